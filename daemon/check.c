/*
 * vsxd --check (-t): what a configuration would serve, on standard output
 * (vsxd(8) OPTIONS): each VM with where it comes from, its sockets, buffer,
 * queue size and groups; the forwards; the control socket, the user to
 * drop to, log settings and limits. main.c checks and resolves the
 * configuration first (the user= lookup among it) and calls this alone.
 */
#include <stdio.h>

#include <vsx/vsx.h>

#include "config.h"
#include "forward.h"
#include "logging.h"
#include "sandbox.h"

static void print_limit(const struct vsxd_config *cfg, int l)
{
	printf("  %s ", vsxd_limit_name(l));
	if (cfg->limit_set[l])
		printf("%llu\n", (unsigned long long)cfg->limits[l]);
	else
		printf("default\n");
}

void vsxd_check_print(const struct vsxd_opts *opts, const struct vsxd_config *cfg, uid_t uid,
		      gid_t ugid)
{
	const struct vsxd_forward *f;
	const struct vsxd_vm *vm;
	unsigned mode;
	bool has_gid;
	uint32_t gid;
	char n[32];
	size_t i, j;
	int l;

	if (opts->config_file)
		printf("config %s\n", opts->config_file);
	for (i = 0; i < cfg->n_vms; i++) {
		vm = &cfg->vms[i];
		printf("vm %s (%s)\n", vsxd_vm_name(vm, n, sizeof(n)), vm->origin);
		printf("  guest-cid %llu\n  socket %s\n", (unsigned long long)vm->guest_cid,
		       vm->socket_path);
		if (vm->uds_path)
			printf("  uds-path %s\n", vm->uds_path);
		if (vm->set & VSXD_VM_FWD_CID) {
			printf("  forward-cid %u\n", vm->forward_cid);
			printf("  forward-listen ");
			for (j = 0; j < vm->n_forward_listen; j++)
				printf("%s%u", j ? "+" : "", vm->forward_listen[j]);
			printf("%s\n", vm->n_forward_listen ? "" : "none");
		}
		printf("  tx-buffer-size %u\n  queue-size %u\n  groups %s\n",
		       vm->tx_buffer_size ? vm->tx_buffer_size : VSXB_DEFAULT_BUF_ALLOC,
		       vm->queue_size ? vm->queue_size : VSXB_DEFAULT_QUEUE_SIZE,
		       vm->groups ? vm->groups : VSXB_GROUP_DEFAULT);
		vsxd_vm_perm(cfg, vm, &mode, &has_gid, &gid);
		printf("  socket-mode %04o\n  socket-group ", mode);
		if (has_gid)
			printf("%s (gid %u)\n", vm->perm.group ? vm->perm.group : cfg->perm.group,
			       gid);
		else
			printf("vsxd's own\n");
	}
	for (i = 0; i < cfg->n_fwds; i++) {
		f = &cfg->fwds[i];
		printf("forward %s (%s)\n  listen %s\n  connect %s\n", f->name, f->origin,
		       f->listen.text, f->connect.text);
		if (f->n_allow) {
			printf("  allow ");
			for (j = 0; j < f->n_allow; j++)
				printf("%s%u", j ? "+" : "", f->allow[j]);
			printf("\n");
		}
		if (f->auth_key)
			printf("  auth psk:%s\n", f->auth_key);
	}
	printf("daemon\n  control %s\n",
	       cfg->control_path ? cfg->control_path : VSX_CONTROL_PATH);
	if (cfg->n_control_allow_uids) {
		printf("  control-allow-uid ");
		for (j = 0; j < cfg->n_control_allow_uids; j++)
			printf("%s%u", j ? "," : "", cfg->control_allow_uids[j]);
		printf("\n");
	}
	vsxd_control_perm(cfg, &mode, &has_gid, &gid);
	printf("  control-mode %04o\n  control-group ", mode);
	if (has_gid)
		printf("%s (gid %u)\n", cfg->control_perm.group, gid);
	else
		printf("vsxd's own (no group admitted)\n");
	if (cfg->user)
		printf("  user %s (uid %u, gid %u)\n", cfg->user, (unsigned)uid, (unsigned)ugid);
	else
		printf("  user (stays as started)\n");
	printf("  seccomp %s\n",
	       vsxd_seccomp_name(cfg->seccomp == VSXD_UNSET ? VSXD_SECCOMP_KILL : cfg->seccomp));
	printf("  log %s\n  log-level %s\n",
	       cfg->log_target == VSXD_LOG_SYSLOG ? "syslog" : "stderr",
	       vsxd_log_level_name(cfg->log_level != VSXD_UNSET ? cfg->log_level
								 : VSXD_DEFAULT_LOG_LEVEL));
	for (l = 0; l < VSXD_LIMIT_N; l++)
		print_limit(cfg, l);
	printf("configuration OK: %zu VM%s, %zu forward%s\n", cfg->n_vms,
	       cfg->n_vms == 1 ? "" : "s", cfg->n_fwds, cfg->n_fwds == 1 ? "" : "s");
}

