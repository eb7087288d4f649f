/*
 * Hybrid vsock's handshake on a Unix socket (Firecracker, Cloud Hypervisor,
 * vhost-device-vsock, vsxd): one header for libvsx's client
 * (transports/virtio/hybrid.c) and vsxd's side (backend/uds.c,
 * backend/peer_host.c).
 *
 *   client -> server   "CONNECT <decimal port>\n"
 *   server -> client   "OK <decimal host port>\n" once the guest accepted;
 *                      on failure the socket is closed with no reply
 */
#ifndef VSX_HYBRID_PROTO_H
#define VSX_HYBRID_PROTO_H

/* Longest CONNECT line a server reads ("CONNECT 4294967295\n" is 19
 * bytes); a longer one is junk. */
#define VSX_HYBRID_CONNECT_MAX 32
/* Longest OK line ("OK 4294967295\n" is 14 bytes), with room to spare. */
#define VSX_HYBRID_OK_MAX 24

#endif
