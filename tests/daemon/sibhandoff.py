# The body of tests/daemon/sibhandoff.test, run by python3 from the build
# tree.
#
# vsxd serves two VMs in one group, a (guest-cid 3) and b (guest-cid 4),
# each a fake guest with 32 RX buffers of 4096 bytes (-Q 32). Guest a
# connects to guest b: a sibling pair. Before each handoff both guests
# stop reading their RX queues (rxhold) and send 150000 bytes each: what
# the other's 32 buffers do not take waits in vsxd, for either guest.
#
#   pair       three vsxctl upgrades, the new process's worker threads
#              set in vsxd.conf before each: 2 (the VMs on two threads:
#              the pair crosses threads, peer_xsib.c), then 1 (one thread,
#              peer_sibling.c), then 2 again: each time vsxctl exits 0 and
#              says 2 connections kept, the new process lists both halves
#              under their ids on the threads the layout says; the guests
#              read again and each gets every byte the other sent, in
#              order (the fake guest checks the pattern); no RST, no
#              disconnect (both front-ends answer on the same vhost-user
#              connection); after the last one the pair ends as any
#              (SHUTDOWN both ways, RST) and a new pair carries data
#   seqpacket  a SEQPACKET pair, 40 messages of 3000 bytes each way per
#              round (one per RX buffer: 8 wait in vsxd; 80 in all stay
#              within the credit the guests saw at the start): bytes held
#              both ways across two handoffs (2 threads, then 1): every
#              byte arrives and every message ends where it ended (the
#              fake guest checks each end)
#   badtwin    a handoff to a stand-in (handoff_prog.py, mode twin) that
#              makes one half name a connection its twin's VM does not
#              have, then runs vsxd: the pair ends, an RST to each guest,
#              a line for each half saying why (vm a's twin is not in the
#              state; vm b's twin does not name it back)
#   gone       a handoff to a process whose vsxd.conf has no VM b: guest
#              a's half has no twin: a gets an RST, vsxd logs why
#   store      vsxd under a stand-in for systemd's file descriptor store
#              (tests/daemon/fdstore.py, not systemd): a new pair, bytes
#              held both ways, SIGTERM and a start with the store
#              (systemctl restart): the pair goes on, every byte arrives
#
#   VSXD, FAKE_GUEST, VSXCTL   the programs (defaults: the build tree's)
import json
import os
import shutil
import signal
import subprocess
import sys

SRC = os.path.join(os.environ.get("srcdir", "."), "tests", "daemon")
sys.path.insert(0, SRC)
import fdstore  # noqa: E402
import vsxdtest  # noqa: E402
from vsxdtest import Guest, check, wait_for  # noqa: E402
T = vsxdtest.Setup("sibhandoff")
VSXD, FG, VSXCTL = T.vsxd, T.fg, T.vsxctl
tmp, conf, ctl = T.tmp, T.conf, T.ctl
log_path, metrics = T.log_path, T.metrics
log = open(log_path, "w")
vhost = {n: os.path.join(tmp, n + ".vhost") for n in ("a", "b")}
N = 150000          # bytes each guest sends per round


def write_conf(threads, with_b=True):
    with open(conf, "w") as f:
        f.write("[daemon]\ncontrol = %s\nmetrics = tcp:%s\nthreads = %d\n\n"
                "[vm a]\nguest-cid = 3\nsocket = %s\nuds-path = %s.vsock\n"
                "groups = pair\n" % (ctl, metrics, threads, vhost["a"], vhost["a"]))
        if with_b:
            f.write("\n[vm b]\nguest-cid = 4\nsocket = %s\nuds-path = %s.vsock\n"
                    "groups = pair\n" % (vhost["b"], vhost["b"]))


def status():
    return vsxdtest.status(VSXCTL, ctl)


def ctl_json(*args):
    out = subprocess.run([VSXCTL, "-c", ctl, "-j"] + list(args), capture_output=True,
                         text=True).stdout
    try:
        return json.loads(out)
    except ValueError:
        return []


def threads_of():
    """VM name -> the thread vsxctl vms names."""
    return {v.get("vm"): v.get("thread") for v in ctl_json("vms")}


def upgrade(*args):
    r = subprocess.run([VSXCTL, "-c", ctl, "upgrade"] + list(args), capture_output=True,
                       text=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


def log_text():
    return vsxdtest.read_log(log, log_path)


def alive(g):
    return g.cmd("backend") and g.line.endswith("alive=1")


def held_both_ways(what):
    """Both guests stop reading and send N bytes each: vsxd holds bytes
    for either."""
    ok = (ga.cmd("rxhold 1") and gb.cmd("rxhold 1") and
          ga.cmd("gsend %d" % N) and gb.cmd("gsend %d" % N))
    q = [c.get("queued", 0) for c in ctl_json("list")]
    return check("%s: both guests sent %d bytes the other does not read: vsxd holds "
                 "bytes for either (%s)" % (what, N, q),
                 ok and len(q) == 2 and all(x > 0 for x in q))


# the stand-in for a new vsxd that spoils the twin (it runs $HANDOFF_VSXD)
twin_prog = vsxdtest.handoff_stand_in(tmp, "twin")
write_conf(2)
vsxd = subprocess.Popen([VSXD, "--config", conf], stdout=log, stderr=log,
                        env=dict(os.environ, HANDOFF_VSXD=VSXD))
ga = gb = None
pid = None
svc = None
try:
    check("vsxd serves (control socket up)", wait_for(lambda: status().get("pid")))
    pid = status().get("pid")
    ga = Guest(FG, vhost["a"], "-Q", "32")
    gb = Guest(FG, vhost["b"], "-Q", "32")
    check("fake guests up (cid 3, cid 4)", ga.line == "0 ok cid=3" and
          gb.line == "0 ok cid=4", ga.line + " " + gb.line)
    ok = (gb.cmd("listen 7000") and ga.cmd("gconnect 7000 4") and
          ga.cmd("gsend 20000") and gb.cmd("grecv 20000") and
          gb.cmd("gsend 20000") and ga.cmd("grecv 20000"))
    check("guest a connects to guest b: a sibling pair, data both ways", ok)
    sent = 20000
    ids = sorted(c.get("conn") for c in ctl_json("list"))
    check("vsxd lists both halves (%s)" % ids, len(ids) == 2)
    if vsxdtest.failures:
        raise RuntimeError("no sibling pair to hand over")

    # ---- pair: three handoffs, the thread layout changed each time ----
    for n, threads in enumerate((2, 1, 2)):
        gen = n + 2
        held_both_ways("handoff %d" % (n + 1))
        sent += N
        write_conf(threads)
        rc, out = upgrade()
        st = status()
        check("handoff %d to a process with %d worker thread%s: exit 0, generation "
              "%d, 2 connections kept" % (n + 1, threads, "s" if threads > 1 else "",
                                          gen),
              rc == 0 and str(st.get("generation")) == str(gen) and
              "2 connections kept" in out, out + " " + str(st))
        pid = st.get("pid") or pid
        th = threads_of()
        same = th.get("a") == th.get("b")
        check("handoff %d: the VMs run on %s (%s)"
              % (n + 1, "one thread" if threads == 1 else "two threads", th),
              None not in th.values() and same == (threads == 1))
        now = sorted(c.get("conn") for c in ctl_json("list"))
        check("handoff %d: the new process lists the pair under its ids %s"
              % (n + 1, now), now == ids, str(now))
        ok = (ga.cmd("rxhold 0") and gb.cmd("rxhold 0") and
              ga.cmd("grecv %d" % sent) and gb.cmd("grecv %d" % sent))
        check("handoff %d: each guest reads every byte the other sent (%d), in "
              "order" % (n + 1, sent), ok)
        ok = (ga.cmd("gsend 30000") and gb.cmd("grecv %d" % (sent + 30000)) and
              gb.cmd("gsend 30000") and ga.cmd("grecv %d" % (sent + 30000)))
        sent += 30000
        check("handoff %d: the pair goes on both ways" % (n + 1), ok)
        check("handoff %d: no RST, both front-ends on the same connection" % (n + 1),
              ga.cmd("state") and "open=1" in ga.line and gb.cmd("state") and
              "open=1" in gb.line and alive(ga) and alive(gb), ga.line + gb.line)
    check("the log says the pairs were made again",
          "1 sibling pair made again between the adopted devices, 0 halves ended"
          in log_text())
    ok = ga.cmd("gshut 3") and ga.cmd("wait-rst") and gb.cmd("wait-closed")
    check("after the last handoff the pair ends as any (SHUTDOWN, RST)", ok)
    ok = (gb.cmd("listen 7001") and ga.cmd("gconnect 7001 4") and
          ga.cmd("gsend 10000") and gb.cmd("grecv 10000") and
          gb.cmd("gsend 10000") and ga.cmd("grecv 10000"))
    check("a new pair carries data both ways", ok)
    ok = ga.cmd("gshut 3") and ga.cmd("wait-rst") and gb.cmd("wait-closed")
    check("it ends as any", ok)

    # ---- seqpacket: message ends kept ----
    M, K = 3000, 40
    ok = (ga.cmd("seqpacket %d" % M) and gb.cmd("seqpacket %d" % M) and
          gb.cmd("listen 7003") and ga.cmd("gconnect 7003 4"))
    check("a SEQPACKET pair", ok)
    ids = sorted(c.get("conn") for c in ctl_json("list"))
    got = 0
    for n, threads in enumerate((2, 1)):
        what = "seqpacket handoff %d" % (n + 1)
        ok = (ga.cmd("rxhold 1") and gb.cmd("rxhold 1") and
              ga.cmd("gsend %d %d" % (K * M, M)) and gb.cmd("gsend %d %d" % (K * M, M)))
        got += K * M
        q = [c.get("queued", 0) for c in ctl_json("list")]
        check("%s: both guests sent %d messages of %d bytes the other does not read: "
              "vsxd holds bytes for either (%s)" % (what, K, M, q),
              ok and len(q) == 2 and all(x > 0 for x in q))
        write_conf(threads)
        rc, out = upgrade()
        st = status()
        pid = st.get("pid") or pid
        check("%s to a process with %d worker thread%s: 2 connections kept"
              % (what, threads, "s" if threads > 1 else ""),
              rc == 0 and "2 connections kept" in out, out)
        now = sorted(c.get("conn") for c in ctl_json("list"))
        check("%s: the pair under its ids %s" % (what, now), now == ids, str(now))
        ok = (ga.cmd("rxhold 0") and gb.cmd("rxhold 0") and
              ga.cmd("grecv %d" % got) and gb.cmd("grecv %d" % got) and
              ga.cmd("state") and ("msgs=%d" % (got // M)) in ga.line and
              gb.cmd("state") and ("msgs=%d" % (got // M)) in gb.line)
        check("%s: each guest reads every byte, %d messages, each ending where it "
              "ended" % (what, got // M), ok, ga.line + " " + gb.line)

    # ---- badtwin: a record whose halves do not name each other ----
    write_conf(2)
    rc, out = upgrade("--exec", twin_prog)
    st = status()
    pid = st.get("pid") or pid
    check("a handoff whose record spoils the twin: exit 0, 0 connections kept, "
          "2 ended", rc == 0 and "0 connections kept, 2 connections ended" in out, out)
    check("both guests get an RST", ga.cmd("wait-rst") and gb.cmd("wait-rst"))
    text = log_text()
    check("vsxd logs why, for each half: vm a's names a twin the state does not "
          "hold, vm b's twin does not name it back",
          "its twin is not in the state: it ends (RST to the guest)" in text and
          "its twin in the state does not match it: it ends (RST to the guest)" in text)
    ok = (gb.cmd("seqpacket 0") and ga.cmd("seqpacket 0") and gb.cmd("listen 7004") and
          ga.cmd("gconnect 7004 4") and ga.cmd("gsend 1000") and gb.cmd("grecv 1000"))
    check("a new pair", ok)

    # ---- gone: the twin's VM is not in the new process ----
    write_conf(2, with_b=False)
    rc, out = upgrade()
    st = status()
    pid = st.get("pid") or pid
    check("a handoff to a process without VM b: exit 0", rc == 0, out)
    check("guest a's half has no twin: an RST", ga.cmd("wait-rst"))
    text = log_text()
    check("vsxd logs why: vm a: sibling connection ...: its twin (vm b, ...) was "
          "not handed over", "vm a: sibling connection " in text and
          "its twin (vm b, connection " in text and "was not handed over: it ends "
          "(RST to the guest)" in text)
    check("guest a's front-end still served", alive(ga))

    # ---- store: systemctl restart under the file descriptor store ----
    for g in (ga, gb):
        g.close()
    ga = gb = None
    os.kill(int(pid), signal.SIGTERM)
    wait_for(lambda: not status().get("pid"))
    pid = None
    write_conf(2)
    svc = fdstore.Service([VSXD, "--config", conf], os.path.join(tmp, "notify"),
                          store_max=64, log=log)
    print("service manager: the stand-in of tests/daemon/fdstore.py (not systemd)")
    svc.start()
    check("store: vsxd READY=1 under the stand-in", svc.wait(lambda: svc.ready))
    ga = Guest(FG, vhost["a"], "-Q", "32")
    gb = Guest(FG, vhost["b"], "-Q", "32")
    ok = (ga.line == "0 ok cid=3" and gb.line == "0 ok cid=4" and
          gb.cmd("listen 7002") and ga.cmd("gconnect 7002 4") and
          ga.cmd("gsend 1000") and gb.cmd("grecv 1000"))
    check("store: a new pair", ok)
    ids = sorted(c.get("conn") for c in ctl_json("list"))
    held_both_ways("store")
    starts = svc.starts
    svc.restart()
    up = svc.wait(lambda: svc.starts > starts and svc.ready)
    st = status()
    check("store: SIGTERM, started again with the store: start-mode restarted, "
          "2 connections kept", up and svc.stopped_rc == 0 and
          st.get("start_mode") == "restarted" and
          str(st.get("recovery_conns_kept")) == "2", str(st))
    now = sorted(c.get("conn") for c in ctl_json("list"))
    check("store: the pair under its ids %s" % now, now == ids, str(now))
    ok = (ga.cmd("rxhold 0") and gb.cmd("rxhold 0") and
          ga.cmd("grecv %d" % N) and gb.cmd("grecv %d" % (N + 1000)) and
          ga.cmd("gsend 5000") and gb.cmd("grecv %d" % (N + 6000)) and
          gb.cmd("gsend 5000") and ga.cmd("grecv %d" % (N + 5000)))
    check("store: every byte held arrives both ways, and the pair goes on", ok)
    check("store: no RST, both front-ends on the same connection",
          ga.cmd("state") and "open=1" in ga.line and alive(ga) and alive(gb),
          ga.line)
    vsxdtest.no_sanitizer_report(log_text())
finally:
    for g in (ga, gb):
        if g:
            g.close()
    if svc:
        svc.close()
    vsxdtest.stop_vsxd(vsxd, pid)
    log.close()
    if vsxdtest.failures:
        sys.stdout.write("---- vsxd's log ----\n" + open(log_path).read())
    shutil.rmtree(tmp, ignore_errors=True)
vsxdtest.finish()
