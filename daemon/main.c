/*
 * vsxd: hosts vhost-user-vsock devices for QEMU guests. Each VM runs on the
 * libevent loop of one worker thread (workers.c); this, the main thread's
 * loop, keeps signals, reload, the control socket, the forwards, the
 * forward-listen listeners and the metrics endpoint.
 *
 * Start-up: parse the command line, read the --config file, merge and check
 * the two (cmdline.c, conffile.c, settings.c), then create the backend's
 * router and one VM per configured device. Any problem in what the user
 * gave exits 2 before anything is created; a failure to start (no
 * memory, a directory that cannot be made) exits 1 after undoing what was
 * done, or 3 when an address or path it names is taken (start_status).
 * Then the loop runs until SIGTERM or SIGINT, which free the router (it
 * resets every connection and unlinks every socket path) and exit 0.
 *
 * A VM's vhost-user and uds-path sockets get the socket-mode and
 * socket-group of its [vm], else of [daemon] (vsxd_vm_perm; 0600 and
 * vsxd's group by default), set by the backend between bind and listen;
 * their missing parent directories are made first (vm_dirs). A reload
 * that changes them applies them to the running VM's files in place
 * (perm_update).
 *
 * The control socket (control.c) is created after the VMs, at --control or
 * the [daemon] control path, else at VSX_CONTROL_PATH. A path that was
 * given and cannot be used is a start-up failure (exit 1, or 3 when
 * another program holds it); the default
 * one only logs a warning (another vsxd may own it), and vsxd runs without.
 *
 * Forwards (forward.c) start after the VMs: one that cannot start is a
 * start-up failure (exit 1, or 3 as below); at reload, unchanged forwards
 * keep running.
 *
 * --check (-t) stops after the checks: it prints what would be served
 * (check.c, vsxd_check_print) and exits 0, or prints the first error and exits 1; it
 * reads the --config file and creates nothing.
 *
 * VMs with forward-cid (vhost-device-vsock's vsock-to-vsock backend): the
 * backend connects their guests' connections to the host to the host
 * kernel's vsock CID forward-cid; vsxd listens on their forward-listen
 * ports (vsock_listen.c) with the VM, from its start to its end.
 *
 * The metrics endpoint (metrics.c), when --metrics or the [daemon] metrics
 * key gives one, starts last; an address that cannot be used is a
 * start-up failure (exit 3 when another program has it, else 1).
 * At reload a new address is tried first and the old one kept when it
 * cannot be used.
 *
 * SIGHUP re-reads the --config file. A broken file changes nothing. VMs
 * whose device is unchanged keep running (a new tx-buffer-size is applied
 * to their new connections), VMs gone from the file are freed, new ones are
 * created; a VM that fails to start is logged and tried again at the next
 * reload. VMs given on the command line always stay.
 *
 * Readiness goes to the service manager through libsystemd's sd_notify
 * (nothing without $NOTIFY_SOCKET): READY=1 once every socket listens,
 * RELOADING=1 then READY=1 around a reload, STOPPING=1 at exit, each with
 * a STATUS= line. MAINPID= only at a live handoff (vsxctl upgrade): the
 * old process names the new one, its child, before it exits, so that
 * systemd (NotifyAccess=main) follows it instead of stopping the unit.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include <vsx/vsx.h>

#include "config.h"
#include "util.h"
#include "control.h"
#include "counters.h"
#include "fdstore.h"
#include "logging.h"
#include "handoff.h"
#include "launcher.h"
#include "sandbox.h"
#include "vhost-user/loop-event.h"
#include "forward.h"
#include "vsock_listen.h"
#include "metrics.h"
#include "workers.h"
#include "backend/backend.h"

#define EXIT_USAGE 2
#define EXIT_IN_USE 3

/* ---- systemd readiness: sd_notify(3), a no-op without $NOTIFY_SOCKET ---- */

__attribute__((format(printf, 1, 2)))
static void notify(const char *fmt, ...)
{
	char state[512];
	va_list ap;
	int r;

	va_start(ap, fmt);
	vsnprintf(state, sizeof(state), fmt, ap);
	va_end(ap);
	r = sd_notify(0, state);
	if (r < 0)
		vsxd_vlog(LOG_WARNING, "sd_notify: %s", strerror(-r));
}

/* RELOADING=1 carries the time it began, as Type=notify-reload (systemd
 * 253) wants; Debian 12's systemd 252 takes it with Type=notify. */
static void notify_reloading(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	notify("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading",
	       (unsigned long long)ts.tv_sec * 1000000ULL +
	       (unsigned long long)ts.tv_nsec / 1000);
}

/* ---- The daemon ---- */

static const int signals[] = { SIGTERM, SIGINT, SIGHUP };
#define NSIGNALS (sizeof(signals) / sizeof(signals[0]))

struct vsxd {
	struct event_base *base;
	struct vsxu_evloop ev;          /* the adapter over @base (ev.loop) */
	struct vsxb_router *router;
	struct vsxd_workers *workers;  /* the VMs' threads (workers.c) */
	struct vsxd_control *control;  /* NULL: no control socket */
	struct vsxd_fwds *fwds;        /* forward.c: the running forwards */
	struct vsxd_relays_in *relays; /* relays an earlier process handed
					  over, until the forwards run */
	struct vsxd_metrics *metrics;  /* NULL: no metrics endpoint */
	struct vsxd_fdstore *fdstore;  /* restarts (fdstore.c) */
	struct vsxd_opts opts;         /* the command line, kept for reloads */
	struct vsxd_config cfg;        /* in force: the file's, then the flags' */
	struct vsxb_vm **vms;           /* cfg.n_vms entries, owned by the router;
					  NULL: failed to start (reload) */
	struct vsxd_vlisten **vls;      /* cfg.n_vms: each VM's forward-listen */
	struct event *sig[NSIGNALS];
	int exit_code;
	char self[4096];               /* the program we run, as started */
	uint64_t handoffs_failed;      /* upgrades that failed (metrics) */
	bool hold_accept;              /* listeners inherited: VMs accept once
					  adopted */
	int handoff_fd;                /* a live handoff started us: answer
					  here once serving (handoff.c); -1 */
	uid_t uid;                     /* user='s, when it names one */
	gid_t gid;
};

/* Read the --config file (if any) and merge it with the command line into
 * @out (initialised here, free it either way). -EINVAL: bad input, said
 * in @err. */
static int load_config(const struct vsxd_opts *opts, struct vsxd_config *out,
		       struct vsxd_err *err, bool reload)
{
	struct vsxd_config file;
	int r = 0, fd = -1;

	vsxd_config_init(out);
	vsxd_config_init(&file);
	/* a reload: the launcher opens the file (sandbox.c, launcher.c) */
	if (opts->config_file && reload && (fd = vsxd_launcher_open_config()) >= 0) {
		r = vsxd_config_load_fd(fd, opts->config_file, &file, err);
		close(fd);
	} else if (opts->config_file) {
		r = vsxd_config_load(opts->config_file, &file, err);
	}
	if (r == 0)
		r = vsxd_config_merge(out, opts->config_file ? &file : NULL, &opts->cfg);
	if (r == -ENOMEM)
		snprintf(err->msg, sizeof(err->msg), "out of memory");
	if (r == 0)
		r = vsxd_config_check(out, err);
	if (r == 0)
		r = vsxd_config_resolve(out, err);
	vsxd_config_free(&file);
	return r;
}

static const char *vm_label(const struct vsxd_vm *vm, char *buf, size_t len)
{
	char n[32];

	snprintf(buf, len, "VM %s (%s)", vsxd_vm_name(vm, n, sizeof(n)), vm->origin);
	return buf;
}

/* Free @vm and give its worker's place back. */
static void vm_stop(struct vsxd *d, struct vsxb_vm *vm)
{
	struct vsxb_vm_info vi;

	vsxb_vm_get_info(vm, &vi);
	vsxd_fdstore_forget(d->fdstore, vi.name);
	vsxb_vm_free(vm);
	vsxd_workers_unplace(d->workers, vi.loop);
}

/*
 * The parent directories of @vm's sockets, when missing: 0755, or 0750 and
 * the socket group's when there is one (whoever may connect may also pass;
 * nobody else need). Existing directories are not touched.
 */
static int vm_dirs(const struct vsxd_vm *vm, bool has_gid, uint32_t gid)
{
	const char *paths[2] = { vm->socket_path, vm->uds_path };
	char label[256];
	size_t i;
	int r;

	for (i = 0; i < 2; i++) {
		if (!paths[i])
			continue;
		r = vsx__mkdir_parents(paths[i], has_gid ? 0750 : 0755,
				       has_gid ? (gid_t)gid : VSX__GID_KEEP);
		if (r < 0) {
			vsxd_vlog(LOG_ERR, "%s: cannot create the directory of %s: %s",
			     vm_label(vm, label, sizeof(label)), paths[i], strerror(-r));
			return r;
		}
	}
	return 0;
}

/* The VM and its forward-listen listeners (*@vl, NULL without). */
static int vm_start(struct vsxd *d, const struct vsxd_config *cfg, const struct vsxd_vm *vm,
		    struct vsxb_vm **out, struct vsxd_vlisten **vl)
{
	struct vsxb_vm_config vc = {
		.name = vm->name,
		.guest_cid = vm->guest_cid,
		.socket_path = vm->socket_path,
		.uds_path = vm->uds_path,
		.tx_buffer_size = vm->tx_buffer_size,
		.queue_size = vm->queue_size,
		.groups = vm->groups,
		.forward = vm->set & VSXD_VM_FWD_CID,
		.forward_cid = vm->forward_cid,
		/* inherited listeners' backlogs wait for the adoption */
		.hold_accept = d->hold_accept,
	};
	char label[256];
	uint32_t bad = 0;
	int r;

	*vl = NULL;
	*out = NULL;
	vsxd_vm_perm(cfg, vm, &vc.socket_mode, &vc.socket_group, &vc.socket_gid);
	r = vm_dirs(vm, vc.socket_group, vc.socket_gid);
	if (r < 0)
		return r;
	vc.loop = vsxd_workers_place(d->workers);
	if (!vc.loop)
		return -EAGAIN;   /* no worker thread could be started */
	r = vsxb_vm_new(d->router, &vc, out);
	if (r < 0) {
		vsxd_workers_unplace(d->workers, vc.loop);
		*out = NULL;
		return r;
	}
	if (vm->n_forward_listen) {
		r = vsxd_vlisten_new(d->base, *out, vm->forward_listen,
				     vm->n_forward_listen, vsxd_backend_log, vl, &bad);
		if (r < 0) {
			vsxd_vlog(LOG_ERR, "%s: forward-listen %u: %s",
			     vm_label(vm, label, sizeof(label)), bad, strerror(-r));
			vm_stop(d, *out);
			*out = NULL;
			return r;
		}
	}
	if (vc.forward)
		vsxd_vlog(LOG_INFO, "%s: guest-cid %llu, vhost-user socket %s, forward-cid %u, "
		     "%zu forward-listen port%s", vm_label(vm, label, sizeof(label)),
		     (unsigned long long)vm->guest_cid, vm->socket_path, vm->forward_cid,
		     vm->n_forward_listen, vm->n_forward_listen == 1 ? "" : "s");
	else
		vsxd_vlog(LOG_INFO, "%s: guest-cid %llu, vhost-user socket %s, uds-path %s",
		     vm_label(vm, label, sizeof(label)), (unsigned long long)vm->guest_cid,
		     vm->socket_path, vm->uds_path);
	vsxd_vlog(LOG_DEBUG, "%s: tx-buffer-size %u, queue-size %u, groups %s, thread w%d, "
	     "socket-mode %04o, socket group %s", vm_label(vm, label, sizeof(label)),
	     vm->tx_buffer_size ? vm->tx_buffer_size : VSXB_DEFAULT_BUF_ALLOC,
	     vm->queue_size ? vm->queue_size : VSXB_DEFAULT_QUEUE_SIZE,
	     vm->groups ? vm->groups : VSXB_GROUP_DEFAULT,
	     vsxd_workers_index(d->workers, vc.loop), vc.socket_mode,
	     vc.socket_group ? (vm->perm.group ? vm->perm.group : cfg->perm.group) : "vsxd's");
	return 0;
}

/*
 * The exit status of a start-up failure @r: EXIT_IN_USE when an address
 * or path the configuration names is held by another program (in use,
 * or a file of another kind in the way), which restarting will not cure:
 * the units list it in RestartPreventExitStatus=, so systemd does not
 * restart into it again and again. EXIT_FAILURE otherwise, also for an
 * address that is not (yet) this host's: at boot the network may bring
 * it, and a restart then succeeds.
 */
static int start_status(int r)
{
	switch (r) {
	case -EADDRINUSE:
	case -ENOTSOCK:
		return EXIT_IN_USE;
	default:
		return EXIT_FAILURE;
	}
}

/* Why a VM (or, @control, the control socket) could not start. */
static const char *start_error(int r, bool control)
{
	switch (r) {
	case -EEXIST:
		return "its guest-cid or name is already in use";
	case -EAGAIN:
		return "no worker thread could be started for it";
	case -EADDRINUSE:
		return control ? "in use (another vsxd is running?)"
			       : "a socket path is in use by another program";
	case -ENOTSOCK:
		return control ? "a file that is not a socket is in the way"
			       : "a socket path exists and is not a socket";
	default:
		return strerror(-r);
	}
}

/* A running VM's tx-buffer-size changed: new connections get the new one. */
static void set_buffer(struct vsxb_vm *vm, const struct vsxd_vm *cfg)
{
	uint32_t bytes = cfg->tx_buffer_size;
	char label[256];
	int r;

	if (!bytes)
		bytes = VSXB_DEFAULT_BUF_ALLOC;
	r = vsxb_vm_set_default_buffer(vm, bytes);
	if (r < 0)
		vsxd_vlog(LOG_ERR, "%s: cannot set tx-buffer-size %u: %s",
		     vm_label(cfg, label, sizeof(label)), bytes, strerror(-r));
	else
		vsxd_vlog(LOG_INFO, "%s: tx-buffer-size %u for new connections",
		     vm_label(cfg, label, sizeof(label)), bytes);
}

/* Who may use the control socket, and its file's mode and group, as
 * @cfg says (@a points into @cfg). */
static void control_access(const struct vsxd_config *cfg, struct vsxd_control_access *a)
{
	memset(a, 0, sizeof(*a));
	a->allow_uids = cfg->control_allow_uids;
	a->n_allow_uids = cfg->n_control_allow_uids;
	vsxd_control_perm(cfg, &a->mode, &a->has_gid, &a->gid);
}

/* A running VM whose socket-mode or socket-group changed at reload: its
 * socket files take the new ones in place (its guest stays connected; a
 * connection already accepted is not affected, as with any file mode). */
static void perm_update(const struct vsxd_config *oc, const struct vsxd_vm *ov,
			const struct vsxd_config *nc, const struct vsxd_vm *nv)
{
	const char *paths[2] = { nv->socket_path, nv->uds_path };
	unsigned om, nm;
	bool og, ng;
	uint32_t ogid, ngid;
	char label[256];
	size_t i;

	vsxd_vm_perm(oc, ov, &om, &og, &ogid);
	vsxd_vm_perm(nc, nv, &nm, &ng, &ngid);
	if (om == nm && og == ng && ogid == ngid)
		return;
	for (i = 0; i < 2; i++) {
		if (!paths[i])
			continue;
		if (lchown(paths[i], (uid_t)-1, ng ? (gid_t)ngid : getegid()) < 0 ||
		    chmod(paths[i], nm) < 0)
			vsxd_vlog(LOG_ERR, "%s: %s: cannot set socket-mode %04o, group %u: %s",
			     vm_label(nv, label, sizeof(label)), paths[i], nm,
			     ng ? ngid : (uint32_t)getegid(), strerror(errno));
	}
	vsxd_vlog(LOG_INFO, "%s: sockets now mode %04o, group %u",
	     vm_label(nv, label, sizeof(label)), nm, ng ? ngid : (uint32_t)getegid());
}

/* The event loop's poller (--poll-us): the guests' TX rings. */
static bool poll_rings(void *arg, bool sleeping)
{
	return vsxb_router_poll(arg, sleeping);
}

/* The [daemon] limits and timeouts of @cfg into the router. */
static int limits_apply(struct vsxd *d, const struct vsxd_config *cfg)
{
	const struct vsxb_router_limits l = {
		.max_conns = (unsigned)cfg->limits[VSXD_LIMIT_MAX_CONNS],
		.max_conns_per_vm = (unsigned)cfg->limits[VSXD_LIMIT_MAX_CONNS_PER_VM],
		.max_conn_memory = cfg->limits[VSXD_LIMIT_MAX_CONN_MEMORY],
		.handshake_ms = (unsigned)cfg->limits[VSXD_LIMIT_HANDSHAKE_TIMEOUT],
		.connect_ms = (unsigned)cfg->limits[VSXD_LIMIT_CONNECT_TIMEOUT],
		.linger_ms = (unsigned)cfg->limits[VSXD_LIMIT_LINGER_TIMEOUT],
	};
	int r;

	r = vsxb_router_set_limits(d->router, &l);
	if (r < 0)
		vsxd_vlog(LOG_ERR, "cannot apply the limits: %s", strerror(-r));
	vsxu_evloop_set_poll(&d->ev, (unsigned)cfg->limits[VSXD_LIMIT_POLL_US]);
	vsxd_workers_set_poll(d->workers, (unsigned)cfg->limits[VSXD_LIMIT_POLL_US]);
	/* (workers already running stay: a VM never moves) */
	vsxd_workers_set_max(d->workers, cfg->limit_set[VSXD_LIMIT_THREADS]
					 ? (unsigned)cfg->limits[VSXD_LIMIT_THREADS] : 0);
	return r;
}

/* Serve the metrics at @addr (NULL: none), replacing what is served: on
 * failure what runs is kept and @err says why. */
static int metrics_apply(struct vsxd *d, const char *addr, struct vsxd_err *err)
{
	struct vsxd_start_info start;
	const struct vsxd_metrics_opts o = {
		.addr = addr,
		.fwds = d->fwds,
		.evloop = &d->ev,
		.workers = d->workers,
		.start = &start,
		.handoffs_failed = &d->handoffs_failed,
		.log = vsxd_backend_log,
	};
	struct vsxd_metrics *m = NULL;
	int r;

	vsxd_fdstore_info(d->fdstore, &start);
	if (d->metrics && addr && !strcmp(vsxd_metrics_addr(d->metrics), addr))
		return 0;
	if (addr) {
		r = vsxd_metrics_new(d->base, d->router, &o, &m, err);
		if (r < 0)
			return r;
	}
	if (d->metrics && !addr)
		vsxd_vlog(LOG_INFO, "metrics on %s: stopped", vsxd_metrics_addr(d->metrics));
	vsxd_metrics_free(d->metrics);
	d->metrics = m;
	return 0;
}

/* The VMs serving now: at reload, one that failed to start is NULL. */
static size_t vms_running(const struct vsxd *d)
{
	size_t i, n = 0;

	for (i = 0; i < d->cfg.n_vms; i++)
		n += d->vms[i] != NULL;
	return n;
}

/*
 * Readiness: READY=1 is sent once every VM's vhost-user and uds-path
 * sockets listen (vsxb_vm_new binds them before it returns), the forwards
 * listen and the control socket does; at reload, RELOADING=1 first, then
 * READY=1 once the new configuration's sockets listen (or, the file
 * being broken, at once: nothing changed).
 */
static void reload(struct vsxd *d)
{
	struct vsxd_config nc;
	struct vsxb_vm **nvms = NULL;
	struct vsxd_vlisten **nvls = NULL;
	struct vsxd_err err;
	bool *kept = NULL, ok = false;
	char label[256];
	size_t i, j, n, added = 0, removed = 0, failed = 0;
	int r;

	if (!d->opts.config_file) {
		vsxd_vlog(LOG_INFO, "SIGHUP: no --config file, nothing to reload");
		return;
	}
	notify_reloading();
	vsxd_vlog(LOG_INFO, "SIGHUP: reloading %s", d->opts.config_file);
	r = load_config(&d->opts, &nc, &err, true);
	if (r == -EACCES && vsxd_sandbox_fs_on()) {
		char was[sizeof(err.msg)];

		memcpy(was, err.msg, sizeof(was));
		vsxd_err_set(&err, "%s (the filesystem view lets vsxd read only the files it "
			     "started with)", was);
	}
	if (r == 0)
		r = vsxd_sandbox_reload(&d->cfg, &nc, &err);
	if (r < 0) {
		vsxd_vlog(LOG_ERR, "reload failed, keeping the running configuration: %s",
		     err.msg);
		goto out;
	}
	nvms = calloc(nc.n_vms ? nc.n_vms : 1, sizeof(*nvms));
	nvls = calloc(nc.n_vms ? nc.n_vms : 1, sizeof(*nvls));
	kept = calloc(d->cfg.n_vms ? d->cfg.n_vms : 1, sizeof(*kept));
	if (!nvms || !nvls || !kept) {
		vsxd_vlog(LOG_ERR, "reload failed: out of memory");
		goto out;
	}

	/* Limits first: a new tx-buffer-size below must fit the new ones. */
	limits_apply(d, &nc);
	/* Keep the devices that did not change. */
	for (j = 0; j < nc.n_vms; j++) {
		for (i = 0; i < d->cfg.n_vms; i++) {
			if (kept[i] || !d->vms[i] ||
			    !vsxd_vm_same_device(&d->cfg.vms[i], &nc.vms[j]))
				continue;
			kept[i] = true;
			nvms[j] = d->vms[i];
			nvls[j] = d->vls[i];
			if (d->cfg.vms[i].tx_buffer_size != nc.vms[j].tx_buffer_size)
				set_buffer(nvms[j], &nc.vms[j]);
			perm_update(&d->cfg, &d->cfg.vms[i], &nc, &nc.vms[j]);
			break;
		}
	}
	/* Free the ones gone or changed (their paths and CIDs become free)... */
	for (i = 0; i < d->cfg.n_vms; i++) {
		if (kept[i] || !d->vms[i])
			continue;
		vsxd_vlog(LOG_INFO, "%s: removed",
		     vm_label(&d->cfg.vms[i], label, sizeof(label)));
		vsxd_vlisten_free(d->vls[i]);
		d->vls[i] = NULL;
		vm_stop(d, d->vms[i]);
		d->vms[i] = NULL;
		removed++;
	}
	/* ...then start the new ones. */
	for (j = 0; j < nc.n_vms; j++) {
		if (nvms[j])
			continue;
		r = vm_start(d, &nc, &nc.vms[j], &nvms[j], &nvls[j]);
		if (r < 0) {
			vsxd_vlog(LOG_ERR, "%s: cannot start: %s",
			     vm_label(&nc.vms[j], label, sizeof(label)), start_error(r, false));
			failed++;
		} else {
			added++;
		}
	}

	r = vsxd_fwds_apply(d->fwds, &nc, false, &err);
	if (r < 0)
		vsxd_vlog(LOG_ERR, "reload: forwards: %s", err.msg);
	else if (r > 0)
		vsxd_vlog(LOG_ERR, "reload: %d forward%s failed to start (tried again at the "
		     "next reload)", r, r == 1 ? "" : "s");
	if (nc.control_path && (!d->cfg.control_path ||
				strcmp(nc.control_path, d->cfg.control_path)))
		vsxd_vlog(LOG_WARNING, "a new control socket path takes effect on restart");
	if (metrics_apply(d, nc.metrics, &err) < 0) {
		vsxd_vlog(LOG_ERR, "reload: %s; keeping %s", err.msg, d->metrics ?
		     vsxd_metrics_addr(d->metrics) : "no metrics endpoint");
		/* what runs stays what the configuration says */
		free(nc.metrics);
		nc.metrics = d->cfg.metrics;
		d->cfg.metrics = NULL;
	}
	if (d->control) {
		struct vsxd_control_access a;

		control_access(&nc, &a);
		r = vsxd_control_set_access(d->control, &a);
		if (r == -ENOMEM)
			vsxd_vlog(LOG_ERR, "control-allow-uid, control-group: out of memory, "
			     "keeping the old ones");
		else if (r < 0)
			vsxd_vlog(LOG_ERR, "control socket: cannot set control-mode %04o, group "
			     "%u: %s", a.mode, a.has_gid ? a.gid : (uint32_t)getegid(),
			     strerror(-r));
		else if (r > 0)
			vsxd_vlog(LOG_INFO, "control socket: now mode %04o, group %u", a.mode,
			     a.has_gid ? a.gid : (uint32_t)getegid());
	}
	vsxd_log_setup(&nc);

	vsxd_config_free(&d->cfg);
	d->cfg = nc;
	vsxd_config_init(&nc);
	free(d->vms);
	d->vms = nvms;
	nvms = NULL;
	free(d->vls);
	d->vls = nvls;
	nvls = NULL;
	vsxd_vlog(LOG_INFO, "reloaded: %zu VMs (%zu added, %zu removed, %zu failed)",
	     d->cfg.n_vms - failed, added, removed, failed);
	ok = failed == 0 && r == 0;    /* r: the forwards' */
out:
	n = vms_running(d);
	notify("READY=1\nSTATUS=serving %zu VM%s%s", n, n == 1 ? "" : "s",
	       ok ? "" : "; the last reload failed in part or whole, see the log");
	free(kept);
	free(nvms);
	free(nvls);
	vsxd_config_free(&nc);
}

/* Where this process's counters are (counters.h). */
static struct vsxd_counted counted(struct vsxd *d)
{
	return (struct vsxd_counted){
		.router = d->router, .vms = d->vms, .n_vms = d->vms ? d->cfg.n_vms : 0,
		.fwds = d->fwds, .evloop = &d->ev, .workers = d->workers,
		.handoffs_failed = &d->handoffs_failed,
	};
}


/* Go on counting where the earlier process stopped: the counters record
 * it passed as @fd (closed here). */
static void counters_continue(struct vsxd *d, int fd)
{
	const struct vsxd_counted w = counted(d);
	struct vsxd_counters c;
	char why[256] = "";
	int r = vsxd_counters_read(fd, &c, why, sizeof(why));

	close(fd);
	if (r < 0) {
		vsxd_vlog(LOG_WARNING, "counters record unusable (%s): counting from 0", why);
		return;
	}
	vsxd_counters_add(&w, &c);
	vsxd_vlog(LOG_INFO, "counters: going on from the earlier process's (%u VM%s)",
	     c.nvms, c.nvms == 1 ? "" : "s");
	vsxd_counters_clear(&c);
}

/* vsxctl upgrade (handoff.c): hand everything to a new process. */
static int upgrade(void *arg, const char *exec, struct vsxd_handoff_report *rep, char *why,
		   size_t whylen)
{
	struct vsxd *d = arg;
	struct vsxd_start_info start;
	struct vsxd_handoff_opts o = {
		.exec = exec && *exec ? exec : d->self,
		.router = d->router,
		.vms = d->vms,
		.n_vms = d->cfg.n_vms,
		.log = vsxd_backend_log,
		.fwds = d->fwds,
	};
	const struct vsxd_counted w = counted(d);
	int r;

	if (!*o.exec) {
		snprintf(why, whylen, "the program vsxd was started as is unknown: give "
			 "--exec PATH");
		return -ENOENT;
	}
	vsxd_fdstore_info(d->fdstore, &start);
	o.generation = start.generation;
	o.counted = &w;
	vsxd_vlog(LOG_NOTICE, "upgrade: handing over to %s", o.exec);
	r = vsxd_handoff_run(&o, rep, why, whylen);
	if (r < 0) {
		__atomic_add_fetch(&d->handoffs_failed, 1, __ATOMIC_RELAXED);
		vsxd_vlog(LOG_ERR, "upgrade to %s failed, serving on: %s", o.exec, why);
	} else {
		vsxd_vlog(LOG_NOTICE, "upgrade: pid %d serves now (%u VM%s, %u listener%s, %u "
		     "connection%s kept, %u ended): exiting", rep->pid, rep->vms,
		     rep->vms == 1 ? "" : "s", rep->listeners, rep->listeners == 1 ? "" : "s",
		     rep->conns_kept, rep->conns_kept == 1 ? "" : "s", rep->conns_ended);
		/* the unit's main process from now on (the launcher's child) */
		notify("MAINPID=%d\nSTATUS=handed over to pid %d", rep->pid, rep->pid);
	}
	return r;
}

/* The handoff is done and vsxctl answered: go, touching nothing the new
 * process now serves (no cleanup: it would unlink its socket paths). */
static void upgraded(void *arg)
{
	(void)arg;
	if (vsxd_log_to_syslog())
		closelog();
	_exit(EXIT_SUCCESS);
}

/* The control socket. A failure is fatal (returns it) only for a path the
 * user gave. */
static int control_start(struct vsxd *d)
{
	const char *path = d->cfg.control_path ? d->cfg.control_path : VSX_CONTROL_PATH;
	struct vsxd_start_info start;
	struct vsxd_control_opts o = {
		.path = path,
		.log = vsxd_backend_log,
		.fwds = d->fwds,
		.evloop = &d->ev,
		.workers = d->workers,
		.start = &start,
		.upgrade = upgrade,
		.upgraded = upgraded,
		.upgrade_arg = d,
	};
	int r;

	control_access(&d->cfg, &o.access);
	vsxd_fdstore_info(d->fdstore, &start);
	r = vsxd_control_new(d->base, d->router, &o, &d->control);
	if (r == 0) {
		vsxd_vlog(LOG_INFO, "control socket %s", path);
		return 0;
	}
	d->control = NULL;
	if (d->cfg.control_path) {
		vsxd_fatal("control socket %s: %s", path, start_error(r, true));
		return r;
	}
	vsxd_vlog(LOG_WARNING, "control socket %s: %s; running without one (give --control "
	     "PATH)", path, start_error(r, true));
	return 0;
}

/*
 * Each connection holds a host socket: with Debian's default soft limit of
 * 1024 files, vsxd would stall near a thousand connections while the hard
 * limit (systemd's LimitNOFILE, or 512K) allows far more. Raise the soft
 * limit to the hard one; whatever is left when the hard one is reached
 * is refused connection by connection, never fatal.
 */
static void raise_nofile(void)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		vsxd_vlog(LOG_WARNING, "cannot raise the open-file limit from %llu: %s",
		     (unsigned long long)was, strerror(errno));
		return;
	}
	vsxd_vlog(LOG_DEBUG, "open-file limit raised from %llu to %llu",
	     (unsigned long long)was, (unsigned long long)rl.rlim_cur);
}

static int relay_put(void *arg, const char *name, int fd)
{
	return vsxd_fdstore_put(arg, name, fd);
}

static int relay_take(void *arg, const char *name)
{
	return vsxd_fdstore_take(arg, name);
}

/* SIGTERM under a store: the established relays of the forwards, their
 * sockets and the relays record, into the store (relay_keep.c). */
static void relays_store(struct vsxd *d)
{
	unsigned kept, ended;
	int rfd = vsxd_fwds_save(d->fwds, relay_put, d->fdstore, &kept, &ended);

	if (rfd == -ENOENT)
		return;
	if (rfd < 0 || vsxd_fdstore_put(d->fdstore, "relays", rfd) < 0)
		vsxd_vlog(LOG_WARNING, "SIGTERM: the relays of forwards are not stored (%s): "
			  "they end", strerror(rfd < 0 ? -rfd : EIO));
	else
		vsxd_vlog(LOG_INFO, "SIGTERM: %u relay%s of forwards stored to go on, %u "
			  "end", kept, kept == 1 ? "" : "s", ended);
	if (rfd >= 0)
		close(rfd);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct vsxd *d = arg;

	if (sig == SIGHUP) {
		reload(d);
		return;
	}
	if (sig == SIGTERM) {
		struct vsxd_start_info start;
		int kept;

		/* under a store, what a restart needs stays there, and no
		 * worker touches a ring again */
		vsxb_router_freeze(d->router);
		vsxd_fdstore_info(d->fdstore, &start);
		if (start.store) {
			const struct vsxd_counted w = counted(d);
			int cfd = vsxd_counters_save(&w);

			if (cfd < 0)
				vsxd_vlog(LOG_WARNING, "SIGTERM: cannot save the counters (%s): "
				     "the next process counts from 0", strerror(-cfd));
			if (cfd >= 0 && vsxd_fdstore_put(d->fdstore, "counters", cfd) < 0)
				vsxd_vlog(LOG_WARNING, "SIGTERM: the counters are not stored: "
				     "the next process counts from 0");
			if (cfd >= 0)
				close(cfd);
			relays_store(d);
		}
		kept = vsxd_fdstore_keep(d->fdstore, d->vms, d->cfg.n_vms);
		if (kept >= 0) {
			vsxd_vlog(LOG_NOTICE, "SIGTERM: the devices and %d listening socket%s stay "
			     "in the file descriptor store for the next start (a stop "
			     "closes them): exiting", kept, kept == 1 ? "" : "s");
			notify("STOPPING=1\nSTATUS=exiting, state kept");
			if (vsxd_log_to_syslog())
				closelog();
			_exit(EXIT_SUCCESS);
		}
		vsxb_router_thaw(d->router);
	}
	vsxd_vlog(LOG_INFO, "%s: exiting", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	notify("STOPPING=1\nSTATUS=exiting");
	event_base_loopbreak(d->base);
}

static int signals_setup(struct vsxd *d)
{
	size_t i;

	for (i = 0; i < NSIGNALS; i++) {
		d->sig[i] = evsignal_new(d->base, signals[i], on_signal, d);
		if (!d->sig[i] || evsignal_add(d->sig[i], NULL) < 0)
			return -ENOMEM;
	}
	return 0;
}

static void daemon_free(struct vsxd *d)
{
	size_t i;

	for (i = 0; i < NSIGNALS; i++) {
		if (d->sig[i]) {
			evsignal_del(d->sig[i]);
			event_free(d->sig[i]);
		}
	}
	vsxd_metrics_free(d->metrics);      /* before what it looks at */
	vsxd_control_free(d->control);
	vsxd_relays_in_free(d->relays);
	vsxd_fwds_free(d->fwds);            /* before the router it uses */
	for (i = 0; d->vls && i < d->cfg.n_vms; i++)
		vsxd_vlisten_free(d->vls[i]); /* before their VMs */
	free(d->vls);
	/* the VMs, while their workers run; then the workers, which run
	 * what was posted to them before they stop; then the router, which
	 * those posts may name */
	for (i = 0; d->router && d->vms && i < d->cfg.n_vms; i++)
		if (d->vms[i])
			vsxb_vm_free(d->vms[i]);
	/* a clean exit: the store lets go too, QEMU sees its back-end go */
	if (d->router)
		vsxb_router_set_device_events(d->router, NULL, NULL);
	vsxd_fdstore_free(d->fdstore);
	vsxd_workers_free(d->workers);
	if (d->router)
		vsxb_router_free(d->router);
	vsxu_evloop_fini(&d->ev);
	free(d->vms);
	if (d->base)
		event_base_free(d->base);
	vsxd_config_free(&d->cfg);
	vsxd_opts_free(&d->opts);
}

/* Start-up is done: every socket bound, every inherited descriptor
 * taken. Drop to user=, restrict the filesystem view and install the
 * syscall allowlist (sandbox.c). */
static int sandbox(struct vsxd *d)
{
	struct vsxd_err err;
	int r = vsxd_sandbox_drop(&d->cfg, true, &err);

	if (r == 0)
		r = vsxd_sandbox_fs(&d->cfg, d->opts.config_file, d->workers, &err);
	if (r == 0)
		r = vsxd_sandbox_seccomp(&d->cfg, &err);
	if (r < 0) {
		vsxd_fatal("%s", err.msg);
		return r;
	}
	if (d->cfg.user)
		vsxd_vlog(LOG_INFO, "sandbox: running as %s (uid %u)", d->cfg.user,
			  (unsigned)getuid());
	vsxd_vlog(LOG_INFO, "sandbox: syscall allowlist %s",
		  vsxd_sandbox_mode() == VSXD_SECCOMP_OFF ? "off"
			  : vsxd_seccomp_name(vsxd_sandbox_mode()));
	return 0;
}

int main(int argc, char **argv)
{
	struct vsxd d = { .exit_code = EXIT_FAILURE, .handoff_fd = -1 };
	struct vsxd_err err;
	char label[256];
	size_t i;
	int r, cfd;

	signal(SIGPIPE, SIG_IGN);
	vsxd_config_init(&d.cfg);
	/* the program as started: an upgrade that replaced the file runs
	 * the new one by this path, never the deleted image */
	{
		ssize_t n = readlink("/proc/self/exe", d.self, sizeof(d.self) - 1);

		d.self[n > 0 ? n : 0] = '\0';
	}

	r = vsxd_opts_parse(argc, argv, &d.opts, &err);
	if (r < 0) {
		fprintf(stderr, "vsxd: %s\nTry 'vsxd --help'.\n", err.msg);
		d.exit_code = r == -ENOMEM || d.opts.check ? EXIT_FAILURE : EXIT_USAGE;
		goto out;
	}
	if (d.opts.help) {
		fputs(vsxd_usage, stdout);
		d.exit_code = EXIT_SUCCESS;
		goto out;
	}
	if (d.opts.version) {
		printf("vsxd (vsx) %s\n", PACKAGE_VERSION);
		d.exit_code = EXIT_SUCCESS;
		goto out;
	}
	r = load_config(&d.opts, &d.cfg, &err, false);
	if (r < 0) {
		fprintf(stderr, "vsxd: %s\n", err.msg);
		d.exit_code = r == -ENOMEM || d.opts.check ? EXIT_FAILURE : EXIT_USAGE;
		goto out;
	}
	if (d.cfg.n_vms == 0 && !d.cfg.control_path && d.cfg.n_fwds == 0 && !d.cfg.metrics) {
		fprintf(stderr, "vsxd: no VM to serve: give --vm, --guest-cid/--socket/"
			"--uds-path or a --config file with [vm] sections\n"
			"Try 'vsxd --help'.\n");
		d.exit_code = d.opts.check ? EXIT_FAILURE : EXIT_USAGE;
		goto out;
	}
	/* user= looked up as the drop will look it up, before anything is made */
	if (d.cfg.user) {
		r = vsxd_sandbox_user(d.cfg.user, &d.uid, &d.gid, &err);
		if (r < 0) {
			fprintf(stderr, "vsxd: %s\n", err.msg);
			d.exit_code = EXIT_FAILURE;
			goto out;
		}
	}
	if (d.opts.check) {
		vsxd_check_print(&d.opts, &d.cfg, d.uid, d.gid);
		d.exit_code = fflush(stdout) == 0 && !ferror(stdout) ? EXIT_SUCCESS
								    : EXIT_FAILURE;
		goto out;
	}

	vsxd_log_setup(&d.cfg);
	event_set_log_callback(vsxd_libevent_log);
	raise_nofile();
	/* before any guest memory is mapped, and before the sandbox */
	r = vsxd_launcher_start(&d.cfg, argv, d.opts.config_file);
	if (r < 0) {
		vsxd_fatal("cannot start the launcher: %s", strerror(-r));
		goto out;
	}

	d.base = event_base_new();
	if (!d.base) {
		vsxd_fatal("cannot create the event loop");
		goto out;
	}
	vsxu_evloop_init(&d.ev, d.base);
	r = vsxb_router_new(&d.ev.loop, vsxd_backend_log, NULL, &d.router);
	if (r < 0) {
		vsxd_fatal("cannot create the router: %s", strerror(-r));
		goto out;
	}
	if (vsxd_fdstore_open(vsxd_backend_log, NULL, &d.fdstore) < 0) {
		vsxd_fatal("out of memory");
		goto out;
	}
	d.handoff_fd = vsxd_handoff_fd();
	d.hold_accept = vsx__inherit_pending();
	if (vsxd_fdstore_refusal(d.fdstore))
		goto out;
	vsxb_router_set_conn_events(d.router, vsxd_conn_event_log, d.fdstore);
	vsxb_router_set_device_events(d.router, vsxd_fdstore_device, d.fdstore);
	vsxu_evloop_set_poller(&d.ev, poll_rings, d.router);
	/* workers post host-port requests to this thread */
	if (vsxu_evloop_enable_post(&d.ev) < 0 ||
	    vsxd_workers_new(d.router, &d.workers) < 0) {
		vsxd_fatal("out of memory");
		goto out;
	}
	if (limits_apply(&d, &d.cfg) < 0)
		goto out;
	d.vms = calloc(d.cfg.n_vms ? d.cfg.n_vms : 1, sizeof(*d.vms));
	d.vls = calloc(d.cfg.n_vms ? d.cfg.n_vms : 1, sizeof(*d.vls));
	if (!d.vms || !d.vls || signals_setup(&d) < 0) {
		vsxd_fatal("out of memory");
		goto out;
	}
	/* before any VM runs: new connections never take a kept one's id (nor
	 * a kept relay's) */
	d.relays = vsxd_relays_in_take(vsxd_fdstore_take(d.fdstore, "relays"), relay_take,
				       d.fdstore, vsxd_backend_log);
	vsxb_router_ids_past(d.router, vsxd_fdstore_max_conn_id(d.fdstore));
	vsxb_router_ids_past(d.router, vsxd_relays_in_max_id(d.relays));
	for (i = 0; i < d.cfg.n_vms; i++) {
		r = vm_start(&d, &d.cfg, &d.cfg.vms[i], &d.vms[i], &d.vls[i]);
		if (r < 0) {
			vm_label(&d.cfg.vms[i], label, sizeof(label));
			vsxd_fatal("%s: cannot start: %s", label, start_error(r, false));
			d.exit_code = start_status(r);
			goto out;
		}
		vsxd_fdstore_adopt(d.fdstore, d.vms[i], vsxb_vm_name(d.vms[i]),
				   d.cfg.vms[i].guest_cid);
		if (vsxd_fdstore_refusal(d.fdstore))
			goto out;
		if (d.hold_accept)
			vsxb_vm_accept_start(d.vms[i]);
	}
	vsxd_fdstore_pair(d.fdstore, d.router);
	cfd = vsxd_fdstore_take(d.fdstore, "counters");
	vsxd_fdstore_ready(d.fdstore);
	r = vsxd_fwds_new(d.base, d.router, vsxd_backend_log, &d.fwds);
	if (r < 0) {
		vsxd_fatal("cannot set up forwards: %s", strerror(-r));
		goto out;
	}
	r = vsxd_fwds_apply(d.fwds, &d.cfg, true, &err);
	if (r < 0) {
		vsxd_fatal("%s", err.msg);
		d.exit_code = start_status(r);
		goto out;
	}
	{
		unsigned kept, ended;

		vsxd_fwds_adopt(d.fwds, d.relays, &kept, &ended);
		d.relays = NULL;
		vsxd_fdstore_relays(d.fdstore, kept, ended);
	}
	if (cfd >= 0)
		counters_continue(&d, cfd);
	r = control_start(&d);
	if (r < 0) {
		d.exit_code = start_status(r);
		goto out;
	}
	r = metrics_apply(&d, d.cfg.metrics, &err);
	if (r < 0) {
		vsxd_fatal("%s", err.msg);
		d.exit_code = start_status(r);
		goto out;
	}

	d.hold_accept = false;
	{
		unsigned unused = vsx__inherit_close_unused();

		if (unused)
			vsxd_vlog(LOG_INFO, "%u inherited listening socket%s the configuration no "
			     "longer names closed", unused, unused == 1 ? "" : "s");
	}
	if (sandbox(&d) < 0)
		goto out;
	if (d.handoff_fd >= 0) {
		struct vsxd_start_info start;

		vsxd_fdstore_info(d.fdstore, &start);
		vsxd_handoff_serving(d.handoff_fd, start.vms_recovered, start.conns_ended,
				     vsx__inherit_taken(), start.conns_kept);
		d.handoff_fd = -1;
	}
	vsxd_vlog(LOG_INFO, "vsxd %s: serving %zu VM%s", PACKAGE_VERSION, d.cfg.n_vms,
	     d.cfg.n_vms == 1 ? "" : "s");
	notify("READY=1\nSTATUS=serving %zu VM%s", d.cfg.n_vms, d.cfg.n_vms == 1 ? "" : "s");
	if (vsxu_evloop_run(&d.ev) < 0) {
		vsxd_vlog(LOG_ERR, "the event loop failed");
		goto out;
	}
	d.exit_code = EXIT_SUCCESS;
out:
	if (d.handoff_fd >= 0) {
		/* the old process serves on: what we inherited is its too (no
		 * cleanup here: it would unlink its socket paths) */
		const char *why = vsxd_fdstore_refusal(d.fdstore);

		vsxd_handoff_refuse(d.handoff_fd, why ? why : *vsxd_fatal_msg() ? vsxd_fatal_msg()
							: "start-up failed (see its log)");
		_exit(EXIT_FAILURE);
	}
	daemon_free(&d);
	libevent_global_shutdown();
	if (vsxd_log_to_syslog())
		closelog();
	return d.exit_code;
}
