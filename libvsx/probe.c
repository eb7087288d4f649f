/*
 * vsx_probe: which vsock transports this machine has, from sysfs.
 *
 *   virtio-vsock device   /sys/bus/virtio/devices/STAR/device == 0x0013 (id 19)
 *   VMBus (Hyper-V, WSL2) /sys/bus/vmbus/devices/ has entries: transport "vmbus"
 *                         (hv_sock), unless a virtio-vsock device is there too
 *   vhost-vsock host      /dev/vhost-vsock exists
 *   vsock loopback        /sys/module/vsock_loopback
 *   vsock core            /sys/class/misc/vsock or /sys/module/vsock
 *
 * $VSX_SYSROOT is prefixed to every path, so tests use a fake tree and never
 * touch the machine's own vsock device. The local CID is asked of /dev/vsock
 * (IOCTL_VM_SOCKETS_GET_LOCAL_CID) only when a guest-side transport exists.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "vsx-int.h"

#define VIRTIO_ID_VSOCK 19

static void path_of(char *buf, size_t len, const char *p)
{
	const char *root = getenv("VSX_SYSROOT");

	snprintf(buf, len, "%s%s", root ? root : "", p);
}

static int exists(const char *p)
{
	char path[PATH_MAX];
	struct stat st;

	path_of(path, sizeof(path), p);
	return stat(path, &st) == 0;
}

static int dir_has_entries(const char *p)
{
	char path[PATH_MAX];
	struct dirent *d;
	DIR *dir;
	int n = 0;

	path_of(path, sizeof(path), p);
	dir = opendir(path);
	if (!dir)
		return 0;
	while (!n && (d = readdir(dir)))
		n = d->d_name[0] != '.';
	closedir(dir);
	return n;
}

static int has_virtio_vsock(void)
{
	char path[PATH_MAX], file[PATH_MAX + 300], buf[32];
	struct dirent *d;
	int found = 0;
	DIR *dir;
	FILE *f;

	path_of(path, sizeof(path), "/sys/bus/virtio/devices");
	dir = opendir(path);
	if (!dir)
		return 0;
	while (!found && (d = readdir(dir))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s/device", path, d->d_name);
		f = fopen(file, "re");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f) &&
		    strtoul(buf, NULL, 0) == VIRTIO_ID_VSOCK)
			found = 1;
		fclose(f);
	}
	closedir(dir);
	return found;
}

static uint32_t local_cid(void)
{
	char path[PATH_MAX];
	unsigned int cid;
	int fd;

	path_of(path, sizeof(path), "/dev/vsock");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return VSX_CID_ANY;
	if (ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0)
		cid = VSX_CID_ANY;
	close(fd);
	return cid;
}

VSX_EXPORT int vsx_probe(struct vsx_probe *out)
{
	vsx__err_clear();
	if (!out)
		return vsx__err(-EINVAL, "NULL argument");
	memset(out, 0, sizeof(*out));
	out->local_cid = VSX_CID_ANY;
	if (has_virtio_vsock())
		out->have |= VSX_HAVE_VIRTIO_GUEST;
	if (dir_has_entries("/sys/bus/vmbus/devices"))
		out->have |= VSX_HAVE_VMBUS;
	if (exists("/dev/vhost-vsock"))
		out->have |= VSX_HAVE_VHOST_HOST;
	if (exists("/sys/module/vsock_loopback"))
		out->have |= VSX_HAVE_LOOPBACK;
	/* vsock_init always registers the "vsock" misc device; /sys/module/vsock
	 * exists for a built-in vsock only thanks to its MODULE_VERSION. */
	if (exists("/sys/class/misc/vsock") || exists("/sys/module/vsock"))
		out->have |= VSX_HAVE_AF_VSOCK;
	/* hv_sock is reached through AF_VSOCK too, but the vmbus transport
	 * knows its rules. */
	snprintf(out->transport, sizeof(out->transport), "%s",
		 (out->have & VSX_HAVE_VMBUS) && !(out->have & VSX_HAVE_VIRTIO_GUEST)
			 ? "vmbus"
		 : out->have & (VSX_HAVE_AF_VSOCK | VSX_HAVE_VIRTIO_GUEST |
				VSX_HAVE_LOOPBACK | VSX_HAVE_VHOST_HOST | VSX_HAVE_VMBUS)
			 ? "virtio" : "");
	if (out->have & (VSX_HAVE_VIRTIO_GUEST | VSX_HAVE_VMBUS | VSX_HAVE_LOOPBACK))
		out->local_cid = local_cid();
	return 0;
}
