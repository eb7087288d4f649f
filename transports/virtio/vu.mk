# vhost-user protocol, guest memory and virtqueues.
VU_SOURCES = \
	transports/virtio/loop.h \
	transports/virtio/vq.h \
	transports/virtio/vq.c \
	transports/virtio/vhost_user.h \
	transports/virtio/vhost_user_proto.h \
	transports/virtio/vhost_user.c \
	transports/virtio/vsock_wire.h
