/*
 * vsxctl libvirt-xml VM: the pieces of a libvirt domain that give the
 * domain VM's vsock device, served by this vsxd (vsxd(8), LIBVIRT).
 *
 * libvirt has no vhost-user vsock element (<vsock> is the kernel's
 * vhost-vsock only), so the device goes in as QEMU arguments
 * (<qemu:commandline>), and guest memory is shared memfd memory
 * (<memoryBacking>), which vhost-user needs. The socket path comes from
 * vsxd (cmd=vms); QEMU's option syntax doubles a ',' in it, XML escapes
 * the rest. The device gets a fixed PCI slot (PCI_SLOT). The output is one well-formed document: a <domain> element
 * holding the pieces, to merge into the real one (virsh edit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>

#include "vsxctl.h"

/* The device's slot on the root bus (pcie.0 on q35, pci.0 on pc). libvirt
 * gives its own devices addresses and does not know this one: without an
 * address QEMU would take the first free slot, which libvirt then claims
 * for one of its own (q35: its first pcie-root-port, slot 1) and QEMU
 * refuses to start. libvirt fills slots from 1 up and puts most devices
 * behind root ports, so 0x10 stays free but in crowded domains. */
#define PCI_SLOT "0x10"

static const char *want;        /* the VM asked for */
static bool found;

/* @s in an XML attribute value between single quotes; with @qemu, each
 * ',' doubled first (QEMU's escape inside an option value). */
static void xml_attr(FILE *f, const char *s, bool qemu)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '\'': fputs("&apos;", f); break;
		case '"': fputs("&quot;", f); break;
		case ',': fputs(qemu ? ",," : ",", f); break;
		default: fputc(*s, f);
		}
	}
}

/* @s inside an XML comment: no "--" may appear there. */
static void xml_comment_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		fputc(*s, f);
		if (*s == '-' && s[1] == '-')
			fputc(' ', f);
	}
}

/* Whether @name is a group and the file @st is writable by it. */
static bool group_writes(const struct stat *st, const char *name)
{
	const struct group *g = getgrnam(name);

	return g && g->gr_gid == st->st_gid && (st->st_mode & 0020);
}

/* The socket file as vsxctl sees it (the same host, usually): a note when
 * libvirt's QEMU (Debian: user libvirt-qemu, in group kvm) cannot connect. */
static void socket_note(FILE *f, const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return;
	if ((st.st_mode & 0002) || group_writes(&st, "kvm") || group_writes(&st, "libvirt-qemu"))
		return;
	fprintf(f, "  <!-- The socket is mode %04o, group %u: libvirt's QEMU (user\n"
		"       libvirt-qemu, in group kvm on Debian) cannot connect to it. Give\n"
		"       vsxd socket-group = kvm (vsxd.conf(5)). -->\n",
		(unsigned)(st.st_mode & 0777), (unsigned)st.st_gid);
}

static void write_xml(FILE *f, const char *vm, const char *cid, const char *sock)
{
	fputs("<!-- vsxd serves VM '", f);
	xml_comment_text(f, vm);
	fprintf(f, "' (guest CID %s) on ", cid);
	xml_comment_text(f, sock);
	fputs(".\n"
	      "     Merge what is inside <domain> into the domain (virsh edit NAME),\n"
	      "     its xmlns:qemu attribute included; vsxd(8), LIBVIRT. -->\n"
	      "<domain xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n"
	      "  <!-- vhost-user: guest memory that QEMU shares with vsxd -->\n"
	      "  <memoryBacking>\n"
	      "    <source type='memfd'/>\n"
	      "    <access mode='shared'/>\n"
	      "  </memoryBacking>\n", f);
	socket_note(f, sock);
	fputs("  <!-- libvirt has no vhost-user vsock device: QEMU's own arguments.\n"
	      "       The guest's CID comes from vsxd. PCI slot " PCI_SLOT " of the root bus,\n"
	      "       which libvirt leaves free (change it if the domain puts a\n"
	      "       device there). Under AppArmor, allow the socket in\n"
	      "       /etc/apparmor.d/local/abstractions/libvirt-qemu:\n"
	      "         \"", f);
	xml_comment_text(f, sock);
	fputs("\" rw, -->\n"
	      "  <qemu:commandline>\n"
	      "    <qemu:arg value='-chardev'/>\n"
	      "    <qemu:arg value='socket,id=vsx-", f);
	xml_attr(f, vm, true);
	fputs(",path=", f);
	xml_attr(f, sock, true);
	fputs("'/>\n"
	      "    <qemu:arg value='-device'/>\n"
	      "    <qemu:arg value='vhost-user-vsock-pci,chardev=vsx-", f);
	xml_attr(f, vm, true);
	fprintf(f, ",addr=%s'/>\n"
		"  </qemu:commandline>\n"
		"</domain>\n", PCI_SLOT);
}

static void print_xml(const struct vsx_kvs *kvs)
{
	const char *cid = NULL, *sock = NULL;
	char *xml = NULL;
	size_t len = 0;
	bool in = false;
	unsigned i;
	FILE *f;

	for (i = 0; i < kvs->n; i++) {
		const char *k = kvs->kv[i].key, *v = kvs->kv[i].value;

		if (strcmp(k, VSX_CTL_K_VM) == 0) {
			if (in)
				break;
			in = strcmp(v, want) == 0;
		} else if (in && strcmp(k, VSX_CTL_K_CID) == 0) {
			cid = v;
		} else if (in && strcmp(k, VSX_CTL_K_SOCKET) == 0) {
			sock = v;
		}
	}
	if (!in || !cid || !sock) {
		err_msg("libvirt-xml", "vsxd serves no VM named '%s' (vsxctl vms lists them)",
			want);
		return;
	}
	f = open_memstream(&xml, &len);
	if (!f) {
		err_msg("libvirt-xml", "out of memory");
		return;
	}
	write_xml(f, want, cid, sock);
	if (fclose(f) != 0) {
		free(xml);
		err_msg("libvirt-xml", "out of memory");
		return;
	}
	found = true;
	if (!opt_json) {
		fputs(xml, stdout);
	} else {
		fputs("{\"vm\": ", stdout);
		json_string(want);
		printf(", \"cid\": %s, \"socket\": ", cid);
		json_string(sock);
		fputs(", \"xml\": ", stdout);
		json_string(xml);
		fputs("}\n", stdout);
	}
	free(xml);
}

int libvirt_xml_main(int argc, char **argv)
{
	struct vsx_ctl_req req;
	int rc;

	if (argc != 2 || !*argv[1])
		die_usage(argv[0]);
	want = argv[1];
	vsx__ctl_req_init(&req, VSX_CTL_VMS);
	rc = ctl_run(argv[0], &req, print_xml);
	return rc ? rc : found ? 0 : 1;
}
