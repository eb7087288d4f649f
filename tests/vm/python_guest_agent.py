# A guest agent written with the vsx package, run by the guest's own
# python3 (tests/vm/python-guest.test copies the interpreter, the few
# standard modules it needs and the package into the initramfs) over the
# guest kernel's vsock:
#
#   python_guest_agent.py serve PORT      echo one connection on vsock:any:PORT
#   python_guest_agent.py dial PORT SIZE  SIZE bytes to vsock:host:PORT (an echo
#                                         server on the host), the echo compared
#
# Prints what it did; exits 0 only when it all worked.
import os
import sys
import threading
import time

import vsx

mode, port = sys.argv[1], int(sys.argv[2])
if mode == "serve":
    with vsx.listen("vsock:any:%d" % port) as l:
        print("pyguest: listening on %s (transport %s)" % (l.info().local, l.info().transport))
        sys.stdout.flush()
        c, peer = l.accept()
        with c:
            n = 0
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d)
                n += len(d)
            i = c.info()
            print("pyguest: echoed %d bytes to %s on %s (transport %s)" %
                  (n, peer, i.local, i.transport))
    sys.exit(0 if n else 1)

size = int(sys.argv[3])
end = time.monotonic() + 60
while True:
    try:
        s = vsx.connect("vsock:host:%d" % port, timeout=10)
        break
    except (ConnectionRefusedError, TimeoutError):
        if time.monotonic() > end:
            raise
        time.sleep(0.2)
data = os.urandom(size)
t = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(vsx.SHUT_WR)))
t.start()
got = bytearray()
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
t.join()
i = s.info()
s.close()
ok = bytes(got) == data
print("pyguest: %d bytes to %s from %s (transport %s), the echo %s" %
      (size, i.peer, i.local, i.transport, "matches" if ok else "DIFFERS"))
if not ok:
    # where: the first byte that differs, and where the bytes found there
    # came from (a chunk out of place, or bytes of nowhere)
    n = min(len(got), size)
    off = next((k for k in range(0, n, 4096) if got[k:k + 4096] != data[k:k + 4096]), n)
    while off < n and got[off] == data[off]:
        off += 1
    print("pyguest: %d bytes echoed; first difference at %d; the 64 bytes there are "
          "at %d of what was sent" % (len(got), off, data.find(bytes(got[off:off + 64]))))
sys.exit(0 if ok else 1)
