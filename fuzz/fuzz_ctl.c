/*
 * Fuzz target: the control protocol. The first byte picks the side:
 *   0: a request block through vsx__ctl_parse (libvsx/ctl.c);
 *   1: a reply block through vsx__ctl_parse_reply;
 *   2, 3: a client's byte stream through vsxd's request handling
 *      (daemon/control_cmds.c, vsxd_control_answer), cut into blocks as
 *      control.c's client_process does, against a router with two VMs
 *      and no guest.
 * Parsed pairs must point into the block, keys and values must be what
 * the protocol allows, and every reply must end with "errno=N\n\n".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "../daemon/control.h"
#include "backend/backend.h"
#include "ctl-proto.h"
#include "util.h"
#include "fuzz.h"

static void check_kvs(const struct vsx_kvs *kvs, const char *buf, size_t len)
{
	for (unsigned i = 0; i < kvs->n; i++) {
		const char *k = kvs->kv[i].key, *v = kvs->kv[i].value;
		uint64_t u;

		if (k < buf || k >= buf + len || v < buf || v > buf + len)
			abort();
		if (!*k || strlen(k) > VSX_CTL_KEY_MAX || strlen(v) > VSX_CTL_VALUE_MAX)
			abort();
		if (vsx__ctl_get(kvs, k) == NULL)
			abort();
		vsx__parse_dec(v, strlen(v), UINT64_MAX, &u);
	}
}

static void fz_parse(const uint8_t *p, size_t n, bool reply)
{
	char *buf = malloc(n ? n : 1);
	struct vsx_kvs kvs;
	int r;

	if (!buf)
		return;
	memcpy(buf, p, n);
	vsx__ctl_block_end(buf, n);
	if (reply) {
		r = vsx__ctl_parse_reply(buf, n, &kvs);
		if (r == 0)
			check_kvs(&kvs, buf, n);
		vsx__ctl_kvs_free(&kvs);
	} else {
		r = vsx__ctl_parse(buf, n, &kvs);
		if (r == 0) {
			if (kvs.n > VSX_CTL_MAX_LINES)
				abort();
			check_kvs(&kvs, buf, n);
		}
	}
	free(buf);
}

/* ---- vsxd's side ---- */

static struct event_base *base;
static struct vsxb_router *router;
static struct vsxd_control *control;

static void setup(void)
{
	struct vsxd_control_opts o = { 0 };
	struct vsxb_vm_config vc = { 0 };
	char path[4][128];
	struct vsxb_vm *vm;

	base = event_base_new();
	if (!base || vsxb_router_new(&fl_loop, NULL, NULL, &router) < 0)
		abort();
	snprintf(path[0], sizeof(path[0]), "%s/ctl.sock", fz_dir());
	snprintf(path[1], sizeof(path[1]), "%s/web.sock", fz_dir());
	snprintf(path[2], sizeof(path[2]), "%s/web.h", fz_dir());
	snprintf(path[3], sizeof(path[3]), "%s/db.sock", fz_dir());
	vc.name = "web";
	vc.guest_cid = 3;
	vc.socket_path = path[1];
	vc.uds_path = path[2];
	vc.groups = "a+b";
	if (vsxb_vm_new(router, &vc, &vm) < 0)
		abort();
	memset(&vc, 0, sizeof(vc));
	vc.guest_cid = 4;
	vc.socket_path = path[3];
	if (vsxb_vm_new(router, &vc, &vm) < 0)
		abort();
	o.path = path[0];
	if (vsxd_control_new(base, router, &o, &control) < 0)
		abort();
}

static void fz_answer(const uint8_t *p, size_t n)
{
	struct evbuffer *out = evbuffer_new();
	char req[VSX_CTL_REQ_MAX];
	struct evbuffer_ptr at;
	size_t end, len, olen;
	char tail[2];

	if (!control)
		setup();
	if (!out)
		return;
	while (n) {
		len = n < VSX_CTL_REQ_MAX ? n : VSX_CTL_REQ_MAX;
		end = vsx__ctl_block_end((const char *)p, len);
		if (!end)
			break; /* vsxd waits for the rest, or refuses a huge one */
		memcpy(req, p, end);
		vsxd_control_answer(control, req, end, 1000, out);
		olen = evbuffer_get_length(out);
		if (olen < 9)
			abort();
		evbuffer_ptr_set(out, &at, olen - 2, EVBUFFER_PTR_SET);
		if (evbuffer_copyout_from(out, &at, tail, 2) != 2 ||
		    tail[0] != '\n' || tail[1] != '\n')
			abort(); /* a reply block ends with its empty line */
		evbuffer_drain(out, olen);
		p += end;
		n -= end;
	}
	evbuffer_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0] & 3) {
	case 0:
		fz_parse(data + 1, size - 1, false);
		break;
	case 1:
		fz_parse(data + 1, size - 1, true);
		break;
	default:
		fz_answer(data + 1, size - 1);
		break;
	}
	return 0;
}
