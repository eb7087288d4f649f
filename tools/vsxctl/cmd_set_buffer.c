/*
 * vsxctl set-buffer: change a receive buffer (the credit a peer sees) live.
 *
 *   set-buffer ID --rx BYTES            a connection of vsxd (CREDIT_UPDATE sent)
 *   set-buffer --vm NAME --rx BYTES     vsxd's default for NAME's new connections
 *   set-buffer --pid PID --fd FD --rx BYTES
 *                                       a kernel vsock socket of any process: a
 *                                       copy of its fd is taken with
 *                                       pidfd_getfd(2) (root or CAP_SYS_PTRACE)
 *                                       and the libvsx knob applied to it.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "vsxctl.h"

static int set_foreign(uint64_t pid, uint64_t fd, uint64_t rx)
{
	/* Our copy must not shut the owner's connection down on close. */
	struct vsx_opts o = { .linger_ms = -1 };
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	vsx_sock *s;
	size_t now;
	int pfd, cfd, rc;

	if (pid == 0 || pid > 0x7fffffff || fd > 0x7fffffff)
		return err_msg("set-buffer", "bad --pid or --fd");
	pfd = pidfd_open((pid_t)pid, 0);
	if (pfd < 0)
		return err_msg("set-buffer", "pid %llu: %s", (unsigned long long)pid,
			       strerror(errno));
	cfd = pidfd_getfd(pfd, (int)fd, 0);
	rc = errno;
	close(pfd);
	if (cfd < 0)
		return err_msg("set-buffer", "fd %llu of pid %llu: %s%s", (unsigned long long)fd,
			       (unsigned long long)pid, strerror(rc),
			       rc == EPERM ? " (needs root or CAP_SYS_PTRACE over the process)" : "");
	/* Only a kernel vsock socket: vsx_adopt() takes AF_UNIX too (hybrid),
	 * whose "buffer" is some vsxd connection's, not this fd's. */
	rc = getsockname(cfd, (struct sockaddr *)&ss, &sslen) < 0 ? errno : 0;
	if (rc || ss.ss_family != AF_VSOCK) {
		close(cfd);
		if (rc == ENOTSOCK)
			return err_msg("set-buffer", "fd %llu of pid %llu is not a socket",
				       (unsigned long long)fd, (unsigned long long)pid);
		if (rc)
			return err_msg("set-buffer", "fd %llu of pid %llu: %s",
				       (unsigned long long)fd, (unsigned long long)pid,
				       strerror(rc));
		return err_msg("set-buffer", "fd %llu of pid %llu is not a vsock socket "
			       "(address family %d)", (unsigned long long)fd,
			       (unsigned long long)pid, (int)ss.ss_family);
	}
	rc = vsx_adopt(cfd, &o, &s);
	if (rc < 0) {
		close(cfd);
		return err_msg("set-buffer", "fd %llu of pid %llu: %s", (unsigned long long)fd,
			       (unsigned long long)pid, vsx_strerror(rc));
	}
	rc = vsx_set_buffer(s, VSX_RX, rx);
	if (rc < 0) {
		err_msg("set-buffer", "%s", vsx_strerror(rc));
		vsx_close(s);
		return 1;
	}
	rc = vsx_get_buffer(s, VSX_RX, &now);
	vsx_close(s);
	if (rc < 0)
		return err_msg("set-buffer", "read back: %s", vsx_strerror(rc));
	if (opt_json)
		printf("{\"pid\": %llu, \"fd\": %llu, \"rx\": %zu}\n",
		       (unsigned long long)pid, (unsigned long long)fd, now);
	else
		printf("pid %llu fd %llu: rx buffer %zu\n", (unsigned long long)pid,
		       (unsigned long long)fd, now);
	return 0;
}

int set_buffer_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "rx", required_argument, NULL, 'r' },
		{ "tx", required_argument, NULL, 't' },
		{ "vm", required_argument, NULL, 'v' },
		{ "pid", required_argument, NULL, 'p' },
		{ "fd", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	const char *vm = NULL;
	struct vsx_ctl_req req;
	uint64_t rx = 0, tx = 0, pid = 0, fd = 0, id;
	bool have_rx = false, have_tx = false, have_pid = false, have_fd = false;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'r':
		case 't':
			rc = parse_size(optarg, ch == 'r' ? &rx : &tx);
			if (rc < 0 || (ch == 'r' ? rx : tx) == 0 ||
			    (ch == 'r' ? rx : tx) > UINT32_MAX)
				return err_msg("set-buffer", "--%s %s: a size from 1 to 4G-1 "
					       "bytes (suffixes K, M, G)", ch == 'r' ? "rx" : "tx",
					       optarg);
			*(ch == 'r' ? &have_rx : &have_tx) = true;
			break;
		case 'v':
			vm = optarg;
			break;
		case 'p':
		case 'f':
			if (parse_u64(optarg, ch == 'p' ? &pid : &fd) < 0)
				return err_msg("set-buffer", "--%s %s: not a number",
					       ch == 'p' ? "pid" : "fd", optarg);
			*(ch == 'p' ? &have_pid : &have_fd) = true;
			break;
		default:
			die_usage("set-buffer");
		}
	}
	if (!have_rx && !have_tx)
		return err_msg("set-buffer", "nothing to set: give --rx BYTES");
	if (have_pid || have_fd) {
		if (!have_pid || !have_fd || vm || optind != argc)
			die_usage("set-buffer");
		if (have_tx)
			return err_msg("set-buffer", "kernel vsock sockets have no TX buffer "
				       "of their own: --rx sets their one buffer, which bounds "
				       "what they keep in flight too");
		return set_foreign(pid, fd, rx);
	}
	vsx__ctl_req_init(&req, VSX_CTL_SET_BUFFER);
	if (vm) {
		if (optind != argc)
			die_usage("set-buffer");
		vsx__ctl_req_add(&req, VSX_CTL_K_VM, vm);
	} else {
		if (optind + 1 != argc)
			die_usage("set-buffer");
		if (parse_u64(argv[optind], &id) < 0)
			return err_msg("set-buffer", "'%s' is not a connection id", argv[optind]);
		vsx__ctl_req_addf(&req, VSX_CTL_K_ID, "%llu", (unsigned long long)id);
	}
	if (have_rx)
		vsx__ctl_req_addf(&req, VSX_CTL_K_RX, "%llu", (unsigned long long)rx);
	if (have_tx)
		vsx__ctl_req_addf(&req, VSX_CTL_K_TX, "%llu", (unsigned long long)tx);
	return ctl_run("set-buffer", &req, out_pairs);
}
