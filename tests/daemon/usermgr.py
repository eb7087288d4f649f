# Debian's real systemd for the tests, on machines where it is not PID 1:
# a user service manager (`systemd --user`: the same service code as PID
# 1's, file descriptor store included) in a private mount namespace where
# /run/systemd/system exists (the manager refuses to run as a user
# instance on a system "not booted with systemd"; the host's /run is not
# touched). Used by tests/daemon/systemd.py, and as a program by
# tests/vm/restart.test in place of the stand-in fdstore.py.
#
#   enter_namespace()   this process into its own mount namespace with
#                       that tmpfs (root only); False when it cannot
#   Manager(dir)        the manager, its XDG directories under dir
#   Manager.unit(...)   a unit made from the build's vsxd.service
import ctypes
import os
import shutil
import subprocess
import sys
import time

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
SYSTEMD = "/lib/systemd/systemd"


def why_not():
    """Why the real systemd cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root: a private mount namespace needs it"
    if not os.access(SYSTEMD, os.X_OK):
        return "no %s (apt-get install systemd)" % SYSTEMD
    if not shutil.which("systemctl"):
        return "no systemctl"
    return None


def enter_namespace():
    """This process (and what it starts) into a private mount namespace
    with a tmpfs on /run/systemd holding system/. False if it cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    os.makedirs("/run/systemd", exist_ok=True)
    if libc.mount(b"vsx-systemd-test", b"/run/systemd", b"tmpfs", 0, b"mode=0755") != 0:
        return False
    os.mkdir("/run/systemd/system")
    return True


def version():
    return subprocess.run([SYSTEMD, "--version"], capture_output=True,
                          text=True).stdout.split("\n")[0]


class Manager:
    def __init__(self, d):
        self.xdg = os.path.join(d, "xdg")
        self.cfg = os.path.join(d, "config")
        os.makedirs(self.xdg, 0o700, exist_ok=True)
        os.makedirs(os.path.join(self.cfg, "systemd", "user"), exist_ok=True)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.xdg, XDG_CONFIG_HOME=self.cfg)
        for k in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
            self.env.pop(k, None)
        self.log = os.path.join(d, "manager.log")
        self.proc = None

    def start(self, secs=20.0):
        """Start the manager; True once it runs."""
        self.proc = subprocess.Popen([SYSTEMD, "--user"], env=self.env,
                                     stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT)
        end = time.monotonic() + secs
        while time.monotonic() < end:
            if self.systemctl("is-system-running")[1] in ("running", "degraded"):
                return True
            time.sleep(0.1)
        return False

    def systemctl(self, *args):
        r = subprocess.run(["systemctl", "--user"] + list(args), env=self.env,
                           capture_output=True, text=True)
        return r.returncode, (r.stdout + r.stderr).strip()

    def prop(self, unit, name):
        return self.systemctl("show", "-p", name, "--value", unit)[1]

    def props(self, unit, *names):
        """Several properties of @unit at once, as a dict."""
        args = ["show", unit]
        for n in names:
            args += ["-p", n]
        out = self.systemctl(*args)[1]
        return dict(l.split("=", 1) for l in out.splitlines() if "=" in l)

    def main_pid(self, unit):
        p = self.prop(unit, "MainPID")
        return int(p) if p.isdigit() else 0

    def unit(self, name, src, argv, log, store_max=None):
        """Unit @name from the unit file @src (the build's vsxd.service):
        ExecStart runs @argv, no condition, vsxd's output appended to @log
        (no journald here), the start limit raised (tests start vsxd more
        often than systemd's default 5 in 10 s allows), the store's size
        @store_max if given; the Protect*=, Private*= and ProcSubset=
        lines go (they need a mount namespace of the service's own, which
        a manager that is not PID 1 cannot make here: exit 226/NAMESPACE),
        and so do User= and Group= (a user manager runs its services as
        its own user; the installed units run as they ship under PID 1 in
        scripts/test-upgrade). Every other line, those about the store,
        readiness, restarts and the main process included, is the file's.
        Returns the lines dropped."""
        dropped, out = [], []
        for line in open(src).read().splitlines():
            if line.startswith("ExecStart="):
                line = "ExecStart=" + " ".join(argv)
            elif line.startswith("ConditionPathExists="):
                continue
            elif line.startswith(("Protect", "Private", "ProcSubset=", "User=", "Group=")):
                dropped.append(line)
                continue
            out.append(line)
        d = os.path.join(self.cfg, "systemd", "user")
        with open(os.path.join(d, name), "w") as f:
            f.write("\n".join(out) + "\n")
        os.makedirs(os.path.join(d, name + ".d"), exist_ok=True)
        with open(os.path.join(d, name + ".d", "test.conf"), "w") as f:
            f.write("[Unit]\nStartLimitBurst=20\n\n[Service]\nStandardOutput=append:%s\n"
                    "StandardError=append:%s\n" % (log, log))
            if store_max is not None:
                f.write("FileDescriptorStoreMax=%d\nEnvironment=FDSTORE=%d\n"
                        % (store_max, store_max))
        self.systemctl("daemon-reload")
        return dropped

    def close(self, unit=None):
        if not self.proc:
            return
        if unit:
            self.systemctl("stop", unit)
        self.systemctl("exit")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def main(argv):
    """As a program (tests/vm/restart.test), the stand-in's command line
    (tests/daemon/fdstore.py) with the real systemd:

        usermgr.py [-m MAX] -s STATUS -u UNITFILE -o LOG DIR -- ARGV...

    runs ARGV as unit vsxd-test.service (made from UNITFILE) until SIGTERM
    (then systemctl stop), does systemctl restart on each SIGUSR1, and
    appends to STATUS: "manager VERSION" first,
    then "start N PID" and "ready N PID" (N counts starts), "exit N PID"
    when another main process took its place, "store count=K"
    when the number of descriptors in the store changes (systemd 252 tells
    no names), "stopped RESULT STATUS" at the end. Exit 77 when the real
    systemd cannot run here (the reason on stderr)."""
    import getopt
    import signal
    import threading
    opts, args = getopt.getopt(argv, "m:s:u:o:")
    o = dict(opts)
    if "--" in args:
        args.remove("--")
    d, service_argv = args[0], args[1:]
    why = why_not()
    if why is None and not enter_namespace():
        why = "cannot mount a tmpfs on /run/systemd in a private mount namespace"
    if why:
        print("usermgr.py: %s" % why, file=sys.stderr)
        return 77
    status = open(o["-s"], "a", buffering=1)
    unit = "vsxd-test.service"
    m = Manager(d)
    if not m.start():
        print("usermgr.py: the manager did not start: %s" % open(m.log).read()[-2000:],
              file=sys.stderr)
        return 77
    status.write("manager %s\n" % version())
    m.unit(unit, o["-u"], service_argv, o["-o"],
           int(o["-m"]) if "-m" in o else None)
    done = threading.Event()
    restarts = []
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGUSR1, lambda *_: restarts.append(1))
    rc, out = m.systemctl("start", "--no-block", unit)
    if rc:
        status.write("failed %s\n" % out)
    seen = {"n": 0, "pid": 0, "ready": False, "store": None}
    while not done.wait(0.03):
        if restarts:
            restarts.pop()
            rc, out = m.systemctl("restart", "--no-block", unit)
            status.write("restart %s\n" % (out.strip() if rc else "queued"))
        p = m.props(unit, "MainPID", "ActiveState", "NFileDescriptorStore")
        pid = int(p.get("MainPID", "0") or 0)
        if pid and pid != seen["pid"]:
            if seen["pid"]:
                status.write("exit %d %d\n" % (seen["n"], seen["pid"]))
            seen.update(n=seen["n"] + 1, pid=pid, ready=False)
            status.write("start %d %d\n" % (seen["n"], pid))
        if pid and p.get("ActiveState") == "active" and not seen["ready"]:
            seen["ready"] = True
            status.write("ready %d %d\n" % (seen["n"], pid))
        k = p.get("NFileDescriptorStore")
        if k != seen["store"]:
            seen["store"] = k
            status.write("store count=%s\n" % k)
    m.systemctl("stop", unit)
    status.write("store count=%s\n" % m.prop(unit, "NFileDescriptorStore"))
    status.write("stopped %s %s\n" % (m.prop(unit, "Result"), m.prop(unit, "ExecMainStatus")))
    m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
