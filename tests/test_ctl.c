/*
 * The control protocol (libvsx/ctl-proto.h): block parsing, bad input, and
 * the client call against a control server written here; plus libvsx's
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
	size_t len = 0;
	ssize_t r;
	int c = accept(f->lfd, NULL, NULL);

	if (c < 0)
		return NULL;
	while (len < sizeof(f->got) - 1 &&
	       (r = read(c, f->got + len, sizeof(f->got) - 1 - len)) > 0) {
		len += (size_t)r;
		f->got[len] = '\0';
		if (vsx__ctl_block_end(f->got, len))
			break;
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
	cr_assert_str_eq(f.got, "vsx-control=1\ncmd=resolve\nvm=web\n\n");
	n = vsx_recv(s, buf, sizeof(buf));
	cr_assert_eq(n, 2);
	cr_assert_eq(memcmp(buf, "hi", 2), 0);
	cr_assert_eq(vsx_info(s, &info), 0);
	cr_assert_str_eq(info.transport, "vm");
	cr_assert_str_eq(info.peer, "vm:web:77");
	vsx_close(s);
	fake_stop(&f);
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
