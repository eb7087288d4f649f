/* The connection API of the fixture (ops.h): calls the peer's hooks. */
#include "ops.h"

void conn_kill(struct conn *c)
{
	c->dead = 1;
}

int conn_schedule(struct conn *c)
{
	return c->ops->emit(c);
}

void batch_flush(struct conn *c)
{
	if (c->ops->flush)
		c->ops->flush(c);
}

void conn_log(struct conn *c)
{
	if (c->ops->log)
		c->ops->log(c);
}
