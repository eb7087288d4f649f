# What handoff_relays.py and restart_relays.py share: relays of a vsxd
# forward (listen=tcp:127.0.0.1:PORT, connect=unix:PATH, a plain Unix
# listener the test runs) caught mid-transfer, vsxd holding bytes each way
# at the freeze, then checked to the last byte.
import hashlib
import os
import re
import socket
import threading

import vsxdtest
from vsxdtest import check, wait_for


def forward_spec(port, path, name="relayed"):
    return "listen=tcp:127.0.0.1:%d,connect=unix:%s,name=%s" % (port, path, name)


class Target:
    """The forward's connect side: a plain Unix listener at @path; with
    @hybrid, a hybrid vsock one (connect=unix:PATH:PORT: vsxd's side is a
    libvsx socket), which answers each CONNECT with OK."""

    def __init__(self, path, hybrid=False):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.bind(path)
        self.s.listen(16)
        self.s.settimeout(15)
        self.hybrid = hybrid

    def accept(self):
        c, _ = self.s.accept()
        c.settimeout(60)
        if self.hybrid:
            line = b""
            while not line.endswith(b"\n"):
                d = c.recv(1)
                if not d:
                    break
                line += d
            if line.startswith(b"CONNECT "):
                c.sendall(b"OK 1024\n")
        return c

    def close(self):
        self.s.close()


def read_to_eof(s, limit):
    """What @s gives until EOF (at most @limit bytes): (bytes, saw EOF)."""
    got = []
    n = 0
    try:
        while n <= limit:
            d = s.recv(1 << 20)
            if not d:
                return b"".join(got), True
            got.append(d)
            n += len(d)
    except OSError:
        pass
    return b"".join(got), False


class Transfer:
    """A client through the forward on @port and the target's end of it
    (accepted from @target). The client sends @up bytes and then shuts its
    sending side; the target sends @down bytes; both from threads, and
    neither end reads until finish(), so that what the sockets do not take
    waits in vsxd's relay."""

    def __init__(self, port, target, up, down):
        self.c = socket.socket()
        # a small window (no autotuning): what it does not take stays in
        # vsxd's sockets and relay, not in the client's kernel
        self.c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.c.settimeout(60)
        self.c.connect(("127.0.0.1", port))
        self.t = target.accept()
        self.up, self.down = os.urandom(up), os.urandom(down)
        self.errors = []
        self.threads = [threading.Thread(target=self._send, args=a, daemon=True)
                        for a in ((self.c, self.up, True), (self.t, self.down, False))]
        for th in self.threads:
            th.start()

    def _send(self, s, data, shut):
        try:
            s.sendall(data)
            if shut:
                s.shutdown(socket.SHUT_WR)
        except OSError as e:
            self.errors.append(str(e))

    def sent(self):
        """Has each end written all it had to?"""
        return not any(th.is_alive() for th in self.threads)

    def finish(self):
        """Both ends read: the target every byte of the client's and its
        EOF, then the target shuts its sending side and the client reads
        every byte of the target's and the EOF. (a description, True when
        every byte arrived in order both ways with the EOFs)"""
        res = {}

        def at_target():
            res["t"] = read_to_eof(self.t, len(self.up))
            try:
                for th in self.threads:
                    th.join(60)
                self.t.shutdown(socket.SHUT_WR)
            except OSError as e:
                self.errors.append(str(e))
        th = threading.Thread(target=at_target, daemon=True)
        th.start()
        res["c"] = read_to_eof(self.c, len(self.down))
        th.join(60)
        up, up_eof = res.get("t", (b"", False))
        down, down_eof = res.get("c", (b"", False))
        ok = (up == self.up and up_eof and down == self.down and down_eof and
              not self.errors)
        what = ("to the target %d of %d bytes (%s), EOF %s; to the client %d of %d "
                "(%s), EOF %s%s" % (len(up), len(self.up), "same" if up == self.up
                                    else "DIFFER", up_eof, len(down), len(self.down),
                                    "same" if down == self.down else "DIFFER",
                                    down_eof, "; " + ", ".join(self.errors)
                                    if self.errors else ""))
        self.c.close()
        self.t.close()
        return what, ok


def relays(vsxctl, ctl):
    """vsxctl list's relayed connections: {id: record}."""
    return {int(r["conn"]): r for r in vsxdtest.conn_list(vsxctl, ctl)
            if r.get("origin") == "relay"}


def mid_transfer(vsxctl, ctl, port, target):
    """Two relays mid-transfer: one moving 6 MiB each way (the client's
    end shut after its bytes), one whose client sent 100 KB and shut its
    sending side (the EOF passed on: closing) while 6 MiB come back; the
    peers read nothing, so vsxd holds bytes in both of each relay's
    directions but the closed one. (the Transfers, their relay ids), or
    None when that state is not reached (said)."""
    big = Transfer(port, target, 6 << 20, 6 << 20)
    ids = wait_for(lambda: len(relays(vsxctl, ctl)) == 1) and list(relays(vsxctl, ctl))
    half = Transfer(port, target, 100000, 6 << 20)
    ok = ids and wait_for(lambda: len(relays(vsxctl, ctl)) == 2)
    if ok:
        ids.append([i for i in relays(vsxctl, ctl) if i != ids[0]][0])
    # until nothing moves any more (three listings alike: the peers read
    # nothing, and 6 MiB is more than the sockets toward them hold): then
    # vsxd's buffers toward them are full (after() reads what the new
    # process says it held)
    seen = []

    def full():
        rl = relays(vsxctl, ctl)
        q = {i: int(r.get("queued", 0)) for i, r in rl.items()}
        seen.append(q)
        return (len(q) == 2 and all(q.values()) and seen[-3:] == [q] * 3 and
                rl[ids[1]].get("state") == "closing")
    ok = ok and wait_for(full, 20)
    rl = relays(vsxctl, ctl)
    if not check("two relays mid-transfer, vsxd holding bytes: %s"
                 % {i: (r.get("state"), r.get("queued")) for i, r in rl.items()},
                 bool(ok)):
        return None
    return (big, half), ids


def held(log, rid):
    """What the new process's log says relay @rid held when it took it:
    (to the target, to the client), or None."""
    m = re.findall(r"conn=%d .*: handed over, goes on \((\d+) bytes held to the "
                   r"target, (\d+) to the client\)" % rid, log)
    return tuple(int(v) for v in m[-1]) if m else None


def after(vsxctl, ctl, transfers, ids, what, log):
    """The relays of mid_transfer once vsxd went on (@what: where; @log:
    the new process's log): it took them holding bytes (both ways; the
    half-closed one to its client), the same ids listed, every byte of
    each arrives checked both ways with the EOFs, and they end."""
    h = [held(log, i) for i in ids]
    check("%s: the new process took them holding bytes both ways (%s)" % (what, h),
          h[0] and h[1] and h[0][0] > 0 and h[0][1] > 0 and h[1][0] == 0 and
          h[1][1] > 0)
    rl = relays(vsxctl, ctl)
    check("%s: vsxctl list shows the relays under the same ids (%s)" % (what, ids),
          sorted(rl) == sorted(ids), str(rl))
    for t, name in zip(transfers, ("6 MiB each way", "half-closed")):
        desc, ok = t.finish()
        check("%s: the relay of %s goes on: %s" % (what, name, desc), ok)
    check("%s: both relays ended" % what, wait_for(lambda: not relays(vsxctl, ctl)),
          str(relays(vsxctl, ctl)))


def closed(s):
    """Does @s see its connection end (EOF, or a reset: vsxd's end closed
    with bytes of ours unread), after what came before, within its
    timeout?"""
    try:
        while s.recv(1 << 20):
            pass
        return True
    except ConnectionResetError:
        return True
    except OSError:
        return False


def ended(got, what):
    """The relays of mid_transfer (@got) did not go on (@what: why): each
    client sees its connection end."""
    for t in (got[0] if got else []):
        check("%s: the relay ended (its client saw the connection end)" % what,
              closed(t.c))
        t.c.close()
        t.t.close()


def new_conn(port, target, what):
    """A new connection through the forward: 70000 bytes each way, echoed
    by the target, the end passed on."""
    data = os.urandom(70000)
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=30)
        t = target.accept()
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        got, eof = read_to_eof(t, len(data))
        t.sendall(hashlib.sha256(got).digest())
        t.close()
        back, eof2 = read_to_eof(c, 64)
        c.close()
        ok = got == data and eof and eof2 and back == hashlib.sha256(data).digest()
    except OSError as e:
        ok = False
        print("  " + str(e))
    check("%s: a new connection through the forward works both ways" % what, ok)
