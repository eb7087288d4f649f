/*
 * Unit tests: vsx_probe against fake sysfs trees.
 *
 * Every test builds its own tree in a fresh temp dir and points $VSX_SYSROOT
 * at it before anything probes; vsx_probe is never called on the real
 * machine (its /dev/vsock belongs to the infrastructure). The fake dev/vsock
 * is a regular file or absent, so the CID ioctl fails and local_cid must
 * read VSX_CID_ANY.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <vsx/vsx.h>

#include "common/tmpdir.h"

static char root[PATH_MAX];

static void mkdirs(const char *rel)
{
	char p[PATH_MAX * 2];
	size_t i, n;

	n = (size_t)snprintf(p, sizeof(p), "%s/%s", root, rel);
	for (i = strlen(root) + 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		p[i] = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			cr_assert_fail("mkdir %s: %s", p, strerror(errno));
		if (i < n)
			p[i] = '/';
	}
}

/* Create @rel (and its parents) holding @content. */
static void put(const char *rel, const char *content)
{
	char dir[PATH_MAX], p[PATH_MAX * 2];
	char *slash;
	FILE *f;

	snprintf(dir, sizeof(dir), "%s", rel);
	slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		mkdirs(dir);
	}
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	f = fopen(p, "w");
	cr_assert_not_null(f, "create %s: %s", p, strerror(errno));
	fputs(content, f);
	fclose(f);
}

static void tree_init(void)
{
	alarm(30); /* a hang fails the test (no .timeout: see test_hybrid.c) */
	snprintf(root, sizeof(root), "%s/vsx-probe-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(root), "mkdtemp %s: %s", root, strerror(errno));
	cr_assert_eq(setenv("VSX_SYSROOT", root, 1), 0, "setenv");
}

static void tree_fini(void)
{
	tmpdir_remove(root);
	unsetenv("VSX_SYSROOT");
}

TestSuite(probe, .init = tree_init, .fini = tree_fini);

/* vsx_probe, only ever with $VSX_SYSROOT at this test's fake tree. */
static struct vsx_probe do_probe(void)
{
	const char *sr = getenv("VSX_SYSROOT");
	struct vsx_probe p;
	int rc;

	cr_assert(sr && root[0] && strcmp(sr, root) == 0,
		  "refusing to probe: VSX_SYSROOT=%s, fake tree %s", sr ? sr : "(unset)",
		  root);
	memset(&p, 0xa5, sizeof(p));
	rc = vsx_probe(&p);
	cr_assert_eq(rc, 0, "vsx_probe = %d (%s), want 0", rc, vsx_strerror(rc));
	return p;
}

static const char *have_text(unsigned have, char *buf, size_t len)
{
	static const struct { unsigned bit; const char *name; } bits[] = {
		{ VSX_HAVE_VIRTIO_GUEST, "VIRTIO_GUEST" },
		{ VSX_HAVE_VHOST_HOST, "VHOST_HOST" },
		{ VSX_HAVE_LOOPBACK, "LOOPBACK" },
		{ VSX_HAVE_VMBUS, "VMBUS" },
		{ VSX_HAVE_AF_VSOCK, "AF_VSOCK" },
	};
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		if (have & bits[i].bit)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "|" : "",
					      bits[i].name);
	if (have & ~0x1fu)
		snprintf(buf + n, len - n, "%s0x%x", n ? "|" : "", have & ~0x1fu);
	if (!buf[0])
		snprintf(buf, len, "0");
	return buf;
}

static void expect(const struct vsx_probe *p, unsigned have, const char *transport)
{
	char got[128], want[128];

	cr_assert_eq(p->have, have, "have = 0x%x (%s), want 0x%x (%s)", p->have,
		     have_text(p->have, got, sizeof(got)), have,
		     have_text(have, want, sizeof(want)));
	cr_assert(memchr(p->transport, '\0', sizeof(p->transport)),
		  "transport is not NUL-terminated");
	cr_assert_str_eq(p->transport, transport, "transport = \"%s\", want \"%s\"",
			 p->transport, transport);
	cr_assert_eq(p->local_cid, VSX_CID_ANY, "local_cid = %u, want VSX_CID_ANY (%u)",
		     p->local_cid, VSX_CID_ANY);
}

/* The pieces of a machine, as sysfs shows them. */
static void virtio_dev(const char *name, const char *id)
{
	char rel[128];

	snprintf(rel, sizeof(rel), "sys/bus/virtio/devices/%s/device", name);
	put(rel, id);
	snprintf(rel, sizeof(rel), "sys/bus/virtio/devices/%s/vendor", name);
	put(rel, "0x1af4\n");
}

static void module(const char *name)
{
	char rel[128];

	snprintf(rel, sizeof(rel), "sys/module/%s/refcnt", name);
	put(rel, "0\n");
}

static void vmbus_dev(const char *uuid, const char *class_id)
{
	char rel[160];

	snprintf(rel, sizeof(rel), "sys/bus/vmbus/devices/%s/class_id", uuid);
	put(rel, class_id);
}

/* ---- machines ----------------------------------------------------------- */

Test(probe, kvm_guest)
{
	struct vsx_probe p;

	virtio_dev("virtio0", "0x0001\n"); /* net */
	virtio_dev("virtio1", "0x0002\n"); /* block */
	virtio_dev("virtio3", "0x0013\n"); /* vsock */
	module("vsock");
	module("vmw_vsock_virtio_transport");
	module("vmw_vsock_virtio_transport_common");
	p = do_probe();
	expect(&p, VSX_HAVE_VIRTIO_GUEST | VSX_HAVE_AF_VSOCK, "virtio");
}

Test(probe, kvm_guest_with_fake_dev_vsock)
{
	struct vsx_probe p;

	/* /dev/vsock as a regular file: opened, but the ioctl fails */
	virtio_dev("virtio3", "0x0013\n");
	module("vsock");
	module("vmw_vsock_virtio_transport");
	put("dev/vsock", "");
	p = do_probe();
	expect(&p, VSX_HAVE_VIRTIO_GUEST | VSX_HAVE_AF_VSOCK, "virtio");
}

Test(probe, kvm_guest_modules_not_loaded_yet)
{
	struct vsx_probe p;

	/* the device is there before its driver: still a virtio guest */
	virtio_dev("virtio3", "0x0013\n");
	p = do_probe();
	expect(&p, VSX_HAVE_VIRTIO_GUEST, "virtio");
}

Test(probe, hyperv_guest)
{
	struct vsx_probe p;

	vmbus_dev("f8615163-df3e-46c5-913f-f2d2f965ed0e",
		  "{f8615163-df3e-46c5-913f-f2d2f965ed0e}\n"); /* synthetic net */
	vmbus_dev("fd149e91-82e0-4a7d-afa6-2a4166cbd7c0",
		  "{ba6163d9-04a1-4d29-b605-72e2ffb1dc7f}\n"); /* scsi */
	module("vsock");
	module("hv_vmbus");
	module("hv_sock");
	p = do_probe();
	/* hv_sock, through AF_VSOCK, with the vmbus transport's rules */
	expect(&p, VSX_HAVE_VMBUS | VSX_HAVE_AF_VSOCK, "vmbus");
}

Test(probe, wsl2_guest)
{
	struct vsx_probe p;

	/* VMBus devices, no virtio-vsock (a virtio-fs device of id 26 at most) */
	vmbus_dev("dc7d0f60-5b5f-4b6c-a5f1-7f9a3b1c9d11",
		  "{44c4f61d-4444-4400-9d52-802e27ede19f}\n"); /* vpci */
	vmbus_dev("0a4d4e2b-2bb5-4b69-8d1e-0f6d14e1b0a7",
		  "{a2b0e08e-b0f7-4bd7-a80b-10c9e2a5c7f4}\n");
	virtio_dev("virtio0", "0x001a\n");
	module("vsock");
	module("hv_sock");
	p = do_probe();
	expect(&p, VSX_HAVE_VMBUS | VSX_HAVE_AF_VSOCK, "vmbus");
}

Test(probe, kvm_host)
{
	struct vsx_probe p;

	put("dev/vhost-vsock", "");
	module("vhost_vsock");
	module("vsock");
	p = do_probe();
	expect(&p, VSX_HAVE_VHOST_HOST | VSX_HAVE_AF_VSOCK, "virtio");
}

Test(probe, kvm_host_module_not_loaded)
{
	struct vsx_probe p;

	/* devtmpfs has the node (devname alias) before the module loads */
	put("dev/vhost-vsock", "");
	p = do_probe();
	expect(&p, VSX_HAVE_VHOST_HOST, "virtio");
}

Test(probe, loopback_only)
{
	struct vsx_probe p;

	module("vsock");
	module("vsock_loopback");
	module("vmw_vsock_virtio_transport_common");
	p = do_probe();
	expect(&p, VSX_HAVE_LOOPBACK | VSX_HAVE_AF_VSOCK, "virtio");
}

Test(probe, vsock_core_only)
{
	struct vsx_probe p;

	module("vsock");
	p = do_probe();
	expect(&p, VSX_HAVE_AF_VSOCK, "virtio");
}

Test(probe, empty_tree)
{
	struct vsx_probe p;

	p = do_probe();
	expect(&p, 0, "");
}

Test(probe, empty_dirs)
{
	struct vsx_probe p;

	/* the buses exist but hold nothing */
	mkdirs("sys/bus/virtio/devices");
	mkdirs("sys/bus/vmbus/devices");
	mkdirs("sys/module");
	mkdirs("dev");
	p = do_probe();
	expect(&p, 0, "");
}

Test(probe, other_virtio_devices_are_not_vsock)
{
	struct vsx_probe p;

	virtio_dev("virtio0", "0x0001\n"); /* net */
	virtio_dev("virtio1", "0x0002\n"); /* block */
	virtio_dev("virtio2", "0x0003\n"); /* console */
	virtio_dev("virtio4", "0x0004\n"); /* rng */
	virtio_dev("virtio5", "0x0130\n"); /* 304: not 19 */
	virtio_dev("virtio6", "0x0012\n"); /* 18: one off */
	virtio_dev("virtio7", "");          /* empty */
	virtio_dev("virtio8", "junk\n");
	mkdirs("sys/bus/virtio/devices/virtio9"); /* no device file */
	p = do_probe();
	expect(&p, 0, "");
}

Test(probe, one_net_device_is_not_vsock)
{
	struct vsx_probe p;

	virtio_dev("virtio0", "0x0001\n");
	module("virtio_net");
	p = do_probe();
	expect(&p, 0, "");
}

Test(probe, vmbus_hidden_entries_only)
{
	struct vsx_probe p;

	/* dot entries are not devices */
	put("sys/bus/vmbus/devices/.keep", "");
	p = do_probe();
	expect(&p, 0, "");
}

Test(probe, everything)
{
	struct vsx_probe p;

	virtio_dev("virtio3", "0x0013\n");
	vmbus_dev("fd149e91-82e0-4a7d-afa6-2a4166cbd7c0", "{x}\n");
	put("dev/vhost-vsock", "");
	put("dev/vsock", "");
	module("vsock");
	module("vsock_loopback");
	p = do_probe();
	expect(&p, VSX_HAVE_VIRTIO_GUEST | VSX_HAVE_VMBUS | VSX_HAVE_VHOST_HOST |
		       VSX_HAVE_LOOPBACK | VSX_HAVE_AF_VSOCK, "virtio");
}

Test(probe, repeatable)
{
	struct vsx_probe a, b;

	virtio_dev("virtio3", "0x0013\n");
	module("vsock");
	a = do_probe();
	b = do_probe();
	cr_assert_eq(a.have, b.have, "have 0x%x then 0x%x", a.have, b.have);
	cr_assert_str_eq(a.transport, b.transport, "\"%s\" then \"%s\"", a.transport,
			 b.transport);
	cr_assert_eq(a.local_cid, b.local_cid, "cid %u then %u", a.local_cid,
		     b.local_cid);
}

Test(probe, null_argument)
{
	int rc = vsx_probe(NULL);

	cr_assert_eq(rc, -EINVAL, "vsx_probe(NULL) = %d, want %d", rc, -EINVAL);
}
