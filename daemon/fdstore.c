/*
 * vsxd's restarts through systemd's file descriptor store.
 *
 * QEMU cannot reconnect a vhost-user-vsock device: when vsxd's process
 * dies, its VMs lose vsock, unless the descriptors that make each device
 * outlive it. Under a service manager that keeps them (systemd's
 * FileDescriptorStoreMax=, sd_pid_notify_with_fds(3)), vsxd stores, per
 * VM whose device runs:
 *
 *   vm.NAME.conn      the vhost-user connection to QEMU
 *   vm.NAME.memK      the file behind memory region K (regions that share
 *                     a file share its name: the store keeps one copy)
 *   vm.NAME.kickQ     ring Q's kick eventfd
 *   vm.NAME.callQ     ring Q's call eventfd
 *   state             a memfd holding the state record (state.h) of every
 *                     stored device and, after it, the connection slots
 *                     (state_slots.h): the connections each one has
 *
 * A device's names are replaced (FDSTOREREMOVE=1, then FDSTORE=1) each time
 * it starts or changes, and removed when it stops. A device whose VM is
 * paused (QEMU stop: every ring stopped by GET_VRING_BASE) stays, without
 * kick eventfds, its rings recorded where they stopped (state.h, version
 * 3), and is taken back paused; while its rings are half stopped, or set
 * up again at cont, it is out of the store (until the start that follows,
 * a crash loses it, as before). The record is rewritten
 * in place each time (under this file's lock: device events are rare).
 * A connection's open and close, on its VM's worker, write only its slot
 * in that VM's region of the memfd (state_slots.h): constant time, under
 * the VM's own lock, never this file's; the record at a SIGTERM holds
 * the connections whole instead.
 *
 * After a crash, the service manager starts vsxd again with the store in
 * $LISTEN_FDS / $LISTEN_FDNAMES. Each configured VM that the record names
 * takes its device back (vsxb_vm_adopt) and sends its guest an RST for each
 * connection the record named; a VM whose descriptors are missing or
 * wrong starts fresh, its front-end connection closed (QEMU sees its
 * back-end go). A record that cannot be read (truncated, corrupted,
 * another version) makes every VM start fresh. Whatever no VM took is
 * closed and leaves the store.
 *
 * SIGTERM (systemctl restart or stop) leaves the store as it is, with every
 * listening socket of the process added (listen.K, vsxd_fdstore_keep) and
 * the connections written whole, the host socket of each one that can go
 * on stored as conn.ID.host (as a live handoff passes it): a restart takes
 * them back (the listeners by address: util.h, inherited listeners; the
 * connections made again on the adopted device), a stop makes systemd
 * discard them (host programs see EOF). A clean exit otherwise
 * (SIGINT) empties the store: QEMU sees its back-end go, as
 * it would without one.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "fdstore.h"
#include "state.h"
#include "state_live.h"
#include "state_slots.h"
#include "util.h"
#include "vhost-user/vhost_user.h"

struct vsxd_fdstore {
	pthread_mutex_t lock;
	vsxd_fdstore_log_fn log;
	void *log_arg;
	struct vsxd_start_info info;
	bool handoff;                 /* a live handoff started us (handoff.c) */
	char refusal[320];            /* why this process refuses the handoff */
	unsigned store_max;           /* $FDSTORE; 0: not said */
	int memfd;                    /* the record; -1: none */
	struct vsxd_slots *slots;     /* the connections, in memfd's slots
					 (state_slots.h); NULL: not named */

	/* What the earlier process left (until vsxd_fdstore_ready) */
	struct vsxd_state prev;
	bool have_prev;
	unsigned nfds;
	struct passed {
		int fd;
		char *name;           /* its FDNAME; NULL: none */
		bool given;           /* a device (or the record) has it now */
		bool taking;          /* taken for the VM being adopted */
		bool keep_name;       /* its name stays in the store */
		bool vm_seen;         /* vm.NAME.*: NAME was configured */
	} *passed;

	/* The stored devices: recs[i] (rec.conns malloc'ed: none but at a
	 * SIGTERM's vsxd_fdstore_keep, the connections are in fs->slots) */
	struct vsxd_state_vm *recs;
	unsigned nrecs, cap;
};

__attribute__((format(printf, 3, 4)))
static void fs_log(struct vsxd_fdstore *fs, int prio, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fs->log(fs->log_arg, prio, msg);
}

/* ---- The store ---- */

static int store_fd(struct vsxd_fdstore *fs, const char *name, int fd)
{
	char msg[VSXD_FDNAME_MAX + 48];
	struct stat st;
	int r;

	/* files cannot be polled for a hang-up: FDPOLL=0 says so (sd_notify(3));
	 * nor may a relay's socket be dropped for one: shut down both ways
	 * (the peer's EOF in, ours out), it still has bytes to write */
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s%s", name,
		 (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) || !strncmp(name, "relay.", 6)
		 ? "\nFDPOLL=0" : "");
	r = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
	if (r <= 0) {
		fs_log(fs, LOG_WARNING, "file descriptor store: cannot store %s: %s", name,
		       r < 0 ? strerror(-r) : "no service manager");
		return r < 0 ? r : -ENOTCONN;
	}
	return 0;
}

static void store_remove(struct vsxd_fdstore *fs, const char *name)
{
	int r = sd_notifyf(0, "FDSTOREREMOVE=1\nFDNAME=%s", name);

	if (r < 0)
		fs_log(fs, LOG_WARNING, "file descriptor store: cannot remove %s: %s", name,
		       strerror(-r));
}

/* Every name of @v's device leaves the store. */
static void remove_vm_names(struct vsxd_fdstore *fs, const struct vsxd_state_vm *v)
{
	if (!*v->conn)
		return;  /* none stored: a paused device between states */
	store_remove(fs, v->conn);
	for (unsigned i = 0; i < v->nregions; i++) {
		bool first = true;

		for (unsigned j = 0; j < i; j++)
			first &= strcmp(v->region[j].fd, v->region[i].fd) != 0;
		if (first)
			store_remove(fs, v->region[i].fd);
	}
	for (unsigned i = 0; i < v->nqueues; i++) {
		if (*v->queue[i].kick)
			store_remove(fs, v->queue[i].kick);
		if (*v->queue[i].call)
			store_remove(fs, v->queue[i].call);
	}
}

/* Descriptors @v's device keeps in the store. */
static unsigned rec_count(const struct vsxd_state_vm *v)
{
	unsigned n = 1;

	if (!*v->conn)
		return 0;

	for (unsigned i = 0; i < v->nregions; i++) {
		bool first = true;

		for (unsigned j = 0; j < i; j++)
			first &= strcmp(v->region[j].fd, v->region[i].fd) != 0;
		n += first;
	}
	for (unsigned i = 0; i < v->nqueues; i++)
		n += !!*v->queue[i].kick + !!*v->queue[i].call;
	return n;
}

/* Descriptors the stored devices keep in the store, the record's aside. */
static unsigned stored_count(const struct vsxd_fdstore *fs)
{
	unsigned n = 0;

	for (unsigned k = 0; k < fs->nrecs; k++)
		n += rec_count(&fs->recs[k]);
	return n;
}

/* ---- The record ---- */

static void write_record(struct vsxd_fdstore *fs)
{
	struct vsxd_state s = {
		.generation = fs->info.generation,
		.nvms = fs->nrecs,
		.vms = fs->recs,
	};
	struct vsxd_state_vm *held = NULL;
	size_t len;
	uint8_t *buf;
	long n;

	if (fs->memfd < 0)
		return;
	/* a paused device between states is not in the record (only its
	 * connections are kept, for when it is again) */
	for (unsigned i = 0; i < fs->nrecs && !held; i++) {
		if (*fs->recs[i].conn)
			continue;
		held = malloc(fs->nrecs * sizeof(*held));
		if (!held) {
			fs_log(fs, LOG_ERR, "restart state: out of memory: not updated");
			return;
		}
		s.nvms = 0;
		s.vms = held;
		for (unsigned k = 0; k < fs->nrecs; k++)
			if (*fs->recs[k].conn)
				held[s.nvms++] = fs->recs[k];
	}
	len = vsxd_state_size(&s);
	buf = malloc(len);
	if (!buf) {
		fs_log(fs, LOG_ERR, "restart state: out of memory: not updated");
		free(held);
		return;
	}
	n = vsxd_state_encode(&s, buf, len);
	if (n < 0) {
		fs_log(fs, LOG_ERR, "restart state: cannot encode: %s", strerror((int)-n));
	} else if (pwrite(fs->memfd, buf, (size_t)n, 0) != n) {
		/* (never truncated: the connection slots follow; the header
		 * says where the record ends) */
		fs_log(fs, LOG_ERR, "restart state: cannot write: %s", strerror(errno));
	}
	free(buf);
	free(held);
}

static int rec_find(const struct vsxd_fdstore *fs, const char *name)
{
	for (unsigned i = 0; i < fs->nrecs; i++)
		if (!strcmp(fs->recs[i].name, name))
			return (int)i;
	return -1;
}

static void rec_drop(struct vsxd_fdstore *fs, unsigned i)
{
	vsxd_slots_unbind(fs->slots, fs->recs[i].name);
	free(fs->recs[i].conns);
	fs->nrecs--;
	if (i != fs->nrecs)
		fs->recs[i] = fs->recs[fs->nrecs];
}

/* ---- Device and connection events ---- */

static unsigned names_needed(const struct vsxu_vu_state *st)
{
	unsigned n = 1 + st->nregions;

	for (unsigned i = 0; i < st->nqueues; i++)
		n += (st->queue[i].kick_fd >= 0) + (st->queue[i].call_fd >= 0);
	return n;
}

static int put_store(void *arg, const char *name, int fd)
{
	return store_fd(arg, name, fd);
}

static int store_device(struct vsxd_fdstore *fs, struct vsxd_state_vm *v,
			const struct vsxu_vu_state *st)
{
	return vsxd_state_vm_fill(v, st, put_store, fs);
}

void vsxd_fdstore_device(void *arg, struct vsxb_vm *vm, const char *name,
			 uint64_t guest_cid, const struct vsxu_vu_state *st, bool held)
{
	struct vsxd_fdstore *fs = arg;
	unsigned others;
	int i, r;

	(void)vm;
	if (!fs || !fs->info.store)
		return;
	pthread_mutex_lock(&fs->lock);
	i = rec_find(fs, name);
	if (i >= 0)
		remove_vm_names(fs, &fs->recs[i]);
	if (!st && held && i >= 0) {
		/* no descriptors to keep for now, the connections stay known */
		struct vsxd_state_vm *v = &fs->recs[i];

		v->conn[0] = '\0';
		v->paused = false;
		v->nregions = v->nqueues = 0;
		goto out;
	}
	if (!st) {
		if (i >= 0)
			rec_drop(fs, (unsigned)i);
		goto out;
	}
	/* (a device that changed keeps its connections: its names change) */
	others = stored_count(fs) - (i >= 0 ? rec_count(&fs->recs[i]) : 0);
	if (fs->store_max && others + names_needed(st) + 1 > fs->store_max) {
		fs_log(fs, LOG_WARNING, "vm %s: the file descriptor store is full (%u of "
		       "FileDescriptorStoreMax=%u): its device does not survive a crash",
		       name, others + 1, fs->store_max);
		if (i >= 0)
			rec_drop(fs, (unsigned)i);
		goto out;
	}
	if (i < 0) {
		if (fs->nrecs == fs->cap) {
			unsigned cap = fs->cap ? 2 * fs->cap : 8;
			struct vsxd_state_vm *nr = realloc(fs->recs, cap * sizeof(*nr));

			if (!nr) {
				fs_log(fs, LOG_ERR, "vm %s: out of memory: its device does not "
				       "survive a crash", name);
				goto out;
			}
			fs->recs = nr;
			fs->cap = cap;
		}
		i = (int)fs->nrecs++;
		memset(&fs->recs[i], 0, sizeof(fs->recs[i]));
		snprintf(fs->recs[i].name, sizeof(fs->recs[i].name), "%s", name);
	}
	fs->recs[i].cid = guest_cid;
	if (store_device(fs, &fs->recs[i], st) < 0) {
		remove_vm_names(fs, &fs->recs[i]);
		rec_drop(fs, (unsigned)i);
	} else if (fs->slots && (r = vsxd_slots_bind(fs->slots, name)) < 0) {
		fs_log(fs, LOG_WARNING, "vm %s: no connection slots in the restart state "
		       "(%s): a crash ends its connections without an RST", name,
		       strerror(-r));
	}
out:
	write_record(fs);
	pthread_mutex_unlock(&fs->lock);
}

/* Constant time, and no lock but the VM's own: its slot (state_slots.h). */
void vsxd_fdstore_conn(struct vsxd_fdstore *fs, const struct vsxb_conn_event *ev)
{
	const struct vsxb_conn_info *ci = &ev->ci;
	struct vsxd_slots_vm *v;

	if (!fs || !fs->info.store || !ci->vm || ev->type == VSXB_CONN_EV_REFUSE)
		return;
	v = vsxd_slots_vm(fs->slots, ci->vm);
	if (!v)
		return;   /* its device is not stored */
	if (ev->type == VSXB_CONN_EV_OPEN) {
		struct vsxd_state_conn c;

		vsxd_state_conn_from_info(&c, ci);
		/* (not named when its region is full: the guest's timeouts
		 * end it) */
		vsxd_slots_add(v, &c);
	} else {
		vsxd_slots_del(v, ci->id);
	}
}

void vsxd_fdstore_forget(struct vsxd_fdstore *fs, const char *name)
{
	vsxd_fdstore_device(fs, NULL, name, 0, NULL, false);
}

/* ---- Start ---- */

/* The record in @fd (a file), decoded into fs->prev. */
static void read_prev(struct vsxd_fdstore *fs, int fd)
{
	char why[256] = "";
	int r = vsxd_state_read(fd, &fs->prev, why, sizeof(why));

	if (r < 0 && fs->handoff) {
		/* the old process serves on */
		snprintf(fs->refusal, sizeof(fs->refusal), "the state is unusable: %s", why);
		fs_log(fs, LOG_ERR, "handoff refused: %s", fs->refusal);
		return;
	}
	if (r < 0) {
		fs_log(fs, LOG_ERR, "restart state unusable (%s): every VM starts fresh", why);
		return;
	}
	/* the connections a crash left in the slots */
	r = vsxd_slots_read(fd, &fs->prev, why, sizeof(why));
	if (r < 0)
		fs_log(fs, LOG_WARNING, "restart state: %s: some connections it named end "
		       "without an RST", why);
	fs->have_prev = true;
}

int vsxd_fdstore_open(vsxd_fdstore_log_fn log, void *log_arg, struct vsxd_fdstore **out)
{
	struct vsxd_fdstore *fs = calloc(1, sizeof(*fs));
	const char *max = getenv("FDSTORE");
	char **names = NULL;
	int n, r, state = -1;

	*out = NULL;
	if (!fs)
		return -ENOMEM;
	pthread_mutex_init(&fs->lock, NULL);
	fs->log = log;
	fs->log_arg = log_arg;
	fs->memfd = -1;
	fs->info.started = time(NULL);
	fs->info.mode = "fresh";
	fs->info.generation = 1;
	/* $FDSTORE: FileDescriptorStoreMax=, set by systemd 254 and later, and
	 * by our units' Environment= for older ones; without it, storing
	 * would only make systemd log that its store is full */
	if (max)
		fs->store_max = (unsigned)strtoul(max, NULL, 10);
	fs->info.store = getenv("NOTIFY_SOCKET") && fs->store_max > 0;
	fs->handoff = getenv("VSXD_HANDOFF_FD") != NULL;

	n = sd_listen_fds_with_names(1, &names);
	if (n < 0)
		fs_log(fs, LOG_WARNING, "LISTEN_FDS: %s", strerror(-n));
	if (n > 0) {
		fs->passed = calloc((size_t)n, sizeof(*fs->passed));
		if (!fs->passed) {
			for (int i = 0; i < n; i++)
				close(SD_LISTEN_FDS_START + i);
			n = 0;
		}
		fs->nfds = (unsigned)(n > 0 ? n : 0);
		for (unsigned i = 0; i < fs->nfds; i++) {
			fs->passed[i].fd = SD_LISTEN_FDS_START + (int)i;
			fs->passed[i].name = names ? names[i] : NULL;
			if (names)
				names[i] = NULL;
			/* a listening socket of a live handoff: whoever binds
			 * its address takes it (util.h, inherited listeners) */
			if (fs->passed[i].name &&
			    !strncmp(fs->passed[i].name, "listen.", 7) &&
			    vsx__inherit_add(fs->passed[i].fd) == 0) {
				fs->passed[i].given = true;
				fs->info.listeners++;
			}
			if (fs->passed[i].name && !strcmp(fs->passed[i].name, "state") &&
			    state < 0)
				state = (int)i;
		}
		if (state < 0 && fs->handoff)
			snprintf(fs->refusal, sizeof(fs->refusal), "no descriptor named "
				 "state among the %u passed", fs->nfds);
		else if (state < 0)
			fs_log(fs, LOG_ERR, "restart: %u descriptors passed, none named "
			       "state: every VM starts fresh", fs->nfds);
		else
			read_prev(fs, fs->passed[state].fd);
	}
	free(names);
	if (fs->have_prev) {
		/* listening sockets in the store: the old process left them on
		 * SIGTERM (vsxd_fdstore_keep), it did not crash */
		fs->info.mode = fs->handoff ? "handed-over"
				: fs->info.listeners ? "restarted" : "recovered";
		fs->info.generation = fs->prev.generation + 1;
		fs_log(fs, LOG_NOTICE, "%s: the state of generation %llu names %u VM%s",
		       fs->handoff ? "taking over in a live handoff"
		       : fs->info.listeners ? "restarting (systemctl restart)"
		       : "recovering after a crash",
		       (unsigned long long)fs->prev.generation,
		       fs->prev.nvms, fs->prev.nvms == 1 ? "" : "s");
	}
	if (fs->info.store) {
		/* the record is written in place: the store's copy is this file
		 * (a handoff's record is not the store's: a new one is) */
		if (fs->have_prev && !fs->handoff) {
			fs->memfd = fs->passed[state].fd;
			fs->passed[state].given = true;
			fs->passed[state].keep_name = true;
			/* (the old process's slots were read) */
			if ((r = vsxd_slots_wipe(fs->memfd)) < 0)
				fs_log(fs, LOG_WARNING, "restart state: cannot empty the "
				       "connection slots: %s", strerror(-r));
		} else {
			if (state >= 0) {
				/* the old record leaves now, and its name is the
				 * new one's from here on */
				store_remove(fs, "state");
				fs->passed[state].keep_name = true;
			}
			fs->memfd = memfd_create("vsxd-state", MFD_CLOEXEC);
			if (fs->memfd < 0 || store_fd(fs, "state", fs->memfd) < 0) {
				fs_log(fs, LOG_ERR, "file descriptor store: no state record (%s): "
				       "VMs will not survive a crash", strerror(errno));
				if (fs->memfd >= 0)
					close(fs->memfd);
				fs->memfd = -1;
				fs->info.store = false;
			}
		}
	}
	if (fs->info.store && (r = vsxd_slots_open(fs->memfd, &fs->slots)) < 0)
		fs_log(fs, LOG_ERR, "restart state: no connection slots (%s): a crash ends "
		       "the connections without an RST", strerror(-r));
	*out = fs;
	return 0;
}

/* vm.NAME.* of a passed descriptor: NAME's length, or 0 */
static size_t vm_of(const char *name)
{
	const char *dot;

	if (!name || strncmp(name, "vm.", 3) || !(dot = strchr(name + 3, '.')))
		return 0;
	return (size_t)(dot - name - 3);
}

/* The passed descriptor named @name, or -1. A region's file may be taken
 * again for the same VM (@dup_ok): a copy. */
static int take_fd(struct vsxd_fdstore *fs, const char *name, bool dup_ok)
{
	for (unsigned i = 0; i < fs->nfds; i++) {
		struct passed *p = &fs->passed[i];

		if (!p->name || strcmp(p->name, name))
			continue;
		if (!p->given) {
			p->given = p->taking = true;
			return p->fd;
		}
		if (dup_ok && p->taking)
			return fcntl(p->fd, F_DUPFD_CLOEXEC, 3);
	}
	return -1;
}

/* The VM being adopted is done with: @st's descriptors went to its device
 * (@handed: whatever adoption made of them, they are not ours), or not. */
static void taken_end(struct vsxd_fdstore *fs, const struct vsxu_vu_state *st,
		      bool handed, bool keep_names)
{
	for (unsigned i = 0; i < fs->nfds; i++) {
		struct passed *p = &fs->passed[i];

		if (!p->taking)
			continue;
		p->taking = false;
		p->given = handed;
		/* a kept connection's socket (conn.ID.host) is never the
		 * store's: it closes when the connection ends */
		p->keep_name = handed && keep_names &&
			       !(p->name && !strncmp(p->name, "conn.", 5));
	}
	if (handed)
		return;
	/* copies made for regions sharing a file are ours to close */
	for (unsigned k = 0; k < st->nregions; k++) {
		bool passed = false;

		for (unsigned i = 0; i < fs->nfds; i++)
			passed |= fs->passed[i].fd == st->region[k].fd;
		if (!passed && st->region[k].fd >= 0)
			close(st->region[k].fd);
	}
}

/* The device state @v names, from the passed descriptors; NULL or why not. */
static const char *build_state(struct vsxd_fdstore *fs, const struct vsxd_state_vm *v,
			       struct vsxu_vu_state *st)
{
	memset(st, 0, sizeof(*st));
	st->conn_fd = -1;
	for (unsigned i = 0; i < VSXU_MEM_MAX_REGIONS; i++)
		st->region[i].fd = -1;
	for (unsigned i = 0; i < VSXU_VU_MAX_QUEUES; i++)
		st->queue[i].kick_fd = st->queue[i].call_fd = -1;
	if (v->nregions > VSXU_MEM_MAX_REGIONS || v->nqueues > VSXU_VU_MAX_QUEUES)
		return "more regions or rings than a device has";
	st->features = v->features;
	st->protocol_features = v->protocol_features;
	st->paused = v->paused;
	st->conn_fd = take_fd(fs, v->conn, false);
	if (st->conn_fd < 0)
		return "its vhost-user connection is missing";
	st->nregions = v->nregions;
	for (unsigned i = 0; i < v->nregions; i++) {
		const struct vsxd_state_region *g = &v->region[i];

		st->region[i] = (struct vsxu_vu_region_state){
			.gpa = g->gpa, .size = g->size, .uva = g->uva,
			.mmap_offset = g->mmap_offset, .fd = take_fd(fs, g->fd, true),
		};
		if (st->region[i].fd < 0)
			return "a memory region's file is missing";
	}
	st->nqueues = v->nqueues;
	for (unsigned i = 0; i < v->nqueues; i++) {
		const struct vsxd_state_queue *g = &v->queue[i];

		st->queue[i] = (struct vsxu_vu_queue_state){
			.index = g->index, .num = g->num, .enabled = g->enabled,
			.desc = g->desc, .avail = g->avail, .used = g->used,
			.base = g->base,
			.kick_fd = *g->kick ? take_fd(fs, g->kick, false) : -1,
			.call_fd = *g->call ? take_fd(fs, g->call, false) : -1,
		};
		if ((*g->kick && st->queue[i].kick_fd < 0) ||
		    (*g->call && st->queue[i].call_fd < 0))
			return "a ring's kick or call eventfd is missing";
	}
	return NULL;
}

static struct vsxb_conn_addr conn_addr(const struct vsxd_state_conn *c)
{
	return (struct vsxb_conn_addr){
		.guest_cid = c->guest_cid, .peer_cid = c->peer_cid,
		.guest_port = c->guest_port, .peer_port = c->peer_port,
		.type = (int)c->type,
	};
}

/* A sibling half @c of @v that can go on: held whole, established, and
 * its twin in the record names it back, the addresses mirrored. NULL, or
 * why not (it ends). */
static const char *sibling_bad(const struct vsxd_fdstore *fs, const struct vsxd_state_vm *v,
			       const struct vsxd_state_conn *c)
{
	const struct vsxd_state_vm *tv = NULL;

	if (fs->prev.version < 3 || !(c->flags & VSXD_CONN_WHOLE) || !*c->twin_vm)
		return "the state holds no twin for it";
	if (c->guest_cid != v->cid || c->state != VSXB_CONN_ESTABLISHED ||
	    c->timer != VSXD_TIMER_NONE || c->to_host_q.len)
		return "the state holds it half done";
	for (unsigned i = 0; i < fs->prev.nvms && !tv; i++)
		if (!strcmp(fs->prev.vms[i].name, c->twin_vm))
			tv = &fs->prev.vms[i];
	if (!tv || tv == v)
		return "its twin's VM is not in the state";
	for (unsigned i = 0; i < tv->nconns; i++) {
		const struct vsxd_state_conn *t = &tv->conns[i];

		if (t->id != c->twin_id)
			continue;
		if (t->peer != VSXD_PEER_SIBLING || !(t->flags & VSXD_CONN_WHOLE) ||
		    strcmp(t->twin_vm, v->name) || t->twin_id != c->id ||
		    t->guest_cid != tv->cid || t->peer_cid != v->cid ||
		    c->peer_cid != tv->cid || t->peer_port != c->guest_port ||
		    c->peer_port != t->guest_port || t->type != c->type)
			return "its twin in the state does not match it";
		return NULL;
	}
	return "its twin is not in the state";
}

/* @v's connections: those the record holds whole with their host socket
 * (or their sibling twin) into @keep (returns how many; their sockets
 * taken), the rest into @rst (*@nrst), which end with an RST. */
static unsigned conns_split(struct vsxd_fdstore *fs, const struct vsxd_state_vm *v,
			    struct vsxb_conn_addr *rst, struct vsxb_conn_keep *keep,
			    unsigned *nrst)
{
	unsigned nk = 0;
	struct stat sb;

	*nrst = 0;
	for (unsigned i = 0; i < v->nconns; i++) {
		const struct vsxd_state_conn *c = &v->conns[i];
		struct vsxb_conn_keep *k = &keep[nk];
		const struct vsxd_state_bytes *q = &c->to_host_q;
		const char *sbad = NULL;
		bool hybrid = false, drain = false, linger = false;
		int fd = -1;

		if (c->peer == VSXD_PEER_SIBLING && fs->prev.version >= 3 &&
		    (c->flags & VSXD_CONN_WHOLE)) {
			/* a pair: made again with its twin (backend.h) */
			sbad = sibling_bad(fs, v, c);
			if (sbad) {
				fs_log(fs, LOG_ERR, "vm %s: sibling connection %llu: %s: it "
				       "ends (RST to the guest)", v->name,
				       (unsigned long long)c->id, sbad);
				rst[(*nrst)++] = conn_addr(c);
				continue;
			}
			q = &c->to_guest_q;
			goto keep;
		}
		/* a host socket, named once, of a socket kind: established or
		 * closing with no timer, a hybrid program waiting for its
		 * "OK" (connecting, its connect timeout running), or one
		 * draining what its guest sent (closing, its drain timer
		 * running) */
		hybrid = c->state == VSXB_CONN_CONNECTING && c->timer == VSXD_TIMER_CONNECT &&
			 !(c->flags & VSXD_CONN_GUEST_INITIATED) && c->peer == VSXD_PEER_HOST &&
			 c->type == 1 && !c->to_host_q.len;
		drain = c->state == VSXB_CONN_CLOSING && c->timer == VSXD_TIMER_DRAIN &&
			c->peer != VSXD_PEER_SIBLING && c->to_host_q.len;
		/* or one shut down both ways waiting for its guest's RST
		 * (closing, its linger timer running), with its socket or,
		 * the program's end gone, without */
		linger = c->state == VSXB_CONN_CLOSING && c->timer == VSXD_TIMER_LINGER &&
			 c->peer != VSXD_PEER_SIBLING &&
			 (c->host_shut | c->shut_pending) == 3 && !(c->ctrl & 0x20);
		if (fs->prev.version >= 2 && (c->flags & VSXD_CONN_WHOLE) && *c->host_fd &&
		    c->guest_cid == v->cid && !c->to_guest_q.len &&
		    (hybrid || drain || linger || (c->state != VSXB_CONN_CONNECTING &&
						   c->timer == VSXD_TIMER_NONE)))
			fd = take_fd(fs, c->host_fd, false);
		if (fd >= 0 && (fstat(fd, &sb) < 0 || !S_ISSOCK(sb.st_mode))) {
			fs_log(fs, LOG_ERR, "vm %s: connection %llu: %s is not a socket: "
			       "the connection ends", v->name, (unsigned long long)c->id,
			       c->host_fd);
			fd = -1;   /* closed with what nobody took */
		}
		if (fd < 0 && linger && !*c->host_fd && (c->flags & VSXD_CONN_WHOLE) &&
		    c->guest_cid == v->cid && !c->to_guest_q.len && !c->to_host_q.len)
			goto keep;   /* kept without a socket: it had none */
		if (fd < 0) {
			/* (a drain's guest had its RST: not another) */
			if (!drain)
				rst[(*nrst)++] = conn_addr(c);
			continue;
		}
keep:
		*k = (struct vsxb_conn_keep){
			.id = c->id, .type = (int)c->type, .state = (int)c->state,
			.guest_port = c->guest_port, .peer_cid = c->peer_cid,
			.peer_port = c->peer_port,
			.guest_initiated = c->flags & VSXD_CONN_GUEST_INITIATED,
			.vsock = c->peer == VSXD_PEER_VSOCK,
			.guest_shut = c->guest_shut, .host_shut = c->host_shut,
			.shut_pending = c->shut_pending, .ctrl = c->ctrl,
			.host_flags = (c->flags & VSXD_CONN_HOST_EOF ? VSXB_KEEP_HOST_EOF : 0) |
				(c->flags & VSXD_CONN_HOST_WR_SHUT ? VSXB_KEEP_HOST_WR_SHUT : 0) |
				(c->flags & VSXD_CONN_HOST_WR_DEAD ? VSXB_KEEP_HOST_WR_DEAD : 0) |
				(hybrid ? VSXB_KEEP_HOST_HYBRID : 0) |
				(drain ? VSXB_KEEP_HOST_DRAIN : 0) |
				(linger ? VSXB_KEEP_HOST_LINGER : 0),
			.timer_ms = hybrid || drain || linger ? c->timer_ms : 0,
			.cr = c->cr,
			.advertised = c->flags & VSXD_CONN_ADVERTISED,
			.credit_req_sent = c->flags & VSXD_CONN_CREDIT_REQ_SENT,
			.msg_open = c->flags & VSXD_CONN_MSG_OPEN,
			.to_guest = c->to_guest, .from_guest = c->from_guest,
			.why = (int)c->why, .why_limit = (int)c->why_limit,
			.why_err = (int)c->why_err,
			.fd = fd, .q = q->data, .qlen = q->len,
			.sibling = c->peer == VSXD_PEER_SIBLING, .twin_id = c->twin_id,
			.eom_pending = c->eom_pending,
		};
		snprintf(k->tag, sizeof(k->tag), "%.*s", (int)sizeof(k->tag) - 1, c->tag);
		snprintf(k->twin_vm, sizeof(k->twin_vm), "%s", c->twin_vm);
		if (q->nends) {
			struct vsxb_msg_end *e = calloc(q->nends, sizeof(*e));

			if (!e) {
				if (fd >= 0)
					close(fd);  /* ends, as below */
				rst[(*nrst)++] = conn_addr(c);
				continue;
			}
			for (unsigned j = 0; j < q->nends; j++)
				e[j] = (struct vsxb_msg_end){ q->ends[j].end, q->ends[j].flags };
			k->ends = e;
			k->nends = q->nends;
		}
		nk++;
	}
	return nk;
}

void vsxd_fdstore_adopt(struct vsxd_fdstore *fs, struct vsxb_vm *vm, const char *name,
			uint64_t cid)
{
	char cidwhy[96];
	const struct vsxd_state_vm *v = NULL;
	struct vsxb_conn_addr *conns = NULL;
	struct vsxb_conn_keep *keep = NULL;
	unsigned nkeep, nrst, kept = 0;
	struct vsxu_vu_state st;
	const char *why;
	int r;

	if (!fs || !fs->have_prev)
		return;
	for (unsigned i = 0; i < fs->prev.nvms && !v; i++)
		if (!strcmp(fs->prev.vms[i].name, name))
			v = &fs->prev.vms[i];
	if (!v)
		return;
	for (unsigned i = 0; i < fs->nfds; i++) {
		struct passed *p = &fs->passed[i];

		if (vm_of(p->name) == strlen(name) && !strncmp(p->name + 3, name, strlen(name)))
			p->vm_seen = true;
	}
	if (v->cid != cid) {
		/* the guest knows the old one: its device is not this VM's */
		snprintf(cidwhy, sizeof(cidwhy), "its guest-cid was %llu, it is %llu now",
			 (unsigned long long)v->cid, (unsigned long long)cid);
		why = cidwhy;
		goto fail;
	}
	why = build_state(fs, v, &st);
	if (!why && v->nconns) {
		conns = calloc(v->nconns, sizeof(*conns));
		keep = calloc(v->nconns, sizeof(*keep));
		if (!conns || !keep)
			why = "out of memory";
	}
	if (why) {
		free(keep);
		taken_end(fs, &st, false, false);
		goto fail;
	}
	nkeep = conns_split(fs, v, conns, keep, &nrst);
	r = vsxb_vm_adopt_keep(vm, &st, conns, nrst, keep, nkeep, &kept);
	free(conns);
	for (unsigned i = 0; i < nkeep; i++)
		free((void *)keep[i].ends);
	free(keep);
	taken_end(fs, &st, true, r == 0);
	if (r < 0) {
		why = r == -EINVAL ? "its descriptors do not match the state (see above)"
				   : strerror(-r);
		goto fail;
	}
	fs->info.vms_recovered++;
	fs->info.conns_ended += v->nconns - kept;
	fs->info.conns_kept += kept;
	if (v->paused)
		fs_log(fs, LOG_NOTICE, "vm %s: %s: device taken back paused (its VM is "
		       "stopped; it goes on at cont) on its vhost-user connection, %u "
		       "connection%s kept, %u ended (RST to the guest at cont)", name,
		       fs->handoff ? "handed over" : fs->info.listeners ? "restarted"
				   : "recovered after a crash",
		       kept, kept == 1 ? "" : "s", v->nconns - kept);
	else if (kept)
		fs_log(fs, LOG_NOTICE, "vm %s: %s: device resumed on its vhost-user "
		       "connection, %u connection%s kept, %u ended (RST to the guest)", name,
		       fs->handoff ? "handed over" : "restarted", kept, kept == 1 ? "" : "s",
		       v->nconns - kept);
	else
		fs_log(fs, LOG_NOTICE, "vm %s: %s: device resumed on its vhost-user "
		       "connection, %u connection%s ended (RST to the guest)", name,
		       fs->handoff ? "handed over" : fs->info.listeners ? "restarted"
				   : "recovered after a crash",
		       v->nconns, v->nconns == 1 ? "" : "s");
	return;

fail:
	fs->info.vms_failed++;
	if (fs->handoff) {
		/* the old process still serves it: the handoff is refused
		 * (main.c), nothing here touched the front-end */
		snprintf(fs->refusal, sizeof(fs->refusal), "vm %s: cannot take its "
			 "device: %s", name, why);
		fs_log(fs, LOG_ERR, "%s", fs->refusal);
		return;
	}
	fs_log(fs, LOG_ERR, "vm %s: cannot recover its device (%s): it starts fresh, "
	       "its front-end connection closed (QEMU sees its back-end go)", name, why);
}

void vsxd_fdstore_pair(struct vsxd_fdstore *fs, struct vsxb_router *r)
{
	unsigned pairs, ended = 0;

	if (!fs || !fs->have_prev)
		return;
	pairs = vsxb_router_pair_kept(r, &ended);
	if (!pairs && !ended)
		return;
	pthread_mutex_lock(&fs->lock);
	/* the adoptions counted each half as kept */
	fs->info.conns_kept -= ended < fs->info.conns_kept ? ended : fs->info.conns_kept;
	fs->info.conns_ended += ended;
	pthread_mutex_unlock(&fs->lock);
	fs_log(fs, LOG_NOTICE, "%u sibling pair%s made again between the adopted "
	       "devices, %u %s ended (RST to the guest)", pairs, pairs == 1 ? "" : "s",
	       ended, ended == 1 ? "half" : "halves");
}

/* Is @name kept in the store by a passed descriptor? */
static bool name_kept(const struct vsxd_fdstore *fs, const char *name)
{
	for (unsigned i = 0; i < fs->nfds; i++)
		if (fs->passed[i].keep_name && fs->passed[i].name &&
		    !strcmp(fs->passed[i].name, name))
			return true;
	return false;
}

/*
 * Say what is left of the passed descriptors nobody took, before they
 * are closed: a VM's device the configuration no longer has, and
 * descriptors no record names (another program's, or a store holding
 * more than vsxd put in it). Already said elsewhere: an unusable record
 * (everything starts fresh), a configured VM whose device could not be
 * taken, a kept connection's socket (conn.ID.host) left over from a
 * connection that ended, and the relays record and a relay's sockets
 * (relay_keep.c says why they were not taken).
 */
static void log_unused(struct vsxd_fdstore *fs)
{
	char list[256];
	size_t off = 0;
	unsigned n = 0;

	if (!fs->have_prev)
		return;
	for (unsigned i = 0; i < fs->nfds; i++) {
		const struct passed *p = &fs->passed[i];
		size_t vl = vm_of(p->name);
		unsigned k = 0;
		bool first = true;

		if (p->given || p->vm_seen || (p->name && !strcmp(p->name, "state")))
			continue;
		if (vl) {
			for (unsigned j = 0; j < fs->nfds; j++) {
				const struct passed *q = &fs->passed[j];

				if (q->given || q->vm_seen || vm_of(q->name) != vl ||
				    strncmp(q->name, p->name, vl + 3))
					continue;
				first = first && j >= i;
				k++;
			}
			if (first)
				fs_log(fs, LOG_WARNING, "vm %.*s: in the restart state but "
				       "not configured now: its %u stored descriptor%s closed "
				       "(its front-end sees its back-end go)", (int)vl,
				       p->name + 3, k, k == 1 ? "" : "s");
			continue;
		}
		if (p->name && (!strncmp(p->name, "conn.", 5) || !strncmp(p->name, "relay", 5)))
			continue;   /* (said by whoever did not take it) */
		n++;
		if (off < sizeof(list))
			off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s",
						n > 1 ? ", " : "", p->name ? p->name : "(unnamed)");
	}
	if (n)
		fs_log(fs, LOG_WARNING, "restart: %u passed descriptor%s that no state "
		       "names, closed: %s%s", n, n == 1 ? "" : "s", list,
		       off >= sizeof(list) ? "..." : "");
}

void vsxd_fdstore_ready(struct vsxd_fdstore *fs)
{
	if (!fs)
		return;
	pthread_mutex_lock(&fs->lock);
	log_unused(fs);
	for (unsigned i = 0; i < fs->nfds; i++) {
		struct passed *p = &fs->passed[i];

		if (!p->given)
			close(p->fd);
		if (fs->info.store && p->name && !name_kept(fs, p->name))
			store_remove(fs, p->name);
	}
	for (unsigned i = 0; i < fs->nfds; i++)
		free(fs->passed[i].name);
	free(fs->passed);
	fs->passed = NULL;
	fs->nfds = 0;
	vsxd_state_clear(&fs->prev);
	fs->have_prev = false;
	write_record(fs);
	pthread_mutex_unlock(&fs->lock);
}
uint64_t vsxd_fdstore_max_conn_id(struct vsxd_fdstore *fs)
{
	uint64_t max = 0;

	if (!fs || !fs->have_prev)
		return 0;
	for (unsigned i = 0; i < fs->prev.nvms; i++)
		for (unsigned j = 0; j < fs->prev.vms[i].nconns; j++)
			if (fs->prev.vms[i].conns[j].id > max)
				max = fs->prev.vms[i].conns[j].id;
	return max;
}

const char *vsxd_fdstore_refusal(struct vsxd_fdstore *fs)
{
	return fs && *fs->refusal ? fs->refusal : NULL;
}

void vsxd_fdstore_info(struct vsxd_fdstore *fs, struct vsxd_start_info *out)
{
	pthread_mutex_lock(&fs->lock);
	*out = fs->info;
	pthread_mutex_unlock(&fs->lock);
}

void vsxd_fdstore_relays(struct vsxd_fdstore *fs, unsigned kept, unsigned ended)
{
	pthread_mutex_lock(&fs->lock);
	fs->info.conns_kept += kept;
	fs->info.conns_ended += ended;
	pthread_mutex_unlock(&fs->lock);
}

struct keep_walk {
	struct vsxd_fdstore *fs;
	struct vsxd_state_conn *conns;
	unsigned n;
};

/* One connection of a VM whole into @arg's list; its host socket, if it
 * can go on, into the store as conn.ID.host (if the store does not take
 * it, the connection is written as one that ends). */
static int keep_conn(const struct vsxb_conn_keep *k, void *arg)
{
	struct keep_walk *w = arg;
	struct vsxd_state_conn *nc, *c;

	if (w->n == VSXD_STATE_MAX_CONNS)
		return 0;
	nc = realloc(w->conns, (w->n + 1) * sizeof(*nc));
	if (!nc)
		return -ENOMEM;
	w->conns = nc;
	c = &nc[w->n++];
	if (vsxd_state_conn_whole(c, k) < 0 ||
	    (*c->host_fd && store_fd(w->fs, c->host_fd, k->fd) < 0)) {
		free(c->to_host_q.data);
		free(c->to_host_q.ends);
		free(c->to_guest_q.data);
		free(c->to_guest_q.ends);
		vsxd_state_conn_from_info(c, k->ci);
	}
	return 0;
}

/* The connections of the running devices, whole: a restart goes on with
 * those to host programs (their sockets in the store), as a handoff does. */
static void keep_conns(struct vsxd_fdstore *fs, struct vsxb_vm *const *vms, size_t n_vms,
		       bool *whole)
{
	for (size_t i = 0; i < n_vms; i++) {
		struct keep_walk w = { .fs = fs };
		int k;

		if (!vms[i] || (k = rec_find(fs, vsxb_vm_name(vms[i]))) < 0)
			continue;
		if (vsxb_vm_foreach_keep(vms[i], keep_conn, &w) < 0) {
			/* the record keeps what the events made of them: they end */
			for (unsigned j = 0; j < w.n; j++) {
				free(w.conns[j].to_host_q.data);
				free(w.conns[j].to_host_q.ends);
				free(w.conns[j].to_guest_q.data);
				free(w.conns[j].to_guest_q.ends);
			}
			free(w.conns);
			continue;
		}
		free(fs->recs[k].conns);
		fs->recs[k].conns = w.conns;
		fs->recs[k].nconns = w.n;
		whole[i] = true;
	}
}

int vsxd_fdstore_keep(struct vsxd_fdstore *fs, struct vsxb_vm *const *vms, size_t n_vms)
{
	int fds[1024], n, kept = 0;
	char name[32];
	bool *whole;

	if (!fs || !fs->info.store || fs->memfd < 0)
		return -ENOTCONN;
	n = vsx__listeners(fds, sizeof(fds) / sizeof(fds[0]));
	if (n < 0)
		return n;
	whole = calloc(n_vms ? n_vms : 1, sizeof(*whole));
	if (!whole)
		return -ENOMEM;
	pthread_mutex_lock(&fs->lock);
	keep_conns(fs, vms, n_vms, whole);
	write_record(fs);
	/* the record holds those VMs' connections whole now: their slots
	 * leave (the record's win over them, in case this stops halfway) */
	for (size_t i = 0; i < n_vms; i++)
		if (whole[i])
			vsxd_slots_unbind(fs->slots, vsxb_vm_name(vms[i]));
	free(whole);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "listen.%d", i);
		kept += store_fd(fs, name, fds[i]) == 0;
	}
	pthread_mutex_unlock(&fs->lock);
	return kept;
}

int vsxd_fdstore_put(struct vsxd_fdstore *fs, const char *name, int fd)
{
	int r;

	if (!fs || !fs->info.store)
		return -ENOTCONN;
	pthread_mutex_lock(&fs->lock);
	r = store_fd(fs, name, fd);
	pthread_mutex_unlock(&fs->lock);
	return r;
}

int vsxd_fdstore_take(struct vsxd_fdstore *fs, const char *name)
{
	int fd = -1;

	if (!fs)
		return -1;
	pthread_mutex_lock(&fs->lock);
	for (unsigned i = 0; i < fs->nfds && fd < 0; i++) {
		struct passed *p = &fs->passed[i];

		if (!p->given && p->name && !strcmp(p->name, name)) {
			p->given = true;
			fd = p->fd;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	return fd;
}

void vsxd_fdstore_free(struct vsxd_fdstore *fs)
{
	if (!fs)
		return;
	vsxd_fdstore_ready(fs);  /* (nothing left to adopt) */
	pthread_mutex_lock(&fs->lock);
	while (fs->nrecs) {
		remove_vm_names(fs, &fs->recs[0]);
		rec_drop(fs, 0);
	}
	if (fs->info.store)
		store_remove(fs, "state");
	pthread_mutex_unlock(&fs->lock);
	vsxd_slots_free(fs->slots);
	if (fs->memfd >= 0)
		close(fs->memfd);
	free(fs->recs);
	pthread_mutex_destroy(&fs->lock);
	free(fs);
}
