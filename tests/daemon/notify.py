# The body of tests/daemon/notify.test (which says what it checks), run by
# python3 from the build tree.
# vsxd's readiness protocol (sd_notify) as systemd sees it: a fake
# service manager binds $NOTIFY_SOCKET (a path, then an abstract @name) and
# reads vsxd's datagrams.
#
#   READY=1      arrives once every configured VM's vhost-user and uds-path
#                socket and the control socket exist and listen: the moment
#                it arrives, vsxd is stopped (SIGSTOP) and each socket is
#                stat'ed and connected to, so a READY=1 sent before a bind
#                fails here however fast the bind follows; STATUS= says how
#                many VMs are served
#   SIGHUP       RELOADING=1 (with MONOTONIC_USEC= of the reload's start),
#                then READY=1 once the new file's sockets listen (checked the
#                same way) and the removed VM's are gone; a broken file:
#                RELOADING=1, READY=1, STATUS= says the reload failed
#   SIGTERM      STOPPING=1, exit 0
#   bad NOTIFY_SOCKET (no such socket, a relative name): a warning, and vsxd
#                serves as usual
# Then systemd-analyze verify on vsxd.service and vsxd@.service, when there
# is a systemd-analyze: no warning at all.
#
#   VSXD          the daemon (default ./daemon/vsxd, from the build tree)
#   srcdir        where daemon/*.service.in are (default .)
#
# Waits are bounded (20 s each); nothing asserts on time.
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

VSXD = os.path.abspath(os.environ.get("VSXD", "./daemon/vsxd"))
SRCDIR = os.environ.get("srcdir", ".")
WAIT = 20.0

sys.path.insert(0, os.path.join(SRCDIR, "tests", "daemon"))
import vsxdtest  # noqa: E402
from vsxdtest import check  # noqa: E402


if not os.access(VSXD, os.X_OK):
    print("notify.test: no executable " + VSXD, file=sys.stderr)
    sys.exit(99)

tmp = tempfile.mkdtemp(prefix="vsxd-notify.")
procs = []


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def path(name):
    return os.path.join(tmp, name)


def vm_section(name, cid):
    return ("[vm %s]\nguest-cid = %d\nsocket = %s\nuds-path = %s\n\n"
            % (name, cid, path(name + ".vhost"), path(name + ".vsock")))


def vm_sockets(name):
    return [path(name + ".vhost"), path(name + ".vsock")]


def write_conf(conf, ctl, vms):
    with open(conf, "w") as f:
        f.write("[daemon]\ncontrol = %s\n\n" % ctl)
        for name, cid in vms:
            f.write(vm_section(name, cid))


def listening(p):
    """p is a Unix socket that accepts a connection (vsxd may be stopped:
    the kernel queues it)."""
    try:
        if not stat.S_ISSOCK(os.stat(p).st_mode):
            return "not a socket"
    except OSError as e:
        return "stat: " + e.strerror
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(WAIT)
        s.connect(p)
    except OSError as e:
        return "connect: " + (e.strerror or str(e))
    finally:
        s.close()
    return None


class Manager:
    """The service manager's end of $NOTIFY_SOCKET."""

    def __init__(self, addr):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(addr)
        self.sock.settimeout(WAIT)

    def recv(self):
        """The next datagram as a dict of its KEY=VALUE lines (None on
        timeout)."""
        try:
            data = self.sock.recv(4096).decode()
        except socket.timeout:
            return None
        return dict(l.split("=", 1) for l in data.split("\n") if "=" in l)

    def close(self):
        self.sock.close()


def start(conf, notify, log):
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    if notify is not None:
        env["NOTIFY_SOCKET"] = notify
    p = subprocess.Popen([VSXD, "--config", conf], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    procs.append(p)
    return p


def at_ready(m, p, up, down=()):
    """Wait for READY=1 from p; at that moment stop p and check that every
    socket of up listens and none of down exists. Returns the message."""
    msg = m.recv()
    if msg is None or msg.get("READY") != "1":
        return msg, "no READY=1 (got %r)" % (msg,)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        bad = ["%s: %s" % (s, listening(s)) for s in up if listening(s)]
        bad += ["%s exists" % s for s in down if os.path.exists(s)]
    finally:
        os.kill(p.pid, signal.SIGCONT)
    return msg, "; ".join(bad)


def log_of(log):
    with open(log) as f:
        return f.read()


try:
    ctl = path("run/ctl")
    conf = path("vsxd.conf")
    log = path("vsxd.log")
    write_conf(conf, ctl, [("web", 3), ("db", 4)])

    # ---- start-up ----
    m = Manager(path("notify"))
    p = start(conf, path("notify"), log)
    msg, bad = at_ready(m, p, vm_sockets("web") + vm_sockets("db") + [ctl])
    check("start: READY=1 is the first message, every vhost-user, uds-path "
          "and control socket listens when it arrives", msg is not None and not bad,
          bad)
    check("start: STATUS=serving 2 VMs", msg and msg.get("STATUS") == "serving 2 VMs",
          repr(msg))

    # ---- reload: db removed, app added ----
    write_conf(conf, ctl, [("web", 3), ("app", 5)])
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    p.send_signal(signal.SIGHUP)
    msg = m.recv()
    t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    check("SIGHUP: RELOADING=1 first", msg is not None and msg.get("RELOADING") == "1",
          repr(msg))
    usec = msg.get("MONOTONIC_USEC", "") if msg else ""
    check("RELOADING=1 carries MONOTONIC_USEC of the reload's start",
          usec.isdigit() and t0 <= int(usec) <= t1, "%r not in [%d, %d]" % (usec, t0, t1))
    msg, bad = at_ready(m, p, vm_sockets("web") + vm_sockets("app") + [ctl],
                        vm_sockets("db"))
    check("SIGHUP: then READY=1, when app's sockets listen and db's are gone",
          msg is not None and not bad, bad)
    check("reload: STATUS=serving 2 VMs", msg and msg.get("STATUS") == "serving 2 VMs",
          repr(msg))

    # ---- a broken file changes nothing, and says so ----
    with open(conf, "w") as f:
        f.write("[vm broken]\nguest-cid = banana\n")
    p.send_signal(signal.SIGHUP)
    msg = m.recv()
    check("broken file: RELOADING=1", msg is not None and msg.get("RELOADING") == "1",
          repr(msg))
    msg, bad = at_ready(m, p, vm_sockets("web") + vm_sockets("app") + [ctl])
    check("broken file: READY=1, every socket still listens", msg is not None and not bad,
          bad)
    check("broken file: STATUS says the reload failed",
          msg and "reload failed" in msg.get("STATUS", ""), repr(msg))

    # ---- SIGTERM ----
    p.send_signal(signal.SIGTERM)
    msg = m.recv()
    check("SIGTERM: STOPPING=1", msg is not None and msg.get("STOPPING") == "1", repr(msg))
    try:
        rc = p.wait(WAIT)
    except subprocess.TimeoutExpired:
        rc = None
    check("SIGTERM: exit 0", rc == 0, "exit %r; log: %s" % (rc, log_of(log)))
    m.close()

    # ---- an abstract NOTIFY_SOCKET (@name) ----
    write_conf(conf, ctl, [("web", 3)])
    name = "vsx-notify-test-%d" % os.getpid()
    m = Manager("\0" + name)
    p = start(conf, "@" + name, log)
    msg, bad = at_ready(m, p, vm_sockets("web") + [ctl])
    check("@abstract NOTIFY_SOCKET: READY=1 when the sockets listen",
          msg is not None and not bad, bad)
    check("@abstract: STATUS=serving 1 VM", msg and msg.get("STATUS") == "serving 1 VM",
          repr(msg))
    p.send_signal(signal.SIGTERM)
    msg = m.recv()
    check("@abstract: STOPPING=1, exit 0",
          msg is not None and msg.get("STOPPING") == "1" and p.wait(WAIT) == 0, repr(msg))
    m.close()

    # ---- a NOTIFY_SOCKET nobody listens on, a relative one ----
    for bad_sock, what in ((path("nobody"), "no such socket"), ("relative", "relative")):
        p = start(conf, bad_sock, log)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and listening(ctl):
            time.sleep(0.05)
        check("NOTIFY_SOCKET %s: vsxd serves anyway" % what,
              p.poll() is None and not listening(ctl), log_of(log))
        p.send_signal(signal.SIGTERM)
        rc = p.wait(WAIT)
        check("NOTIFY_SOCKET %s: a warning, exit 0" % what,
              rc == 0 and "warning: sd_notify: " in log_of(log), "exit %r; log: %s" %
              (rc, log_of(log)))

    # ---- the units ----
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        print("skip: systemd-analyze verify (no systemd-analyze)")
    else:
        units = []
        for u in ("vsxd.service", "vsxd@.service"):
            with open(os.path.join(SRCDIR, "daemon", u + ".in")) as f:
                text = f.read()
            text = text.replace("@sbindir@", os.path.dirname(VSXD))
            text = text.replace("@sysconfdir@", "/etc")
            units.append(path(u))
            with open(units[-1], "w") as f:
                f.write(text)
            check(u + ": Type=notify, ExecReload sends SIGHUP",
                  "\nType=notify\n" in text and
                  "\nExecReload=/bin/kill -HUP $MAINPID\n" in text)
        with open(units[1]) as f:
            text = f.read()
        check("vsxd@.service: --config /etc/vsxd/%i.conf, control socket /run/vsxd/%i/control",
              "--config /etc/vsxd/%i.conf --control /run/vsxd/%i/control" in text)
        r = subprocess.run([analyze, "verify", "--man=no"] + units,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check("systemd-analyze verify vsxd.service vsxd@.service: no complaint",
              r.returncode == 0 and not r.stdout.strip(), r.stdout)
finally:
    cleanup()

sys.exit(1 if vsxdtest.failures else 0)
