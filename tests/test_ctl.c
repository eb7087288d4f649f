/*
 * The control protocol (libvsx/ctl-proto.h): the request builder, block
 * parsing, bad input, and the client call against a control server
 * written here; plus libvsx's
 * vm:NAME:PORT resolution and hybrid buffer requests through it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <vsx/vsx.h>

#include "ctl-proto.h"

static int parse(const char *text, struct vsx_kvs *kvs, char *buf, size_t cap)
{
	size_t n = strlen(text);

	cr_assert_lt(n, cap);
	memcpy(buf, text, n + 1);
	return vsx__ctl_parse(buf, n, kvs);
}

Test(ctl, parse_good)
{
	struct vsx_kvs kvs;
	char buf[256];

	cr_assert_eq(parse("vsx-control=1\ncmd=list\nvm=web-1\nempty=\n", &kvs, buf,
			   sizeof(buf)), 0);
	cr_assert_eq(kvs.n, 4);
	cr_assert_str_eq(vsx__ctl_get(&kvs, "cmd"), "list");
	cr_assert_str_eq(vsx__ctl_get(&kvs, "vm"), "web-1");
	cr_assert_str_eq(vsx__ctl_get(&kvs, "empty"), "");
	cr_assert_null(vsx__ctl_get(&kvs, "nope"));
}

Test(ctl, parse_bad)
{
	static const char *bad[] = {
		"noequals\n", "=value\n", "Upper=1\n", "k=v", "k=v\n\nx=1\n",
		"k=tab\there\n", "k=\x01\n", "k\x80=1\n", "sp ace=1\n",
		"averyveryveryveryverylongkeyname_over32=1\n",
	};
	struct vsx_kvs kvs;
	char buf[256];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(parse(bad[i], &kvs, buf, sizeof(buf)), -EINVAL,
			     "case %zu accepted", i);
}

Test(ctl, parse_limits)
{
	static char big[VSX_CTL_VALUE_MAX + 16], lines[8192], buf[8192];
	struct vsx_kvs kvs;
	size_t off = 0;
	int i;

	memset(big, 'x', sizeof(big) - 1);
	memcpy(big, "k=", 2);
	big[VSX_CTL_VALUE_MAX + 3] = '\n';
	big[VSX_CTL_VALUE_MAX + 4] = '\0';
	cr_assert_eq(parse(big, &kvs, buf, sizeof(buf)), -EINVAL);
	for (i = 0; i < VSX_CTL_MAX_LINES + 1; i++)
		off += (size_t)snprintf(lines + off, sizeof(lines) - off, "k%d=%d\n", i, i);
	cr_assert_eq(parse(lines, &kvs, buf, sizeof(buf)), -E2BIG);
}

/* A reply has one record per connection: thousands of lines, not 64. */
Test(ctl, parse_reply_grows)
{
	static char lines[1 << 17];
	struct vsx_kvs kvs;
	size_t off = 0;
	char key[16];
	int i;

	for (i = 0; i < 5000; i++)
		off += (size_t)snprintf(lines + off, sizeof(lines) - off, "k%d=%d\n", i, i);
	cr_assert_eq(vsx__ctl_parse_reply(lines, off, &kvs), 0);
	cr_assert_eq(kvs.n, 5000);
	cr_assert_str_eq(kvs.kv[0].key, "k0");
	cr_assert_str_eq(kvs.kv[4999].value, "4999");
	snprintf(key, sizeof(key), "k%d", 4321);
	cr_assert_str_eq(vsx__ctl_get(&kvs, key), "4321");
	vsx__ctl_kvs_free(&kvs);
	/* Malformed lines are refused the same way as in requests. */
	memcpy(lines, "k=v\nBAD=1\n", 11);
	cr_assert_eq(vsx__ctl_parse_reply(lines, 11, &kvs), -EINVAL);
	vsx__ctl_kvs_free(&kvs);
}

Test(ctl, block_end)
{
	cr_assert_eq(vsx__ctl_block_end("a=1\n", 4), 0);
	cr_assert_eq(vsx__ctl_block_end("a=1\n\nb", 6), 5);
	cr_assert_eq(vsx__ctl_block_end("\n", 1), 1);
}

/* ---- A fake vsxd: answers one request per connection from a script. ---- */

struct fake {
	char dir[64];
	char ctl[128];
	int lfd;
	pthread_t thr;
	const char *reply;     /* reply block to send */
	char got[1024];        /* the request received */
	int hybrid_lfd;        /* a hybrid server for vm: connects, or -1 */
	int old;               /* play a vsxd that speaks version 1 only */
	int refused;           /* requests it refused for their version */
};

static int unix_listen(const char *path)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	snprintf(un.sun_path, sizeof(un.sun_path), "%s", path);
	cr_assert_eq(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0);
	cr_assert_eq(listen(fd, 8), 0);
	return fd;
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	size_t len;
	ssize_t r;
	int c;

again:
	len = 0;
	c = accept(f->lfd, NULL, NULL);
	if (c < 0)
		return NULL;
	while (len < sizeof(f->got) - 1 &&
	       (r = read(c, f->got + len, sizeof(f->got) - 1 - len)) > 0) {
		len += (size_t)r;
		f->got[len] = '\0';
		if (vsx__ctl_block_end(f->got, len))
			break;
	}
	if (f->old && strncmp(f->got, "vsx-control=1\n", 14)) {
		static const char no[] = "error=protocol version 2 is not supported: this "
					 "vsxd speaks vsx-control=1\nerrno=93\n\n";

		(void)!write(c, no, strlen(no));
		close(c);
		f->refused++;
		goto again;
	}
	if (f->reply)
		(void)!write(c, f->reply, strlen(f->reply));
	close(c);
	if (f->hybrid_lfd >= 0) {
		char line[32] = { 0 };

		c = accept(f->hybrid_lfd, NULL, NULL);
		if (c >= 0) {
			(void)!read(c, line, sizeof(line) - 1);
			if (strcmp(line, "CONNECT 77\n") == 0)
				(void)!write(c, "OK 1025\nhi", 10);
			close(c);
		}
	}
	return NULL;
}

static void fake_start(struct fake *f, const char *reply, int with_hybrid)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/vsx-ctl-XXXXXX");
	cr_assert_not_null(mkdtemp(f->dir));
	snprintf(f->ctl, sizeof(f->ctl), "%s/control", f->dir);
	f->lfd = unix_listen(f->ctl);
	f->reply = reply;
	f->hybrid_lfd = -1;
	f->old = f->refused = 0;
	if (with_hybrid) {
		char p[128];

		snprintf(p, sizeof(p), "%s/vm.vsock", f->dir);
		f->hybrid_lfd = unix_listen(p);
	}
	pthread_create(&f->thr, NULL, fake_main, f);
}

static void fake_stop(struct fake *f)
{
	char p[160];

	pthread_join(f->thr, NULL);
	close(f->lfd);
	if (f->hybrid_lfd >= 0)
		close(f->hybrid_lfd);
	unlink(f->ctl);
	snprintf(p, sizeof(p), "%s/vm.vsock", f->dir);
	unlink(p);
	rmdir(f->dir);
}

Test(ctl, call_reply_and_errno)
{
	struct fake f;
	char *reply = NULL;
	int rerr = -1;

	fake_start(&f, "vm=a\nerror=no such thing\nerrno=2\n\n", 0);
	cr_assert_eq(vsx__ctl_call(f.ctl, "vsx-control=1\ncmd=vms\n\n", 2000, &reply,
				   &rerr), 0);
	cr_assert_eq(rerr, 2);
	cr_assert_str_eq(reply, "vm=a\nerror=no such thing\nerrno=2\n\n");
	cr_assert_str_eq(f.got, "vsx-control=1\ncmd=vms\n\n");
	free(reply);
	fake_stop(&f);
}

/* An older vsxd refuses version 2: the request goes again as version 1
 * (ctl-proto.h's rule), and what vsxd answers then is the reply. */
Test(ctl, call_older_vsxd_gets_version_1)
{
	struct vsx_ctl_req r;
	struct fake f;
	char *reply = NULL;
	int rerr = -1;

	fake_start(&f, "vm=web\ncid=3\nerrno=0\n\n", 0);
	f.old = 1;
	vsx__ctl_req_init(&r, VSX_CTL_RESOLVE);
	vsx__ctl_req_add(&r, VSX_CTL_K_VM, "web");
	cr_assert_eq(vsx__ctl_req_end(&r), 0);
	cr_assert_eq(strncmp(r.buf, "vsx-control=3\n", 14), 0);
	cr_assert_eq(vsx__ctl_call(f.ctl, r.buf, 2000, &reply, &rerr), 0);
	fake_stop(&f);
	cr_assert_eq(f.refused, 1);
	cr_assert_str_eq(f.got, "vsx-control=1\ncmd=resolve\nvm=web\n\n");
	cr_assert_eq(rerr, 0);
	cr_assert_str_eq(reply, "vm=web\ncid=3\nerrno=0\n\n");
	free(reply);
}

Test(ctl, call_bad_replies)
{
	static const char *bad[] = { "errno=abc\n\n", "noerrno=1\n\n", "errno=0\n" };
	char *reply;
	int rerr;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct fake f;

		fake_start(&f, bad[i], 0);
		cr_expect_eq(vsx__ctl_call(f.ctl, "vsx-control=1\ncmd=vms\n\n", 2000,
					   &reply, &rerr), -EPROTO, "case %zu", i);
		fake_stop(&f);
	}
	cr_assert_eq(vsx__ctl_call("/nonexistent/vsx/control", "x=1\n\n", 500, &reply,
				   &rerr), -ENOENT);
}

Test(ctl, vm_address_resolves_through_vsxd)
{
	struct vsx_opts o = { 0 };
	char reply[256], buf[8];
	struct vsx_info info;
	struct fake f;
	vsx_sock *s;
	ssize_t n;
	int rc;

	fake_start(&f, NULL, 1);
	snprintf(reply, sizeof(reply), "vm=web\ncid=3\nuds-path=%s/vm.vsock\nerrno=0\n\n",
		 f.dir);
	f.reply = reply;
	o.control_path = f.ctl;
	rc = vsx_connect("vm:web:77", &o, &s);
	cr_assert_eq(rc, 0, "vsx_connect: %d %s", rc, vsx_strerror(rc));
	cr_assert_str_eq(f.got, "vsx-control=3\ncmd=resolve\nvm=web\n\n");
	n = vsx_recv(s, buf, sizeof(buf));
	cr_assert_eq(n, 2);
	cr_assert_eq(memcmp(buf, "hi", 2), 0);
	/* the fake vsxd answered its one request and is gone: no credit */
	fake_stop(&f);
	cr_assert_eq(vsx_info(s, &info), 0);
	cr_assert_str_eq(info.transport, "vm");
	cr_assert_str_eq(info.peer, "vm:web:77");
	cr_assert_eq(info.flags & VSX_INFO_CREDIT, 0);
	vsx_close(s);
}

Test(ctl, vm_unknown_and_no_daemon)
{
	struct vsx_opts o = { .control_path = "/nonexistent/vsx/control" };
	struct fake f;
	vsx_sock *s;
	int rc;

	cr_assert_eq(vsx_connect("vm:web:77", &o, &s), -ENODEV);
	fake_start(&f, "error=no VM named web\nerrno=2\n\n", 0);
	o.control_path = f.ctl;
	rc = vsx_connect("vm:web:77", &o, &s);
	cr_assert_eq(rc, -EHOSTUNREACH);
	cr_assert_not_null(strstr(vsx_strerror(rc), "web"));
	fake_stop(&f);
}

/* ---- The request builder ---- */

Test(ctl, req_bytes)
{
	struct vsx_ctl_req r;

	vsx__ctl_req_init(&r, VSX_CTL_STATUS);
	cr_assert_eq(vsx__ctl_req_end(&r), 0);
	cr_assert_str_eq(r.buf, "vsx-control=3\ncmd=status\n\n");
	cr_assert_eq(r.len, strlen(r.buf));

	vsx__ctl_req_init(&r, VSX_CTL_SET_BUFFER);
	cr_assert_eq(vsx__ctl_req_add(&r, VSX_CTL_K_UDS_PATH, "/run/vm 3.vsock"), 0);
	cr_assert_eq(vsx__ctl_req_addf(&r, VSX_CTL_K_HOST_PORT, "%u", 1024u), 0);
	cr_assert_eq(vsx__ctl_req_addf(&r, VSX_CTL_K_RX, "%zu", (size_t)65536), 0);
	cr_assert_eq(vsx__ctl_req_add(&r, "empty", ""), 0);
	cr_assert_eq(vsx__ctl_req_end(&r), 0);
	cr_assert_str_eq(r.buf, "vsx-control=3\ncmd=set-buffer\nuds-path=/run/vm 3.vsock\n"
			 "host-port=1024\nrx=65536\nempty=\n\n");
	cr_assert_eq(r.len, strlen(r.buf));
}

/* What the builder writes, vsxd's parser reads back. */
Test(ctl, req_parses_back)
{
	struct vsx_ctl_req r;
	struct vsx_kvs kvs;

	vsx__ctl_req_init(&r, VSX_CTL_CLOSE);
	vsx__ctl_req_addf(&r, VSX_CTL_K_ID, "%llu", 18446744073709551615ull);
	vsx__ctl_req_add(&r, VSX_CTL_K_RESET, "1");
	cr_assert_eq(vsx__ctl_req_end(&r), 0);
	cr_assert_eq(vsx__ctl_block_end(r.buf, r.len), r.len);
	cr_assert_eq(vsx__ctl_parse(r.buf, r.len - 1, &kvs), 0);
	cr_assert_eq(kvs.n, 4);
	cr_assert_str_eq(kvs.kv[0].key, "vsx-control");
	cr_assert_str_eq(vsx__ctl_get(&kvs, VSX_CTL_K_CMD), "close");
	cr_assert_str_eq(vsx__ctl_get(&kvs, VSX_CTL_K_ID), "18446744073709551615");
	cr_assert_str_eq(vsx__ctl_get(&kvs, VSX_CTL_K_RESET), "1");
}

Test(ctl, req_bad_keys)
{
	static const char *bad[] = {
		"", "Upper", "sp ace", "a=b", "new\nline", "k\x80",
		"averyveryveryveryverylongkeyname_over32",
		"cmd", "vsx-control",          /* the builder writes those */
		"rx",                          /* given twice (below) */
	};
	struct vsx_ctl_req r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		vsx__ctl_req_init(&r, VSX_CTL_SET_BUFFER);
		cr_assert_eq(vsx__ctl_req_add(&r, VSX_CTL_K_RX, "1"), 0);
		cr_expect_eq(vsx__ctl_req_add(&r, bad[i], "1"), -EINVAL, "key %zu accepted", i);
		cr_expect_eq(vsx__ctl_req_end(&r), -EINVAL, "key %zu: end", i);
	}
	/* a 32-byte key is fine, and a key that only starts like another */
	vsx__ctl_req_init(&r, VSX_CTL_STATUS);
	cr_assert_eq(vsx__ctl_req_add(&r, "k0123456789012345678901234567890", "v"), 0);
	cr_assert_eq(vsx__ctl_req_add(&r, "cm", "v"), 0);
	cr_assert_eq(vsx__ctl_req_add(&r, "vsx", "v"), 0);
	cr_assert_eq(vsx__ctl_req_end(&r), 0);
}

Test(ctl, req_bad_values)
{
	static const char *bad[] = { "tab\there", "new\nline", "\x01", "caf\xc3\xa9", "\x7f" };
	char big[VSX_CTL_VALUE_MAX + 2];
	struct vsx_ctl_req r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		vsx__ctl_req_init(&r, VSX_CTL_LIST);
		cr_expect_eq(vsx__ctl_req_add(&r, VSX_CTL_K_VM, bad[i]), -EINVAL,
			     "value %zu accepted", i);
		cr_expect_eq(vsx__ctl_req_end(&r), -EINVAL);
	}
	/* VSX_CTL_VALUE_MAX bytes: fine; one more: refused, by add and addf */
	memset(big, 'v', VSX_CTL_VALUE_MAX);
	big[VSX_CTL_VALUE_MAX] = '\0';
	vsx__ctl_req_init(&r, VSX_CTL_LIST);
	cr_assert_eq(vsx__ctl_req_add(&r, VSX_CTL_K_VM, big), 0);
	cr_assert_eq(vsx__ctl_req_end(&r), 0);
	big[VSX_CTL_VALUE_MAX] = 'v';
	big[VSX_CTL_VALUE_MAX + 1] = '\0';
	vsx__ctl_req_init(&r, VSX_CTL_LIST);
	cr_assert_eq(vsx__ctl_req_add(&r, VSX_CTL_K_VM, big), -EINVAL);
	vsx__ctl_req_init(&r, VSX_CTL_LIST);
	cr_assert_eq(vsx__ctl_req_addf(&r, VSX_CTL_K_VM, "%s", big), -EINVAL);
	/* a bad command is a bad value */
	vsx__ctl_req_init(&r, "bad\ncmd");
	cr_assert_eq(vsx__ctl_req_end(&r), -EINVAL);
}

Test(ctl, req_limits)
{
	char key[16], big[VSX_CTL_VALUE_MAX + 1];
	struct vsx_ctl_req r;
	unsigned i;
	int rc = 0;

	/* VSX_CTL_MAX_LINES lines in all (version and cmd included) */
	vsx__ctl_req_init(&r, VSX_CTL_STATUS);
	for (i = 2; i < VSX_CTL_MAX_LINES; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		cr_assert_eq(vsx__ctl_req_add(&r, key, "v"), 0);
	}
	cr_assert_eq(vsx__ctl_req_add(&r, "one-more", "v"), -E2BIG);
	cr_assert_eq(vsx__ctl_req_add(&r, "after", "v"), -E2BIG, "the first error sticks");
	cr_assert_eq(vsx__ctl_req_end(&r), -E2BIG);

	/* VSX_CTL_REQ_MAX bytes, the empty line included */
	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	vsx__ctl_req_init(&r, VSX_CTL_STATUS);
	for (i = 0; rc == 0 && i < 8; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		rc = vsx__ctl_req_add(&r, key, big);
	}
	cr_assert_eq(rc, -E2BIG);
	cr_assert_eq(vsx__ctl_req_end(&r), -E2BIG);

	/* exactly VSX_CTL_REQ_MAX: "vsx-control=3\ncmd=status\n" is 25 bytes,
	 * then "kN=" lines and the empty line */
	vsx__ctl_req_init(&r, VSX_CTL_STATUS);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		cr_assert_eq(vsx__ctl_req_add(&r, key, big), 0);    /* 3 * 1028 */
	}
	memset(big, 'w', VSX_CTL_REQ_MAX - r.len - 5);
	big[VSX_CTL_REQ_MAX - r.len - 5] = '\0';
	cr_assert_eq(vsx__ctl_req_add(&r, "k3", big), 0);   /* "k3=" + value + "\n" */
	cr_assert_eq(r.len, VSX_CTL_REQ_MAX - 1);
	cr_assert_eq(vsx__ctl_req_end(&r), 0);
	cr_assert_eq(r.len, VSX_CTL_REQ_MAX);
	cr_assert_eq(strlen(r.buf), VSX_CTL_REQ_MAX);
}
