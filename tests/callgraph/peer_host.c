/* The host peer of the fixture (ops.h): its table, and a call back. */
#include "ops.h"

const struct peer_ops *host_table(void);

static int host_emit(struct conn *c)
{
	return c->dead;
}

static void host_flush(struct conn *c)
{
	conn_kill(c);   /* the socket failed: back into conn.c */
}

static const struct peer_ops host_ops = {
	.emit = host_emit,
	.flush = host_flush,
};

static int host_accept(int fd)
{
	return fd;
}

static void host_log_line(const char *msg)
{
	(void)msg;
}

/* a listener's configuration: its .log is no peer_ops member */
const struct listen_conf host_listen = {
	.accept = host_accept,
	.log = host_log_line,
};

const struct peer_ops *host_table(void)
{
	return &host_ops;
}
