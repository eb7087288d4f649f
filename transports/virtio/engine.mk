# The virtio-vsock device: connections, credit, host exposure, routing.
ENGINE_SOURCES = \
	transports/virtio/backend.h \
	transports/virtio/engine.h \
	transports/virtio/vsock.c \
	transports/virtio/host.c \
	transports/virtio/router.c \
	transports/virtio/txbuf.c

# The engine's tests (in-process driver + libevent loop).
include tests/backend/Makefile.inc
