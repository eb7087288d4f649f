"""Hostile guests and front-ends against a real, sandboxed vsxd (issue
#32): the cases of tests/vhost-user/test_vu_hostile.c, played by
fake_guest (its hostile verb) on VM web's vhost-user socket, one fresh
front-end each, vsxd's log line for it awaited (-v). After every case:
vsxd runs on, its sandbox refused no
call (no "allowlist refused" line: the error paths need nothing the
allowlist lacks), VM two's connection, open all along, carries data both
ways (every byte checked), and a new front-end on web gets a device that
serves connections both ways. Once with vsxd's default threads, once with
--threads 1 (both VMs on one worker)."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vsxdtest  # noqa: E402
from vsxdtest import check, wait_for  # noqa: E402

S = vsxdtest.Setup("hostile")
vhost2 = os.path.join(S.tmp, "two.vhost")
uds2 = os.path.join(S.tmp, "two.vsock")
with open(S.conf, "w") as f:
    f.write("[daemon]\ncontrol = %s\n\n[vm web]\nguest-cid = 3\nsocket = %s\nuds-path = %s\n"
            "\n[vm two]\nguest-cid = 4\nsocket = %s\nuds-path = %s\n"
            % (S.ctl, S.vhost, S.uds, vhost2, uds2))

# each case, and the line vsxd logs for it (so the case is known to reach it)
CHAIN = "TX queue: invalid descriptor chain"
CASES = [("desc-outside", CHAIN), ("len-overflow", CHAIN), ("addr-wraps", CHAIN),
         ("loop", CHAIN), ("next-out", CHAIN), ("indirect-outside", CHAIN),
         ("oversized", "bad message header (request 1,"),
         ("unknown", "unsupported request 99"),
         ("vring-num", "SET_VRING_NUM 100 for ring 0 refused"),
         ("vring-addr", "SET_VRING_ADDR for ring 0 outside guest memory"),
         ("mem-table", "bad message header (request 5,"),
         ("fds-extra", "closing 2 fds sent with request 1"),
         ("features", "SET_FEATURES with bits not offered")]

for threads in ([], ["--threads", "1"]):
    layout = "--threads 1" if threads else "default threads"
    log_path = os.path.join(S.tmp, "vsxd%s.log" % ("-t1" if threads else ""))
    log = open(log_path, "w")
    p = subprocess.Popen([S.vsxd, "--config", S.conf, "-v"] + threads, stdout=log,
                         stderr=subprocess.STDOUT)

    def text():
        with open(log_path) as f:
            return f.read()

    check("%s: vsxd serves, sandboxed" % layout,
          wait_for(lambda: "serving 2 VMs" in text()) and "allowlist kill" in text(),
          text()[-300:])
    two = vsxdtest.Guest(S.fg, vhost2)
    port = 5000
    check("%s: VM two: a connection open" % layout, vsxdtest.open_conn(two, uds2, port))
    sent = 4000
    for case, said in CASES:
        before = text().count(said)
        g = vsxdtest.Guest(S.fg, S.vhost)
        ok = g.cmd("hostile " + case)
        check("%s: hostile %s: vsxd says '%s'" % (layout, case, said),
              ok and wait_for(lambda: text().count(said) > before), g.line)
        g.close()
        check("%s: hostile %s: vsxd runs on, no call refused" % (layout, case),
              p.poll() is None and "allowlist refused" not in text(), text()[-300:])
        # the other VM's connection, open all along
        check("%s: hostile %s: VM two's connection carries data both ways" % (layout, case),
              two.cmd("hsend 1000") and two.cmd("grecv %d" % (sent + 1000)) and
              two.cmd("gsend 1000") and two.cmd("hrecv 1000"))
        sent += 1000
        # the hostile VM with a new front-end
        port += 10
        g = vsxdtest.Guest(S.fg, S.vhost)
        check("%s: hostile %s: a new front-end on web serves both ways" % (layout, case),
              vsxdtest.both_ways(g, S.uds, port), text()[-400:])
        g.close()
    two.close()
    p.terminate()
    p.wait(60)             # (an ASan build checks for leaks as it exits)
    log.close()
    check("%s: SIGTERM: exit 0" % layout, p.returncode == 0, str(p.returncode))
    vsxdtest.no_sanitizer_report(text())
shutil.rmtree(S.tmp, ignore_errors=True)
vsxdtest.finish()
