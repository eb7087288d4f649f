# vsx without vsxd: addresses, errors by errno, timeouts, closed sockets,
# adopt(), probe() on fake sysfs trees, threads, over plain Unix sockets
# (a hybrid stream is a Unix socket once its handshake is done).
import errno
import os
import socket
import threading
import time

import pytest

import vsx
from conftest import need_auth, pattern


def test_every_address_form_parses():
    assert vsx.parse_address("vsock:host:5000") == ("vsock", 2, 5000, None, None)
    assert vsx.parse_address("vsock:local:1") == ("vsock", 1, 1, None, None)
    assert vsx.parse_address("vsock:any:any") == ("vsock", vsx.CID_ANY, vsx.PORT_ANY, None, None)
    assert vsx.parse_address("vsock:3:4294967295")[1:3] == (3, 4294967295)
    assert vsx.parse_address("hvsock:{00000808-FACB-11E6-BD58-64006A7986D3}") == \
        ("hvsock", None, 2056, "00000808-facb-11e6-bd58-64006a7986d3", None)
    # PATH may hold ':': the last one separates the port
    assert vsx.parse_address("unix:/run/a:b.vsock:7") == ("unix", None, 7, None, "/run/a:b.vsock")
    assert vsx.parse_address("vm:web:5000") == ("vm", None, 5000, None, "web")


def test_canonical_text():
    assert vsx.format_address("vsock:host:5000") == "vsock:2:5000"
    assert vsx.format_address("vsock:any:80") == "vsock:any:80"
    assert vsx.format_address("hvsock:{00000808-FACB-11E6-BD58-64006A7986D3}") == \
        "hvsock:00000808-facb-11e6-bd58-64006a7986d3"
    assert vsx.format_address("unix:/x:1") == "unix:/x:1"


def test_guids():
    assert vsx.guid_from_port(2056) == "00000808-facb-11e6-bd58-64006a7986d3"
    assert vsx.guid_to_port("{00000808-FACB-11e6-bd58-64006a7986d3}") == 2056
    with pytest.raises(vsx.Error) as e:
        vsx.guid_to_port("00000808-0000-11e6-bd58-64006a7986d3")   # not the template
    assert e.value.errno == errno.EINVAL
    with pytest.raises(vsx.Error):
        vsx.guid_to_port("nope")
    with pytest.raises(OverflowError):
        vsx.guid_from_port(1 << 32)


@pytest.mark.parametrize("bad, says", [
    ("", "unknown kind"), ("tcp:1.2.3.4:5", "unknown kind"), ("vsock:5000", "vsock:CID:PORT"),
    ("vsock:nohost:1", "CID"), ("vsock:2:99999999999", "port"), ("unix:/p", "unix:PATH:PORT"),
    ("unix:/p:x", "port"), ("vm::1", "name"), ("hvsock:1234", "GUID"),
    ("unix:/" + "a" * 200 + ":1", "path"),
])
def test_bad_addresses_are_einval_saying_what(bad, says):
    with pytest.raises(vsx.Error) as e:
        vsx.parse_address(bad)
    assert e.value.errno == errno.EINVAL
    assert says.lower() in e.value.strerror.lower(), e.value.strerror
    # and connect refuses them the same way, before any socket (a host
    # test never gives connect a vsock address: conftest.py)
    if not bad.startswith(("vsock:", "hvsock:")):
        with pytest.raises(vsx.Error) as e2:
            vsx.connect(bad, timeout=1)
        assert e2.value.errno == errno.EINVAL


def test_non_str_address_is_typeerror():
    for bad in (None, 5000, b"unix:/x:1", ["unix:/x:1"]):
        with pytest.raises(TypeError):
            vsx.connect(bad)
        with pytest.raises(TypeError):
            vsx.listen(bad)
        with pytest.raises(TypeError):
            vsx.parse_address(bad)
    with pytest.raises(ValueError):
        vsx.connect("unix:/x\0y:1")


def test_error_classes_carry_errno_and_builtin_kind(tmp_path):
    with pytest.raises(ConnectionRefusedError) as e:
        vsx.connect("unix:%s:5000" % (tmp_path / "nobody"), timeout=1)
    assert isinstance(e.value, vsx.Error) and isinstance(e.value, OSError)
    assert type(e.value) is vsx.ConnectionRefusedError
    assert e.value.errno == errno.ECONNREFUSED
    assert "nobody" in e.value.strerror     # libvsx's detail, not strerror(3)'s
    assert issubclass(vsx.TimeoutError, TimeoutError) and issubclass(vsx.TimeoutError, vsx.Error)
    assert issubclass(vsx.BrokenPipeError, BrokenPipeError)
    assert vsx.strerror(-errno.EPIPE) == os.strerror(errno.EPIPE)


def test_bad_options():
    with pytest.raises(ValueError):
        vsx.connect("unix:/x:1", timeout=-1)
    with pytest.raises(TypeError):
        vsx.connect("unix:/x:1", timeout="soon")
    with pytest.raises(vsx.Error) as e:
        vsx.connect("unix:/x:1", buffer=0)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(vsx.Error) as e:
        vsx.connect("unix:/x:1", transport="carrier-pigeon")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(TypeError):
        vsx.connect("unix:/x:1", 5)    # options are keywords
    with pytest.raises(TypeError):
        vsx.Socket()


def test_key_file_errors(tmp_path):
    need_auth(tmp_path)
    with pytest.raises(FileNotFoundError) as e:
        vsx.connect("unix:/x:1", key_file=str(tmp_path / "none"))
    assert e.value.errno == errno.ENOENT and isinstance(e.value, vsx.Error)
    k = tmp_path / "key"
    k.write_bytes(b"k" * 32)
    k.chmod(0o644)
    with pytest.raises(PermissionError) as e:
        vsx.connect("unix:/x:1", key_file=k)    # a PathLike too
    assert e.value.errno == errno.EACCES


def silent_listener(tmp_path):
    """A Unix socket that accepts (the kernel's backlog does) and never
    answers CONNECT."""
    path = str(tmp_path / "silent")
    l = socket.socket(socket.AF_UNIX)
    l.bind(path)
    l.listen(4)
    return l, path


def test_connect_timeout(tmp_path):
    l, path = silent_listener(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        vsx.connect("unix:%s:5000" % path, timeout=0.3)
    took = time.monotonic() - t0
    l.close()
    assert e.value.errno == errno.ETIMEDOUT and isinstance(e.value, vsx.Error)
    assert 0.25 <= took < 2.0, took


def test_connect_releases_the_gil(tmp_path):
    l, path = silent_listener(tmp_path)
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)
    t = threading.Thread(target=tick)
    t.start()
    with pytest.raises(TimeoutError):
        vsx.connect("unix:%s:5000" % path, timeout=0.5)
    stop.set()
    t.join()
    l.close()
    assert len(ticks) >= 10, len(ticks)


def pair(linger=0.2):
    """A vsx socket adopted from one end of a Unix socketpair, and the
    plain other end; its close waits @linger seconds for the other end."""
    a, b = socket.socketpair()
    return vsx.adopt(a, linger=linger), b


def test_adopt_a_socket_and_move_bytes():
    a, b = socket.socketpair()
    s = vsx.adopt(a)
    assert a.fileno() == -1           # detached: the vsx socket owns it now
    assert s.fileno() >= 0
    i = s.info()
    assert i.transport == "hybrid" and i.state == "connected" and not i.credit
    assert i.buf_alloc is None and i.tx_free is None
    data = pattern(2, 300000)
    t = threading.Thread(target=s.sendall, args=(data,))
    t.start()
    got = bytearray()
    while len(got) < len(data):
        got += b.recv(65536)
    t.join()
    assert bytes(got) == data
    b.sendall(pattern(1, 1000))
    buf = bytearray(1000)
    n = 0
    while n < 1000:
        n += s.recv_into(memoryview(buf)[n:])
    assert bytes(buf) == pattern(1, 1000)
    i = s.info()
    assert (i.bytes_sent, i.bytes_received) == (300000, 1000)
    b.close()
    assert s.recv(10) == b""           # the peer's end
    assert s.info().state == "closing"
    assert s.close() is True
    assert s.closed


def test_adopt_an_fd_and_bad_ones(tmp_path):
    a, b = socket.socketpair()
    s = vsx.adopt(a.detach())
    s.send(b"hi")
    assert b.recv(2) == b"hi"
    b.close()
    s.close()
    with pytest.raises(vsx.Error) as e:
        vsx.adopt(987654)
    assert e.value.errno == errno.EBADF
    r, w = os.pipe()
    with pytest.raises(vsx.Error) as e:
        vsx.adopt(r)
    assert e.value.errno == errno.ENOTSOCK
    os.close(r)
    os.close(w)
    with socket.socket(socket.AF_INET) as inet:
        inet.bind(("127.0.0.1", 0))
        with pytest.raises(vsx.Error) as e:
            vsx.adopt(inet)
        assert e.value.errno == errno.EAFNOSUPPORT
        assert inet.fileno() >= 0      # failure leaves it the caller's
    with socket.socket(socket.AF_UNIX) as u:
        with pytest.raises(vsx.Error) as e:
            vsx.adopt(u)
        assert e.value.errno == errno.ENOTCONN
    with pytest.raises(TypeError):
        vsx.adopt("3")


def test_closed_socket_raises_ebadf():
    s, b = pair()
    s.close()
    assert s.fileno() == -1 and s.closed
    for call in (lambda: s.send(b"x"), lambda: s.sendall(b"x"), lambda: s.recv(1),
                 lambda: s.recv_into(bytearray(1)), s.info, lambda: s.shutdown(1),
                 lambda: s.get_buffer(vsx.RX), lambda: s.set_buffer(vsx.RX, 4096),
                 s.accept):
        with pytest.raises(vsx.Error) as e:
            call()
        assert e.value.errno == errno.EBADF
    assert s.close() is True           # twice: nothing
    assert "closed" in repr(s)
    b.close()


def test_close_is_bounded_by_linger():
    s, b = pair(linger=0.3)
    t0 = time.monotonic()
    assert s.close() is False           # the peer did not finish: reset
    assert 0.25 <= time.monotonic() - t0 < 2.0
    assert b.recv(1) == b""
    b.close()
    s, b = pair(linger=0)               # 0: close does not wait
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 0.2
    b.close()


def test_context_manager_closes():
    a, b = socket.socketpair()
    with vsx.adopt(a, linger=0.2) as s:
        s.sendall(b"x")
    assert s.closed
    assert b.recv(1) == b"x" and b.recv(1) == b""
    b.close()


def test_timeouts_as_the_socket_module_has_them():
    s, b = pair()
    assert s.gettimeout() is None and s.getblocking()
    s.settimeout(0.2)
    assert s.gettimeout() == 0.2 and s.timeout == 0.2 and s.getblocking()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        s.recv(10)
    assert 0.15 <= time.monotonic() - t0 < 2.0
    assert e.value.errno == errno.ETIMEDOUT and isinstance(e.value, vsx.Error)
    s.setblocking(False)
    assert s.gettimeout() == 0.0 and not s.getblocking()
    with pytest.raises(BlockingIOError) as e:
        s.recv(10)
    assert e.value.errno == errno.EAGAIN
    s.setblocking(True)
    assert s.gettimeout() is None
    with pytest.raises(ValueError):
        s.settimeout(-1)
    with pytest.raises(TypeError):
        s.settimeout("x")
    # a send that cannot go on: the timeout bounds the whole sendall
    s.settimeout(0.3)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        s.sendall(b"x" * (64 << 20))
    assert time.monotonic() - t0 < 3.0
    # non-blocking send: what fits, then BlockingIOError
    s.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            s.send(b"y" * 65536)
    s.close()
    b.close()


def test_peer_reset_and_broken_pipe():
    s, b = pair()
    s.send(b"unread")
    b.close()                           # with our bytes unread: a reset
    with pytest.raises(ConnectionResetError) as e:
        s.recv(10)
    assert e.value.errno == errno.ECONNRESET and isinstance(e.value, vsx.Error)
    with pytest.raises(BrokenPipeError) as e:
        s.sendall(b"more")
    assert e.value.errno == errno.EPIPE
    s.close()


def test_shutdown():
    s, b = pair()
    s.shutdown(socket.SHUT_WR)
    assert b.recv(1) == b""
    assert s.info().shut_local == vsx.SHUT_WR
    with pytest.raises(BrokenPipeError):
        s.send(b"x")
    s.shutdown(vsx.SHUT_RD)
    assert s.info().shut_local == vsx.SHUT_RDWR
    with pytest.raises(vsx.Error) as e:
        s.shutdown(3)
    assert e.value.errno == errno.EINVAL
    b.close()
    s.close()


def test_buffer_knob_on_a_socket_without_vsxd():
    s, b = pair()
    with pytest.raises(vsx.Error) as e:
        s.get_buffer(vsx.RX)            # not known until set through vsxd
    assert e.value.errno == errno.ENODATA
    with pytest.raises(vsx.Error) as e:
        s.get_buffer(vsx.TX)
    assert e.value.errno == errno.EOPNOTSUPP
    with pytest.raises(vsx.Error) as e:
        s.set_buffer(vsx.RX, 0)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(vsx.Error) as e:
        s.set_buffer(vsx.RX | vsx.TX, 1 << 33)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(vsx.Error) as e:
        s.get_buffer(7)
    assert e.value.errno == errno.EINVAL
    s.close()
    b.close()


def test_hybrid_listener_binds_path_port(tmp_path):
    base = str(tmp_path / "vm.vsock")
    with vsx.listen("unix:%s:6000" % base) as l:
        assert os.path.exists(base + "_6000")
        i = l.info()
        assert i.state == "listening" and i.transport == "hybrid"
        l.settimeout(0.2)
        with pytest.raises(TimeoutError):
            l.accept()
        c = socket.socket(socket.AF_UNIX)
        c.connect(base + "_6000")      # what vsxd does for a guest's connect
        s, peer = l.accept()
        assert isinstance(s, vsx.Socket) and isinstance(peer, str)
        assert s.gettimeout() is None
        c.sendall(b"ping")
        assert s.recv(4) == b"ping"
        c.close()
        s.close()
        with pytest.raises(vsx.Error) as e:
            vsx.listen("unix:%s:6000" % base)
        assert e.value.errno == errno.EADDRINUSE
    assert not os.path.exists(base + "_6000")   # removed with the listener
    with pytest.raises(vsx.Error) as e:
        vsx.listen("unix:%s:any" % base)
    assert e.value.errno == errno.EINVAL


def test_threads_share_a_socket_and_close_under_a_reader():
    s, b = pair()
    got = []

    def reader():
        try:
            got.append(s.recv(10))
            got.append(s.recv(10))
        except OSError as e:
            got.append(e)
    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.1)
    s.sendall(b"while")                 # a writer is not kept out by the reader
    assert b.recv(5) == b"while"
    b.send(b"one")
    time.sleep(0.1)
    s.close()                           # the reader waits again: it gets EBADF
    t.join(5)
    assert not t.is_alive()
    assert got[0] == b"one"
    assert isinstance(got[1], vsx.Error) and got[1].errno == errno.EBADF
    b.close()


def test_fileno_works_with_selectors():
    import selectors
    s, b = pair()
    with selectors.DefaultSelector() as sel:
        sel.register(s, selectors.EVENT_READ)
        assert sel.select(0) == []
        b.send(b"x")
        assert len(sel.select(2)) == 1
    assert s.recv(1) == b"x"
    s.close()
    b.close()


def fake_tree(root, files):
    for rel, text in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)


def test_probe_on_fake_trees(tmp_path, monkeypatch):
    kvm = tmp_path / "kvm"
    fake_tree(str(kvm), {"sys/bus/virtio/devices/virtio3/device": "0x0013\n",
                         "sys/bus/virtio/devices/virtio3/vendor": "0x1af4\n",
                         "sys/module/vsock/refcnt": "0\n",
                         "sys/module/vmw_vsock_virtio_transport/refcnt": "0\n"})
    monkeypatch.setenv("VSX_SYSROOT", str(kvm))
    p = vsx.probe()
    assert p.virtio_guest and p.af_vsock and not p.vmbus and not p.vhost_host
    assert p.have == vsx.HAVE_VIRTIO_GUEST | vsx.HAVE_AF_VSOCK
    assert p.transport == "virtio" and p.local_cid is None   # no dev/vsock in the tree
    hv = tmp_path / "hv"
    fake_tree(str(hv), {"sys/bus/vmbus/devices/x/class_id":
                        "{f8615163-df3e-46c5-913f-f2d2f965ed0e}\n",
                        "sys/module/hv_sock/refcnt": "0\n",
                        "sys/module/vsock/refcnt": "0\n"})
    monkeypatch.setenv("VSX_SYSROOT", str(hv))
    p = vsx.probe()
    assert p.vmbus and not p.virtio_guest
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("VSX_SYSROOT", str(empty))
    p = vsx.probe()
    assert p.have == 0 and p.transport == ""


def test_version_and_constants():
    assert vsx.version() == vsx.__version__ and vsx.version().count(".") == 2
    assert (vsx.RX, vsx.TX, vsx.SHUT_RD, vsx.SHUT_WR) == (1, 2, 4, 1)
    assert vsx.CONTROL_PATH == "/run/vsxd/control"


def test_every_public_name_is_documented():
    """Each function, Socket method and vsx.asyncio call has a docstring
    and its entry in vsx-python(7)."""
    import vsx.asyncio
    from conftest import SRCDIR
    with open(os.path.join(SRCDIR, "man", "vsx-python.7")) as f:
        page = f.read().replace("\\-", "-").replace("\\fP", "").replace("\\fI", "")
    names = [n for n in vsx.__all__ if callable(getattr(vsx, n)) and n[0].islower()]
    methods = [m for m in dir(vsx.Socket) if not m.startswith("_")]
    missing = [n for n in names + methods + vsx.asyncio.__all__ if n not in page]
    assert not missing, "not in man/vsx-python.7: %s" % missing
    undocumented = [n for n in names if not getattr(vsx, n).__doc__] + \
        [m for m in methods if not getattr(vsx.Socket, m).__doc__] + \
        [n for n in vsx.asyncio.__all__ if not getattr(vsx.asyncio, n).__doc__]
    assert not undocumented, "no docstring: %s" % undocumented


def test_bad_input_never_crashes():
    """Wrong types and values for every argument: each an exception, never
    a crash (and under ASan and UBSan in a sanitizer build: python.test)."""
    vals = [None, 0, -1, 1 << 70, 3.5, float("nan"), "", "unix:/x:1", b"x", bytearray(4),
            memoryview(b"ro"), [], object(), "x" * 5000, "unix:" + "a" * 300 + ":1", "\udcff"]
    for f in (vsx.parse_address, vsx.format_address, vsx.guid_from_port,
              vsx.guid_to_port, vsx.strerror, vsx.adopt):
        for v in vals:
            try:
                f(v)
            except (OSError, TypeError, ValueError, OverflowError):
                pass
    for kw in ("timeout", "buffer", "tx_buffer", "key_file", "linger", "backlog",
               "seqpacket", "transport", "control"):
        for v in vals:
            with pytest.raises((OSError, TypeError, ValueError, OverflowError)):
                vsx.connect("unix:/nonexistent/x:1", **{kw: v}).close()
    s, b = pair(linger=0)
    s.setblocking(False)
    for m in ("send", "sendall", "recv", "recv_into", "shutdown", "settimeout",
              "setblocking", "set_buffer", "get_buffer"):
        for v in vals:
            for args in ((v,), (v, v)):
                try:
                    getattr(s, m)(*args)
                except (OSError, TypeError, ValueError, OverflowError, BufferError):
                    pass
                s.setblocking(False)
    s.close()
    b.close()
