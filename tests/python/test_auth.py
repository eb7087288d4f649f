# Pre-shared keys (vsx_auth(7)) from Python: vsx.connect(key_file=) and a
# keyed vsx.listen, and vsx.asyncio's, through a stand-in for a hybrid
# backend's uds-path (CONNECT P answered OK, then relayed to PATH_P, where
# the listener is), as vsxd relays a guest's connection.
import asyncio
import errno
import os
import select
import socket
import threading

import pytest

import vsx
import vsx.asyncio
from conftest import need_auth


class Backend:
    """A Unix socket at @path that answers "CONNECT P" with "OK 1" and
    relays the rest to @path_P, one thread per connection."""

    def __init__(self, path):
        self.path = path
        self.l = socket.socket(socket.AF_UNIX)
        self.l.bind(path)
        self.l.listen(8)
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def serve(self):
        while True:
            try:
                c, _ = self.l.accept()
            except OSError:
                return
            threading.Thread(target=self.relay, args=(c,), daemon=True).start()

    def relay(self, c):
        line = b""
        while not line.endswith(b"\n"):
            d = c.recv(1)
            if not d:
                return c.close()
            line += d
        port = int(line.split()[1])
        b = socket.socket(socket.AF_UNIX)
        b.connect("%s_%d" % (self.path, port))
        c.sendall(b"OK 1\n")
        ends = {c: b, b: c}
        while ends:
            for r in select.select(list(ends), [], [], 10)[0]:
                d = r.recv(65536)
                if d:
                    ends[r].sendall(d)
                else:
                    ends[r].shutdown(socket.SHUT_WR)
                    del ends[r]
        c.close()
        b.close()

    def close(self):
        self.l.close()


def key(tmp_path, name, byte):
    p = tmp_path / name
    p.write_bytes(bytes([byte]) * 32)
    p.chmod(0o600)
    return str(p)


@pytest.fixture
def backend(tmp_path):
    need_auth(tmp_path)
    b = Backend(str(tmp_path / "vm.vsock"))
    yield b
    b.close()


def test_keyed_connect_and_accept(tmp_path, backend):
    k = key(tmp_path, "k", 7)
    with vsx.listen("unix:%s:9000" % backend.path, key_file=k, timeout=5) as l:
        assert l.info().authenticated
        got = []

        def server():
            c, _ = l.accept()
            with c:
                got.append(c.info().authenticated)
                c.sendall(c.recv(100))
                got.append(c.recv(1))
        t = threading.Thread(target=server)
        t.start()
        with vsx.connect("unix:%s:9000" % backend.path, key_file=k, timeout=5) as s:
            i = s.info()
            assert i.authenticated and i.flags & vsx.INFO_AUTH
            s.sendall(b"after the proofs")
            assert s.recv(100) == b"after the proofs"
            s.shutdown(socket.SHUT_WR)
            t.join(10)
        assert got == [True, b""]


def test_wrong_key_is_permission_error_both_sides(tmp_path, backend):
    with vsx.listen("unix:%s:9001" % backend.path, key_file=key(tmp_path, "a", 1),
                    timeout=5) as l:
        errs = []

        def server():
            try:
                l.accept()
            except OSError as e:
                errs.append(e)
        t = threading.Thread(target=server)
        t.start()
        with pytest.raises(PermissionError) as e:
            vsx.connect("unix:%s:9001" % backend.path, key_file=key(tmp_path, "b", 2),
                        timeout=5)
        assert e.value.errno == errno.EACCES and isinstance(e.value, vsx.Error)
        t.join(10)
        assert len(errs) == 1 and errs[0].errno in (errno.EACCES, errno.ETIMEDOUT)
        assert isinstance(errs[0], vsx.Error)


def test_asyncio_keyed_server_and_client(tmp_path, backend):
    k = key(tmp_path, "k", 9)

    async def main():
        async def echo(r, w):
            w.write(await r.readexactly(5))
            await w.drain()
            w.close()
        async with await vsx.asyncio.start_server(echo, "unix:%s:9002" % backend.path,
                                                  key_file=k, timeout=5):
            r, w = await vsx.asyncio.open_connection("unix:%s:9002" % backend.path,
                                                     key_file=k, timeout=5)
            w.write(b"hello")
            assert await r.readexactly(5) == b"hello"
            w.close()
            await w.wait_closed()
            # a client without the key: the server refuses it and goes on
            with pytest.raises(OSError):
                r2, w2 = await vsx.asyncio.open_connection(
                    "unix:%s:9002" % backend.path, key_file=key(tmp_path, "x", 3), timeout=5)
            r, w = await vsx.asyncio.open_connection("unix:%s:9002" % backend.path,
                                                     key_file=k, timeout=5)
            w.write(b"again")
            assert await r.readexactly(5) == b"again"
            w.close()
            await w.wait_closed()
    asyncio.run(asyncio.wait_for(main(), 30))
