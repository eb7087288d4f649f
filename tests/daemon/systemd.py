# The body of tests/daemon/systemd.test (which says how it runs), run by
# python3 in a private mount namespace.
#
# vsxd as a unit of a real systemd (Debian 12's, 252: a user service
# manager, `systemd --user`, the same service.c as PID 1's), with
# fake_guest as QEMU and the guest and as a host program (libvsx). The
# unit is the build's daemon/vsxd.service: ExecStart and the condition
# point at the test's vsxd.conf, a drop-in sends vsxd's output to a file
# (no journald runs in the namespace) and raises the start limit (the test
# starts vsxd more often than systemd's default allows), and the
# Protect*= lines go (they need a
# mount namespace of the service's own, which a manager that is not PID 1
# cannot make here: exit 226/NAMESPACE); every line about the store,
# readiness, restarts and the main process is the shipped one.
#
#   start        active (Type=notify), the state record and the device's
#                descriptors in systemd's store (NFileDescriptorStore)
#   crash x3     SIGKILL of the main process while a connection carries
#                data both ways: Restart=on-failure starts vsxd again with
#                the store (NRestarts), start-mode recovered, the same
#                front-end connection serves on, the host end reads EOF,
#                the guest gets an RST, new connections both ways within
#                2 s of the kill
#   restart      systemctl restart (what the package's postinst does on an
#                upgrade): the store is kept, start-mode restarted, the
#                same front-end serves on, its 4 listening sockets taken
#                back (vhost-user, uds-path, control, metrics), the old
#                connection ends (EOF, RST), new connections both ways
#   upgrade      vsxctl upgrade under systemd: the unit stays active and
#                its main process is the new vsxd (MAINPID=), which a
#                later SIGKILL restarts with the store as before
#   stop         systemctl stop: inactive, systemd closed the store, the
#                front-end sees its back-end go
#
#   VSXD, FAKE_GUEST, VSXCTL   the programs (defaults: the build tree's)
#   VSXD_UNIT                  the unit (default ./daemon/vsxd.service)
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ.get("srcdir", "."), "tests", "daemon"))
import vsxdtest  # noqa: E402
from vsxdtest import Guest, check  # noqa: E402

T = vsxdtest.Setup("systemd")
tmp, conf, ctl, vhost, uds = T.tmp, T.conf, T.ctl, T.vhost, T.uds
UNIT = "vsxd-test.service"
xdg = os.path.join(tmp, "xdg")
cfg = os.path.join(tmp, "config")
env = dict(os.environ, XDG_RUNTIME_DIR=xdg, XDG_CONFIG_HOME=cfg)
env.pop("NOTIFY_SOCKET", None)
env.pop("LISTEN_FDS", None)


def systemctl(*args):
    r = subprocess.run(["systemctl", "--user"] + list(args), env=env,
                       capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def prop(name):
    return systemctl("show", "-p", name, "--value", UNIT)[1]


def main_pid():
    p = prop("MainPID")
    return int(p) if p.isdigit() else 0


def status():
    return vsxdtest.status(T.vsxctl, ctl)


def write_unit():
    src = os.path.abspath(os.environ.get("VSXD_UNIT", "./daemon/vsxd.service"))
    dropped, out = [], []
    for line in open(src).read().splitlines():
        if line.startswith("ExecStart="):
            line = "ExecStart=%s --config %s" % (T.vsxd, conf)
        elif line.startswith("ConditionPathExists="):
            line = "ConditionPathExists=%s" % conf
        elif line.startswith("Protect"):
            dropped.append(line)
            continue
        out.append(line)
    d = os.path.join(cfg, "systemd", "user")
    os.makedirs(d)
    with open(os.path.join(d, UNIT), "w") as f:
        f.write("\n".join(out) + "\n")
    # vsxd's output to a file (no journald in the namespace); the test
    # starts vsxd 7 times in about 15 s, past systemd's default start
    # limit (5 in 10 s), which would leave the unit failed
    os.makedirs(os.path.join(d, UNIT + ".d"))
    with open(os.path.join(d, UNIT + ".d", "test.conf"), "w") as f:
        f.write("[Unit]\nStartLimitBurst=20\n\n[Service]\nStandardOutput=append:%s\n"
                "StandardError=append:%s\n" % (T.log_path, T.log_path))
    return src, dropped


def traffic(g, port):
    """A host-to-guest connection carrying data both ways, left open."""
    return (g.cmd("listen %d" % port) and g.cmd("hconnect unix:%s:%d" % (uds, port)) and
            g.cmd("hsend 4000") and g.cmd("grecv 4000") and g.cmd("gsend 4000") and
            g.cmd("hrecv 4000"))


manager = None
guest = None
try:
    os.mkdir(xdg, 0o700)
    src, dropped = write_unit()
    version = subprocess.run(["/lib/systemd/systemd", "--version"], capture_output=True,
                             text=True).stdout.split("\n")[0]
    print("service manager: real %s, a user manager (systemd --user) in a private "
          "mount namespace" % version)
    print("unit: %s, with ExecStart and ConditionPathExists for this test and "
          "without %s" % (src, ", ".join(dropped) or "nothing else"))
    mlog = open(os.path.join(tmp, "manager.log"), "w")
    manager = subprocess.Popen(["/lib/systemd/systemd", "--user"], env=env,
                               stdout=mlog, stderr=subprocess.STDOUT)
    check("the manager runs", vsxdtest.wait_for(
        lambda: systemctl("is-system-running")[1] in ("running", "degraded"), 20),
        systemctl("is-system-running")[1])

    rc, out = systemctl("start", UNIT)
    check("start: systemctl start returns once vsxd is ready (Type=notify)",
          rc == 0 and prop("ActiveState") == "active", out)
    guest = Guest(T.fg, vhost)
    check("fake guest up (cid 3)", guest.line == "0 ok cid=3", guest.line)
    # the record, the connection, one memory file, kick and call of 3 rings
    check("start: systemd's store holds the state record and the device's 8 "
          "descriptors", vsxdtest.wait_for(lambda: prop("NFileDescriptorStore") == "9"),
          prop("NFileDescriptorStore"))
    st = status()
    check("start: vsxctl status: start-mode fresh, fd-store 1",
          st.get("start_mode") == "fresh" and str(st.get("fd_store")) == "1", str(st))

    port = 5000
    for crash in range(1, 4):
        check("crash %d: a connection carries data both ways" % crash,
              traffic(guest, port))
        pid = main_pid()
        restarts = int(prop("NRestarts") or 0)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        up = vsxdtest.wait_for(lambda: main_pid() not in (0, pid) and
                               prop("ActiveState") == "active", 10)
        check("crash %d: SIGKILL of %d: systemd started vsxd again (pid %d, NRestarts "
              "%s, %.0f ms)" % (crash, pid, main_pid(), prop("NRestarts"),
                                1000 * (time.monotonic() - t0)),
              up and int(prop("NRestarts") or 0) == restarts + 1)
        check("crash %d: the host end reads EOF, the guest gets an RST" % crash,
              guest.cmd("hclosed") and guest.cmd("wait-rst"))
        ok = vsxdtest.both_ways(guest, uds, port + 1)
        t_new = time.monotonic() - t0
        check("crash %d: new connections both ways, %.0f ms after the kill"
              % (crash, 1000 * t_new), ok and t_new < 2.0)
        st = status()
        check("crash %d: vsxctl status: start-mode recovered, generation %d"
              % (crash, crash + 1), st.get("start_mode") == "recovered" and
              str(st.get("generation")) == str(crash + 1), str(st))
        port += 10
    check("crash: the same front-end connection throughout (set up once)",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)

    # ---- systemctl restart ----
    check("restart: a connection carries data both ways", traffic(guest, 5500))
    pid = main_pid()
    gen = int(status().get("generation", 0))
    rc, out = systemctl("restart", UNIT)
    check("restart: systemctl restart returns with vsxd ready (pid %d -> %d)"
          % (pid, main_pid()), rc == 0 and main_pid() not in (0, pid) and
          prop("ActiveState") == "active", out)
    st = status()
    check("restart: systemd kept the store: start-mode restarted, generation %d, "
          "4 listening sockets taken back" % (gen + 1),
          st.get("start_mode") == "restarted" and
          str(st.get("generation")) == str(gen + 1) and
          str(st.get("handed_over_listeners")) == "4", str(st))
    check("restart: the same front-end connection serves on",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)
    check("restart: the old connection ends (host EOF, guest RST)",
          guest.cmd("hclosed") and guest.cmd("wait-rst"))
    check("restart: new connections both ways", vsxdtest.both_ways(guest, uds, 5600))

    # ---- vsxctl upgrade under systemd ----
    pid = main_pid()
    r = subprocess.run([T.vsxctl, "-c", ctl, "upgrade"], capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip()
    new = main_pid()
    check("upgrade: vsxctl upgrade exits 0", r.returncode == 0, out)
    check("upgrade: the unit is active and its main process is the new vsxd "
          "(pid %d -> %d)" % (pid, new), prop("ActiveState") == "active" and
          new not in (0, pid) and "pid %d" % new in out and
          str(status().get("pid")) == str(new), out)
    check("upgrade: new connections both ways", vsxdtest.both_ways(guest, uds, 5700))
    check("upgrade: the store holds the device as before (9 descriptors)",
          vsxdtest.wait_for(lambda: prop("NFileDescriptorStore") == "9"),
          prop("NFileDescriptorStore"))
    os.kill(new, signal.SIGKILL)
    up = vsxdtest.wait_for(lambda: main_pid() not in (0, new) and
                           prop("ActiveState") == "active", 10)
    st = status()
    check("upgrade: SIGKILL of the new vsxd: systemd restarts it from the store "
          "(start-mode recovered)", up and st.get("start_mode") == "recovered", str(st))
    check("upgrade: then new connections both ways on the same front-end",
          vsxdtest.both_ways(guest, uds, 5800) and guest.cmd("backend") and
          guest.line.endswith("alive=1"), guest.line)

    # ---- systemctl stop ----
    rc, out = systemctl("stop", UNIT)
    check("stop: inactive, and systemd closed the store",
          rc == 0 and prop("ActiveState") == "inactive" and
          prop("NFileDescriptorStore") == "0",
          "%s %s" % (prop("ActiveState"), prop("NFileDescriptorStore")))
    check("stop: the front-end sees its back-end go",
          vsxdtest.wait_for(lambda: guest.cmd("backend") and
                            guest.line.endswith("alive=0"), 5), guest.line)
finally:
    if guest:
        guest.close()
    if manager:
        systemctl("stop", UNIT)
        systemctl("exit")
        try:
            manager.wait(10)
        except subprocess.TimeoutExpired:
            manager.kill()
            manager.wait()
    if vsxdtest.failures:
        if os.path.exists(T.log_path):
            sys.stdout.write("---- vsxd's log ----\n" + open(T.log_path).read()[-6000:])
        ml = os.path.join(tmp, "manager.log")
        if os.path.exists(ml):
            sys.stdout.write("---- the manager's output ----\n" + open(ml).read()[-4000:])
    shutil.rmtree(tmp, ignore_errors=True)

vsxdtest.finish()
