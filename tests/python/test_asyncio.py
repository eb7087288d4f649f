# vsx.asyncio: open_connection and start_server, through a real vsxd with
# fake_guest (conftest.py) and over plain Unix sockets; the connect
# handshake does not block the event loop.
import asyncio
import errno
import os
import socket

import pytest

import vsx
import vsx.asyncio
from conftest import pattern


def run(coro, timeout=30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_open_connection_through_vsxd(daemon, guest):
    async def main():
        loop = asyncio.get_running_loop()
        assert guest.cmd("listen 5101")
        r, w = await vsx.asyncio.open_connection("unix:%s:5101" % daemon.uds, timeout=10)
        w.write(pattern(2, 200000))
        # the guest's commands block: they run beside the loop
        ok = loop.run_in_executor(None, guest.cmd, "grecv 200000")
        await w.drain()
        assert await ok, guest.line
        got = b""
        for _ in range(3):
            assert await loop.run_in_executor(None, guest.cmd, "gsend 50000"), guest.line
            got += await r.readexactly(50000)
        assert got == pattern(1, 150000)
        assert await loop.run_in_executor(None, guest.cmd, "gshut 3")
        assert await r.read() == b""
        w.close()
        await w.wait_closed()
    run(main())


def test_open_connection_vm_name(daemon, guest):
    async def main():
        loop = asyncio.get_running_loop()
        assert guest.cmd("listen 5102")
        r, w = await vsx.asyncio.open_connection("vm:web:5102", control=daemon.ctl)
        assert w.get_extra_info("socket").family == socket.AF_UNIX   # vsxd's hybrid socket
        w.write(pattern(2, 1000))
        await w.drain()
        assert await loop.run_in_executor(None, guest.cmd, "grecv 1000"), guest.line
        assert await loop.run_in_executor(None, guest.cmd, "gsend 1000")
        assert await r.readexactly(1000) == pattern(1, 1000)
        w.close()
        await w.wait_closed()
    run(main())


def test_connect_does_not_block_the_loop(tmp_path):
    path = str(tmp_path / "silent")
    l = socket.socket(socket.AF_UNIX)
    l.bind(path)
    l.listen(4)                        # accepts, never answers CONNECT

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
        t = asyncio.ensure_future(ticker())
        with pytest.raises(TimeoutError) as e:
            await vsx.asyncio.open_connection("unix:%s:5000" % path, timeout=0.5)
        t.cancel()
        assert e.value.errno == errno.ETIMEDOUT
        assert ticks >= 20, ticks
        with pytest.raises(ConnectionRefusedError):
            await vsx.asyncio.open_connection("unix:%s:5000" % (tmp_path / "none"))
        with pytest.raises(TypeError):
            await vsx.asyncio.open_connection(5000)
    run(main())
    l.close()


def test_start_server_for_a_guest(daemon, guest):
    async def main():
        loop = asyncio.get_running_loop()
        done, ended = asyncio.Event(), asyncio.Event()
        seen = []

        async def handle(r, w):
            data = await r.readexactly(100000)
            seen.append(data == pattern(1, 100000))
            w.write(pattern(2, 60000))
            await w.drain()
            done.set()
            seen.append(await r.read() == b"")    # the guest's end
            w.close()
            await w.wait_closed()
            ended.set()

        async with await vsx.asyncio.start_server(handle, "unix:%s:6101" % daemon.uds) as srv:
            assert srv.is_serving() and srv.address.startswith("unix:")
            assert await loop.run_in_executor(None, guest.cmd, "gconnect 6101"), guest.line
            assert await loop.run_in_executor(None, guest.cmd, "gsend 100000"), guest.line
            assert await loop.run_in_executor(None, guest.cmd, "grecv 60000"), guest.line
            await done.wait()
            assert await loop.run_in_executor(None, guest.cmd, "gshut 3"), guest.line
            await ended.wait()
        assert seen == [True, True]
        assert not os.path.exists("%s_6101" % daemon.uds)   # the listener went with it
    run(main())


def test_start_server_many_clients(tmp_path):
    base = str(tmp_path / "vm.vsock")

    async def main():
        async def echo(r, w):
            while True:
                d = await r.read(65536)
                if not d:
                    break
                w.write(d)
                await w.drain()
            w.close()

        srv = await vsx.asyncio.start_server(echo, "unix:%s:7000" % base)

        async def client(i):
            # a plain Unix client, as vsxd connects for a guest
            r, w = await asyncio.open_unix_connection(base + "_7000")
            data = pattern(i % 7, 20000 + i)
            w.write(data)
            w.write_eof()
            got = await r.read()
            w.close()
            return got == data
        results = await asyncio.gather(*(client(i) for i in range(100)))
        srv.close()
        await srv.wait_closed()
        assert all(results)
        assert not srv.is_serving()
    run(main())
