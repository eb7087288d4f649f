/*
 * Code run inside a real, sandboxed vsxd (tests/daemon/sandbox.test): a
 * test-only library that vsxd is started with in LD_PRELOAD. It is not
 * part of vsxd (the release binary has no hook); it plays what an
 * attacker who found a bug in vsxd could run there.
 *
 * With $VSX_INJECT set to a directory, its constructor starts a thread
 * (before vsxd's main, so the allowlist, installed on every thread,
 * covers it) that reads one command per line from the fifo DIR/cmd and
 * answers on the fifo DIR/res with "r=N errno=E": the raw syscall's
 * result, made with syscall(2), so no libc wrapper stands in between.
 * The filesystem view (Landlock) restricts the threads vsxd has when it
 * starts serving, not this one: so a command prefixed "main " runs on
 * vsxd's main thread instead, in a signal handler (SIGRTMIN+7) that the
 * serving thread waits for.
 *
 *   openat PATH        openat(AT_FDCWD, PATH, O_RDONLY)
 *   creat PATH         openat(AT_FDCWD, PATH, O_WRONLY|O_CREAT|O_EXCL, 0600)
 *   execve PATH        execve(PATH, {PATH}, {})
 *   socket FAMILY      socket(FAMILY, SOCK_STREAM or SOCK_RAW, 0)
 *   socketpair FAMILY  socketpair(FAMILY, SOCK_STREAM, 0)
 *   ptrace PID         ptrace(PTRACE_ATTACH, PID)
 *   setuid UID         setuid(UID)
 *   mount              mount("none", "/mnt", "tmpfs", 0, NULL)
 *   bpf                bpf(BPF_PROG_LOAD, {}, 0)
 *   init_module        init_module(NULL, 0, "")
 *   mmap PROT          an anonymous private page, PROT (decimal)
 *   mprotect PROT      a page of ours made PROT
 *   thread             pthread_create (clone with CLONE_THREAD) and join
 *   fork               clone(SIGCHLD): a new process
 *   clone3             clone3 with fork's arguments
 *   ioctl REQ          ioctl on a pipe, request REQ (decimal)
 *   prctl OP           prctl(OP, 0, 0, 0, 0)
 *   tgkill PID         tgkill(PID, PID, 0)
 *   kill PID           kill(PID, 0)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/sched.h>

static char dir[4096];

static void *noop(void *arg)
{
	return arg;
}

static long run(const char *cmd, const char *arg)
{
	long a = strtol(arg, NULL, 0);

	if (!strcmp(cmd, "openat") || !strcmp(cmd, "creat")) {
		long r = cmd[0] == 'o' ? syscall(SYS_openat, AT_FDCWD, arg, O_RDONLY | O_CLOEXEC)
				       : syscall(SYS_openat, AT_FDCWD, arg,
						 O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

		if (r >= 0)
			close((int)r);
		return r < 0 ? r : 0;
	}
	if (!strcmp(cmd, "execve")) {
		char *const argv[] = { (char *)arg, NULL }, *const envp[] = { NULL };

		return syscall(SYS_execve, arg, argv, envp);
	}
	if (!strcmp(cmd, "socket"))
		return syscall(SYS_socket, a, a == AF_PACKET ? SOCK_RAW : SOCK_STREAM, 0);
	if (!strcmp(cmd, "socketpair")) {
		int sv[2];
		long r = syscall(SYS_socketpair, a, SOCK_STREAM, 0, sv);

		if (r == 0) {
			close(sv[0]);
			close(sv[1]);
		}
		return r;
	}
	if (!strcmp(cmd, "ptrace"))
		return syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, a, 0, 0);
	if (!strcmp(cmd, "setuid"))
		return syscall(SYS_setuid, a);
	if (!strcmp(cmd, "mount"))
		return syscall(SYS_mount, "none", "/mnt", "tmpfs", 0, NULL);
	if (!strcmp(cmd, "bpf")) {
		char attr[128] = { 0 };

		return syscall(SYS_bpf, 5 /* BPF_PROG_LOAD */, attr, sizeof(attr));
	}
	if (!strcmp(cmd, "init_module"))
		return syscall(SYS_init_module, NULL, 0, "");
	if (!strcmp(cmd, "mmap")) {
		long r = syscall(SYS_mmap, NULL, 4096, a, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (r != -1)
			munmap((void *)r, 4096);
		return r == -1 ? -1 : 0;
	}
	if (!strcmp(cmd, "mprotect")) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0);
		long r;

		if (p == MAP_FAILED)
			return -1;
		r = syscall(SYS_mprotect, p, 4096, a);
		munmap(p, 4096);
		return r;
	}
	if (!strcmp(cmd, "thread")) {
		pthread_t t;
		int e = pthread_create(&t, NULL, noop, NULL);

		if (e) {
			errno = e;
			return -1;
		}
		return pthread_join(t, NULL);
	}
	if (!strcmp(cmd, "fork")) {
		long r = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);

		if (r == 0)
			_exit(0);
		return r > 0 ? 0 : r;
	}
	if (!strcmp(cmd, "clone3")) {
		struct clone_args ca = { .exit_signal = SIGCHLD };
		long r = syscall(SYS_clone3, &ca, sizeof(ca));

		if (r == 0)
			_exit(0);
		return r > 0 ? 0 : r;
	}
	if (!strcmp(cmd, "ioctl")) {
		int p[2], n = 0;
		long r;

		if (pipe(p) < 0)
			return -1;
		r = syscall(SYS_ioctl, p[0], (unsigned long)a, &n);
		close(p[0]);
		close(p[1]);
		return r;
	}
	if (!strcmp(cmd, "prctl"))
		return syscall(SYS_prctl, a, 0, 0, 0, 0) < 0 ? -1 : 0;
	if (!strcmp(cmd, "tgkill"))
		return syscall(SYS_tgkill, a, a, 0);
	if (!strcmp(cmd, "kill"))
		return syscall(SYS_kill, a, 0);
	errno = EINVAL;
	return -1;
}

/* The command the main thread runs (SIGRTMIN+7), and its answer. */
static char main_cmd[4200], *main_arg;
static long main_r;
static int main_errno;
static sem_t main_done;

static void on_main(int sig)
{
	(void)sig;
	errno = 0;
	main_r = run(main_cmd, main_arg ? main_arg : "");
	main_errno = main_r < 0 ? errno : 0;
	sem_post(&main_done);
}

static void *serve(void *arg)
{
	char path[4200], line[4200];

	(void)arg;
	for (;;) {
		FILE *in, *out;
		char *sp, *nl;
		long r;
		int e;

		snprintf(path, sizeof(path), "%s/cmd", dir);
		in = fopen(path, "r");
		if (!in)
			return NULL;
		if (!fgets(line, sizeof(line), in)) {
			fclose(in);
			continue;
		}
		fclose(in);
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		sp = strchr(line, ' ');
		if (sp)
			*sp++ = '\0';
		errno = 0;
		if (!strcmp(line, "main") && sp) {
			char *sp2 = strchr(sp, ' ');

			if (sp2)
				*sp2++ = '\0';
			snprintf(main_cmd, sizeof(main_cmd), "%s", sp);
			main_arg = sp2;
			syscall(SYS_tgkill, getpid(), getpid(), SIGRTMIN + 7);
			while (sem_wait(&main_done) < 0 && errno == EINTR)
				;
			r = main_r;
			e = main_errno;
		} else {
			r = run(line, sp ? sp : "");
			e = r < 0 ? errno : 0;
		}
		snprintf(path, sizeof(path), "%s/res", dir);
		out = fopen(path, "w");
		if (!out)
			return NULL;
		fprintf(out, "r=%ld errno=%d\n", r < 0 ? -1 : r, e);
		fclose(out);
	}
}

__attribute__((constructor)) static void inject_init(void)
{
	const char *d = getenv("VSX_INJECT");
	pthread_t t;

	if (!d || strlen(d) >= sizeof(dir))
		return;
	strcpy(dir, d);
	unsetenv("VSX_INJECT");   /* not the launcher's next vsxd's */
	sem_init(&main_done, 0, 0);
	signal(SIGRTMIN + 7, on_main);
	if (pthread_create(&t, NULL, serve, NULL) == 0)
		pthread_detach(t);
}
