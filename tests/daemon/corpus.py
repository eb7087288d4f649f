"""The fuzz targets' seed inputs against a real, sandboxed vsxd (issue
#32): the fuzz targets run vsxd's parsers in their own process, this runs
the same inputs through a vsxd that serves, with its syscall allowlist
and filesystem view. fuzz/corpus/config's configuration files (first byte
0) become vsxd's file, written in place, and SIGHUP reloads them; the
control protocol's request blocks and client streams of fuzz/corpus/ctl
(first byte 0, 2 or 3) are sent on the control socket, each on a
connection of its own. After each input vsxd runs on with no call
refused; at the end a connection carries data both ways (the fake guest,
every byte checked) and SIGTERM ends vsxd with status 0."""
import os
import shutil
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vsxdtest  # noqa: E402
from vsxdtest import check, wait_for  # noqa: E402

S = vsxdtest.Setup("corpus")
top = os.environ.get("top_srcdir", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", ".."))
corpus = os.path.join(top, "fuzz", "corpus")
if not os.path.isdir(os.path.join(corpus, "config")):
    print("corpus.test: no %s" % corpus, file=sys.stderr)
    sys.exit(99)
with open(S.conf) as f:
    good = f.read()

log = open(S.log_path, "w")
p = subprocess.Popen([S.vsxd, "--config", S.conf], stdout=log, stderr=subprocess.STDOUT)


def text():
    with open(S.log_path) as f:
        return f.read()


def alive(what):
    return check(what + ": vsxd runs on, no call refused",
                 p.poll() is None and "allowlist refused" not in text(), text()[-300:])


check("vsxd serves, sandboxed", wait_for(lambda: "serving 1 VM" in text()) and
      "allowlist kill" in text(), text()[-300:])

# ---- configuration files, reloaded ----
n = 0
for name in sorted(os.listdir(os.path.join(corpus, "config"))):
    with open(os.path.join(corpus, "config", name), "rb") as f:
        data = f.read()
    if not data or data[0] != 0:
        continue            # (--vm specs, command lines, values: not a file)
    if any(k in data for k in (b"forward-cid", b"forward_cid", b"forward-listen",
                               b"forward_listen", b"vsock:")):
        # kernel vsock is the machine's infrastructure's: never here
        print("skip: config %s: it names kernel vsock" % name)
        continue
    before = text().count("SIGHUP: reloading")
    with open(S.conf, "wb") as f:
        f.write(data[1:])
    p.send_signal(1)
    done = wait_for(lambda: text().count("SIGHUP: reloading") > before and
                    (text().rstrip().endswith(("VMs)", "VM)")) or
                     "reload failed" in text().split("SIGHUP: reloading")[-1] or
                     "reloaded" in text().split("SIGHUP: reloading")[-1]))
    check("config %s: SIGHUP answered (reloaded or refused)" % name, done, text()[-300:])
    alive("config " + name)
    n += 1
check("%d configuration files reloaded" % n, n >= 3)
with open(S.conf, "w") as f:
    f.write(good)
before = text().count("SIGHUP: reloading")
p.send_signal(1)
check("the test's own file again: reloaded",
      wait_for(lambda: text().count("SIGHUP: reloading") > before and
               "reloaded" in text().split("SIGHUP: reloading")[-1]), text()[-300:])

# ---- control protocol inputs ----
n = 0
for name in sorted(os.listdir(os.path.join(corpus, "ctl"))):
    with open(os.path.join(corpus, "ctl", name), "rb") as f:
        data = f.read()
    if not data or data[0] not in (0, 2, 3):
        continue            # (reply blocks: vsxctl's side)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    got = b""
    try:
        s.connect(S.ctl)
        # a request block (0) ends with an empty line; streams (2, 3) as they are
        s.sendall(data[1:] + (b"\n" if data[0] == 0 else b""))
        s.shutdown(socket.SHUT_WR)
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except OSError:
        pass                # (vsxd may close on a bad block: fine)
    finally:
        s.close()
    alive("ctl %s (%d bytes answered)" % (name, len(got)))
    n += 1
check("%d control inputs sent" % n, n >= 10)
st = vsxdtest.status(S.vsxctl, S.ctl)
check("vsxctl status answers after them", st.get("vms") == 1, str(st)[:200])

g = vsxdtest.Guest(S.fg, S.vhost)
check("a connection both ways after all inputs", vsxdtest.both_ways(g, S.uds, 5000))
g.close()
p.terminate()
try:
    rc = p.wait(60)
except subprocess.TimeoutExpired:
    p.kill()
    rc = None
log.close()
check("SIGTERM: exit 0", rc == 0, str(rc))
vsxdtest.no_sanitizer_report(text())
shutil.rmtree(S.tmp, ignore_errors=True)
vsxdtest.finish()
