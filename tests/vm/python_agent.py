# The host side of tests/vm/python-guest.test: a Python agent written with
# the vsx package, talking through vsxd to a real guest (echo_example in
# it). Host to guest: 64 MiB of random bytes to guest port 5000 over
# unix:UDS:5000 and to port 5001 over vm:cid3:5001, every echoed byte
# compared; guest to host: a vsx.asyncio server on unix:UDS:6000 echoing
# what echo_example's client sends and checks, once and then for 100
# clients at once; then a Python agent in the guest (python_guest_agent.py):
# 16 MiB each way to its echo server, and its 16 MiB to ours; last, every
# echo of our server flushed and closed before it goes. One "ok: ..." or
# "FAIL: ..." line per check; the exit status is the number of failures.
#
#   python_agent.py UDS CONTROL
import asyncio
import hashlib
import os
import sys
import threading
import time

import vsx
import vsx.asyncio

UDS, CTL = sys.argv[1], sys.argv[2]
SIZE = 64 << 20
failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok: " if ok else "FAIL: ") + what + (": " + detail if detail and not ok else ""))
    sys.stdout.flush()
    failures += not ok


def dial(addr):
    """vsx.connect, again while the guest boots (refused until it listens);
    the buffer is asked of vsxd, through its control socket."""
    end = time.monotonic() + 240
    while True:
        try:
            return vsx.connect(addr, timeout=10, buffer=1 << 20, control=CTL)
        except (ConnectionRefusedError, TimeoutError):
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def echo_round(addr, size=SIZE):
    """@size random bytes to the guest's echo server at @addr, the echo
    read back at the same time and compared; (ok, what it says). An error
    is a failed round, said, not the agent's end."""
    try:
        return _echo_round(addr, size)
    except OSError as e:
        return False, "%s: %r" % (addr, e)


def _echo_round(addr, size):
    s = dial(addr)
    data = os.urandom(size)
    got = bytearray(size)
    errs = []
    t0 = time.monotonic()

    def send():
        try:
            s.sendall(data)
            s.shutdown(vsx.SHUT_WR)
        except OSError as e:
            errs.append(e)
    t = threading.Thread(target=send)
    t.start()
    n, view, i = 0, memoryview(got), None
    while n < size:
        r = s.recv_into(view[n:])
        if not r:
            break
        n += r
        if i is None and n >= size // 2:
            i = s.info()    # mid-transfer: the connection is vsxd's to show
    t.join()
    took = time.monotonic() - t0
    if i is None:
        i = s.info()
    eof = s.recv(1) == b""
    s.close()
    same = n == size and hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    return (not errs and same and eof and i is not None and i.credit and
            i.buf_alloc == 1 << 20,
            "%s: %d of %d bytes echoed%s, %.1f s (%.1f MiB/s each way), transport %s, "
            "credit buf_alloc=%s peer_buf_alloc=%s%s" %
            (addr, n, size, " identical" if same else " DIFFERENT", took, size / took / 2 ** 20,
             i.transport, i.buf_alloc, i.peer_buf_alloc, " %r" % errs if errs else ""))


async def main():
    loop = asyncio.get_running_loop()
    served = asyncio.Event()
    echoed = []
    live, tasks_at_once = set(), []

    async def echo(reader, writer):
        live.add(writer)
        tasks_at_once.append(len(live))
        n = 0
        try:
            while True:
                d = await reader.read(65536)
                if not d:
                    break
                n += len(d)
                writer.write(d)
                await writer.drain()
        except OSError as e:
            # said, and counted as -1: the checks below then fail and show it
            print("echo: after %d bytes: %r" % (n, e))
            n = -1
        # counted once the peer's EOF came and every byte was handed to the
        # writer (a guest that powers off at once may reset the close); the
        # close flushes what the writer still holds, and main waits for it
        echoed.append(n)
        served.set()
        writer.close()
        try:
            await writer.wait_closed()
        except OSError as e:
            print("echo: closing after %d bytes: %r" % (n, e))
        live.discard(writer)

    # before the guest's client runs: it connects once it served 5000 and 5001
    async with await vsx.asyncio.start_server(echo, "unix:%s:6000" % UDS):
        ok, what = await loop.run_in_executor(None, echo_round, "unix:%s:5000" % UDS)
        check("host -> guest over unix: (hybrid), 64 MiB each way compared: " + what, ok)
        ok, what = await loop.run_in_executor(None, echo_round, "vm:cid3:5001")
        check("host -> guest over vm:cid3 (vsxd's control socket), 64 MiB each way "
              "compared: " + what, ok)
        try:
            await asyncio.wait_for(served.wait(), 240)
        except asyncio.TimeoutError:
            pass
        check("guest -> host: a vsx.asyncio server on unix:%s:6000 echoed the guest's "
              "connection (%s bytes)" % (UDS, echoed[:1]), served.is_set() and echoed[0] > 0)
        # then 100 clients of the guest at once, each checking its echo
        end = loop.time() + 300
        while len(echoed) < 101 and loop.time() < end:
            await asyncio.sleep(0.1)
        most = max(tasks_at_once, default=0)
        check("guest -> host: the server echoed 100 more connections (%d, %d at once at "
              "most), %d bytes each" % (len(echoed) - 1, most, echoed[-1] if echoed else 0),
              len(echoed) == 101 and all(n == echoed[0] for n in echoed))
        # Python in the guest: its echo server, then its client of ours
        ok, what = await loop.run_in_executor(None, echo_round, "unix:%s:5002" % UDS, 16 << 20)
        check("host -> a Python guest agent (vsx over the guest's vsock), 16 MiB each way "
              "compared: " + what, ok)
        end = loop.time() + 120
        while len(echoed) < 102 and loop.time() < end:
            await asyncio.sleep(0.1)
        check("a Python guest agent -> host: the server echoed its 16 MiB (%s)" %
              echoed[101:], echoed[101:] == [16 << 20])
        # An echo is counted at the peer's EOF, when its last bytes may still
        # be in the writer's buffer (drain() waits only below the high-water
        # mark): the server goes only once every writer flushed and closed,
        # or asyncio.run() would cancel those closes and drop what they hold
        # (the guest's echo would end short).
        end = loop.time() + 120
        while live and loop.time() < end:
            await asyncio.sleep(0.1)
        check("every echo flushed and closed before the server went (%d still "
              "open)" % len(live), not live)


asyncio.run(main())
sys.exit(min(failures, 100))
