/*
 * Transport detection against fake sysfs trees ($VSX_SYSROOT): a KVM guest,
 * a Hyper-V guest, a WSL2 guest, a KVM host, and a nested Hyper-V guest
 * that is also a KVM host. Only the registry's choice is looked at
 * (vsx__transport_for); no socket is opened, and no tree has a dev/vsock,
 * so vsx_probe never opens one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "vsx-int.h"

static char root[256];

static void put(const char *rel, const char *content)
{
	char path[600], cmd[700];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	cr_assert_eq(system(cmd), 0);
	if (!content) {
		snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
		cr_assert_eq(system(cmd), 0);
		return;
	}
	f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fputs(content, f);
	fclose(f);
}

static void tree_init(void)
{
	snprintf(root, sizeof(root), "/tmp/vsx-detect.%d", (int)getpid());
	put("sys", NULL);
	setenv("VSX_SYSROOT", root, 1);
}

static void tree_fini(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
}

static void kvm_guest(void)
{
	put("sys/bus/virtio/devices/virtio0/device", "0x0001\n");  /* net */
	put("sys/bus/virtio/devices/virtio1/device", "0x0013\n");  /* vsock */
	put("sys/bus/virtio/devices/virtio2/device", "0x0002\n");  /* block */
	put("sys/module/vsock", NULL);
	put("sys/module/vmw_vsock_virtio_transport", NULL);
}

static void hyperv_guest(void)
{
	/* VMBus devices are named by instance GUID */
	put("sys/bus/vmbus/devices/242ff919-07db-4180-9c2e-b86cb68c8c55/class_id",
	    "{ba6163d9-04a1-4d29-b605-72e2ffb1dc7f}\n");   /* storvsc */
	put("sys/bus/vmbus/devices/f8615163-df3e-46c5-913f-f2d2f965ed0e/class_id",
	    "{f8615163-df3e-46c5-913f-f2d2f965ed0e}\n");   /* netvsc */
	put("sys/module/hv_vmbus", NULL);
	put("sys/module/vsock", NULL);
	put("sys/module/hv_sock", NULL);
}

/* WSL2 is a Hyper-V utility VM: VMBus and hv_sock; a virtio device that is
 * not vsock (virtio-fs, id 26) must not make it a virtio-vsock guest. */
static void wsl2_guest(void)
{
	put("sys/bus/vmbus/devices/00000000-0000-0000-0000-000000000001", NULL);
	put("sys/bus/vmbus/devices/7b9ba6a3-a2a0-4e93-8bc1-f1f34d1aa1c8", NULL);
	put("sys/bus/virtio/devices/virtio0/device", "0x001a\n");
	put("sys/module/vsock", NULL);
	put("sys/module/hv_sock", NULL);
}

static void kvm_host(void)
{
	put("dev/vhost-vsock", "");
	put("sys/module/vhost_vsock", NULL);
	put("sys/module/vsock", NULL);
	put("sys/module/vsock_loopback", NULL);
}

static const struct vsx_transport *pick(const char *text)
{
	struct vsx_addr a;

	cr_assert_eq(vsx_addr_parse(text, &a), 0, "%s", text);
	return vsx__transport_for(&a, NULL);
}

static const char *pick_name(const char *text)
{
	const struct vsx_transport *t = pick(text);

	return t ? t->name : "(none)";
}

static struct vsx_probe probe(void)
{
	struct vsx_probe p;

	cr_assert_eq(vsx_probe(&p), 0);
	cr_assert_eq(p.local_cid, VSX_CID_ANY); /* no dev/vsock in any tree */
	return p;
}

TestSuite(detect, .init = tree_init, .fini = tree_fini);

Test(detect, kvm_guest)
{
	struct vsx_probe p;

	kvm_guest();
	p = probe();
	cr_assert_eq(p.have, VSX_HAVE_VIRTIO_GUEST | VSX_HAVE_AF_VSOCK, "have 0x%x", p.have);
	cr_assert_str_eq(p.transport, "virtio");
	cr_assert_str_eq(pick_name("vsock:host:1234"), "virtio");
	cr_assert_str_eq(pick_name("vsock:3:1234"), "virtio");
}

Test(detect, hyperv_guest)
{
	struct vsx_probe p;

	hyperv_guest();
	p = probe();
	cr_assert_eq(p.have, VSX_HAVE_VMBUS | VSX_HAVE_AF_VSOCK, "have 0x%x", p.have);
	cr_assert_str_eq(p.transport, "vmbus");
	cr_assert_str_eq(pick_name("vsock:host:1234"), "vmbus");
	cr_assert_str_eq(pick_name("vsock:any:1234"), "vmbus");
	/* other CIDs too: the vmbus transport then refuses them with a reason */
	cr_assert_str_eq(pick_name("vsock:3:1234"), "vmbus");
	cr_assert_str_eq(pick_name("hvsock:00000808-facb-11e6-bd58-64006a7986d3"), "vmbus");
}

Test(detect, wsl2_guest)
{
	struct vsx_probe p;

	wsl2_guest();
	p = probe();
	cr_assert_eq(p.have, VSX_HAVE_VMBUS | VSX_HAVE_AF_VSOCK, "have 0x%x", p.have);
	cr_assert_str_eq(p.transport, "vmbus");
	cr_assert_str_eq(pick_name("vsock:host:1234"), "vmbus");
}

Test(detect, kvm_host)
{
	struct vsx_probe p;

	kvm_host();
	p = probe();
	cr_assert_eq(p.have, VSX_HAVE_VHOST_HOST | VSX_HAVE_LOOPBACK | VSX_HAVE_AF_VSOCK,
		     "have 0x%x", p.have);
	cr_assert_str_eq(p.transport, "virtio");
	cr_assert_str_eq(pick_name("vsock:3:1234"), "virtio");
	/* hvsock: has one transport; it refuses off Hyper-V (test_vmbus_rules) */
	cr_assert_str_eq(pick_name("hvsock:00000808-facb-11e6-bd58-64006a7986d3"), "vmbus");
}

/* A Hyper-V guest that runs KVM guests of its own: hv_sock reaches the
 * host, vhost-vsock and loopback the rest, as the kernel routes them. */
Test(detect, nested_hyperv_guest_and_kvm_host)
{
	struct vsx_probe p;

	hyperv_guest();
	kvm_host();
	p = probe();
	cr_assert_eq(p.have, VSX_HAVE_VMBUS | VSX_HAVE_VHOST_HOST | VSX_HAVE_LOOPBACK |
			     VSX_HAVE_AF_VSOCK, "have 0x%x", p.have);
	cr_assert_str_eq(p.transport, "vmbus");
	cr_assert_str_eq(pick_name("vsock:host:1234"), "vmbus");
	cr_assert_str_eq(pick_name("vsock:any:1234"), "vmbus");
	cr_assert_str_eq(pick_name("vsock:3:1234"), "virtio");
	cr_assert_str_eq(pick_name("vsock:local:1234"), "virtio");
}

Test(detect, empty_machine)
{
	struct vsx_probe p;

	p = probe();
	cr_assert_eq(p.have, 0);
	cr_assert_str_eq(p.transport, "");
	/* vsock: still has a transport to try (it then finds no AF_VSOCK) */
	cr_assert_str_eq(pick_name("vsock:host:1234"), "virtio");
}

/* An explicit name wins, and must serve the address kind. */
Test(detect, by_name)
{
	struct vsx_addr a;

	hyperv_guest();
	cr_assert_eq(vsx_addr_parse("vsock:host:1", &a), 0);
	cr_assert_eq(vsx__transport_for(&a, "virtio"), &vsx__virtio_kernel);
	cr_assert_eq(vsx__transport_for(&a, "vmbus"), &vsx__vmbus);
	cr_assert_eq(vsx_addr_parse("unix:/x:1", &a), 0);
	cr_assert_null(vsx__transport_for(&a, "vmbus"));
	cr_assert_eq(vsx__transport_by_name(VSX_TRANSPORT_VMBUS), &vsx__vmbus);
}
