# The state a vsxd of the previous release (scripts/prior-release, built
# by scripts/build-prior: $VSXD_PRIOR) leaves in the file descriptor store
# is read by this one (issue #33: the connection slots after the record):
# the previous release serves a connection under the stand-in store and
# is SIGKILLed; this vsxd takes the device back on the same front-end
# connection and ends that connection with an RST, as the record named
# it. Then this vsxd's own state across a SIGTERM restart (the connection
# kept) and a crash (the connection, named only by its slot, ends with an
# RST). Skipped (77) without $VSXD_PRIOR.
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.environ.get("srcdir", "."), "tests", "daemon"))
import fdstore  # noqa: E402
import vsxdtest  # noqa: E402
from vsxdtest import Guest, check  # noqa: E402

PRIOR = os.environ.get("VSXD_PRIOR")
if not PRIOR:
    print("restart_prior.py: no $VSXD_PRIOR (scripts/build-prior DIR: "
          "DIR/src/build/daemon/vsxd): skipped")
    sys.exit(77)
T = vsxdtest.Setup("restart_prior")
log = open(T.log_path, "w")
svc = fdstore.Service([os.path.abspath(PRIOR), "--config", T.conf],
                      os.path.join(T.tmp, "notify"), store_max=64, log=log)
guest = None
try:
    svc.start()
    check("prior vsxd: READY=1 under the stand-in store", svc.wait(lambda: svc.ready))
    guest = Guest(T.fg, T.vhost)
    check("fake guest up (cid 3)", guest.line == "0 ok cid=3", guest.line)
    check("prior vsxd: a connection carries data both ways",
          vsxdtest.open_conn(guest, T.uds, 5000))
    svc.argv[0] = T.vsxd
    starts = svc.starts
    svc.kill(signal.SIGKILL)
    check("SIGKILL of the prior vsxd: this one started with its store",
          svc.wait(lambda: svc.starts > starts and svc.ready))
    check("the guest got an RST for the prior vsxd's connection", guest.cmd("wait-rst"))
    text = vsxdtest.read_log(log, T.log_path)
    check("this vsxd took the device back from the prior one's record, 1 connection ended",
          "vm web: recovered after a crash: device resumed on its vhost-user connection, "
          "1 connection ended" in text)
    check("new connections both ways", vsxdtest.both_ways(guest, T.uds, 5100))
    check("a connection open", vsxdtest.open_conn(guest, T.uds, 5200))
    svc.restart()
    check("SIGTERM restart: ready again", svc.wait(lambda: svc.ready))
    check("SIGTERM restart: the connection kept",
          "1 connection kept" in vsxdtest.read_log(log, T.log_path))
    check("SIGTERM restart: the kept connection moves data",
          guest.cmd("hsend 100") and guest.cmd("grecv 100"))
    starts = svc.starts
    svc.kill(signal.SIGKILL)
    check("SIGKILL: started again", svc.wait(lambda: svc.starts > starts and svc.ready))
    check("SIGKILL: the guest got an RST for the connection its slot named",
          guest.cmd("wait-rst"))
    check("the same front-end throughout",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)
finally:
    if guest:
        guest.close()
    svc.stop()
    svc.close()
vsxdtest.no_sanitizer_report(vsxdtest.read_log(log, T.log_path))
vsxdtest.finish()
