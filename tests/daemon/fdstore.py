# A stand-in for systemd's side of the file descriptor store, for tests
# on machines where systemd is not PID 1 (restart.test, tests/vm's
# restart.test). It implements what sd_notify(3), sd_pid_notify_with_fds(3),
# sd_listen_fds_with_names(3) and systemd's FILE_DESCRIPTOR_STORE document
# describe, for one Type=notify service with NotifyAccess=main,
# Restart=on-failure, RestartPreventExitStatus=2 and
# FileDescriptorStoreMax=MAX:
#
#   - $NOTIFY_SOCKET: a datagram socket; messages from any other process
#     than the main one are ignored (SO_PASSCRED), as NotifyAccess=main;
#   - FDSTORE=1 with the descriptors of the message (SCM_RIGHTS), named by
#     FDNAME= ("stored" without one); a descriptor that is the same open
#     file as one already kept (kcmp(2) KCMP_FILE, as systemd's same_fd) is
#     not kept twice; beyond MAX, descriptors are refused (closed);
#   - FDSTOREREMOVE=1 with FDNAME=: every descriptor of that name is
#     closed and forgotten;
#   - FDPOLL (the default, FDPOLL=1): a kept descriptor that reports
#     POLLHUP or POLLERR is dropped; FDPOLL=0 keeps it unpolled;
#   - $FDSTORE=MAX in the service's environment, as systemd 254 and later;
#   - a main process that dies by a signal or exits non-zero (but 2) is
#     started again with what the store keeps: the descriptors from fd 3 in
#     the order they were stored, $LISTEN_FDS, $LISTEN_FDNAMES (names joined
#     by ':') and $LISTEN_PID, the new process's pid (set by `exec` from a
#     shell, so it is the pid that runs the service);
#   - restart() (SIGTERM, as systemctl restart) starts the service again
#     with the store, as systemd 254's FileDescriptorStorePreserve=restart;
#   - a clean exit, and stop() (SIGTERM, as systemctl stop), discard the
#     store: every descriptor is closed.
# A thread serves the socket all along, as systemd does (a service's
# sd_notify blocks when the socket's queue is full).
import ctypes
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time

KCMP_FILE = 0
SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)
_libc = ctypes.CDLL(None, use_errno=True)


def same_file(a, b):
    """Are descriptors a and b of this process the same open file?"""
    if SYS_KCMP is not None:
        pid = os.getpid()
        r = _libc.syscall(SYS_KCMP, pid, pid, KCMP_FILE, a, b)
        if r >= 0:
            return r == 0
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino) and \
        (sa.st_mode & 0o170000) != 0   # anonymous inodes: cannot tell


class Service:
    def __init__(self, argv, notify_path, store_max=64, log=None, env=None):
        self.argv = argv
        self.notify_path = notify_path
        self.store_max = store_max
        self.log = log
        self.env = dict(env or os.environ)
        self.store = []           # [(name, fd)], in the order stored
        self.nopoll = set()       # fds stored with FDPOLL=0
        self.proc = None
        self.starts = 0
        self.ready = 0            # READY=1 from the current process
        self.messages = []        # every accepted message, as text
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(notify_path)
        self.sock.setblocking(False)
        self.lock = threading.RLock()
        self.running = True
        self.stopping = False
        self.stopped_rc = None
        self.last_rc = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            r, _, _ = select.select([self.sock], [], [], 0.02)
            with self.lock:
                if not self.running:
                    return
                if r:
                    self._recv()
                self.pump(0)

    # ---- the service ----

    def start(self):
        names = [n for n, _ in self.store]
        fds = [fd for _, fd in self.store]
        env = dict(self.env)
        env["NOTIFY_SOCKET"] = self.notify_path
        env["FDSTORE"] = str(self.store_max)
        for k in ("LISTEN_FDS", "LISTEN_FDNAMES", "LISTEN_PID"):
            env.pop(k, None)
        if fds:
            env["LISTEN_FDS"] = str(len(fds))
            env["LISTEN_FDNAMES"] = ":".join(names)
        # copies above any number the child uses, then moved to 3.. in the
        # child; LISTEN_PID is the pid that execs the service
        high = [os.dup(fd) for fd in fds]
        moved = [fcntl_dup_high(fd) for fd in high]
        for fd in high:
            os.close(fd)

        def place():
            for i, fd in enumerate(moved):
                os.dup2(fd, 3 + i)

        argv = ["/bin/sh", "-c",
                ('LISTEN_PID=$$; export LISTEN_PID; ' if fds else '') + 'exec "$@"',
                "sh"] + self.argv
        self.proc = subprocess.Popen(argv, env=env, preexec_fn=place,
                                     pass_fds=list(range(3, 3 + len(fds))),
                                     stderr=self.log, stdout=self.log)
        for fd in moved:
            os.close(fd)
        self.starts += 1
        self.ready = 0

    def pump(self, timeout=0):
        """Read what notifications are queued, drop hung-up descriptors,
        restart a dead service as Restart=on-failure does."""
        while select.select([self.sock], [], [], 0)[0]:
            self._recv()
        self._poll_store()
        if self.proc and self.proc.poll() is not None and self.running and \
                not self.stopping:
            rc = self.proc.returncode
            self.last_rc = rc
            self.proc = None
            if rc < 0 or (rc != 0 and rc != 2):
                self.start()          # on-failure: the store goes with it
            else:
                self.discard()

    def wait(self, cond, timeout=20.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if cond():
                    return True
            time.sleep(0.01)
        with self.lock:
            return cond()

    def kill(self, sig=signal.SIGKILL):
        with self.lock:
            pid = self.proc.pid
            os.kill(pid, sig)
            return pid

    def stop(self):
        """systemctl stop: SIGTERM, wait, discard the store."""
        with self.lock:
            self.stopping = True
            proc = self.proc
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with self.lock:
            self.pump()     # what it sent before exiting still counts
            self.stopped_rc = proc.returncode if proc else None
            self.proc = None
            self.discard()
            self.stopping = False

    def restart(self):
        """systemctl restart: SIGTERM, wait, start again with the store
        (systemd 254's FileDescriptorStorePreserve=restart, the default)."""
        with self.lock:
            self.stopping = True
            proc = self.proc
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with self.lock:
            self.pump()     # what it sent before exiting still counts
            self.stopped_rc = proc.returncode if proc else None
            self.proc = None
            self.stopping = False
            self.start()

    def discard(self):
        for _, fd in self.store:
            os.close(fd)
        self.store = []
        self.nopoll = set()

    def close(self):
        with self.lock:
            self.running = False
        self.thread.join()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.discard()
        self.sock.close()

    # ---- the protocol ----

    def names(self):
        with self.lock:
            return [n for n, _ in self.store]

    def fd(self, name):
        with self.lock:
            for n, fd in self.store:
                if n == name:
                    return fd
        return None

    def drop(self, name):
        """Forget @name (a test's way to lose a descriptor)."""
        with self.lock:
            self._drop(name)

    def _drop(self, name):
        keep = []
        for n, fd in self.store:
            if n == name:
                os.close(fd)
                self.nopoll.discard(fd)
            else:
                keep.append((n, fd))
        self.store = keep

    def add(self, name, fd):
        """Keep @fd (taken over) under @name, as if the service had stored
        it: what another program, or an older store, could leave."""
        with self.lock:
            self.store.append((name, fd))

    def replace(self, name, fd):
        """Put @fd (taken over) in place of @name's first descriptor."""
        with self.lock:
            self._replace(name, fd)

    def _replace(self, name, fd):
        for i, (n, f) in enumerate(self.store):
            if n == name:
                os.close(f)
                self.nopoll.discard(f)
                self.store[i] = (n, fd)
                return

    def _recv(self):
        fdsize = struct.calcsize("i")
        try:
            msg, anc, _, _ = self.sock.recvmsg(
                4096, socket.CMSG_SPACE(253 * fdsize) +
                socket.CMSG_SPACE(struct.calcsize("3i")))
        except BlockingIOError:
            return
        fds, pid = [], None
        for level, typ, data in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                n = len(data) // fdsize
                fds += list(struct.unpack("%di" % n, data[:n * fdsize]))
            elif level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                pid = struct.unpack("3i", data[:struct.calcsize("3i")])[0]
        if not self.proc or pid != self.proc.pid:
            for fd in fds:
                os.close(fd)
            return
        text = msg.decode(errors="replace")
        self.messages.append(text)
        kv = {}
        for line in text.split("\n"):
            if "=" in line:
                k, v = line.split("=", 1)
                kv[k] = v
        if kv.get("READY") == "1":
            self.ready += 1
        if kv.get("FDSTOREREMOVE") == "1" and "FDNAME" in kv:
            self._drop(kv["FDNAME"])
        if kv.get("FDSTORE") == "1":
            name = kv.get("FDNAME", "stored")
            for fd in fds:
                if any(same_file(fd, f) for _, f in self.store):
                    os.close(fd)
                elif len(self.store) >= self.store_max:
                    os.close(fd)
                else:
                    self.store.append((name, fd))
                    if kv.get("FDPOLL") == "0":
                        self.nopoll.add(fd)
            fds = []
        for fd in fds:
            os.close(fd)

    def _poll_store(self):
        if not self.store:
            return
        p = select.poll()
        for _, fd in self.store:
            if fd not in self.nopoll:
                p.register(fd, 0)
        hung = {fd for fd, ev in p.poll(0) if ev & (select.POLLHUP | select.POLLERR)}
        if hung:
            for n, fd in self.store:
                if fd in hung:
                    os.close(fd)
            self.store = [(n, fd) for n, fd in self.store if fd not in hung]


def fcntl_dup_high(fd):
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 1000)


def main(argv):
    """As a program (tests/vm/restart.test):

        fdstore.py [-m MAX] -s STATUS NOTIFY_PATH -- ARGV...

    runs ARGV as the service until SIGTERM (then stops it: systemctl stop),
    restarts it on each SIGUSR1 (systemctl restart), and appends to STATUS one line per event: "start N PID", "ready N PID",
    "exit N PID STATUS" (a signal as -SIG), "store NAME,NAME,..." when what
    the store keeps changes, "stopped RC" at the end."""
    import getopt
    opts, args = getopt.getopt(argv, "m:s:")
    o = dict(opts)
    if "--" in args:
        args.remove("--")
    notify, service_argv = args[0], args[1:]
    status = open(o["-s"], "a", buffering=1)
    svc = Service(service_argv, notify, store_max=int(o.get("-m", "64")))
    done = threading.Event()
    restarts = []
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGUSR1, lambda *_: restarts.append(1))
    seen = {"start": 0, "ready": 0, "store": None, "pid": None}

    def report():
        with svc.lock:
            if svc.starts != seen["start"]:
                if seen["pid"] is not None:
                    status.write("exit %d %d %s\n" % (seen["start"], seen["pid"],
                                                      svc.last_rc))
                seen["start"] = svc.starts
                seen["pid"] = svc.proc.pid if svc.proc else None
                seen["ready"] = 0
                status.write("start %d %s\n" % (svc.starts, seen["pid"]))
            if svc.ready and not seen["ready"]:
                seen["ready"] = 1
                status.write("ready %d %s\n" % (svc.starts, seen["pid"]))
            names = ",".join(svc.names())
            if names != seen["store"]:
                seen["store"] = names
                status.write("store %s\n" % names)

    svc.start()
    while not done.wait(0.02):
        if restarts:
            restarts.pop()
            status.write("restart queued\n")
            svc.restart()
        report()
    svc.stop()
    report()
    status.write("stopped %s\n" % svc.stopped_rc)
    svc.close()
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
