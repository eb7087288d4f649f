# The body of tests/daemon/handoff.test, run by python3 from the build tree.
#
# vsxd serves one VM (the fake guest as QEMU and as the guest, a host
# program through libvsx), a control socket and a metrics endpoint. A
# connection carries data both ways throughout the failures, every byte
# checked by the fake guest's patterns.
#
#   failed       vsxctl upgrade to a program that exits at once, one that
#                dies of SIGSEGV after reading the state, one that says
#                nothing (killed after vsxd's 10 s), a state whose checksum
#                fails, one of version 99, one whose connection has a
#                bad state and one that says the running device is paused
#                (kicks and all), both with their checksum right (the new
#                vsxd refuses them):
#                vsxctl exits non-zero saying why, the same vsxd serves on,
#                the connection carries on, the front-end never sees its
#                back-end go, it holds as many descriptors as before;
#                afterwards new connections work
#   handoff      vsxctl upgrade to a vsxd that starts 1 s late: a host
#                program that connects to the uds-path meanwhile, a
#                control client and a vhost-user request of the front-end
#                are answered by the new process (backlogs kept, no
#                refusal, no message lost); the counters go on (bytes,
#                opened, closed, failed handoffs); vsxctl says what was
#                handed over and
#                exits 0; the old process exited 0; the new one says
#                start-mode handed-over, generation 2, 4 listeners; the
#                same front-end connection serves on (no setup again) and
#                new connections work both ways
#   owed OK      a hybrid program whose CONNECT the guest has not answered
#                at the freeze: kept connecting under its id, the guest's
#                answer reaches the new process, the program gets its OK,
#                data both ways
#   again        vsxctl upgrade without --exec (the program vsxd was
#                started as), generation 3, with a connection open: it
#                goes on in the new process (data both ways, every byte
#                checked), then ends as any; the device serves on
#   keep         generations 4 to 6: a connection whose host program reads
#                nothing while the guest fills a 16 MiB window (vsxd holds
#                megabytes for it at the freeze): all 16000000 bytes reach
#                the program in order, the new process lists it under its
#                id; the guest shuts its sending side (the host reads EOF)
#                and it stays half-closed across the next handoff; a
#                guest-initiated connection across the last one
#   paused       generation 8: QEMU's stop (GET_VRING_BASE on each ring),
#                a connection open, the host sending and its buffer set
#                (set-buffer: a CREDIT_UPDATE owed) while the VM is
#                stopped, then vsxctl upgrade: exit 0, one connection
#                kept; the new process holds the VM paused (vsxctl vms)
#                and says so; at cont (the fake guest's resume: the
#                rings set up again where they stopped) the bytes sent
#                meanwhile arrive, the new process sends the CREDIT_UPDATE
#                owed, the connection carries on both ways,
#                every byte checked, on the same front-end connection,
#                and new connections work both ways
#   drain        generation 9: two connections the guest shut down both
#                ways (vsxd answered RST) while vsxd held megabytes for
#                their programs, which read nothing: both kept, listed
#                under their ids; one program then reads every byte, in
#                order, and EOF, and its connection ends; the other's
#                drain timer (what was left of the linger timeout) ends
#                it in the new process: its program reads what its socket
#                held, in order, then EOF; new connections work both ways
#   early        generation 10: a hybrid program that sent bytes with its
#                CONNECT, before its OK (the guest has not answered): kept
#                under its id, the guest's answer gives it its OK, the
#                guest reads those bytes first, then the rest, in order
#   linger       generations 11 and 12: a connection vsxctl close shut down
#                both ways while the guest read nothing (its RST awaited
#                under the linger timer): kept under its id; the guest
#                reads its SHUTDOWN and answers RST, none comes from vsxd,
#                the program reads EOF; a second one whose guest never
#                answers is ended by the new process's linger timer; a
#                third whose program closed its socket (vsxd closed its
#                end too) is kept without a socket (generation 13): the
#                guest gets its SHUTDOWN both ways, no RST
#
#   VSXD, FAKE_GUEST, VSXCTL   the programs (defaults: the build tree's)
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

SRC = os.path.join(os.environ.get("srcdir", "."), "tests", "daemon")
sys.path.insert(0, SRC)
import vsxdtest  # noqa: E402
from vsxdtest import Guest, check, wait_for  # noqa: E402
T = vsxdtest.Setup("handoff")
VSXD, FG, VSXCTL = T.vsxd, T.fg, T.vsxctl
tmp, conf, ctl, vhost, uds = T.tmp, T.conf, T.ctl, T.vhost, T.uds
log_path, metrics = T.log_path, T.metrics
log = open(log_path, "w")

# the stand-ins for a new vsxd: copies of handoff_prog.py named by mode
progs = {}
for mode in ("slow", "crash", "exit", "hang", "corrupt", "version", "badconn",
             "badpaused"):
    progs[mode] = vsxdtest.handoff_stand_in(tmp, mode)


def status():
    return vsxdtest.status(VSXCTL, ctl)


def upgrade(*args):
    r = subprocess.run([VSXCTL, "-c", ctl, "upgrade"] + list(args),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


def log_text():
    return vsxdtest.read_log(log, log_path)


def metric_lines():
    return vsxdtest.metric_lines(metrics)


def both_ways(g, port):
    return vsxdtest.both_ways(g, uds, port)


# the service manager's end of $NOTIFY_SOCKET: the old process names the
# new one the unit's main process (MAINPID=) before it exits. Read all
# along, as systemd does: a full queue blocks the sender's sd_notify (each
# handoff sends a few, and the socket queues 10 by default)
nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
nsock.bind(os.path.join(tmp, "notify"))
notes = []


def _read_notifications():
    while True:
        try:
            notes.append(nsock.recv(4096).decode())
        except OSError:
            return


threading.Thread(target=_read_notifications, daemon=True).start()


def notifications():
    return list(notes)


env = dict(os.environ, HANDOFF_VSXD=VSXD, NOTIFY_SOCKET=os.path.join(tmp, "notify"))
vsxd = subprocess.Popen([VSXD, "--config", conf], stdout=log, stderr=log, env=env)
guest = None
final_pid = None
try:
    check("vsxd serves (control socket up)", wait_for(lambda: status().get("pid")))
    pid0 = status().get("pid")
    guest = Guest(FG, vhost)
    check("fake guest up (cid 3)", guest.line == "0 ok cid=3", guest.line)
    sent = 0
    ok = (guest.cmd("listen 5000") and guest.cmd("hconnect unix:%s:5000" % uds) and
          guest.cmd("hsend 65536") and guest.cmd("grecv 65536") and
          guest.cmd("gsend 32768") and guest.cmd("hrecv 32768"))
    check("a connection carries data both ways", ok)
    h2g, g2h = 65536, 32768
    nfds0 = len(os.listdir("/proc/%s/fd" % pid0))

    # ---- failed handoffs: the same vsxd serves on ----
    failed = [
        ("a program that exits at once", "exit",
         "the new process exited with status 3 before it served"),
        ("a program that dies of SIGSEGV after reading the state", "crash",
         "the new process was killed by signal 11"),
        ("a state record whose checksum fails", "corrupt",
         "the new process refused: the state is unusable: state record checksum "
         "mismatch"),
        ("a state record of version 99", "version",
         "the new process refused: the state is unusable: state record version 99, "
         "this vsxd reads 1 to 4"),
        ("a state record whose connection is in no state (checksum right)", "badconn",
         "the new process refused: the state is unusable: state record VM 0: bad "
         "connection state"),
        ("a state record that says a running device is paused (checksum right)",
         "badpaused", "the new process refused: the state is unusable: state record "
         "VM 0: a paused VM with a started ring"),
        ("a program that never answers", "hang",
         "the new process did not say it serves within 10000 ms: killed"),
    ]
    for what, mode, says in failed:
        t0 = time.monotonic()
        rc, out = upgrade("--exec", progs[mode])
        check("upgrade to %s: vsxctl exits non-zero, saying why (%.1f s)"
              % (what, time.monotonic() - t0), rc != 0 and says in out, out)
        check("upgrade to %s: the same vsxd serves on" % what,
              status().get("pid") == pid0 and vsxd.poll() is None, str(status()))
        # the connection carries on, every byte checked
        ok = (guest.cmd("hsend 40000") and guest.cmd("grecv %d" % (h2g + 40000)) and
              guest.cmd("gsend 30000") and guest.cmd("hrecv 30000"))
        h2g += 40000
        g2h += 30000
        check("upgrade to %s: the connection carries on both ways" % what, ok)
        check("upgrade to %s: the front-end never saw its back-end go" % what,
              guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)
    rc, out = upgrade("--exec", os.path.join(tmp, "nonexistent"))
    check("upgrade --exec a missing program: non-zero, said", rc != 0 and
          "no such program" in out, out)
    nfds = len(os.listdir("/proc/%s/fd" % pid0))
    check("after the failed handoffs vsxd holds as many descriptors as before "
          "(%d, %d)" % (nfds0, nfds), nfds == nfds0)
    check("metrics: vsxd_handoffs_failed_total 7",
          "vsxd_handoffs_failed_total 7" in metric_lines())
    check("after the failed handoffs the connection ends cleanly (%d bytes to the "
          "guest, %d from it, all checked)" % (h2g, g2h),
          guest.cmd("gshut 3") and guest.cmd("wait-rst") and guest.cmd("hclose"))
    check("after the failed handoffs, new connections both ways", both_ways(guest, 7000))

    # ---- the handoff ----
    before = vsxdtest.metric_values(metrics)
    st_before = status()
    check("guest listens on 6000", guest.cmd("listen 6000"))
    t0 = time.monotonic()
    up = subprocess.Popen([VSXCTL, "-c", ctl, "upgrade", "--exec", progs["slow"]],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.4)   # the new process waits 1 s before it starts
    # a host program and a control client arrive during the handoff
    hyb = socket.socket(socket.AF_UNIX)
    hyb.settimeout(15)
    hyb.connect(uds)
    hyb.sendall(b"CONNECT 6000\n")
    cc = socket.socket(socket.AF_UNIX)
    cc.settimeout(15)
    cc.connect(ctl)
    cc.sendall(b"vsx-control=3\ncmd=status\n\n")
    # and the front-end sends a vhost-user request (GET_FEATURES), which
    # waits in the socket: the old process's workers are parked
    alive = guest.cmd("backend") and guest.line.endswith("alive=1")
    t_vu = time.monotonic() - t0
    out = up.communicate(timeout=60)[0].strip()
    t_up = time.monotonic() - t0
    check("a vhost-user request the front-end sent during the handoff was answered "
          "by the new process (after %.1f s: it starts 1 s in)" % t_vu,
          alive and t_vu >= 1.0, guest.line)
    check("upgrade: vsxctl exits 0 (%.1f s)" % t_up, up.returncode == 0, out)
    check("upgrade: it says what was handed over",
          out.startswith("handed over to vsxd pid ") and
          "1 VM device, 4 listening sockets" in out and "0 connections kept, 0 connections ended" in out, out)
    try:
        vsxd.wait(10)
    except subprocess.TimeoutExpired:
        pass
    check("the old process exited 0", vsxd.returncode == 0, str(vsxd.returncode))
    st = status()
    final_pid = st.get("pid")
    check("the new process serves: start-mode handed-over, generation 2, 4 "
          "listeners taken", final_pid not in (None, pid0) and
          st.get("start_mode") == "handed-over" and str(st.get("generation")) == "2" and
          str(st.get("handed_over_listeners")) == "4", str(st))
    check("the pid vsxctl printed is the new process's", "pid %s:" % final_pid in out, out)
    told = wait_for(lambda: any(("MAINPID=%s\n" % final_pid) in m
                                for m in notifications()), 5)
    check("the old process told the service manager MAINPID=%s" % final_pid,
          told, str(notifications()[-3:]))
    try:
        line = hyb.recv(64).decode()
    except OSError as e:
        line = str(e)
    check("a host program that connected during the handoff was served (OK)",
          line.startswith("OK "), line)
    hyb.close()
    try:
        reply = b""
        while not reply.endswith(b"\n\n"):
            d = cc.recv(65536)
            if not d:
                break
            reply += d
        reply = reply.decode()
    except OSError as e:
        reply = str(e)
    check("a control client that connected during the handoff was answered by the "
          "new process", "pid=%s\n" % final_pid in reply and "errno=0" in reply,
          reply[:200])
    cc.close()
    check("the guest's end of it closes when the host program's does",
          guest.cmd("wait-closed"))
    check("the same front-end connection serves on (no setup again)",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)
    after = vsxdtest.metric_values(metrics)
    st = status()
    moved = ['vsxd_bytes_total{vm="web",direction="guest_to_host"}',
             'vsxd_bytes_total{vm="web",direction="host_to_guest"}']
    opened = 'vsxd_connections_opened_total{vm="web"}'
    closed = [k for k in before if k.startswith("vsxd_connections_closed_total")]
    check("the counters go on in the new process: bytes as they were (%s), one "
          "connection more opened (%s -> %s), the closed ones by reason as they were"
          % ([before.get(k) for k in moved], before.get(opened), after.get(opened)),
          all(before.get(k, 0) > 0 and after.get(k) == before[k] for k in moved) and
          after.get(opened) == before.get(opened, 0) + 1 and before.get(opened, 0) > 0 and
          closed and all(after.get(k) == before[k] for k in closed),
          str([(k, before.get(k), after.get(k)) for k in moved + [opened] + closed]))
    check("vsxctl status: conns-opened goes on (%s -> %s)"
          % (st_before.get("conns_opened"), st.get("conns_opened")),
          int(st.get("conns_opened", 0)) == int(st_before.get("conns_opened", -1)) + 1,
          str(st))
    check("new connections both ways after the handoff", both_ways(guest, 8000))
    m = metric_lines()
    want_m = ["vsxd_generation 2", 'vsxd_start_mode{mode="handed-over"} 1',
              "vsxd_handoff_listeners 4", "vsxd_handoffs_failed_total 7"]
    check("the metrics endpoint answers (its listener handed over): %s"
          % ", ".join(want_m), all(w in m for w in want_m),
          str([l for l in m if l.startswith("vsxd_") and "handoff" in l or
               "generation" in l or "start_mode" in l]))
    text = log_text()
    check("the log says it: handed over, device resumed",
          "vm web: handed over: device resumed on its vhost-user connection" in text)

    # ---- again, to the program vsxd was started as, with a connection ----
    ok = (guest.cmd("listen 5100") and guest.cmd("hconnect unix:%s:5100" % uds) and
          guest.cmd("hsend 4000") and guest.cmd("grecv 4000") and
          guest.cmd("gsend 4000") and guest.cmd("hrecv 4000"))
    check("a connection carries data both ways before the second handoff", ok)
    rc, out = upgrade()
    st = status()
    check("upgrade without --exec: exit 0, generation 3",
          rc == 0 and str(st.get("generation")) == "3" and st.get("pid") != final_pid,
          out + " " + str(st))
    final_pid = st.get("pid") or final_pid
    check("the connection goes on in the new process: data both ways, every byte "
          "checked", guest.cmd("hsend 5000") and guest.cmd("grecv 9000") and
          guest.cmd("gsend 5000") and guest.cmd("hrecv 5000"))
    check("the same front-end still", guest.cmd("backend") and
          guest.line.endswith("alive=1"))
    check("it ends as any: the guest shuts down both ways, vsxd answers RST, the "
          "host reads EOF", guest.cmd("gshut 3") and guest.cmd("wait-rst") and
          guest.cmd("hclosed") and guest.cmd("hclose"))
    check("new connections both ways", both_ways(guest, 9000))

    # ---- keep: bytes vsxd holds at the freeze, half-closed, a 4th and 5th ----
    def conns():
        return vsxdtest.conn_list(VSXCTL, ctl)

    def upgrade_to(gen):
        rc, out = upgrade()
        st = status()
        return (rc == 0 and str(st.get("generation")) == str(gen) and
                "1 connection kept" in out, out + " " + str(st), st.get("pid"))

    # host to guest; the host program reads nothing, so what its socket does
    # not take waits in vsxd (a 16 MiB window: more than a Unix socket's
    # send buffer holds, net.core.wmem_max being 4 MiB at most here)
    ok = (guest.cmd("listen 5200") and guest.cmd("hconnect unix:%s:5200" % uds) and
          guest.cmd("hsend 1000") and guest.cmd("grecv 1000"))
    cl = conns()
    cid = cl[0].get("conn") if len(cl) == 1 else None
    ok = ok and cid is not None and subprocess.run(
        [VSXCTL, "-c", ctl, "set-buffer", str(cid), "--rx", "16MiB"],
        capture_output=True).returncode == 0 and guest.cmd("wait-credit 16777216")
    ok = ok and guest.cmd("gsend 16000000")
    held = [c.get("queued", 0) for c in conns()]
    check("a connection whose host program reads nothing: vsxd holds bytes for it "
          "(%s)" % held, ok and len(held) == 1 and held[0] > 0)
    good, out, pid = upgrade_to(4)
    final_pid = pid or final_pid
    check("upgrade with bytes queued for the host: exit 0, generation 4, one "
          "connection kept", good, out)
    st = status()
    check("vsxctl status: recovery-conns-kept 1, recovery-conns-ended 0",
          str(st.get("recovery_conns_kept")) == "1" and
          str(st.get("recovery_conns_ended")) == "0", str(st))
    check("metrics: vsxd_recovery_connections_kept 1",
          "vsxd_recovery_connections_kept 1" in metric_lines())
    cl = conns()
    check("the new process lists the connection with its id",
          cid is not None and len(cl) == 1 and cl[0].get("conn") == cid, str(cl))
    check("the host program reads all 16000000 bytes, in order, none lost or twice",
          guest.cmd("hrecv 16000000"))
    check("both ways go on", guest.cmd("hsend 3000") and guest.cmd("grecv 4000") and
          guest.cmd("gsend 1000") and guest.cmd("hrecv 1000"))
    # the guest shuts its sending side: half-closed across the next handoff
    ok = guest.cmd("gshut 2") and guest.cmd("hclosed")
    check("half-closed: the guest shut its sending side, the host reads EOF", ok)
    good, out, pid = upgrade_to(5)
    final_pid = pid or final_pid
    check("upgrade of a half-closed connection: generation 5, kept", good, out)
    check("still half-closed: the host still sends, the guest receives every byte",
          guest.cmd("hsend 5000") and guest.cmd("grecv 9000"))
    cl = conns()
    check("the new process shows it closing, the guest's send side shut",
          len(cl) == 1 and cl[0].get("state") == "closing", str(cl))
    check("it ends: the host closes, the guest sees the end",
          guest.cmd("hclose") and guest.cmd("wait-closed"))
    # guest to host, across one more
    ok = (guest.cmd("hlisten unix:%s:5300" % uds) and guest.cmd("gconnect 5300") and
          guest.cmd("haccept") and guest.cmd("gsend 7000") and guest.cmd("hrecv 7000"))
    cl = conns()
    check("a new connection's id goes on past the kept one's (%s > %s)"
          % ([c.get("conn") for c in cl], cid),
          len(cl) == 1 and cid is not None and cl[0].get("conn", 0) > cid, str(cl))
    good, out, pid = upgrade_to(6)
    final_pid = pid or final_pid
    check("a guest-initiated connection across a sixth generation", ok and good, out)
    check("it carries on both ways, every byte checked",
          guest.cmd("gsend 3000") and guest.cmd("hrecv 3000") and
          guest.cmd("hsend 2000") and guest.cmd("grecv 2000") and
          guest.cmd("gshut 3") and guest.cmd("wait-rst") and guest.cmd("hclose"))
    # a hybrid program waiting for its "OK" at the freeze: vsxd sent the
    # guest its REQUEST, which the fake guest does not read (rxhold) until
    # after the handoff
    hyb = vsxdtest.hybrid_waiting(guest, uds, 5400)
    ok = hyb and wait_for(lambda: [c for c in conns() if c.get("state") == "connecting"])
    cl = conns()
    check("a hybrid program's CONNECT: vsxd lists its connection connecting, no "
          "\"OK\" yet", ok and len(cl) == 1, str(cl))
    hid = cl[0].get("conn") if len(cl) == 1 else None
    good, out, pid = upgrade_to(7)
    final_pid = pid or final_pid
    check("upgrade while the program waits for its \"OK\": generation 7, the "
          "connection kept", good, out)
    cl = conns()
    check("the new process lists it, still connecting, under the same id",
          len(cl) == 1 and cl[0].get("conn") == hid and
          cl[0].get("state") == "connecting", str(cl))
    line, ok = vsxdtest.hybrid_answered(guest, hyb, 6000, 5000) if hyb else ("", False)
    check("the guest answers the new process: the program gets its OK, then data "
          "both ways (6000 bytes to the guest, 5000 from it, every byte checked), "
          "the end seen", line.startswith("OK ") and ok, line)
    check("the same front-end through all of it", guest.cmd("backend") and
          guest.line.endswith("alive=1"))

    # ---- paused: QEMU's stop, a handoff, cont ----
    def vm_paused():
        out = subprocess.run([VSXCTL, "-c", ctl, "-j", "vms"], capture_output=True,
                             text=True).stdout
        try:
            vms = json.loads(out)
        except ValueError:
            return None
        return str(vms[0].get("paused")) if vms else None

    ok = vsxdtest.open_conn(guest, uds, 5400) and guest.cmd("pause")
    check("paused: a connection open (4000 bytes each way), then QEMU's stop: "
          "vsxctl vms says paused", ok and vm_paused() == "1", str(vm_paused()))
    check("paused: the host sends 3000 bytes while the VM is stopped",
          guest.cmd("hsend 3000"))
    # a CREDIT_UPDATE owed to the guest at the freeze (no RX buffer while
    # stopped): the new process sends it
    cl = conns()
    pcid = cl[0].get("conn") if len(cl) == 1 else None
    check("paused: vsxctl set-buffer --rx 300000 while the VM is stopped (the "
          "guest cannot be told yet)", pcid is not None and subprocess.run(
              [VSXCTL, "-c", ctl, "set-buffer", str(pcid), "--rx", "300000"],
              capture_output=True).returncode == 0, str(cl))
    good, out, pid = upgrade_to(8)
    final_pid = pid or final_pid
    check("paused: vsxctl upgrade exits 0, generation 8, 1 connection kept",
          good, out)
    check("paused: the new process holds the VM paused (vsxctl vms)",
          vm_paused() == "1", str(vm_paused()))
    check("paused: the log says the device was taken over paused",
          "vm web: handed over: device taken back paused (its VM is stopped; it "
          "goes on at cont) on its vhost-user connection, 1 connection kept" in
          log_text())
    check("paused: cont (the rings set up again where they stopped): the 3000 "
          "bytes sent meanwhile arrive, every byte checked",
          guest.cmd("resume") and guest.cmd("grecv 7000"))
    check("paused: the CREDIT_UPDATE owed at the freeze comes from the new "
          "process (buf_alloc 300000)", guest.cmd("wait-credit 300000"), guest.line)
    check("paused: the new process resumed it: vsxctl vms not paused, its log "
          "says resumed", vm_paused() == "0" and
          "vm web: device resumed after" in log_text(), str(vm_paused()))
    check("paused: the connection carries on both ways, every byte checked",
          guest.cmd("gsend 5000") and guest.cmd("hrecv 5000") and
          guest.cmd("hsend 2000") and guest.cmd("grecv 9000") and
          guest.cmd("gshut 3") and guest.cmd("wait-rst") and guest.cmd("hclose"))
    check("paused: the same front-end connection (no setup again)",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)
    check("paused: new connections both ways after cont", both_ways(guest, 9600))

    # ---- drain: the guest's bytes still going to a program, under a timer ----
    # two connections whose guest shut down both ways (vsxd answered RST)
    # while vsxd held megabytes for their programs: one program reads it
    # all after the handoff, the other reads nothing until the drain
    # timer (the linger timeout, 8 s) ends it in the new process
    N = vsxdtest.DRAIN_BYTES
    d1, did1, held1 = vsxdtest.draining(guest, uds, 5600, VSXCTL, ctl)
    d2, did2, held2 = vsxdtest.draining(guest, uds, 5700, VSXCTL, ctl)
    cl = conns()
    check("drain: two connections the guest ended while vsxd holds bytes for their "
          "programs (%s, %s), listed closing" % (held1, held2),
          d1 and d2 and sorted(c.get("conn") for c in cl) == sorted([did1, did2]) and
          all(c.get("state") == "closing" for c in cl), str(cl))
    rc, out = upgrade()
    st = status()
    final_pid = st.get("pid") or final_pid
    check("drain: vsxctl upgrade exits 0, generation 9, both kept",
          rc == 0 and str(st.get("generation")) == "9" and
          "2 connections kept, 0 connections ended" in out, out + " " + str(st))
    cl = conns()
    check("drain: the new process lists both under their ids, closing",
          sorted(c.get("conn") for c in cl) == sorted([did1, did2]) and
          all(c.get("state") == "closing" for c in cl), str(cl))
    got, ok = vsxdtest.drained(d1) if d1 else (b"", False)
    check("drain: the first program reads all %d bytes the guest sent, in order, "
          "then EOF (%d)" % (N, len(got)), ok and len(got) == N)
    check("drain: its connection ends once its bytes are out",
          wait_for(lambda: did1 not in [c.get("conn") for c in conns()], 5), str(conns()))
    check("drain: the other, whose program reads nothing, is still there",
          did2 in [c.get("conn") for c in conns()], str(conns()))
    check("drain: its drain timer ends it in the new process",
          wait_for(lambda: did2 not in [c.get("conn") for c in conns()], 15),
          str(conns()))
    got, ok = vsxdtest.drained(d2) if d2 else (b"", False)
    check("drain: its program then reads what its socket held, in order, and EOF "
          "(%d of %d bytes: vsxd held the rest)" % (len(got), N), ok and len(got) < N)
    # the record carries why they end (version 4): the new process says
    # and counts what the old one would have
    ends = [ln for ln in log_text().splitlines() if "conn close" in ln or "conn reset" in ln]
    check("drain: the new process ends both for the reason they had, the guest's "
          "shutdown", all(any(("id=%s " % d) in ln and "reason=guest-shutdown" in ln
                              for ln in ends) for d in (did1, did2)),
          "\n".join(ln for ln in ends if any(("id=%s " % d) in ln for d in (did1, did2))))
    check("drain: new connections both ways", both_ways(guest, 9700))

    # ---- early: a program's data sent with its CONNECT, before its OK ----
    hyb = vsxdtest.hybrid_waiting(guest, uds, 5800, early=3000)
    ok = hyb and wait_for(lambda: [c for c in conns() if c.get("state") == "connecting"])
    cl = conns()
    hid = cl[0].get("conn") if len(cl) == 1 else None
    rc, out = upgrade()
    st = status()
    final_pid = st.get("pid") or final_pid
    check("early: a program sent 3000 bytes with its CONNECT, the guest has not "
          "answered: vsxctl upgrade exits 0, generation 10, the connection kept",
          ok and rc == 0 and str(st.get("generation")) == "10" and
          "1 connection kept, 0 connections ended" in out, out + " " + str(st))
    cl = conns()
    check("early: the new process lists it connecting under its id",
          hid is not None and [c.get("conn") for c in cl] == [hid] and
          cl[0].get("state") == "connecting", str(cl))
    line, ok = (vsxdtest.hybrid_answered(guest, hyb, 4000, 2000, early=3000)
                if hyb else ("", False))
    check("early: the guest answers the new process: the program gets its OK, the "
          "guest reads the 3000 early bytes then 4000 more in order, 2000 go back, "
          "every byte checked, the end seen", line.startswith("OK ") and ok, line)

    # ---- linger: shut down both ways by vsxd, the guest's RST awaited ----
    lid = vsxdtest.lingering(guest, uds, 5900, VSXCTL, ctl)
    check("linger: vsxctl close while the guest reads nothing: the connection waits "
          "closing for the guest's RST", lid is not None)
    good, out, pid = upgrade_to(11)
    final_pid = pid or final_pid
    check("linger: vsxctl upgrade exits 0, generation 11, the connection kept", good, out)
    cl = conns()
    check("linger: the new process lists it closing under its id",
          lid is not None and [c.get("conn") for c in cl] == [lid] and
          cl[0].get("state") == "closing", str(cl))
    check("linger: the guest reads again: SHUTDOWN both ways, which it answers "
          "with its RST; no RST from vsxd", guest.cmd("rxhold 0") and
          guest.cmd("wait-closed") and guest.line.endswith("rst=0 shut=3"), guest.line)
    check("linger: the new process ends it on the guest's RST, the program reads EOF",
          wait_for(lambda: not conns(), 5) and guest.cmd("hclosed") and
          guest.cmd("hclose"), str(conns()))
    # the guest never answers: the linger timer (8 s) ends it in the new process
    lid = vsxdtest.lingering(guest, uds, 5950, VSXCTL, ctl)
    good, out, pid = upgrade_to(12)
    final_pid = pid or final_pid
    cl = conns()
    check("linger, no answer: kept across generation 12, listed under its id",
          lid is not None and good and [c.get("conn") for c in cl] == [lid], out + str(cl))
    check("linger, no answer: the new process's linger timer ends it while the "
          "guest says nothing; the program reads EOF",
          wait_for(lambda: not conns(), 15) and guest.cmd("hclosed") and
          guest.cmd("hclose"), str(conns()))
    check("linger, no answer: the guest, reading again, sees its end",
          guest.cmd("rxhold 0") and guest.cmd("wait-closed"), guest.line)
    # the program closes its socket while the guest reads nothing: vsxd
    # reads its end, closes the socket too and shuts the connection down
    # both ways: kept without a socket
    ps = vsxdtest.hybrid_open(guest, uds, 5980)
    ok = ps is not None and guest.cmd("rxhold 1")
    if ps:
        ps.close()
    ok = ok and wait_for(lambda: [c.get("state") for c in conns()] == ["closing"], 5)
    lid = [c.get("conn") for c in conns()]
    good, out, pid = upgrade_to(13)
    final_pid = pid or final_pid
    cl = conns()
    check("linger, the program gone: kept across generation 13 without its socket, "
          "listed under its id", ok and good and [c.get("conn") for c in cl] == lid,
          out + str(cl))
    check("linger, the program gone: the guest reads its SHUTDOWN both ways and "
          "answers RST, none from vsxd; the new process ends it",
          guest.cmd("rxhold 0") and guest.cmd("wait-closed") and
          guest.line.endswith("rst=0 shut=3") and wait_for(lambda: not conns(), 5),
          guest.line + str(conns()))
    check("linger: new connections both ways", both_ways(guest, 9800))

    vsxdtest.no_sanitizer_report(log_text())
finally:
    if guest:
        guest.close()
    vsxdtest.stop_vsxd(vsxd, final_pid)
    log.close()
    if vsxdtest.failures:
        sys.stdout.write("---- vsxd's log ----\n" + open(log_path).read())
    shutil.rmtree(tmp, ignore_errors=True)

vsxdtest.finish()
