"""asyncio streams over vsx addresses (vsx-python(7), ASYNCIO).

    reader, writer = await vsx.asyncio.open_connection("vm:web:5000")
    server = await vsx.asyncio.start_server(handle, "unix:/run/vm3.vsock:6000")

libvsx's connect blocks (the hybrid CONNECT handshake, a vm: name asked of
vsxd, the key handshake): it runs in the loop's default executor, so the
event loop goes on meanwhile. The connected descriptor is then handed to
asyncio as a plain socket.socket (AF_VSOCK or AF_UNIX, which asyncio
drives like any other): the streams are asyncio's own, and closing the
writer closes the connection the way asyncio closes sockets, without
libvsx's bounded linger. Buffer and key options are applied by libvsx
before the hand-over.
"""
import asyncio as _asyncio
import socket as _socket

from . import _vsx

__all__ = ["open_connection", "start_server", "Server"]


def _handover(s):
    """A plain socket.socket for vsx socket @s, whose descriptor it takes
    over: @s was opened with linger=0, so closing it only closes its own
    descriptor (no shutdown: the duplicate lives on), and is closed here."""
    try:
        fd = _socket.dup(s.fileno())
        sock = _socket.socket(fileno=fd)
    finally:
        s.close()
    sock.setblocking(False)
    return sock


async def open_connection(address, *, limit=2 ** 16, timeout=None, buffer=None,
                          key_file=None, transport=None, control=None, **kwds):
    """Connect to @address as vsx.connect() does, without blocking the
    event loop, and return asyncio's (StreamReader, StreamWriter) for it.
    @timeout bounds the connect only (None: libvsx's 2 s); @kwds go to
    asyncio.open_connection (e.g. ssl=None is not useful here)."""
    loop = _asyncio.get_running_loop()

    def dial():
        return _vsx.connect(address, timeout=timeout, buffer=buffer, key_file=key_file,
                            transport=transport, control=control, linger=0)

    s = await loop.run_in_executor(None, dial)
    return await _asyncio.open_connection(sock=_handover(s), limit=limit, **kwds)


class Server:
    """What start_server returns: an asyncio-like server accepting on a vsx
    listener. The listener stays libvsx's (a unix: listener's PATH_PORT is
    removed when it closes; a key handshake runs in libvsx's accept), and
    each accepted connection becomes asyncio streams passed to the
    callback. Use it as an async context manager, or close() and
    await wait_closed()."""

    def __init__(self, listener, cb, limit, loop):
        self._l = listener
        self._cb = cb
        self._limit = limit
        self._loop = loop
        self._closed = _asyncio.Event()
        self._tasks = set()
        self._keyed = listener.info().authenticated
        listener.settimeout(0.0)
        loop.add_reader(listener.fileno(), self._readable)

    @property
    def address(self):
        """The listener's address text (vsx.Socket.info().local)."""
        return self._l.info().local if not self._l.closed else ""

    def fileno(self):
        return self._l.fileno()

    def is_serving(self):
        return not self._l.closed

    def _readable(self):
        if self._keyed:
            # The key handshake blocks for up to the connect timeout.
            self._loop.remove_reader(self._l.fileno())
            self._spawn(self._accept_keyed())
            return
        try:
            conn, _ = self._l.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return  # this attempt failed (vsx_accept(3)); the listener goes on
        self._spawn(self._serve(conn))

    async def _accept_keyed(self):
        try:
            self._l.settimeout(None)
            conn, _ = await self._loop.run_in_executor(None, self._l.accept)
        except OSError:
            conn = None
        finally:
            if not self._l.closed:
                self._l.settimeout(0.0)
                self._loop.add_reader(self._l.fileno(), self._readable)
        if conn:
            await self._serve(conn)

    def _spawn(self, coro):
        t = self._loop.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _serve(self, conn):
        reader, writer = await _asyncio.open_connection(sock=_handover(conn),
                                                        limit=self._limit)
        r = self._cb(reader, writer)
        if _asyncio.iscoroutine(r):
            await r

    def close(self):
        """Stop accepting and close the listener (connections go on)."""
        if not self._l.closed:
            self._loop.remove_reader(self._l.fileno())
            self._l.close()
        self._closed.set()

    async def wait_closed(self):
        await self._closed.wait()

    async def serve_forever(self):
        await self._closed.wait()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()
        await self.wait_closed()


async def start_server(client_connected_cb, address, *, limit=2 ** 16, backlog=0,
                       buffer=None, key_file=None, timeout=None, transport=None):
    """Listen on @address as vsx.listen() does ('unix:PATH:PORT' binds
    PATH_PORT, where vsxd connects for a guest's connection to host port
    PORT) and call client_connected_cb(reader, writer) for every connection
    (a coroutine function is run as a task). Returns a Server."""
    loop = _asyncio.get_running_loop()
    l = _vsx.listen(address, backlog=backlog, buffer=buffer, key_file=key_file,
                    timeout=timeout, transport=transport, linger=0)
    return Server(l, client_connected_cb, limit, loop)
