"""The sandbox (issue #32; vsxd(8) SECURITY), on real vsxd processes: code
run inside a sandboxed vsxd (tests/daemon/inject.c, an LD_PRELOAD library
of the tests: vsxd has no hook) makes each forbidden call, and each call
whose arguments the allowlist filters with allowed arguments (it works,
vsxd serves on) and perturbed ones (vsxd dies of SIGSYS, one log line
naming the call), in the shape of Firecracker's seccomp validation test.

  1  the filter is on every thread, no_new_privs set; the launcher too
     has no_new_privs only after it starts a program (it is not filtered)
  2  allowed arguments work, vsxd serves on (a connection both ways)
  3  each forbidden call, a fresh vsxd each: killed by SIGSYS, "the
     syscall allowlist refused NAME" in its log
  4  --seccomp log: the call is let through, the kernel logs it
     (audit type=1326, syscall=NR), vsxd serves on; --seccomp off: no
     filter
  5  --user nobody: vsxd and its launcher run as nobody with no
     capability, data both ways, and vsxctl upgrade hands over to a new
     vsxd that is nobody too, sandboxed, the device kept
  6  the launcher runs only a program owned by root that nobody else may
     write: upgrade --exec a group-writable copy is refused, vsxd serves on
  7  vsxd -t looks user= up as the drop does: nobody and its uid print
     with uid and gid; an unknown name, an unknown uid and root are
     errors, exit 1, the reason said; a vsxd started with one does not
     start

A sanitizer build's sandbox also lets the runtime's calls through
(ptrace, clone, execve, prctl, reading any file: sandbox.c): those checks
are skipped there.
"""
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vsxdtest  # noqa: E402
from vsxdtest import check, wait_for  # noqa: E402

S = vsxdtest.Setup("sandbox")
INJECT = os.path.abspath(os.environ.get("VSX_INJECT_LIB", "./tests/daemon/.libs/libinject.so"))
if not os.path.exists(INJECT):
    print("sandbox.test: no %s" % INJECT, file=sys.stderr)
    sys.exit(99)
os.chmod(S.tmp, 0o755)     # nobody (5) reads the configuration below it

AF_UNIX, AF_INET, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 16, 17, 40
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
FIONREAD, TIOCSTI = 0x541B, 0x5412
PR_SET_DUMPABLE, PR_GET_NO_NEW_PRIVS = 4, 39

# only AF_UNIX: no metrics endpoint, no tcp or vsock forward
with open(S.conf, "w") as f:
    f.write("[daemon]\ncontrol = %s\n\n[vm web]\nguest-cid = 3\nsocket = %s\n"
            "uds-path = %s\n" % (S.ctl, S.vhost, S.uds))
os.chmod(S.conf, 0o644)


class Vsxd:
    """A vsxd with the inject library, its log in a file."""
    n = 0

    def __init__(self, *flags):
        Vsxd.n += 1
        self.dir = os.path.join(S.tmp, "inj%d" % Vsxd.n)
        os.mkdir(self.dir)
        os.mkfifo(os.path.join(self.dir, "cmd"))
        os.mkfifo(os.path.join(self.dir, "res"))
        self.log_path = os.path.join(self.dir, "log")
        env = dict(os.environ, LD_PRELOAD=INJECT, VSX_INJECT=self.dir)
        # an ASan build's vsxd: the runtime need not come before the library
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                               ":verify_asan_link_order=0").lstrip(":")
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen([S.vsxd, "--config", S.conf, "-v"] + list(flags),
                                  stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.ready = wait_for(lambda: "serving" in self.text() or self.p.poll() is not None)
        self.pid = self.p.pid    # (libtool's wrapper execs vsxd)

    def launcher(self):
        out = subprocess.run(["pgrep", "-P", str(self.p.pid), "-x", "vsxd-launcher"],
                             capture_output=True, text=True).stdout.split()
        return out[0] if out else None

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def call(self, cmd, secs=5.0):
        """Run @cmd inside vsxd: ("r=N errno=E", None) or (None, the
        process's exit status: negative, a signal) if it died."""
        fd = os.open(os.path.join(self.dir, "cmd"), os.O_WRONLY)
        os.write(fd, (cmd + "\n").encode())
        os.close(fd)
        rfd = os.open(os.path.join(self.dir, "res"), os.O_RDONLY | os.O_NONBLOCK)
        end = time.monotonic() + secs
        got = b""
        try:
            while time.monotonic() < end:
                try:
                    got += os.read(rfd, 256)
                except BlockingIOError:
                    pass
                if got.endswith(b"\n"):
                    return got.decode().strip(), None
                rc = self.p.poll()
                if rc is not None:
                    return None, rc
                time.sleep(0.01)
        finally:
            os.close(rfd)
        return None, None

    def stop(self):
        """SIGTERM; the exit status (None: killed after 30 s, an ASan
        build's leak check included)."""
        rc = self.p.poll()
        if rc is None:
            self.p.terminate()
            try:
                rc = self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        return rc


def status_field(pid, key, task=None):
    path = "/proc/%s/task/%s/status" % (pid, task) if task else "/proc/%s/status" % pid
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].split()
    return []


def sanitized(pid):
    with open("/proc/%s/maps" % pid) as f:
        m = f.read()
    return "libasan" in m or "libtsan" in m


# ---- 1, 2: on, everywhere; allowed arguments work ----
v = Vsxd()
check("vsxd serves with the inject library", v.ready and v.p.poll() is None, v.text()[-400:])
san = sanitized(v.pid)
tasks = os.listdir("/proc/%d/task" % v.pid)
check("Seccomp 2 on every thread (%d threads)" % len(tasks),
      len(tasks) >= 3 and all(status_field(v.pid, "Seccomp", t) == ["2"] for t in tasks))
check("NoNewPrivs 1", status_field(v.pid, "NoNewPrivs") == ["1"])
check("the log says the allowlist is on", "sandbox: syscall allowlist kill" in v.text())
lp = v.launcher()
check("the launcher runs, unfiltered (it starts the next vsxd)",
      lp is not None and status_field(lp, "Seccomp") == ["0"])
allowed = [
    ("socket %d" % AF_UNIX, "socket(AF_UNIX)"),
    ("socketpair %d" % AF_UNIX, "socketpair(AF_UNIX)"),
    ("mmap %d" % (PROT_READ | PROT_WRITE), "mmap(PROT_READ|PROT_WRITE)"),
    ("mprotect %d" % PROT_READ, "mprotect(PROT_READ)"),
    ("thread", "clone(CLONE_THREAD): pthread_create"),
    ("ioctl %d" % FIONREAD, "ioctl(FIONREAD)"),
    ("prctl %d" % PR_GET_NO_NEW_PRIVS, "prctl(PR_GET_NO_NEW_PRIVS)"),
    ("tgkill %d" % v.pid, "tgkill(own pid, 0)"),
]
for cmd, what in allowed:
    res, rc = v.call(cmd)
    check("allowed: %s works" % what, res is not None and res.startswith("r=") and
          "errno=0" in res, "%s %s" % (res, rc))
res, rc = v.call("clone3")
check("clone3: ENOSYS (glibc falls back to clone), vsxd alive",
      res == "r=-1 errno=38" and v.p.poll() is None, "%s %s" % (res, rc))
g = vsxdtest.Guest(S.fg, S.vhost)
check("after all that, a connection both ways", vsxdtest.both_ways(g, S.uds, 5000))
g.close()

# ---- 2b: the filesystem view (Landlock), on vsxd's main thread ----
landlock = "sandbox: filesystem view (Landlock" in v.text()
if not landlock:
    print("skip: no Landlock in this kernel: " + v.text()[-300:])
else:
    for cmd, what, want, runtime in [
            ("openat /etc/shadow", "open a file outside its paths", "r=-1 errno=13", True),
            ("openat /etc/passwd", "open a world-readable file outside", "r=-1 errno=13",
             True),
            ("openat " + S.conf, "read its configuration file", "r=0 errno=0", False),
            ("creat " + os.path.join(S.tmp, "new-file"), "create a file in a socket "
             "directory", "r=-1 errno=13", False),
            ("creat /root/vsx-sandbox-test", "create a file under /root", "r=-1 errno=13",
             False)]:
        if san and runtime:
            print("skip: %s: a sanitizer's runtime reads files anywhere (sandbox.c)" % cmd)
            continue
        res, rc = v.call("main " + cmd)
        check("filesystem view: %s: %s" % (what, want), res == want, "%s %s" % (res, rc))
    check("nothing was created", not os.path.exists(os.path.join(S.tmp, "new-file")) and
          not os.path.exists("/root/vsx-sandbox-test"))
    # SIGHUP: a VM whose sockets are in the same directory: started
    with open(S.conf, "a") as f:   # (in place: the same inode)
        f.write("\n[vm two]\nguest-cid = 4\nsocket = %s/two.vhost\nuds-path = %s/two.vsock\n"
                % (S.tmp, S.tmp))
    v.p.send_signal(signal.SIGHUP)
    check("reload: a VM in a directory of the view starts",
          wait_for(lambda: os.path.exists(os.path.join(S.tmp, "two.vhost"))), v.text()[-500:])
    # a VM in a directory outside the view: the reload is refused
    other = os.path.join(S.tmp, "elsewhere")
    os.mkdir(other)
    with open(S.conf, "a") as f:
        f.write("\n[vm three]\nguest-cid = 5\nsocket = %s/three.vhost\n"
                "uds-path = %s/three.vsock\n" % (other, other))
    v.p.send_signal(signal.SIGHUP)
    check("reload: a VM in a directory outside the view: refused, said",
          wait_for(lambda: "is outside the filesystem view vsxd started with" in v.text()),
          v.text()[-500:])
    check("... and nothing made there", os.listdir(other) == [])
    # a configuration file put in place by a rename (as editors and
    # deployment tools write it): the launcher opens it, the reload reads it
    new_conf = S.conf + ".new"
    with open(new_conf, "w") as f:
        f.write("[daemon]\ncontrol = %s\n\n[vm web]\nguest-cid = 3\nsocket = %s\n"
                "uds-path = %s\n\n[vm four]\nguest-cid = 6\nsocket = %s/four.vhost\n"
                "uds-path = %s/four.vsock\n" % (S.ctl, S.vhost, S.uds, S.tmp, S.tmp))
    os.chmod(new_conf, 0o644)
    os.rename(new_conf, S.conf)
    v.p.send_signal(signal.SIGHUP)
    check("reload: a configuration file replaced by a rename is read (VM four "
          "starts, two goes)", wait_for(
              lambda: os.path.exists(os.path.join(S.tmp, "four.vhost")) and
              not os.path.exists(os.path.join(S.tmp, "two.vhost"))), v.text()[-500:])
    check("vsxd serves on after the reloads", v.p.poll() is None and
          vsxdtest.status(S.vsxctl, S.ctl).get("vms") == 2)
    # back to the one VM for what follows
    with open(S.conf, "w") as f:
        f.write("[daemon]\ncontrol = %s\n\n[vm web]\nguest-cid = 3\nsocket = %s\n"
                "uds-path = %s\n" % (S.ctl, S.vhost, S.uds))
rc = v.stop()
check("SIGTERM: the sandboxed vsxd exits 0 (an ASan build's leak check runs in it)",
      rc == 0, "%s %s" % (rc, v.text()[-300:]))

# ---- 3: forbidden, each fatal ----
sleeper = subprocess.Popen(["sleep", "60"])
forbidden = [
    ("execve /bin/true", "execve", True),
    ("socket %d" % AF_PACKET, "socket", False),
    ("socket %d" % AF_INET, "socket", False),
    ("socket %d" % AF_VSOCK, "socket", False),
    ("socket %d" % AF_NETLINK, "socket", False),
    ("socketpair %d" % AF_INET, "socketpair", False),
    ("ptrace %d" % sleeper.pid, "ptrace", True),
    ("setuid 0", "setuid", False),
    ("mount", "mount", False),
    ("bpf", "bpf", False),
    ("init_module", "init_module", False),
    ("mmap %d" % (PROT_READ | PROT_EXEC), "mmap", False),
    ("mprotect %d" % (PROT_READ | PROT_EXEC), "mprotect", False),
    ("fork", "clone", True),
    ("ioctl %d" % TIOCSTI, "ioctl", False),
    ("prctl %d" % PR_SET_DUMPABLE, "prctl", True),
    ("tgkill %d" % sleeper.pid, "tgkill", False),
    ("kill %d" % sleeper.pid, "kill", False),
]
for cmd, name, runtime in forbidden:
    if san and runtime:
        print("skip: %s: a sanitizer's runtime needs it (sandbox.c)" % cmd)
        continue
    v = Vsxd()
    res, rc = v.call(cmd)
    v.stop()
    check("forbidden: %s: killed by SIGSYS, the log names %s" % (cmd, name),
          rc == -signal.SIGSYS and
          ("the syscall allowlist refused %s (" % name) in v.text(),
          "%s rc=%s log=%s" % (res, rc, v.text()[-300:]))
check("the process it tried to reach lives", sleeper.poll() is None)
sleeper.kill()
sleeper.wait()

# ---- 4: log and off ----
v = Vsxd("--seccomp", "log")
res, rc = v.call("setuid 0")
check("--seccomp log: setuid let through (r=0), vsxd alive", res == "r=0 errno=0" and
      v.p.poll() is None, "%s %s" % (res, rc))
kern = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
if kern:
    check("--seccomp log: the kernel logged it: audit pid=%d syscall=105" % v.pid,
          re.search(r"type=1326 .*pid=%d .*syscall=105 " % v.pid, kern) is not None)
else:
    print("skip: no kernel log to read here")
check("--seccomp log: Seccomp 2", status_field(v.pid, "Seccomp") == ["2"])
v.stop()
v = Vsxd("--seccomp", "off")
check("--seccomp off: Seccomp 0, the log says off",
      status_field(v.pid, "Seccomp") == ["0"] and "syscall allowlist off" in v.text())
v.stop()

# ---- 5: --user nobody, and a handoff under the sandbox ----
v = Vsxd("--user", "nobody")
uids = [status_field(v.pid, "Uid", t) for t in os.listdir("/proc/%d/task" % v.pid)]
check("--user nobody: every thread's uids 65534", uids and
      all(u == ["65534"] * 4 for u in uids), str(uids))
check("--user nobody: CapEff and CapPrm 0",
      status_field(v.pid, "CapEff") == ["0000000000000000"] and
      status_field(v.pid, "CapPrm") == ["0000000000000000"])
lp = v.launcher()
check("--user nobody: the launcher is nobody too",
      lp is not None and status_field(lp, "Uid") == ["65534"] * 4)
check("--user nobody: the sockets, made before the drop, are nobody's now (0600)",
      all(os.stat(p).st_uid == 65534 and stat.S_IMODE(os.stat(p).st_mode) == 0o600
          for p in (S.vhost, S.uds, S.ctl)))
# the host programs' listeners (uds-path_PORT) must be ones nobody may
# connect to: the fake guest's are made under umask 0
old_umask = os.umask(0)
g = vsxdtest.Guest(S.fg, S.vhost)
os.umask(old_umask)
check("--user nobody: a connection both ways", vsxdtest.both_ways(g, S.uds, 5100))
check("--user nobody: a connection kept open", vsxdtest.open_conn(g, S.uds, 5200))
up = subprocess.run([S.vsxctl, "-c", S.ctl, "upgrade"], capture_output=True, text=True)
m = re.search(r"vsxd pid (\d+)", up.stdout)
new = m.group(1) if m else None
check("--user nobody: vsxctl upgrade: exit 0, a new pid", up.returncode == 0 and new,
      up.stdout + up.stderr)
if new:
    check("the new vsxd: nobody, Seccomp 2, NoNewPrivs 1",
          status_field(new, "Uid") == ["65534"] * 4 and
          status_field(new, "Seccomp") == ["2"] and status_field(new, "NoNewPrivs") == ["1"])
    check("the new vsxd: its own launcher", subprocess.run(
        ["pgrep", "-P", new, "-x", "vsxd-launcher"], capture_output=True).returncode == 0)
check("the kept connection goes on after the handoff",
      g.cmd("hsend 3000") and g.cmd("grecv 3000") and g.cmd("gsend 2000") and
      g.cmd("hrecv 2000") and g.cmd("gshut 3") and g.cmd("wait-rst") and g.cmd("hclose"))
check("new connections both ways after the handoff", vsxdtest.both_ways(g, S.uds, 5300),
      v.text()[-1500:])
g.close()

# ---- 6: what the launcher runs ----
bad = os.path.join(S.tmp, "vsxd-group-writable")
shutil.copy("/bin/true", bad)
os.chmod(bad, 0o775)
up = subprocess.run([S.vsxctl, "-c", S.ctl, "upgrade", "--exec", bad], capture_output=True,
                    text=True)
check("upgrade --exec a group-writable program: refused, said",
      up.returncode != 0 and "owned by root that no group" in up.stdout + up.stderr,
      up.stdout + up.stderr)
st = vsxdtest.status(S.vsxctl, S.ctl)
check("vsxd serves on after the refusal", st.get("pid") == int(new or 0), str(st)[:200])
vsxdtest.stop_vsxd(v.p, new)
v.log.close()
vsxdtest.no_sanitizer_report(v.text())

# ---- 7: vsxd -t and user= ----
def vsxd_t(user, check_only=True):
    return subprocess.run([S.vsxd] + (["-t"] if check_only else []) +
                          ["--config", S.conf, "--user", user],
                          capture_output=True, text=True, timeout=20)


for u in ("nobody", "65534"):
    r = vsxd_t(u)
    check("vsxd -t --user %s: exit 0, \"user %s (uid 65534, gid 65534)\"" % (u, u),
          r.returncode == 0 and "  user %s (uid 65534, gid 65534)\n" % u in r.stdout,
          r.stdout[-300:] + r.stderr)
for u, why in (("no-such-user-x", "no such user"), ("4242424", "no such uid"),
               ("root", "is root; name an unprivileged user")):
    r = vsxd_t(u)
    check("vsxd -t --user %s: exit 1, \"user %s: %s\"" % (u, u, why),
          r.returncode == 1 and "vsxd: user %s: %s\n" % (u, why) in r.stderr and not r.stdout,
          r.stdout[-300:] + r.stderr)
for leftover in (S.ctl, S.vhost, S.uds):
    if os.path.exists(leftover):
        os.unlink(leftover)
r = vsxd_t("no-such-user-x", check_only=False)
check("vsxd --user no-such-user-x: does not start (exit 1, said), nothing made",
      r.returncode == 1 and "user no-such-user-x: no such user" in r.stderr and
      not any(os.path.exists(p) for p in (S.ctl, S.vhost, S.uds)), r.stderr[-300:])
shutil.rmtree(S.tmp, ignore_errors=True)
vsxdtest.finish()
