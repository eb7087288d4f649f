# The relays part of tests/daemon/handoff.test, run by python3 from the
# build tree after handoff.py.
#
# vsxd runs a forward listen=tcp:127.0.0.1:PORT, connect=unix:PATH (a
# plain Unix listener of the test's), which relays each connection.
#
#   kept         two relays mid-transfer (6 MiB each way; 100 KB whose EOF
#                was passed on, 6 MiB back), the peers reading nothing so
#                that vsxd holds bytes each way at the freeze: vsxctl
#                upgrade says 2 connections kept; the new process lists
#                them under the same ids, and every byte arrives, checked,
#                both ways, with the EOFs; a new connection through the
#                forward works
#   threads 1    the same, handed to a new process on --threads 1
#   hybrid       the same through a second forward whose target is hybrid
#                vsock (connect=unix:PATH:PORT, a listener of the test's
#                that answers CONNECT): vsxd's side a libvsx socket, passed
#                as its plain socket and wrapped again
#   corrupt      the relays record spoiled on its way (its checksum
#                fails): the new process says so and serves on, the relays
#                end (their clients see the connection end), a new
#                connection works
#   renamed      a new process whose forward has another name: each relay
#                ends with a line saying why (vsxctl upgrade: 2 connections
#                ended), a new connection works
#
#   VSXD, FAKE_GUEST, VSXCTL   the programs (defaults: the build tree's)
import os
import re
import shutil
import subprocess
import sys

SRC = os.path.join(os.environ.get("srcdir", "."), "tests", "daemon")
sys.path.insert(0, SRC)
import relaykeep  # noqa: E402
import vsxdtest  # noqa: E402
from vsxdtest import check, wait_for  # noqa: E402

T = vsxdtest.Setup("handoffrelays")
VSXD, VSXCTL, tmp, ctl = T.vsxd, T.vsxctl, T.tmp, T.ctl
log = open(T.log_path, "w")
port, hport = vsxdtest.free_port(), vsxdtest.free_port()
target = relaykeep.Target(os.path.join(tmp, "target.sock"))
# a second forward whose target is hybrid vsock (vsxd's side a libvsx socket)
htarget = relaykeep.Target(os.path.join(tmp, "hybrid.sock"), hybrid=True)

# new vsxds: on one worker thread; one that spoils the relays record first
threads1 = os.path.join(tmp, "vsxd-threads-1")
with open(threads1, "w") as f:
    f.write('#!/bin/sh\nexec "$HANDOFF_VSXD" --threads 1 "$@"\n')
spoil = os.path.join(tmp, "vsxd-spoil-relays")
with open(spoil, "w") as f:
    f.write("#!%s\nimport os, sys\n"
            "fd = 3 + os.environ['LISTEN_FDNAMES'].split(':').index('relays')\n"
            "b = os.pread(fd, 1, 40)\n"
            "os.pwrite(fd, bytes([b[0] ^ 0xff]), 40)\n"
            "os.execv(os.environ['HANDOFF_VSXD'], [os.environ['HANDOFF_VSXD']] + "
            "sys.argv[1:])\n" % sys.executable)
renamed = os.path.join(tmp, "vsxd-forward-renamed")
with open(renamed, "w") as f:
    f.write("#!%s\nimport os, sys\n"
            "args = [a.replace('name=relayed', 'name=renamed') for a in sys.argv[1:]]\n"
            "os.execv(os.environ['HANDOFF_VSXD'], [os.environ['HANDOFF_VSXD']] + args)\n"
            % sys.executable)
for p in (threads1, spoil, renamed):
    os.chmod(p, 0o755)


def status():
    return vsxdtest.status(VSXCTL, ctl)


def log_text():
    return vsxdtest.read_log(log, T.log_path)


def upgrade(*args):
    r = subprocess.run([VSXCTL, "-c", ctl, "upgrade"] + list(args),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


env = dict(os.environ, HANDOFF_VSXD=VSXD)
vsxd = subprocess.Popen([VSXD, "--config", T.conf, "--forward",
                         relaykeep.forward_spec(port, os.path.join(tmp, "target.sock")),
                         "--forward",
                         relaykeep.forward_spec(hport, os.path.join(tmp, "hybrid.sock") +
                                                ":1024", "hybrid")],
                        stdout=log, stderr=log, env=env)
pid = None
try:
    check("vsxd serves (control socket up)", wait_for(lambda: status().get("pid")))
    pid = status().get("pid")
    relaykeep.new_conn(port, target, "before any handoff")
    for what, args, gen, p, t in (
            ("upgrade", [], 2, port, target),
            ("upgrade to a vsxd on --threads 1", ["--exec", threads1], 3, port, target),
            ("upgrade, the target hybrid vsock (a libvsx side)", [], 4, hport, htarget)):
        got = relaykeep.mid_transfer(VSXCTL, ctl, p, t)
        rc, out = upgrade(*args)
        st = status()
        check("%s: exit 0, generation %d, \"2 connections kept, 0 connections "
              "ended\"" % (what, gen), rc == 0 and str(st.get("generation")) == str(gen) and
              "2 connections kept, 0 connections ended" in out and st.get("pid") != pid,
              out + " " + str(st))
        pid = st.get("pid") or pid
        check("%s: the new process says it: 2 relays go on, recovery-conns-kept 2"
              % what, "forwards: 2 relays handed over go on, 0 ended" in log_text() and
              str(st.get("recovery_conns_kept")) == "2", str(st))
        if got:
            relaykeep.after(VSXCTL, ctl, got[0], got[1], what, log_text())
        relaykeep.new_conn(p, t, what)
    cmdline = open("/proc/%s/cmdline" % pid).read().split("\0")
    check("the new process runs on --threads 1 (%s)" % " ".join(cmdline[1:]),
          "--threads" in cmdline and str(status().get("threads")) == "1")

    # ---- a spoiled relays record ----
    got = relaykeep.mid_transfer(VSXCTL, ctl, port, target)
    rc, out = upgrade("--exec", spoil)
    st = status()
    check("a spoiled relays record: the handoff goes through (exit 0), generation 5",
          rc == 0 and str(st.get("generation")) == "5", out + " " + str(st))
    pid = st.get("pid") or pid
    check("a spoiled relays record: the new process says so",
          "relays record unusable (relays record checksum mismatch): the relays of "
          "forwards the earlier process handed over end" in log_text())
    check("a spoiled relays record: it lists no relay",
          wait_for(lambda: not relaykeep.relays(VSXCTL, ctl)),
          str(relaykeep.relays(VSXCTL, ctl)))
    relaykeep.ended(got, "a spoiled relays record")
    relaykeep.new_conn(port, target, "after a spoiled relays record")

    # ---- the forward not configured in the new process ----
    got = relaykeep.mid_transfer(VSXCTL, ctl, port, target)
    rc, out = upgrade("--exec", renamed)
    st = status()
    check("the forward renamed in the new process: exit 0, \"0 connections kept, 2 "
          "connections ended\"", rc == 0 and str(st.get("generation")) == "6" and
          "0 connections kept, 2 connections ended" in out, out)
    pid = st.get("pid") or pid
    for i in (got[1] if got else []):
        check("the forward renamed: relay %d ends with a line saying why" % i,
              re.search(r"forward relayed: conn=%d tcp:127\.0\.0\.1:\d+: handed over, "
                        r"but its forward is not configured now: it ends" % i,
                        log_text()))
    relaykeep.ended(got, "the forward renamed")
    check("the forward renamed: no relay listed", not relaykeep.relays(VSXCTL, ctl))
    relaykeep.new_conn(port, target, "the forward renamed")
    vsxdtest.no_sanitizer_report(log_text())
finally:
    vsxdtest.stop_vsxd(vsxd, pid)
    target.close()
    htarget.close()
    log.close()
    if vsxdtest.failures:
        sys.stdout.write("---- vsxd's log ----\n" + open(T.log_path).read())
    shutil.rmtree(tmp, ignore_errors=True)

vsxdtest.finish()
