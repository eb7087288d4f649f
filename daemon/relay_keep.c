/*
 * vsxd forwards: relays across a live handoff or a restart under a store
 * (forward.h; vsxd(8) UPGRADING VSXD).
 *
 * The old process, its loop stopped (a handoff waits on the main thread,
 * SIGTERM is handled there): each relay established at that point goes
 * into the relays record (state.h), whole: its id, its forward's name, its
 * client, the bytes it held each way (read and not yet written), the EOF
 * and shutdown each way, the bytes moved; its two sockets are passed with
 * the record as relay.ID.0 and relay.ID.1. A relay still connecting, or
 * with a side that cannot be wrapped again (a libvsx socket of vmbus,
 * whose transport has its own send and receive), ends as before: its
 * sockets close when the old process exits.
 *
 * The new process takes the record and the sockets before any VM runs
 * (connection ids go on past the relays'), and, once its forwards run,
 * makes each relay again in its forward (by name) with its id, and goes
 * on where the old one stopped: no byte lost or repeated either way. A
 * relay whose forward is no longer configured, or whose sockets are
 * missing or not stream sockets, ends with a log line; an unusable record
 * ends them all (one line), and nothing else.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "forward.h"
#include "forward-int.h"
#include "state.h"
#include "util.h"

_Static_assert(FWD_BUF == VSXD_RELAY_HELD_MAX, "a relay's buffer fits the record");

/* ---- The old process ---- */

/* Side @s as the record names it: its kind, or 0 (it cannot go on). */
static unsigned side_kind(const struct side *s)
{
	struct vsx_info info;

	if (s->fd < 0)
		return 0;
	if (!s->vs)
		return VSXD_RELAY_PLAIN;
	/* kernel vsock and hybrid: a plain socket under libvsx, which
	 * vsx_adopt wraps again */
	if (vsx_info(s->vs, &info) == 0 && (!strcmp(info.transport, VSX_TRANSPORT_VIRTIO) ||
					    !strcmp(info.transport, VSX_TRANSPORT_HYBRID)))
		return VSXD_RELAY_LIBVSX;
	return 0;
}

/* @rl into @e: 0, or it cannot go on. */
static int relay_fill(struct relay *rl, struct vsxd_state_relay *e)
{
	if ((rl->state != RL_ESTABLISHED && rl->state != RL_CLOSING) ||
	    !rl->b[0].buf || !rl->b[1].buf)
		return -EAGAIN;
	memset(e, 0, sizeof(*e));
	e->id = rl->id;
	snprintf(e->forward, sizeof(e->forward), "%s", rl->f->cfg.name);
	snprintf(e->client, sizeof(e->client), "%s", rl->client);
	e->auth = rl->auth;
	for (unsigned k = 0; k < 2; k++) {
		struct dirbuf *b = &rl->b[k];

		e->kind[k] = side_kind(&rl->s[k]);
		if (!e->kind[k])
			return -EOPNOTSUPP;
		snprintf(e->fd[k], sizeof(e->fd[k]), "relay.%llu.%u",
			 (unsigned long long)rl->id, k);
		e->dir[k] = (struct vsxd_relay_dir){
			.eof = b->eof, .shut = b->shut, .bytes = b->bytes,
			.len = (uint32_t)b->len, .data = (uint8_t *)b->buf + b->off,
		};
	}
	return 0;
}

int vsxd_fwds_save(struct vsxd_fwds *fs, vsxd_fd_put_fn put, void *arg, unsigned *kept,
		   unsigned *ended)
{
	struct vsxd_relays rs = { 0 };
	struct relay *rl;
	size_t len;
	int fd;

	*kept = *ended = 0;
	if (!fs || !fs->nrelays)
		return -ENOENT;
	rs.relays = calloc(fs->nrelays, sizeof(*rs.relays));
	if (!rs.relays) {
		*ended = fs->nrelays;
		return -ENOMEM;
	}
	len = vsxd_relays_size(&rs);
	for (rl = fs->relays.next; rl != &fs->relays; rl = rl->next) {
		struct vsxd_state_relay *e = &rs.relays[rs.nrelays];
		struct vsxd_relays one = { .nrelays = 1, .relays = e };
		size_t elen;

		rs.nended++;
		if (rs.nrelays == VSXD_RELAYS_MAX || relay_fill(rl, e) < 0)
			continue;
		/* what does not fit in a record ends (at 64 MiB: 500 relays
		 * holding all they can) */
		elen = vsxd_relays_size(&one) - VSXD_STATE_HDR;
		if (len + elen > VSXD_STATE_MAX_LEN || put(arg, e->fd[0], rl->s[0].fd) < 0 ||
		    put(arg, e->fd[1], rl->s[1].fd) < 0)
			continue;
		rs.nended--;
		rs.nrelays++;
		len += elen;
	}
	/* (the bytes are the relays': the record only points at them) */
	fd = vsxd_relays_memfd(&rs);
	free(rs.relays);
	*kept = fd >= 0 ? rs.nrelays : 0;
	*ended = fd >= 0 ? rs.nended : fs->nrelays;
	return fd;
}

/* ---- The new process ---- */

__attribute__((format(printf, 3, 4)))
static void in_log(vsxd_fwd_log_fn log, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsx__logv(log, NULL, prio, fmt, ap);
	va_end(ap);
}

struct vsxd_relays_in {
	struct vsxd_relays rec;
	int (*fd)[2];                  /* each relay's sockets; -1: missing */
	unsigned ended;                /* the old process's, and ours so far */
};

struct vsxd_relays_in *vsxd_relays_in_take(int fd, vsxd_fd_take_fn take, void *arg,
					   vsxd_fwd_log_fn log)
{
	struct vsxd_relays_in *in;
	char why[256] = "";
	int r;

	if (fd < 0)
		return NULL;
	in = calloc(1, sizeof(*in));
	if (!in) {
		close(fd);
		in_log(log, LOG_ERR, "relays record: out of memory: the relays of forwards "
		       "the earlier process handed over end");
		return NULL;
	}
	r = vsxd_relays_read(fd, &in->rec, why, sizeof(why));
	close(fd);
	if (r == 0 && in->rec.nrelays &&
	    !(in->fd = calloc(in->rec.nrelays, sizeof(*in->fd)))) {
		vsxd_relays_clear(&in->rec);
		r = -ENOMEM;
		snprintf(why, sizeof(why), "out of memory");
	}
	if (r < 0) {
		in_log(log, LOG_ERR, "relays record unusable (%s): the relays of forwards "
		       "the earlier process handed over end", why);
		free(in);
		return NULL;
	}
	in->ended = in->rec.nended;
	for (unsigned i = 0; i < in->rec.nrelays; i++)
		for (unsigned k = 0; k < 2; k++)
			in->fd[i][k] = take(arg, in->rec.relays[i].fd[k]);
	return in;
}

uint64_t vsxd_relays_in_max_id(const struct vsxd_relays_in *in)
{
	uint64_t max = 0;

	for (unsigned i = 0; in && i < in->rec.nrelays; i++)
		if (in->rec.relays[i].id > max)
			max = in->rec.relays[i].id;
	return max;
}

void vsxd_relays_in_free(struct vsxd_relays_in *in)
{
	if (!in)
		return;
	for (unsigned i = 0; i < in->rec.nrelays; i++)
		for (unsigned k = 0; k < 2; k++)
			if (in->fd[i][k] >= 0)
				close(in->fd[i][k]);
	free(in->fd);
	vsxd_relays_clear(&in->rec);
	free(in);
}

/* Why socket @fd cannot be a relay's side, or NULL. */
static const char *sock_bad(int fd)
{
	struct stat st;
	int type = 0;

	if (fd < 0)
		return "was not handed over";
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return "is not a socket";
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &(socklen_t){ sizeof(type) }) < 0 ||
	    type != SOCK_STREAM)
		return "is not a stream socket";
	return NULL;
}

/* Relay @e (its sockets @fd, taken here) again in @fs: NULL, or why not. */
static const char *relay_make(struct vsxd_fwds *fs, const struct vsxd_state_relay *e,
			      int fd[2], char *why, size_t whylen)
{
	const struct vsx_opts o = { .flags = VSX_O_NONBLOCK, .linger_ms = -1 };
	struct relay *rl;
	struct fwd *f;
	const char *bad;

	for (f = fs->fwds; f && strcmp(f->cfg.name, e->forward); f = f->next)
		;
	if (!f)
		return "its forward is not configured now";
	for (unsigned k = 0; k < 2; k++) {
		bad = sock_bad(fd[k]);
		if (bad) {
			snprintf(why, whylen, "its socket %s %s", e->fd[k], bad);
			return why;
		}
	}
	rl = vsxd__relay_new(f, e->id, e->client);
	if (!rl)
		return "out of memory";
	rl->auth = e->auth;
	for (unsigned k = 0; k < 2; k++) {
		struct dirbuf *b = &rl->b[k];
		int r;

		if (e->kind[k] == VSXD_RELAY_LIBVSX &&
		    (r = vsx_adopt(fd[k], &o, &rl->s[k].vs)) < 0) {
			snprintf(why, whylen, "its socket %s cannot be wrapped again: %s",
				 e->fd[k], vsx_strerror(r));
			break;
		}
		rl->s[k].fd = fd[k];
		fd[k] = -1;
		vsx__set_nonblock(rl->s[k].fd, true);
		b->buf = malloc(FWD_BUF);
		if (!b->buf) {
			snprintf(why, whylen, "out of memory");
			break;
		}
		if (e->dir[k].len)
			memcpy(b->buf, e->dir[k].data, e->dir[k].len);
		b->len = e->dir[k].len;
		b->eof = e->dir[k].eof;
		b->shut = e->dir[k].shut;
		b->bytes = e->dir[k].bytes;
	}
	if (rl->s[0].fd < 0 || rl->s[1].fd < 0 || !rl->b[0].buf || !rl->b[1].buf) {
		rl->state = RL_CONNECTING;       /* no "closed" line: said below */
		vsxd__relay_free(rl, NULL);
		return why;
	}
	vsxd__relay_resume(rl);
	return NULL;
}

void vsxd_fwds_adopt(struct vsxd_fwds *fs, struct vsxd_relays_in *in, unsigned *kept,
		     unsigned *ended)
{
	char buf[160];

	*kept = *ended = 0;
	if (!in)
		return;
	for (unsigned i = 0; i < in->rec.nrelays; i++) {
		const struct vsxd_state_relay *e = &in->rec.relays[i];
		const char *why = relay_make(fs, e, in->fd[i], buf, sizeof(buf));

		if (!why) {
			(*kept)++;
			continue;
		}
		in->ended++;
		vsxd__flog(fs, LOG_WARNING, "forward %s: conn=%llu %s: handed over, but %s: "
			   "it ends", e->forward, (unsigned long long)e->id, e->client, why);
	}
	*ended = in->ended;
	if (*kept || *ended)
		vsxd__flog(fs, LOG_NOTICE, "forwards: %u relay%s handed over go%s on, %u "
			   "ended", *kept, *kept == 1 ? "" : "s", *kept == 1 ? "es" : "",
			   *ended);
	vsxd_relays_in_free(in);
}
