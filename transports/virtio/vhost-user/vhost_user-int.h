/*
 * The vhost-user layer's private state, shared by vhost_user.c (the
 * protocol) and vhost_user_state.c (a live device's state read out for a
 * restart, and adopted again by a new process). Nothing outside this
 * directory includes it.
 */
#ifndef VSX_VHOST_USER_INT_H
#define VSX_VHOST_USER_INT_H

#include <sys/types.h>

#include "vhost_user.h"
#include "vhost_user_proto.h"

#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

/* What the layer offers besides the device's own bits. */
#define VU_FEATURES ((1ull << VIRTIO_F_VERSION_1) |		\
		     (1ull << VIRTIO_RING_F_EVENT_IDX) |	\
		     (1ull << VIRTIO_RING_F_INDIRECT_DESC) |	\
		     (1ull << VIRTIO_F_NOTIFY_ON_EMPTY) |	\
		     (1ull << VU_F_PROTOCOL_FEATURES))
#define VU_PROTOCOL_FEATURES ((1ull << VU_PF_REPLY_ACK) |	\
			      (1ull << VU_PF_CONFIG) |		\
			      (1ull << VU_PF_RESET_DEVICE))

struct vu_queue {
	struct vsxu_vq vq;
	struct vsxu_watch *kick_w;
	bool addr_set;
	uint64_t desc_uva, avail_uva, used_uva;
	/* Where GET_VRING_BASE left the ring (stop_valid): a restart with
	 * the same base, size and addresses resumes it (vu_start_how). */
	bool stop_valid;
	uint16_t stop_base;
	unsigned stop_num;
	uint64_t stop_desc, stop_avail, stop_used;
};

/* What identifies a mapped region's file, and the file itself: kept open
 * so that a restart can hand it over (vsxu_vu_get_state). */
struct vu_region_id {
	dev_t dev;
	ino_t ino;
	int fd;                       /* -1: none */
	uint64_t mmap_offset;
};

struct vsxu_vu {
	const struct vsxu_loop *loop;
	const struct vsxu_vu_ops *ops;
	void *dev;
	unsigned nq;
	unsigned queue_max;

	char *path;
	dev_t path_dev;
	ino_t path_ino;
	int listen_fd;
	struct vsxu_acceptor *acc;    /* on listen_fd */

	int conn_fd;
	struct vsxu_watch *conn_w;
	struct {
		struct vu_hdr hdr;
		union vu_payload p;
		size_t have;          /* bytes of header + payload read */
		int fds[VU_MAX_FDS];
		unsigned nfds;
	} rx;

	uint64_t features;
	uint64_t protocol_features;
	bool owner;
	bool live;                    /* start called, stop not yet */
	bool paused;                  /* stopped resumably, not started since */
	uint64_t stop_features;       /* features at that stop */
	struct vsxu_mem mem;
	struct vu_region_id mem_id[VSXU_MEM_MAX_REGIONS];
	struct vu_queue q[VSXU_VU_MAX_QUEUES];

	uint64_t logged[2];           /* unknown requests logged once */
};

/* Handler results besides 0 / -errno */
#define VU_REPLIED 1     /* the handler sent the reply itself */
#define VU_CLOSE 2       /* drop the front-end */

void vsxu_vu__log(struct vsxu_vu *vu, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void vsxu_vu__close_fd(int *fd);
void vsxu_vu__apply_features(struct vsxu_vu *vu, struct vsxu_vq *vq);
int vsxu_vu__place_ring(struct vsxu_vu *vu, struct vu_queue *q, uint64_t desc,
			uint64_t avail, uint64_t used);
void vsxu_vu__update(struct vsxu_vu *vu, int kq);
void vsxu_vu__kick_cb(int fd, int events, void *arg);
void vsxu_vu__conn_cb(int fd, int events, void *arg);
int vsxu_vu__map_region(struct vsxu_vu *vu, const char *what, unsigned i, int fd,
		       const struct vu_region *r, struct vsxu_mem_region *out);
/* Close the front-end's connection: the device stops and forgets all. */
void vsxu_vu__disconnect(struct vsxu_vu *vu);
/* Unmap guest memory and close its files. */
void vsxu_vu__mem_clear(struct vsxu_vu *vu);
/* (vhost_user_queues.c) */
void vsxu_vu__flush_all(struct vsxu_vu *vu);
void vsxu_vu__unwatch_kick(struct vsxu_vu *vu, struct vu_queue *q);
void vsxu_vu__reset_device(struct vsxu_vu *vu);
void vsxu_vu__stop(struct vsxu_vu *vu, bool resumable);
void vsxu_vu__queue_reset(struct vsxu_vu *vu, struct vu_queue *q);
int vsxu_vu__map_ring(struct vsxu_vu *vu, struct vu_queue *q);

#endif
