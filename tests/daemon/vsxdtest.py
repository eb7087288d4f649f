# What the python bodies of tests/daemon's vsxd tests share (restart.py,
# handoff.py, sibhandoff.py): the check lines, the fake guest on pipes,
# vsxctl status, new connections both ways, the fake guest's byte
# pattern, a hybrid program waiting for its OK, the stand-ins for a new
# vsxd of a live handoff. (The state record's walker is staterec.py.)
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

failures = 0


def check(what, ok, detail=""):
    """One "ok: WHAT" or "FAIL: WHAT: DETAIL" line; failures counts them."""
    global failures
    if ok:
        print("ok: " + what)
    else:
        failures += 1
        print("FAIL: " + what + (": " + detail if detail else ""))
    sys.stdout.flush()
    return ok


def finish():
    """The last line, and the exit status."""
    print("%d failure%s" % (failures, "" if failures == 1 else "s"))
    sys.exit(1 if failures else 0)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(cond, secs=10.0):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


class Guest:
    """fake_guest (@fg, with options @opts) on the vhost-user socket
    @vhost, on pipes: one command, one answer."""

    def __init__(self, fg, vhost, *opts):
        self.p = subprocess.Popen([fg] + list(opts) + [vhost], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        self.line = self.p.stdout.readline().strip()   # "0 ok cid=3"
        self.n = 0

    def cmd(self, c):
        self.n += 1
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        self.line = self.p.stdout.readline().strip()
        ok = self.line.startswith("%d ok" % self.n)
        if not ok:
            print("  fake_guest: %s -> %s" % (c, self.line))
        return ok

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()


def no_sanitizer_report(log_text):
    """The check every handoff test ends with: vsxd's log (its text) holds
    no ASan, LSan or UBSan report."""
    check("no sanitizer report in vsxd's log",
          not any(w in log_text for w in ("AddressSanitizer", "LeakSanitizer",
                                          "runtime error:")))


def stop_vsxd(proc, pid):
    """Stop what a test started as @proc (a Popen) and handed over, perhaps
    several times: SIGTERM to the process serving now (@pid, a string or
    None), the first one killed if it still runs, and wait (5 s) until
    @pid is gone or a zombie (a handed-over vsxd is no child of the
    test)."""
    if pid:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except (OSError, ValueError):
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if pid:
        wait_for(lambda: not os.path.exists("/proc/%s" % pid) or
                 open("/proc/%s/stat" % pid).read().split()[2] == "Z", 5)


def status(vsxctl, ctl):
    """vsxctl status's first record, as a dict ({} when none answers)."""
    out = subprocess.run([vsxctl, "-c", ctl, "-j", "status"], capture_output=True,
                         text=True).stdout
    try:
        j = json.loads(out)
    except ValueError:
        return {}
    return j[0] if isinstance(j, list) else j


def open_conn(g, uds, port):
    """A host-to-guest connection through the uds-path @uds to guest port
    @port, 4000 bytes each way, left open."""
    return (g.cmd("listen %d" % port) and g.cmd("hconnect unix:%s:%d" % (uds, port)) and
            g.cmd("hsend 4000") and g.cmd("grecv 4000") and g.cmd("gsend 4000") and
            g.cmd("hrecv 4000"))


def both_ways(g, uds, port):
    """A new host-to-guest and guest-to-host connection through the
    uds-path @uds, data both ways; each ends (the guest shuts down, vsxd
    answers RST)."""
    return (g.cmd("listen %d" % port) and g.cmd("hconnect unix:%s:%d" % (uds, port)) and
            g.cmd("hsend 3000") and g.cmd("grecv 3000") and g.cmd("gsend 2000") and
            g.cmd("hrecv 2000") and g.cmd("gshut 3") and g.cmd("wait-rst") and
            g.cmd("hclose") and
            g.cmd("hlisten unix:%s:%d" % (uds, port + 1000)) and
            g.cmd("gconnect %d" % (port + 1000)) and g.cmd("haccept") and
            g.cmd("gsend 1000") and g.cmd("hrecv 1000") and g.cmd("hsend 500") and
            g.cmd("grecv 500") and g.cmd("gshut 3") and g.cmd("wait-rst") and
            g.cmd("hclose"))


class Setup:
    """The programs ($VSXD, $FAKE_GUEST, $VSXCTL; the build tree's by
    default: exit 99 when one is missing) and a temporary directory with a
    vsxd.conf serving VM web (guest-cid 3) with a uds-path, a control
    socket and a metrics endpoint on a free port."""

    def __init__(self, test):
        self.vsxd = os.path.abspath(os.environ.get("VSXD", "./daemon/vsxd"))
        self.fg = os.path.abspath(os.environ.get("FAKE_GUEST", "./tests/daemon/fake_guest"))
        self.vsxctl = os.path.abspath(os.environ.get("VSXCTL", "./tools/vsxctl/vsxctl"))
        for prog in (self.vsxd, self.fg, self.vsxctl):
            if not os.access(prog, os.X_OK):
                print("%s.test: no executable %s" % (test, prog), file=sys.stderr)
                sys.exit(99)
        self.tmp = tempfile.mkdtemp(prefix="vsxd-%s." % test)
        self.conf = os.path.join(self.tmp, "vsxd.conf")
        self.ctl = os.path.join(self.tmp, "control")
        self.vhost = os.path.join(self.tmp, "web.vhost")
        self.uds = os.path.join(self.tmp, "web.vsock")
        self.log_path = os.path.join(self.tmp, "vsxd.log")
        self.metrics = "127.0.0.1:%d" % free_port()
        with open(self.conf, "w") as f:
            f.write("[daemon]\ncontrol = %s\nmetrics = tcp:%s\n\n[vm web]\n"
                    "guest-cid = 3\nsocket = %s\nuds-path = %s\n"
                    % (self.ctl, self.metrics, self.vhost, self.uds))


def handoff_stand_in(tmp, mode):
    """tests/daemon/handoff_prog.py copied into @tmp as handoff-@mode (it
    does what @mode says, then runs $HANDOFF_VSXD), with staterec.py, which
    it imports, beside it: the copy's path, for vsxctl upgrade --exec."""
    src = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(tmp, "handoff-" + mode)
    shutil.copy(os.path.join(src, "handoff_prog.py"), path)
    os.chmod(path, 0o755)
    shutil.copy(os.path.join(src, "staterec.py"), tmp)
    return path


def metric_lines(addr):
    """The lines of http://@addr/metrics ([] when it does not answer)."""
    import urllib.request
    try:
        with urllib.request.urlopen("http://%s/metrics" % addr, timeout=10) as r:
            return r.read().decode().splitlines()
    except OSError:
        return []


def metric_values(addr):
    """The samples of http://@addr/metrics: {"name{labels}": value}."""
    out = {}
    for line in metric_lines(addr):
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def pattern(seed, n):
    """The bytes fake_guest sends and checks (its pat()): @seed 2 from the
    host, 1 from the guest, @n bytes from the start of a connection."""
    return bytes(((i * 131 + seed * 17) ^ (i >> 9)) & 0xff for i in range(n))


def hybrid_waiting(guest, uds, port, early=0):
    """A program that wrote CONNECT @port to @uds and waits for its OK,
    which the guest (listening on @port) cannot give yet: it reads nothing
    (rxhold) until hybrid_answered. With @early, the program sends that
    many bytes for the guest with its CONNECT line, before its OK. The
    program's socket, or None."""
    if not (guest.cmd("listen %d" % port) and guest.cmd("rxhold 1")):
        return None
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15)
    s.connect(uds)
    s.sendall(b"CONNECT %d\n" % port + pattern(2, early))
    return s


def hybrid_answered(guest, s, to_guest, from_guest, early=0):
    """The guest reads again and answers the program of hybrid_waiting (@s),
    then @to_guest bytes go to the guest (after the @early ones the
    program sent before its OK) and @from_guest come back, every byte
    checked, and the program closes. (the OK line, True if the data went
    both ways and the guest saw the end)"""
    ok = guest.cmd("rxhold 0") and guest.cmd("state")
    got = b""
    try:
        line = s.recv(64).decode()
        s.sendall(pattern(2, early + to_guest)[early:])
        ok = ok and guest.cmd("grecv %d" % (early + to_guest)) and \
            guest.cmd("gsend %d" % from_guest)
        while ok and len(got) < from_guest:
            d = s.recv(from_guest - len(got))
            if not d:
                break
            got += d
    except OSError as e:
        line, ok = str(e), False
    s.close()
    return line, ok and got == pattern(1, from_guest) and guest.cmd("wait-closed")


def read_log(log, path):
    """What vsxd wrote so far to the log file @log (open for writing, its
    stderr) at @path."""
    log.flush()
    with open(path) as f:
        return f.read()


def conn_list(vsxctl, ctl):
    """vsxctl -j list: the connections, as dicts ([] when none answers)."""
    out = subprocess.run([vsxctl, "-c", ctl, "-j", "list"], capture_output=True,
                         text=True).stdout
    try:
        return json.loads(out)
    except ValueError:
        return []


def hybrid_open(guest, uds, port):
    """A program's connection (a plain socket) to guest port @port through
    the uds-path @uds, the guest listening: its socket once it read its
    OK, or None."""
    if not guest.cmd("listen %d" % port):
        return None
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15)
    try:
        s.connect(uds)
        s.sendall(b"CONNECT %d\n" % port)
        if guest.cmd("state") and s.recv(64).startswith(b"OK "):
            return s
    except OSError:
        pass
    s.close()
    return None


def lingering(guest, uds, port, vsxctl, ctl):
    """A connection vsxd shut down both ways that waits for its guest's
    RST: a host-to-guest connection to guest port @port (open_conn), the
    guest reading nothing (rxhold) when vsxctl close shuts it down (the
    guest's answer to the SHUTDOWN, an RST, waits until it reads again:
    meanwhile vsxd's linger timer runs). Its id, or None."""
    if not (open_conn(guest, uds, port) and guest.cmd("rxhold 1")):
        return None
    cl = conn_list(vsxctl, ctl)
    lid = cl[0].get("conn") if len(cl) == 1 else None
    if lid is None or subprocess.run([vsxctl, "-c", ctl, "close", str(lid)],
                                     capture_output=True).returncode != 0:
        return None
    cl = conn_list(vsxctl, ctl)
    return lid if [c.get("state") for c in cl] == ["closing"] else None


def _wmem_max():
    try:
        with open("/proc/sys/net/core/wmem_max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 4 << 20


# What a draining connection's guest sends: 4 MiB more than the program's
# socket can take (its SO_SNDBUF, which vsxd raises toward the window, is
# capped at net.core.wmem_max and doubled by the kernel), so that vsxd holds
# the rest whatever the sizes of its writes; and the window it needs
DRAIN_BYTES = 2 * _wmem_max() + (4 << 20)
DRAIN_WINDOW_MIB = DRAIN_BYTES // (1 << 20) + 1


def draining(guest, uds, port, vsxctl, ctl):
    """A connection draining what its guest sent into a host socket: a
    program's hybrid connection to guest port @port reads nothing while
    the guest sends DRAIN_BYTES (more than a Unix socket holds, so that
    vsxd holds the rest), then the guest shuts down both
    ways and gets vsxd's RST: vsxd goes on writing what it holds to the
    socket under its drain timer (the linger timeout). (the program's
    socket, the connection's id, what vsxd held for it), or (None, ...)."""
    s = hybrid_open(guest, uds, port)
    if not s:
        return None, None, 0
    ok = True
    cl = [c for c in conn_list(vsxctl, ctl) if str(c.get("guest")).endswith(":%d" % port)]
    cid = cl[0].get("conn") if len(cl) == 1 else None
    ok = ok and cid is not None and subprocess.run(
        [vsxctl, "-c", ctl, "set-buffer", str(cid), "--rx", "%dMiB" % DRAIN_WINDOW_MIB],
        capture_output=True).returncode == 0 and \
        guest.cmd("wait-credit %d" % (DRAIN_WINDOW_MIB << 20))
    ok = ok and guest.cmd("gsend %d" % DRAIN_BYTES) and guest.cmd("gshut 3") and \
        guest.cmd("wait-rst")
    cl = [c for c in conn_list(vsxctl, ctl) if c.get("conn") == cid]
    held = cl[0].get("queued", 0) if len(cl) == 1 else 0
    if not ok or not held:
        s.close()
        return None, cid, held
    return s, cid, held


def drained(s):
    """Everything program socket @s reads until its end: (the bytes, True
    when they are the guest's from the start of its connection, in order,
    and end with EOF)."""
    got = bytearray()
    eof = False
    try:
        while True:
            d = s.recv(1 << 20)
            if not d:
                eof = True
                break
            got += d
    except OSError:
        pass
    s.close()
    return bytes(got), eof and bytes(got) == pattern(1, len(got))
