/*
 * vsxctl ss: every kernel AF_VSOCK socket on this machine, through the
 * vsock_diag sock_diag(7) netlink interface (like `ss --vsock`), with libnl-3.
 *
 *   -l           listening sockets only      -a   all states (default: all)
 *   --state S    one state (listen, established, connecting, closing, close)
 *   --port P     local or peer port P
 *   -p           the owning process and fd (socket inodes matched in /proc)
 *
 * Needs the vsock_diag module; without it the kernel answers ENOENT.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/sock_diag.h>
#include <linux/vm_sockets.h>
#include <linux/vm_sockets_diag.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include "vsxctl.h"

/* sk_state values (include/net/tcp_states.h); vsock uses these. */
enum { SS_ESTABLISHED = 1, SS_SYN_SENT = 2, SS_CLOSE = 7, SS_CLOSING = 11, SS_LISTEN = 10 };

static const char *state_name(unsigned st)
{
	switch (st) {
	case SS_ESTABLISHED: return "established";
	case SS_SYN_SENT: return "connecting";
	case SS_CLOSE: return "close";
	case SS_CLOSING: return "closing";
	case SS_LISTEN: return "listen";
	default: return "unknown";
	}
}

static int state_by_name(const char *n)
{
	static const unsigned all[] = { SS_ESTABLISHED, SS_SYN_SENT, SS_CLOSE,
					SS_CLOSING, SS_LISTEN };
	size_t i;

	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(state_name(all[i]), n) == 0)
			return (int)all[i];
	return -1;
}

struct owner {
	unsigned ino;
	int pid, fd;
	char comm[32];
};

struct ss_ctx {
	struct vsock_diag_msg *v;
	size_t n, cap;
	int err;
};

static int on_msg(struct nl_msg *msg, void *arg)
{
	struct nlmsghdr *h = nlmsg_hdr(msg);
	struct ss_ctx *c = arg;
	struct vsock_diag_msg *m, *nv;

	if (h->nlmsg_type == NLMSG_ERROR) {
		struct nlmsgerr *e = nlmsg_data(h);

		c->err = e->error;
		return NL_STOP;
	}
	if (nlmsg_datalen(h) < (int)sizeof(*m))
		return NL_SKIP;
	m = nlmsg_data(h);
	if (c->n == c->cap) {
		nv = realloc(c->v, (c->cap ? c->cap * 2 : 64) * sizeof(*nv));
		if (!nv) {
			c->err = -ENOMEM;
			return NL_STOP;
		}
		c->v = nv;
		c->cap = c->cap ? c->cap * 2 : 64;
	}
	c->v[c->n++] = *m;
	return NL_OK;
}

static int dump(struct ss_ctx *c, unsigned states)
{
	struct vsock_diag_req req = {
		.sdiag_family = AF_VSOCK,
		.vdiag_states = states,
	};
	struct nl_sock *sk;
	struct nl_msg *msg;
	int rc;

	sk = nl_socket_alloc();
	if (!sk)
		return -ENOMEM;
	rc = nl_connect(sk, NETLINK_SOCK_DIAG);
	if (rc < 0)
		goto out;
	nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, on_msg, c);
	msg = nlmsg_alloc_simple(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP);
	if (!msg) {
		rc = -NLE_NOMEM;
		goto out;
	}
	rc = nlmsg_append(msg, &req, sizeof(req), NLMSG_ALIGNTO);
	if (rc == 0)
		rc = nl_send_auto(sk, msg);
	nlmsg_free(msg);
	if (rc >= 0)
		rc = nl_recvmsgs_default(sk);
out:
	nl_socket_free(sk);
	if (rc < 0)
		return rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NOADDR ? -ENOENT : -EIO;
	return c->err;
}

/* Fill @own with the process/fd of each socket inode, scanning /proc. */
static size_t find_owners(struct owner *own, size_t max)
{
	char path[600], link[64], comm[32];
	struct dirent *p, *f;
	DIR *proc, *fds;
	size_t n = 0;
	unsigned ino;
	ssize_t l;
	FILE *cf;

	proc = opendir("/proc");
	if (!proc)
		return 0;
	while ((p = readdir(proc)) && n < max) {
		if (!isdigit((unsigned char)p->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", p->d_name);
		comm[0] = '\0';
		if ((cf = fopen(path, "re"))) {
			if (fgets(comm, sizeof(comm), cf))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(cf);
		}
		snprintf(path, sizeof(path), "/proc/%s/fd", p->d_name);
		fds = opendir(path);
		if (!fds)
			continue;
		while ((f = readdir(fds)) && n < max) {
			if (f->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "/proc/%s/fd/%s", p->d_name, f->d_name);
			l = readlink(path, link, sizeof(link) - 1);
			if (l <= 0)
				continue;
			link[l] = '\0';
			if (sscanf(link, "socket:[%u]", &ino) != 1)
				continue;
			own[n].ino = ino;
			own[n].pid = atoi(p->d_name);
			own[n].fd = atoi(f->d_name);
			snprintf(own[n].comm, sizeof(own[n].comm), "%s", comm);
			n++;
		}
		closedir(fds);
	}
	closedir(proc);
	return n;
}

static void cid_text(char *b, size_t n, unsigned cid)
{
	if (cid == VMADDR_CID_ANY)
		snprintf(b, n, "*");
	else
		snprintf(b, n, "%u", cid);
}

static void port_text(char *b, size_t n, unsigned port)
{
	if (port == VMADDR_PORT_ANY)
		snprintf(b, n, "*");
	else
		snprintf(b, n, "%u", port);
}

int ss_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "processes", no_argument, NULL, 'p' },
		{ "listening", no_argument, NULL, 'l' },
		{ "all", no_argument, NULL, 'a' },
		{ "state", required_argument, NULL, 's' },
		{ "port", required_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned states = ~0u;
	bool procs = false, have_port = false;
	struct owner *own = NULL;
	struct ss_ctx c = { 0 };
	size_t nown = 0, i, j;
	uint64_t port = 0;
	int ch, rc, st;

	while ((ch = getopt_long(argc, argv, "plas:P:", longopts, NULL)) != -1) {
		switch (ch) {
		case 'p': procs = true; break;
		case 'l': states = 1u << SS_LISTEN; break;
		case 'a': states = ~0u; break;
		case 's':
			st = state_by_name(optarg);
			if (st < 0)
				return err_msg("ss", "unknown state '%s' (listen, established, "
					       "connecting, closing, close)", optarg);
			states = 1u << st;
			break;
		case 'P':
			if (parse_u64(optarg, &port) < 0 || port > UINT32_MAX)
				return err_msg("ss", "--port %s: not a port", optarg);
			have_port = true;
			break;
		default:
			die_usage("ss");
		}
	}
	if (optind != argc)
		die_usage("ss");
	rc = dump(&c, states);
	if (rc < 0) {
		free(c.v);
		if (rc == -ENOENT)
			return err_msg("ss", "the kernel has no vsock_diag (modprobe vsock_diag)");
		return err_msg("ss", "vsock_diag: %s", strerror(-rc));
	}
	if (procs) {
		own = calloc(65536, sizeof(*own));
		if (own)
			nown = find_owners(own, 65536);
	}
	if (opt_json)
		printf("[");
	else
		printf("%-7s %-12s %-21s %-21s %10s%s\n", "TYPE", "STATE", "LOCAL", "PEER",
		       "INODE", procs ? "  PROCESS" : "");
	for (i = 0, j = 0; i < c.n; i++) {
		struct vsock_diag_msg *m = &c.v[i];
		char lc[16], lp[16], pc[16], pp[16], la[40], pa[40];
		struct owner *o = NULL;
		size_t k;

		if (have_port && m->vdiag_src_port != port && m->vdiag_dst_port != port)
			continue;
		for (k = 0; k < nown; k++)
			if (own[k].ino == m->vdiag_ino) {
				o = &own[k];
				break;
			}
		cid_text(lc, sizeof(lc), m->vdiag_src_cid);
		port_text(lp, sizeof(lp), m->vdiag_src_port);
		cid_text(pc, sizeof(pc), m->vdiag_dst_cid);
		port_text(pp, sizeof(pp), m->vdiag_dst_port);
		if (opt_json) {
			printf("%s\n {\"type\": \"%s\", \"state\": \"%s\", \"local_cid\": %u, "
			       "\"local_port\": %u, \"peer_cid\": %u, \"peer_port\": %u, "
			       "\"inode\": %u, \"shutdown\": %u",
			       j++ ? "," : "", m->vdiag_type == SOCK_STREAM ? "stream" :
			       m->vdiag_type == SOCK_SEQPACKET ? "seqpacket" : "dgram",
			       state_name(m->vdiag_state), m->vdiag_src_cid, m->vdiag_src_port,
			       m->vdiag_dst_cid, m->vdiag_dst_port, m->vdiag_ino,
			       m->vdiag_shutdown);
			if (o) {
				printf(", \"pid\": %d, \"fd\": %d, \"process\": ", o->pid, o->fd);
				json_string(o->comm);
			}
			printf("}");
			continue;
		}
		snprintf(la, sizeof(la), "%s:%s", lc, lp);
		snprintf(pa, sizeof(pa), "%s:%s", pc, pp);
		printf("%-7s %-12s %-21s %-21s %10u", m->vdiag_type == SOCK_STREAM ? "stream" :
		       m->vdiag_type == SOCK_SEQPACKET ? "seqpkt" : "dgram",
		       state_name(m->vdiag_state), la, pa, m->vdiag_ino);
		if (o)
			printf("  %s pid=%d fd=%d", o->comm, o->pid, o->fd);
		putchar('\n');
	}
	if (opt_json)
		printf(j ? "\n]\n" : "]\n");
	free(own);
	free(c.v);
	return 0;
}
