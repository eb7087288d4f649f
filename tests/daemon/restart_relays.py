# The relays part of tests/daemon/restart.test, run by python3 from the
# build tree after restart.py: vsxd under the stand-in service manager of
# tests/daemon/fdstore.py (not systemd), with a forward
# listen=tcp:127.0.0.1:PORT, connect=unix:PATH (a plain Unix listener of
# the test's).
#
#   restart      two relays mid-transfer, vsxd holding bytes each way (one
#                half-closed), then SIGTERM and a start with the store
#                (systemctl restart): the relays' sockets and the relays
#                record go into the store (its relay sockets unpolled,
#                FDPOLL=0), the new process takes them and they leave the
#                store; it lists them under the same ids, every byte
#                arrives, checked, both ways, with the EOFs; the forward's
#                counters do not count them twice; a new connection works
#   crash        the same, but SIGKILL: no relay is kept (their clients
#                see the connection end), a new connection works
#
#   VSXD, FAKE_GUEST, VSXCTL   the programs (defaults: the build tree's)
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.join(os.environ.get("srcdir", "."), "tests", "daemon"))
import fdstore  # noqa: E402
import relaykeep  # noqa: E402
import vsxdtest  # noqa: E402
from vsxdtest import check  # noqa: E402

T = vsxdtest.Setup("restartrelays")
VSXD, VSXCTL, tmp, ctl = T.vsxd, T.vsxctl, T.tmp, T.ctl
log = open(T.log_path, "w")
port = vsxdtest.free_port()
target = relaykeep.Target(os.path.join(tmp, "target.sock"))


def status():
    return vsxdtest.status(VSXCTL, ctl)


def log_text():
    return vsxdtest.read_log(log, T.log_path)


svc = fdstore.Service([VSXD, "--config", T.conf, "--forward",
                       relaykeep.forward_spec(port, os.path.join(tmp, "target.sock"))],
                      os.path.join(tmp, "notify"), store_max=64, log=log)
try:
    print("service manager: the stand-in of tests/daemon/fdstore.py (not systemd)")
    svc.start()
    check("stand-in: vsxd READY=1", svc.wait(lambda: svc.ready))
    relaykeep.new_conn(port, target, "stand-in: before a restart")

    # ---- systemctl restart ----
    got = relaykeep.mid_transfer(VSXCTL, ctl, port, target)
    st0 = status()
    starts, nmsg = svc.starts, len(svc.messages)
    svc.restart()
    up = svc.wait(lambda: svc.starts > starts and svc.ready)
    st = status()
    stored = [m.split("FDNAME=")[1].split("\n")[0] for m in svc.messages[nmsg:]
              if m.startswith("FDSTORE=1") and "FDNAME=relay" in m]
    unpolled = [m for m in svc.messages[nmsg:] if "FDNAME=relay." in m and
                "FDPOLL=0" in m]
    ids = got[1] if got else []
    want = sorted(["relays"] + ["relay.%d.%d" % (i, k) for i in ids for k in (0, 1)])
    check("restart: SIGTERM stored the relays record and each relay's two sockets "
          "(%s), the sockets unpolled (FDPOLL=0)" % stored,
          got and sorted(stored) == want and len(unpolled) == 4, str(want))
    check("restart: vsxd exited 0, started again: start-mode restarted, "
          "recovery-conns-kept 2",
          up and svc.stopped_rc == 0 and st.get("start_mode") == "restarted" and
          str(st.get("recovery_conns_kept")) == "2", str(st))
    check("restart: the log says 2 relays stored, 2 taken back",
          "SIGTERM: 2 relays of forwards stored to go on, 0 end" in log_text() and
          "forwards: 2 relays handed over go on, 0 ended" in log_text())
    check("restart: the relays record and sockets left the store once taken",
          svc.wait(lambda: not [n for n in svc.names() if n.startswith("relay")]),
          str(svc.names()))
    check("restart: the forward's counters go on, the kept relays not counted "
          "again (fwd-accepted %s, then %s; relays %s)"
          % (st0.get("fwd_accepted"), st.get("fwd_accepted"), st.get("relays")),
          st0.get("fwd_accepted") == st.get("fwd_accepted") and
          int(st.get("fwd_accepted", 0)) == 3 and str(st.get("relays")) == "2")
    if got:
        relaykeep.after(VSXCTL, ctl, got[0], got[1], "restart", log_text())
    relaykeep.new_conn(port, target, "restart")

    # ---- a crash keeps none ----
    got = relaykeep.mid_transfer(VSXCTL, ctl, port, target)
    starts = svc.starts
    svc.kill(signal.SIGKILL)
    up = svc.wait(lambda: svc.starts > starts and svc.ready)
    check("crash: SIGKILL, started again (recovered), no relay listed",
          up and status().get("start_mode") == "recovered" and
          not relaykeep.relays(VSXCTL, ctl), str(status()))
    relaykeep.ended(got, "crash")
    relaykeep.new_conn(port, target, "crash")
    svc.stop()
    vsxdtest.no_sanitizer_report(log_text())
finally:
    svc.close()
    target.close()
    log.close()
    if vsxdtest.failures:
        sys.stdout.write("---- vsxd's log ----\n" + open(T.log_path).read())
    shutil.rmtree(tmp, ignore_errors=True)

vsxdtest.finish()
