/*
 * forward-listen (vhost-device-vsock's vsock-to-vsock backend): vsxd
 * listens on the host kernel's vsock, (VMADDR_CID_ANY, port), for each
 * port of a forward-cid VM, and hands each connection it accepts to the
 * VM's guest, same port (vsxb_vm_connect_fd; its peer kind is "vsock").
 * The listeners live and die with their VM (main.c).
 */
#ifndef VSXD_VSOCK_LISTEN_H
#define VSXD_VSOCK_LISTEN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

struct event_base;
struct vsxd_vlisten;

/* Listen on @n @ports for @vm; @log (may be NULL) says what went wrong with
 * an accepted connection. 0 and *@out (free it with vsxd_vlisten_free), or
 * a negative errno with the failing port in *@bad_port. */
int vsxd_vlisten_new(struct event_base *base, struct vsxb_vm *vm, const uint32_t *ports,
		     size_t n, vsxb_log_fn log, struct vsxd_vlisten **out,
		     uint32_t *bad_port);
/* Closes the listeners (connections already handed over stay). NULL: no-op. */
void vsxd_vlisten_free(struct vsxd_vlisten *l);

#endif
