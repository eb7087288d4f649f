# The body of tests/daemon/systemd.test, run by python3.
#
# vsxd as a unit of a real systemd (Debian 12's, 252), with fake_guest as
# QEMU and the guest and as a host program (libvsx). systemd is not PID 1
# on these machines: the test runs it as a user service manager
# (`systemd --user`, the same service code as PID 1's) in a private mount
# namespace (tests/daemon/usermgr.py says how); the unit is the build's
# daemon/vsxd.service with ExecStart for this test and usermgr.py's
# changes (no condition, output to a file, a higher start limit, no
# Protect*= lines); every line about the store, readiness, restarts and
# the main process is the shipped one. Skips when it cannot run (not
# root, no systemd).
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
#                back (vhost-user, uds-path, control, metrics), the
#                connection open carries on (its socket through the store),
#                new connections both ways
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
import usermgr  # noqa: E402
import vsxdtest  # noqa: E402
from vsxdtest import Guest, check  # noqa: E402

T = vsxdtest.Setup("systemd")
tmp, conf, ctl, vhost, uds = T.tmp, T.conf, T.ctl, T.vhost, T.uds
UNIT = "vsxd-test.service"
why = usermgr.why_not()
if why is None and not usermgr.enter_namespace():
    why = "cannot mount a tmpfs on /run/systemd in a private mount namespace"
if why:
    print("SKIP: systemd.test: %s" % why)
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(77)
M = usermgr.Manager(tmp)


def systemctl(*args):
    return M.systemctl(*args)


def prop(name):
    return M.prop(UNIT, name)


def main_pid():
    return M.main_pid(UNIT)


def status():
    return vsxdtest.status(T.vsxctl, ctl)


guest = None
try:
    src = os.path.abspath(os.environ.get("VSXD_UNIT", "./daemon/vsxd.service"))
    print("service manager: real %s, a user manager (systemd --user) in a private "
          "mount namespace" % usermgr.version())
    check("the manager runs", M.start(), open(M.log).read()[-2000:])
    dropped = M.unit(UNIT, src, [T.vsxd, "--config", conf], T.log_path)
    print("unit: %s, with ExecStart for this test, no condition, and without %s"
          % (src, ", ".join(dropped) or "nothing else"))

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
              vsxdtest.open_conn(guest, uds, port))
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
    check("restart: a connection carries data both ways", vsxdtest.open_conn(guest, uds, 5500))
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
    check("restart: the connection goes on: data both ways, every byte checked",
          guest.cmd("hsend 3000") and guest.cmd("grecv 7000") and
          guest.cmd("gsend 2000") and guest.cmd("hrecv 2000"))
    check("restart: the store holds the device as before (9 descriptors: the "
          "connection's socket left it once taken back)",
          vsxdtest.wait_for(lambda: prop("NFileDescriptorStore") == "9"),
          prop("NFileDescriptorStore"))
    check("restart: it ends as any: the guest shuts down both ways, RST, host EOF",
          guest.cmd("gshut 3") and guest.cmd("wait-rst") and guest.cmd("hclosed") and
          guest.cmd("hclose"))
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
    M.close(UNIT)
    if vsxdtest.failures:
        if os.path.exists(T.log_path):
            sys.stdout.write("---- vsxd's log ----\n" + open(T.log_path).read()[-6000:])
        if os.path.exists(M.log):
            sys.stdout.write("---- the manager's output ----\n" + open(M.log).read()[-4000:])
    shutil.rmtree(tmp, ignore_errors=True)

vsxdtest.finish()
