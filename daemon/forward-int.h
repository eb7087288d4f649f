/*
 * What forward.c (forwards: listeners, connects, workers, reload) and
 * relay.c (the relay data path) share: the run-time state of forwards.
 * Not for callers, who use forward.h.
 */
#ifndef VSXD_FORWARD_INT_H
#define VSXD_FORWARD_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <vsx/vsx.h>

#include "forward.h"
#include "util.h"       /* vsx__logv */
#include "vhost-user/loop-event.h"

struct event;
struct event_base;
struct vsxb_port;
struct vsxb_router;

#define FWD_BUF (64u * 1024)       /* per direction of a relay */
#define FWD_MAX_JOBS 64            /* libvsx connects/handshakes at once */
#define FWD_CONNECT_MS 5000        /* libvsx connect (and handshake) bound */
#define FWD_IO_ROUNDS 16           /* reads per direction per event */
#define ADDR_LEN (VSX_ADDR_STRLEN + 16)

struct fwd;
struct relay;

/* A libvsx call in a worker thread. */
enum job_kind { JOB_CONNECT, JOB_ACCEPT };

struct job {
	enum job_kind kind;
	struct vsxd_fwds *fs;
	struct relay *rl;            /* JOB_CONNECT: NULL once cancelled */
	struct fwd *f;               /* JOB_ACCEPT: NULL once cancelled */
	char addr[ADDR_LEN];         /* JOB_CONNECT */
	char *key;                   /* auth key file, or NULL */
	vsx_sock *ls;                /* JOB_ACCEPT: the listener (lent) */
	vsx_sock *out;               /* the result, or NULL */
	int rc;
	char msg[256];
};

struct side {
	int fd;                      /* -1: none */
	vsx_sock *vs;                /* when a libvsx socket (fd is vsx_fd) */
	struct event *ev;
	short want;                  /* EV_READ | EV_WRITE watched */
};

struct dirbuf {
	char *buf;                   /* FWD_BUF bytes */
	size_t off, len;
	bool eof;                    /* the source sent EOF */
	bool shut;                   /* passed on: shutdown(SHUT_WR) */
	uint64_t bytes;              /* moved */
};

enum { RL_CONNECTING = 1, RL_ESTABLISHED, RL_CLOSING };

struct relay {
	struct relay *next, *prev;   /* fs->relays, oldest first */
	struct fwd *f;
	uint64_t id;
	int state;
	struct side s[2];            /* 0: the accepted client, 1: the target */
	struct dirbuf b[2];          /* 0: client -> target, 1: target -> client */
	uint64_t wait_id;            /* vm: listen side: the engine connection
					waiting for us (0: none) */
	struct job *job;             /* a libvsx connect running */
	struct event *cev;           /* a non-blocking connect running */
	int cfd;
	bool auth;
	char client[ADDR_LEN];
};

struct fwd {
	struct fwd *next;
	struct vsxd_fwds *fs;
	struct vsxd_forward cfg;     /* a copy */
	int lfd;                     /* tcp/unix listener, -1 */
	struct vsxu_acceptor *acc;    /* on lfd or ls (vhost-user/acceptor.h) */
	vsx_sock *ls;                /* libvsx listener */
	bool accepting;              /* JOB_ACCEPT running on @ls */
	struct job *ajob;
	struct vsxb_port *port;       /* vm: listener */
	char *unlink_path;           /* our plain Unix socket file */
	struct sockaddr_storage ta;  /* tcp/unix connect address */
	socklen_t talen;
	bool keep;                   /* apply(): still in the new config */
};

struct vsxd_fwds {
	struct event_base *base;
	struct vsxu_evloop acc_loop;  /* the listeners' adapter over @base */
	struct vsxb_router *r;
	vsxd_fwd_log_fn log;
	struct fwd *fwds;
	struct relay relays;         /* list head */
	unsigned nrelays;
	int pipe[2];                 /* workers -> loop: struct job * */
	struct event *pev;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned njobs;              /* running (under mu) */
	bool in_port_cb;             /* inside the engine's port handler */
	bool port_failed;            /* ...and the connection failed at once */
	struct vsxd_fwd_stats st;
};

/* The forwards' log, if any (both files write it: here, so that neither
 * calls the other for it). */
__attribute__((format(printf, 3, 4)))
static inline void vsxd__flog(struct vsxd_fwds *fs, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsx__logv(fs->log, NULL, prio, fmt, ap);
	va_end(ap);
}

/* ---- Relays (relay.c) ---- */

/* A relay's state as vsxctl list shows it. */
const char *vsxd__rl_state(int s);
/* A new relay of @f (state RL_CONNECTING, no sides yet) in fs->relays,
 * with id @id (0: the next of the router's sequence); NULL when out of
 * memory. */
struct relay *vsxd__relay_new(struct fwd *f, uint64_t id, const char *client);
/* Close both sides of @rl and free it; @why (NULL: done) goes in its
 * "closed" log line. What forward.c set up for it (a job, a connect, an
 * engine connection waiting) is forward.c's to end first (relay_end). */
void vsxd__relay_free(struct relay *rl, const char *why);
/* Both sides are there: start moving bytes. */
void vsxd__relay_start(struct relay *rl);
/* A relay an earlier process handed over (relay_keep.c), its sides and
 * buffers (b[], FWD_BUF each, the bytes held from offset 0) set: go on. */
void vsxd__relay_resume(struct relay *rl);

#endif /* VSXD_FORWARD_INT_H */
