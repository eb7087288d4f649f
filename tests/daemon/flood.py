#!/usr/bin/env python3
"""Connection flooding for fdflood.test: an echo server, and a client that
takes a vsxd's descriptors through a forward and gives them back.

  flood.py echo PORT
      echo every byte back, on 127.0.0.1:PORT, until killed; prints "ready".
  flood.py flood FWD_PORT HELD WAITING [unix:PATH | tcp:PORT]...
      opens HELD connections to 127.0.0.1:FWD_PORT one by one, each checked
      with a one-byte round trip (vsxd relays it); then WAITING more, which
      nobody accepts, and one to each other listener given; prints "held"
      and waits for a line on standard input. Then it closes the HELD ones,
      and checks that each WAITING one is served: SIZE bytes of a pattern
      sent, the same bytes echoed back; then one new connection likewise.
      Prints "served N/WAITING" and "fresh ok"; exit 0 only if all was.
Every blocking step is bounded by a 30 s timeout."""
import socket
import sys
import threading

SIZE = 65536
TIMEOUT = 30


def pattern(seed, n):
    return bytes((seed * 131 + i * 7) & 0xff for i in range(n))


def serve(c):
    with c:
        while True:
            b = c.recv(65536)
            if not b:
                return
            c.sendall(b)


def echo(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(256)
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def roundtrip(c, seed, n):
    data = pattern(seed, n)
    c.settimeout(TIMEOUT)
    c.sendall(data)
    got = b""
    while len(got) < n:
        b = c.recv(n - len(got))
        if not b:
            break
        got += b
    return got == data


def connect(addr):
    if addr.startswith("unix:"):
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(TIMEOUT)
        c.connect(addr[5:])
    else:
        c = socket.create_connection(("127.0.0.1", int(addr.split(":")[-1])), TIMEOUT)
    return c


def flood(port, held, waiting, others):
    fwd = "tcp:%d" % port
    hs = []
    for i in range(held):
        c = connect(fwd)
        if not roundtrip(c, i, 1):
            print("held connection %d: no echo" % i, flush=True)
            return 1
        hs.append(c)
    ws = [connect(fwd) for _ in range(waiting)]
    oth = [connect(a) for a in others]
    print("held %d, waiting %d, others %d" % (len(hs), len(ws), len(oth)), flush=True)
    sys.stdin.readline()
    for c in hs:
        c.close()
    ok = sum(roundtrip(c, 100 + i, SIZE) for i, c in enumerate(ws))
    print("served %d/%d" % (ok, waiting), flush=True)
    c = connect(fwd)
    fresh = roundtrip(c, 999, SIZE)
    print("fresh %s" % ("ok" if fresh else "failed"), flush=True)
    for c in ws + oth:
        c.close()
    return 0 if ok == waiting and fresh else 1


if __name__ == "__main__":
    if sys.argv[1] == "echo":
        echo(int(sys.argv[2]))
    else:
        sys.exit(flood(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]))
