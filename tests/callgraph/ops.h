/*
 * tests/callgraph.test's fixture: the cycle the backend had before its
 * TX batch moved to device.c. conn.c delivered the batch through the
 * peer's table (ops->flush), and the host peer calls conn.c back: nm sees
 * only peer_host.c -> conn.c; scripts/callgraph, reading the table, must
 * see conn.c -> peer_host.c too, and the cycle. And a member name
 * two types share (log): a listener's configuration in peer_host.c sets
 * its .log, which is no peer_ops table, so conn.c's ops->log is no edge
 * to peer_host.c.
 */
#ifndef CALLGRAPH_FIXTURE_OPS_H
#define CALLGRAPH_FIXTURE_OPS_H

struct conn;

struct peer_ops {
	int (*emit)(struct conn *c);
	void (*flush)(struct conn *c);
	void (*log)(struct conn *c);   /* (filled elsewhere) */
};

typedef void (*log_fn)(const char *msg);

struct listen_conf {
	int (*accept)(int fd);
	log_fn log;
};

struct conn {
	const struct peer_ops *ops;
	int dead;
};

void conn_kill(struct conn *c);
int conn_schedule(struct conn *c);
void batch_flush(struct conn *c);
void conn_log(struct conn *c);

#endif
