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

const struct peer_ops *host_table(void)
{
	return &host_ops;
}
