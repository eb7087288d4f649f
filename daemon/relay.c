/*
 * vsxd forwards: the relay data path (forward-int.h).
 *
 * A relay is two non-blocking sockets (plain fds or libvsx sockets) and a
 * bounded buffer each way (FWD_BUF). A side is read only while the buffer
 * toward the other has room, so a slow reader holds back a fast writer;
 * an EOF is passed on with shutdown(SHUT_WR) once what came before it is
 * written; the relay ends when both directions have ended, or at the
 * first error on either socket, which closes both. Setting relays up
 * (listen sides, connects, workers) is forward.c's; handing them to the
 * next process, relay_keep.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include <event2/event.h>

#include <vsx/vsx.h>

#include "forward.h"
#include "forward-int.h"
#include "backend/backend.h"

/* ---- Relays ---- */

const char *vsxd__rl_state(int s)
{
	return s == RL_CONNECTING ? "connecting" : s == RL_ESTABLISHED ? "established"
	       : "closing";
}

static void side_close(struct side *s)
{
	if (s->ev) {
		event_free(s->ev);
		s->ev = NULL;
	}
	if (s->vs) {
		vsx_close(s->vs);       /* linger < 0: no wait (set at creation) */
		s->vs = NULL;
	} else if (s->fd >= 0) {
		close(s->fd);
	}
	s->fd = -1;
}

void vsxd__relay_free(struct relay *rl, const char *why)
{
	struct vsxd_fwds *fs = rl->f->fs;
	int i;

	if (rl->state != RL_CONNECTING || why)
		vsxd__flog(fs, LOG_INFO, "forward %s: conn=%llu %s -> %s: closed (%s), "
			   "from-client=%llu to-client=%llu", rl->f->cfg.name,
			   (unsigned long long)rl->id, rl->client, rl->f->cfg.connect.text,
			   why ? why : "done", (unsigned long long)rl->b[0].bytes,
			   (unsigned long long)rl->b[1].bytes);
	for (i = 0; i < 2; i++) {
		side_close(&rl->s[i]);
		free(rl->b[i].buf);
	}
	rl->prev->next = rl->next;
	rl->next->prev = rl->prev;
	fs->nrelays--;
	free(rl);
}

struct relay *vsxd__relay_new(struct fwd *f, uint64_t id, const char *client)
{
	struct vsxd_fwds *fs = f->fs;
	struct relay *rl = calloc(1, sizeof(*rl));

	if (!rl)
		return NULL;
	rl->f = f;
	rl->id = id ? id : vsxb_router_new_id(fs->r);
	rl->state = RL_CONNECTING;
	rl->s[0].fd = rl->s[1].fd = rl->cfd = -1;
	snprintf(rl->client, sizeof(rl->client), "%s", client);
	rl->prev = fs->relays.prev;
	rl->next = &fs->relays;
	fs->relays.prev->next = rl;
	fs->relays.prev = rl;
	fs->nrelays++;
	return rl;
}

static ssize_t side_read(struct side *s, void *p, size_t n)
{
	ssize_t r;

	if (s->vs)
		return vsx_recv(s->vs, p, n);
	do {
		r = recv(s->fd, p, n, MSG_DONTWAIT);
	} while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

static ssize_t side_write(struct side *s, const void *p, size_t n)
{
	ssize_t r;

	if (s->vs)
		return vsx_send(s->vs, p, n);
	do {
		r = send(s->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	} while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

static void side_shut_wr(struct side *s)
{
	if (s->vs)
		vsx_shutdown(s->vs, SHUT_WR);
	else
		shutdown(s->fd, SHUT_WR);
}

static void relay_cb(evutil_socket_t fd, short what, void *arg);

/* Watch what each side can do now. */
static void relay_watch(struct relay *rl)
{
	struct event_base *base = rl->f->fs->base;
	int i;

	for (i = 0; i < 2; i++) {
		struct side *s = &rl->s[i];
		struct dirbuf *out = &rl->b[i], *in = &rl->b[1 - i];
		short want = 0;

		if (!out->eof && out->off + out->len < FWD_BUF)
			want |= EV_READ;
		if (in->len)
			want |= EV_WRITE;
		if (want == s->want && s->ev)
			continue;
		if (s->ev)
			event_del(s->ev);
		else if (!(s->ev = event_new(base, s->fd, 0, relay_cb, rl)))
			continue;       /* out of memory: this side stalls */
		event_assign(s->ev, base, s->fd, want | EV_PERSIST, relay_cb, rl);
		s->want = want;
		if (want)
			event_add(s->ev, NULL);
	}
}

/* Move bytes of direction @d; 0, or a negative errno that ends the relay. */
static int relay_move(struct relay *rl, int d)
{
	struct side *src = &rl->s[d], *dst = &rl->s[1 - d];
	struct dirbuf *b = &rl->b[d];
	unsigned rounds;
	ssize_t n;

	for (rounds = 0; rounds < FWD_IO_ROUNDS; rounds++) {
		if (b->len) {
			n = side_write(dst, b->buf + b->off, b->len);
			if (n == -EAGAIN || n == -EWOULDBLOCK)
				break;
			if (n < 0)
				return (int)n;
			b->off += (size_t)n;
			b->len -= (size_t)n;
			b->bytes += (uint64_t)n;
			if (!b->len)
				b->off = 0;
			continue;
		}
		if (b->eof || b->off + b->len >= FWD_BUF)
			break;
		n = side_read(src, b->buf + b->off + b->len, FWD_BUF - b->off - b->len);
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			break;
		if (n < 0)
			return (int)n;
		if (n == 0) {
			b->eof = true;
			break;
		}
		b->len += (size_t)n;
	}
	if (b->eof && !b->len && !b->shut) {
		side_shut_wr(dst);
		b->shut = true;
		rl->state = RL_CLOSING;
	}
	return 0;
}

static void relay_pump(struct relay *rl)
{
	char why[96];
	int r, d;

	for (d = 0; d < 2; d++) {
		r = relay_move(rl, d);
		if (r < 0) {
			snprintf(why, sizeof(why), "%s side: %s", d ? "target" : "client",
				 strerror(-r));
			vsxd__relay_free(rl, why);
			return;
		}
	}
	if (rl->b[0].shut && rl->b[1].shut) {
		vsxd__relay_free(rl, NULL);
		return;
	}
	relay_watch(rl);
}

static void relay_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	relay_pump(arg);
}

/* Both sides are there: start moving bytes. */
void vsxd__relay_start(struct relay *rl)
{
	int i;

	for (i = 0; i < 2; i++) {
		rl->b[i].buf = malloc(FWD_BUF);
		if (!rl->b[i].buf) {
			vsxd__relay_free(rl, "out of memory");
			return;
		}
		if (rl->s[i].vs)
			rl->s[i].fd = vsx_fd(rl->s[i].vs);
	}
	rl->state = RL_ESTABLISHED;
	vsxd__flog(rl->f->fs, LOG_INFO, "forward %s: conn=%llu %s -> %s: open%s",
		   rl->f->cfg.name, (unsigned long long)rl->id, rl->client,
		   rl->f->cfg.connect.text, rl->auth ? " (authenticated)" : "");
	relay_pump(rl);
}

void vsxd__relay_resume(struct relay *rl)
{
	rl->state = rl->b[0].shut || rl->b[1].shut ? RL_CLOSING : RL_ESTABLISHED;
	vsxd__flog(rl->f->fs, LOG_INFO, "forward %s: conn=%llu %s -> %s: handed over, goes "
		   "on (%u bytes held to the target, %u to the client)%s", rl->f->cfg.name,
		   (unsigned long long)rl->id, rl->client, rl->f->cfg.connect.text,
		   (unsigned)rl->b[0].len, (unsigned)rl->b[1].len,
		   rl->auth ? " (authenticated)" : "");
	/* watched, not pumped: until the loop runs (after a handoff's new
	 * process said it serves), no byte is taken from a socket the old
	 * process may still go on with */
	relay_watch(rl);
}

