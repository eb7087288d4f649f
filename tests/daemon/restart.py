# The body of tests/daemon/restart.test (which says what it checks), run by
# python3 from the build tree.
#
# vsxd under a file descriptor store, with fake_guest as QEMU and the
# guest (the test driver) and as a host program (libvsx), and the stand-in
# service manager of tests/daemon/fdstore.py (systemd is not PID 1 here:
# every line says "stand-in").
#
#   store        READY=1 comes with the state memfd and the device's
#                descriptors stored (conn, one name per memory file, kick
#                and call per ring); the record names the connection
#   crash x4     SIGKILL while a connection carries data both ways (the
#                4th time with the record rewritten as version 1): the
#                stand-in restarts vsxd with LISTEN_FDS; the host end reads
#                EOF, the guest gets an RST for the connection within 1 s
#                of the new process's start, and new connections work both
#                ways within 2 s of the kill (host to guest and guest to
#                host), on the same front-end connection (no setup again)
#   bad state    a corrupted record, a missing kick eventfd, a pipe in
#                place of guest memory, another guest-cid for the VM in
#                the file, the VM renamed in the file (and back): a log
#                line saying so, the VM starts fresh (the front-end sees
#                its back-end go), vsxd serves on
#   extra fds    two descriptors in the store that no state names: a log
#                line names them, vsxd closes them (a pipe's reader sees
#                EOF) and drops them from the store, the device goes on
#   restart      SIGTERM then a start with the store (systemctl restart):
#                vsxd exits 0 leaving its devices, listening sockets, the
#                connection's host socket and its counters in the store;
#                the new process takes them back (start-mode restarted,
#                the counters going on where they were): same front-end,
#                the connection goes on both ways (every byte checked), its
#                socket leaves the store, new ones work both ways; again
#                while a hybrid program waits for its OK (the guest has
#                not read the REQUEST): kept, the guest's answer gives it
#                its OK from the new process, data both ways; again while
#                a connection drains (its guest shut it down both ways while
#                vsxd held megabytes for its program, which read nothing):
#                kept under its id, the program reads every byte, in
#                order, then EOF; and while a program that sent bytes with
#                its CONNECT waits for its OK: kept, the guest reads them
#                first once it answers; and while a connection vsxctl
#                close shut down waits for its guest's RST: kept, the
#                guest gets its SHUTDOWN, no RST
#   paused       QEMU's stop (GET_VRING_BASE on each ring): the device
#                stays in the store without its kick eventfds (the record
#                says paused); SIGTERM then a start with the store: the
#                new process takes it back paused with its connection (the
#                host sent meanwhile); at cont every byte arrives and the
#                connection goes on both ways; then SIGKILL while paused:
#                the device is recovered paused, the host end reads EOF,
#                and at cont the guest gets the RST and new connections
#                work both ways, on the same front-end throughout
#   stop         SIGTERM (systemctl stop): exit 0, the store is left to the
#                service manager, which discards it, and the front-end
#                sees its back-end go
#   small store  FileDescriptorStoreMax=4: the device does not fit (a log
#                line), only the record is kept, the device serves
#
#   VSXD, FAKE_GUEST, VSXCTL   the programs (defaults: the build tree's)
import os
import select
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ.get("srcdir", "."), "tests", "daemon"))
import fdstore  # noqa: E402
import staterec  # noqa: E402
import vsxdtest  # noqa: E402
from vsxdtest import Guest, check  # noqa: E402

T = vsxdtest.Setup("restart")
VSXD, FG, VSXCTL = T.vsxd, T.fg, T.vsxctl
tmp, conf, ctl, vhost, uds = T.tmp, T.conf, T.ctl, T.vhost, T.uds
log_path, metrics = T.log_path, T.metrics
WAIT = 20.0
log = open(log_path, "w")


def status():
    return vsxdtest.status(VSXCTL, os.path.join(tmp, "control"))


def metric_lines():
    return vsxdtest.metric_lines(metrics)


def log_text():
    return vsxdtest.read_log(log, log_path)


def record_v1(buf):
    """The state record @buf (version 3 or later of running VMs,
    daemon/state.h) as an earlier release wrote it: version 1, connections
    by their addresses, no ring bases."""
    rec = staterec.walk(buf)
    assert rec.version >= 3
    body = b""
    for v in rec.vms:
        body += buf[v.start:v.queues_at]
        for q_start, q_end in v.queues:
            body += buf[q_start:q_end]      # (the ring's base: 0 in a running VM)
        for c in v.conns:
            body += buf[c.start:c.start + staterec.V1_CONN]
    return staterec.make(1, rec.nvms, rec.generation, body)


def both_ways(g, port, tag):
    return vsxdtest.both_ways(g, uds, port)


svc = fdstore.Service([VSXD, "--config", conf], os.path.join(tmp, "notify"),
                      store_max=64, log=log)
guest = None
try:
    print("service manager: the stand-in of tests/daemon/fdstore.py (not systemd)")
    svc.start()
    check("stand-in: vsxd READY=1", svc.wait(lambda: svc.ready))
    check("stand-in: the state memfd is stored as 'state'",
          svc.wait(lambda: "state" in svc.names()), str(svc.names()))
    guest = Guest(FG, vhost)
    check("fake guest up (cid 3)", guest.line == "0 ok cid=3", guest.line)
    want = {"vm.web.conn", "vm.web.mem0", "vm.web.kick0", "vm.web.call0",
            "vm.web.kick1", "vm.web.call1"}
    check("stand-in: the device's descriptors are stored under their names",
          svc.wait(lambda: want <= set(svc.names())), str(svc.names()))
    check("one name per memory file (two regions, one memfd)",
          "vm.web.mem1" not in svc.names(), str(svc.names()))
    st = status()
    check("vsxctl status: start-mode fresh, generation 1, fd-store 1",
          st.get("start_mode") == "fresh" and str(st.get("generation")) == "1" and
          str(st.get("fd_store")) == "1", str(st))

    port = 5000
    for crash in range(1, 5):
        check("crash %d: a connection carries data both ways" % crash,
              vsxdtest.open_conn(guest, uds, port))
        if crash == 4:
            # the record of the release before (version 1): read, the
            # connection it names ends as well
            fd = svc.fd("state")
            rec = os.pread(fd, 1 << 20, 0)
            old = record_v1(rec[:int.from_bytes(rec[12:16], "little")])
            os.pwrite(fd, old + b"\0" * (len(rec) - len(old)), 0)
            check("crash 4: the stored record rewritten as version 1 (%d bytes, was %d)"
                  % (len(old), int.from_bytes(rec[12:16], "little")),
                  old[8] == 1 and len(old) < int.from_bytes(rec[12:16], "little"))
        starts = svc.starts
        t0 = time.monotonic()
        pid = svc.kill(signal.SIGKILL)
        up = svc.wait(lambda: svc.starts > starts and svc.ready)
        t_up = time.monotonic()
        check("crash %d: SIGKILL of %d: the stand-in restarted vsxd with LISTEN_FDS "
              "(%.0f ms)" % (crash, pid, 1000 * (t_up - t0)), up)
        check("crash %d: the host end reads EOF" % crash, guest.cmd("hclosed"))
        rst = guest.cmd("wait-rst")
        t_rst = time.monotonic()
        check("crash %d: the guest got an RST for it, %.0f ms after the new start"
              % (crash, 1000 * (t_rst - t_up)), rst and t_rst - t_up < 1.0)
        ok = both_ways(guest, port + 1, "crash %d" % crash)
        t_new = time.monotonic()
        check("crash %d: new connections both ways, %.0f ms after the kill"
              % (crash, 1000 * (t_new - t0)), ok and t_new - t0 < 2.0)
        text = log_text()
        check("crash %d: vsxd says it recovered the VM with 1 connection ended" % crash,
              text.count("vm web: recovered after a crash: device resumed on its "
                         "vhost-user connection, 1 connection ended") == crash)
        st = status()
        check("crash %d: vsxctl status: start-mode recovered, generation %d, 1 VM "
              "recovered, 1 connection ended" % (crash, crash + 1),
              st.get("start_mode") == "recovered" and
              str(st.get("generation")) == str(crash + 1) and
              str(st.get("recovered_vms")) == "1" and
              str(st.get("recovery_conns_ended")) == "1", str(st))
        m = metric_lines()
        want_m = ["vsxd_generation %d" % (crash + 1), "vsxd_fd_store 1",
                  'vsxd_recovery_vms{result="recovered"} 1',
                  'vsxd_recovery_vms{result="fresh"} 0',
                  "vsxd_recovery_connections_ended 1"]
        check("crash %d: metrics say it: %s" % (crash, ", ".join(want_m)),
              all(w in m for w in want_m),
              str([l for l in m if "generation" in l or "recovery" in l]))
        port += 10
    check("the same front-end throughout (the fake guest set the device up once)",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)

    # ---- bad states: each time the VM starts fresh, vsxd serves on ----
    def bad(what, spoil, says, cid=3, name="web"):
        global guest
        starts = svc.starts
        spoil()
        svc.kill(signal.SIGKILL)
        up = svc.wait(lambda: svc.starts > starts and svc.ready)
        check("%s: vsxd restarted and serves" % what, up)
        check("%s: a log line says why" % what, says in log_text(), says)
        check("%s: the front-end sees its back-end go" % what,
              guest.cmd("backend") and guest.line.endswith("alive=0"), guest.line)
        check("%s: nothing of the VM is left in the store" % what,
              svc.wait(lambda: not [n for n in svc.names() if n.startswith("vm.web.")]),
              str(svc.names()))
        guest.close()
        guest = Guest(FG, vhost)
        check("%s: a new front-end gets a device that works both ways" % what,
              guest.line == "0 ok cid=%d" % cid and both_ways(guest, 7000, what),
              guest.line)
        svc.wait(lambda: "vm.%s.conn" % name in svc.names())

    def corrupt():
        fd = svc.fd("state")
        os.pwrite(fd, b"\xff\xff", 40)

    def lose_kick():
        svc.drop("vm.web.kick1")

    keep = []

    def pipe_for_memory():
        r, w = os.pipe()
        keep.append(w)   # (a pipe without a writer hangs up: the store drops it)
        svc.replace("vm.web.mem0", r)

    bad("a corrupted state record", corrupt,
        "restart state unusable (state record checksum mismatch)")
    bad("a missing kick eventfd", lose_kick,
        "vm web: cannot recover its device (a ring's kick or call eventfd is missing)")
    bad("a pipe in place of guest memory", pipe_for_memory,
        "cannot adopt the device on %s: a memory region's descriptor is not a file"
        % vhost)

    def other_cid():
        with open(conf, "w") as f:
            f.write("[daemon]\ncontrol = %s\n\n[vm web]\nguest-cid = 4\nsocket = %s\n"
                    "uds-path = %s\n" % (os.path.join(tmp, "control"), vhost, uds))

    bad("the VM's guest-cid changed in the file", other_cid,
        "vm web: cannot recover its device (its guest-cid was 3, it is 4 now)", cid=4)

    def vm_named(name):
        def write():
            with open(conf, "w") as f:
                f.write("[daemon]\ncontrol = %s\n\n[vm %s]\nguest-cid = 4\nsocket = %s\n"
                        "uds-path = %s\n" % (os.path.join(tmp, "control"), name, vhost, uds))
        return write

    # a VM the file no longer has: its stored device is closed, saying so
    bad("the VM renamed in the file (web -> web2)", vm_named("web2"),
        "vm web: in the restart state but not configured now: its 8 stored "
        "descriptors closed (its front-end sees its back-end go)", cid=4, name="web2")
    bad("the VM renamed back (web2 -> web)", vm_named("web"),
        "vm web2: in the restart state but not configured now: its 8 stored "
        "descriptors closed (its front-end sees its back-end go)", cid=4)

    # ---- descriptors in the store that no state names ----
    r_end, w_end = os.pipe()
    svc.add("stray", w_end)
    svc.add("stored", os.dup(w_end))    # (what an FDSTORE=1 without FDNAME= is)
    starts = svc.starts
    svc.kill(signal.SIGKILL)
    up = svc.wait(lambda: svc.starts > starts and svc.ready)
    says = "restart: 2 passed descriptors that no state names, closed: stray, stored"
    check("extra descriptors: vsxd restarted and serves, a log line names them",
          up and svc.wait(lambda: says in log_text()), says)
    check("extra descriptors: they left the store", svc.wait(
        lambda: not {"stray", "stored"} & set(svc.names())), str(svc.names()))
    readable, _, _ = select.select([r_end], [], [], 5.0)
    check("extra descriptors: closed by vsxd (the pipe's reader sees EOF)",
          readable and os.read(r_end, 1) == b"")
    os.close(r_end)
    check("extra descriptors: the device went on (the same front-end, both ways)",
          guest.cmd("backend") and guest.line.endswith("alive=1") and
          both_ways(guest, 7100, "extra descriptors"), guest.line)

    # ---- systemctl restart: SIGTERM, the store kept, started again ----
    check("restart: a connection carries data both ways",
          vsxdtest.open_conn(guest, uds, 5500))
    st0 = status()
    gen = int(st0.get("generation", 0))
    starts = svc.starts
    nmsg = len(svc.messages)
    t0 = time.monotonic()
    svc.restart()
    up = svc.wait(lambda: svc.starts > starts and svc.ready)
    t_up = time.monotonic()
    st = status()
    check("restart: the counters go on (conns-opened %s, then %s; the counters "
          "record taken back, a log line)" % (st0.get("conns_opened"),
                                             st.get("conns_opened")),
          int(st0.get("conns_opened", 0)) > 0 and
          st.get("conns_opened") == st0.get("conns_opened") and
          "counters: going on from the earlier process's (1 VM)" in log_text() and
          svc.wait(lambda: "counters" not in svc.names()), str(svc.names()))
    listeners = [m for m in svc.messages[nmsg:]
                 if m.startswith("FDSTORE=1") and "FDNAME=listen." in m]
    # (the file has no metrics since the guest-cid change above)
    check("restart: SIGTERM: vsxd exited 0, its devices and its 3 listening sockets "
          "(vhost-user, uds-path, control) left in the store; started again "
          "(%.0f ms)" % (1000 * (t_up - t0)),
          up and svc.stopped_rc == 0 and len(listeners) == 3 and
          not any("FDSTOREREMOVE=1\nFDNAME=state" in m for m in svc.messages[nmsg:]),
          "exit %s, %d listeners" % (svc.stopped_rc, len(listeners)))
    check("restart: the connection went into the store too (conn.N.host)",
          any("FDSTORE=1" in m and "FDNAME=conn." in m for m in svc.messages[nmsg:]))
    check("restart: the connection goes on: data both ways, every byte checked",
          guest.cmd("hsend 3000") and guest.cmd("grecv 7000") and
          guest.cmd("gsend 2000") and guest.cmd("hrecv 2000"))
    check("restart: its socket left the store once taken back",
          svc.wait(lambda: not [n for n in svc.names() if n.startswith("conn.")]),
          str(svc.names()))
    check("restart: it ends as any: the guest shuts down both ways, RST, host EOF",
          guest.cmd("gshut 3") and guest.cmd("wait-rst") and guest.cmd("hclosed") and
          guest.cmd("hclose"))
    check("restart: the same front-end connection serves on (no setup again)",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)
    check("restart: new connections both ways", both_ways(guest, 5600, "restart"))

    st = status()
    check("restart: vsxctl status: start-mode restarted, generation %d, 3 listeners "
          "taken back" % (gen + 1), st.get("start_mode") == "restarted" and
          str(st.get("generation")) == str(gen + 1) and
          str(st.get("handed_over_listeners")) == "3", str(st))
    check("restart: the listeners left the store once taken back",
          svc.wait(lambda: not [n for n in svc.names() if n.startswith("listen.")]),
          str(svc.names()))

    def restart_keeping_one():
        """SIGTERM and a start with the store: True once the new process
        serves, the old one having exited 0, and its log says it kept one
        connection."""
        starts = svc.starts
        svc.restart()
        return (svc.wait(lambda: svc.starts > starts and svc.ready) and
                svc.stopped_rc == 0 and
                "restarted: device resumed on its vhost-user connection, 1 connection "
                "kept" in log_text().rsplit("restarting (systemctl restart)", 1)[-1])

    # ---- systemctl restart while a hybrid program waits for its OK ----
    hyb = vsxdtest.hybrid_waiting(guest, uds, 5700)
    ok = hyb and svc.wait(lambda: str(status().get("conns")) == "1")
    kept = restart_keeping_one()
    check("restart while a program waits for its OK (the guest has not read the "
          "REQUEST): vsxd exited 0, started again, the connection kept",
          ok and kept)
    line, ok = vsxdtest.hybrid_answered(guest, hyb, 3000, 2000) if hyb else ("", False)
    check("the guest answers the new process: the program gets its OK, then data "
          "both ways (3000 bytes to the guest, 2000 from it, every byte checked), "
          "the end seen", line.startswith("OK ") and ok, line)

    # ---- systemctl restart while a connection drains ----
    d, did, held = vsxdtest.draining(guest, uds, 5900, VSXCTL, ctl)
    kept = restart_keeping_one()
    check("restart while a connection drains what its guest sent (the guest shut "
          "it down, had its RST; vsxd holds %d bytes for its program, which reads "
          "nothing): vsxd exited 0, started again, the connection kept" % held,
          d and kept)
    cl = vsxdtest.conn_list(VSXCTL, ctl)
    check("drain: the new process lists it under its id, closing",
          did is not None and [c.get("conn") for c in cl] == [did] and
          cl[0].get("state") == "closing", str(cl))
    got, ok = vsxdtest.drained(d) if d else (b"", False)
    check("drain: its program reads all %d bytes the guest sent, in order, then EOF "
          "(%d)" % (vsxdtest.DRAIN_BYTES, len(got)), ok and len(got) == vsxdtest.DRAIN_BYTES)
    check("drain: the connection ends once they are out", svc.wait(
        lambda: not vsxdtest.conn_list(VSXCTL, ctl)), str(vsxdtest.conn_list(VSXCTL, ctl)))

    # ---- systemctl restart while a program that sent data waits for its OK ----
    hyb = vsxdtest.hybrid_waiting(guest, uds, 6000, early=2500)
    ok = hyb and svc.wait(lambda: str(status().get("conns")) == "1")
    kept = restart_keeping_one()
    check("restart while a program that sent 2500 bytes with its CONNECT waits for "
          "its OK: vsxd exited 0, started again, the connection kept", ok and kept)
    line, ok = (vsxdtest.hybrid_answered(guest, hyb, 3000, 2000, early=2500)
                if hyb else ("", False))
    check("early: the program gets its OK from the new process, the guest reads "
          "the 2500 early bytes then 3000 more, 2000 go back, every byte checked",
          line.startswith("OK ") and ok, line)

    # ---- systemctl restart while a connection waits for its guest's RST ----
    lid = vsxdtest.lingering(guest, uds, 6100, VSXCTL, ctl)
    kept = restart_keeping_one()
    cl = vsxdtest.conn_list(VSXCTL, ctl)
    check("restart while a connection vsxctl close shut down waits for its guest's "
          "RST (the guest reads nothing): kept, listed closing under its id",
          lid is not None and kept and
          [c.get("conn") for c in cl] == [lid] and cl[0].get("state") == "closing",
          str(cl))
    check("linger: the guest reads its SHUTDOWN both ways and answers RST, none "
          "from vsxd; the program reads EOF", guest.cmd("rxhold 0") and
          guest.cmd("wait-closed") and guest.line.endswith("rst=0 shut=3") and
          guest.cmd("hclosed") and guest.cmd("hclose"), guest.line)

    # ---- a paused VM: systemctl restart, then a crash ----
    running = {"vm.web.kick0", "vm.web.kick1"}
    check("paused: a connection carries data both ways",
          vsxdtest.open_conn(guest, uds, 5700))
    check("paused: QEMU's stop: the device stays in the store, its kick eventfds "
          "out", guest.cmd("pause") and
          svc.wait(lambda: "vm.web.conn" in svc.names() and
                   not running & set(svc.names())), str(svc.names()))
    check("paused: the host sends 3000 bytes while the VM is stopped",
          guest.cmd("hsend 3000"))
    gen = int(status().get("generation", 0))
    starts = svc.starts
    svc.restart()
    up = svc.wait(lambda: svc.starts > starts and svc.ready)
    check("paused: SIGTERM and a start with the store: vsxd exited 0, started again",
          up and svc.stopped_rc == 0, "exit %s" % svc.stopped_rc)
    check("paused: the new process took the device back paused, the connection "
          "kept", "vm web: restarted: device taken back paused (its VM is stopped; "
          "it goes on at cont) on its vhost-user connection, 1 connection kept"
          in log_text())
    st = status()
    check("paused: start-mode restarted, generation %d" % (gen + 1),
          st.get("start_mode") == "restarted" and
          str(st.get("generation")) == str(gen + 1), str(st))
    check("paused: cont: the 3000 bytes sent meanwhile arrive, every byte checked",
          guest.cmd("resume") and guest.cmd("grecv 7000"))
    check("paused: the connection goes on both ways",
          guest.cmd("gsend 2000") and guest.cmd("hrecv 2000") and
          guest.cmd("hsend 1000") and guest.cmd("grecv 8000"))
    check("paused: running again, the kick eventfds are back in the store",
          svc.wait(lambda: running <= set(svc.names())), str(svc.names()))
    # a crash while paused: the device comes back paused, the connection ends
    # (killed once the paused device is stored and the record names it: in
    # between, its rings half stopped, a crash loses it, as vsxd(8) says)
    def stored_paused():
        names = set(svc.names())
        rec = os.pread(svc.fd("state"), 1 << 20, 0)
        return ("vm.web.conn" in names and not running & names and
                b"vm.web.conn" in rec[:int.from_bytes(rec[12:16], "little")])
    ok = guest.cmd("pause") and svc.wait(stored_paused)
    starts = svc.starts
    svc.kill(signal.SIGKILL)
    up = svc.wait(lambda: svc.starts > starts and svc.ready)
    check("paused crash: SIGKILL while paused, restarted", ok and up)
    check("paused crash: the device recovered paused, its connection ended",
          "vm web: recovered after a crash: device taken back paused (its VM is "
          "stopped; it goes on at cont) on its vhost-user connection, 0 connections "
          "kept, 1 ended" in log_text())
    check("paused crash: the host end reads EOF", guest.cmd("hclosed"))
    check("paused crash: at cont the guest gets the RST",
          guest.cmd("resume") and guest.cmd("wait-rst"))
    check("paused crash: the same front-end connection (no setup again)",
          guest.cmd("backend") and guest.line.endswith("alive=1"), guest.line)
    check("paused crash: new connections both ways", both_ways(guest, 5800, "paused"))
    guest.cmd("hclose")

    # ---- systemctl stop ----
    svc.stop()
    check("stop: vsxd exited 0 and left the store to the service manager, which "
          "discarded it", svc.stopped_rc == 0 and not svc.store,
          "exit %s, store %s" % (svc.stopped_rc, svc.names()))
    check("stop: the front-end sees its back-end go",
          guest.cmd("backend") and guest.line.endswith("alive=0"), guest.line)

    # ---- a store too small for the device ----
    guest.close()
    guest = None
    svc.close()
    svc = fdstore.Service([VSXD, "--config", conf], os.path.join(tmp, "notify2"),
                          store_max=4, log=log)
    svc.start()
    check("small store: vsxd READY=1", svc.wait(lambda: svc.ready))
    guest = Guest(FG, vhost)
    says = "vm web: the file descriptor store is full (1 of FileDescriptorStoreMax=4)"
    check("small store (FileDescriptorStoreMax=4): a log line says the device does "
          "not fit", svc.wait(lambda: says in log_text()), says)
    check("small store: the store keeps the record alone", svc.names() == ["state"],
          str(svc.names()))
    check("small store: the device serves all the same",
          both_ways(guest, 9000, "small store"))
    svc.stop()
    vsxdtest.no_sanitizer_report(log_text())
finally:
    if guest:
        guest.close()
    svc.close()
    log.close()
    if vsxdtest.failures:
        sys.stdout.write("---- vsxd's log ----\n" + open(log_path).read())
    shutil.rmtree(tmp, ignore_errors=True)

vsxdtest.finish()
