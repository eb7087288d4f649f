# vsx through a real vsxd on Unix sockets, fake_guest (tests/daemon/)
# playing QEMU and the guest: unix: and vm: addresses, bytes compared both
# ways, the buffer knob read back and seen by the guest, info()'s credit
# fields, refusals by errno, a guest's connection to a vsx listener.
import errno
import threading

import pytest

import vsx
from conftest import pattern


def exchange(s, g, to_guest, from_guest):
    """@to_guest bytes from the host (pattern 2) checked by the guest, then
    @from_guest from the guest (pattern 1) compared here."""
    t = threading.Thread(target=s.sendall, args=(pattern(2, to_guest),))
    t.start()
    ok = g.cmd("grecv %d" % to_guest)
    t.join(30)
    assert ok and not t.is_alive(), g.line
    got = bytearray()
    while len(got) < from_guest:
        # within the credit vsxd gives the guest: a piece at a time
        n = min(65536, from_guest - len(got))
        assert g.cmd("gsend %d" % n), g.line
        want = len(got) + n
        while len(got) < want:
            d = s.recv(want - len(got))
            assert d, "EOF after %d bytes" % len(got)
            got += d
    assert bytes(got) == pattern(1, from_guest)


def finish(s, g):
    """The guest ends the connection (SHUTDOWN both ways, vsxd's RST):
    the host reads its end, and close() returns at once, True."""
    assert g.cmd("gshut 3") and g.cmd("wait-rst"), g.line
    assert s.recv(1) == b""
    assert s.close() is True


def test_unix_address_both_ways(daemon, guest):
    assert guest.cmd("listen 5001")
    with vsx.connect("unix:%s:5001" % daemon.uds, timeout=10) as s:
        i = s.info()
        assert i.transport == "hybrid" and i.state == "connected"
        assert i.local.startswith("unix:%s:" % daemon.uds)   # the host port vsxd gave
        assert i.peer == "unix:%s:5001" % daemon.uds
        exchange(s, guest, 1 << 20, 1 << 20)
        assert (s.info().bytes_sent, s.info().bytes_received) == (1 << 20, 1 << 20)
        finish(s, guest)


def test_vm_name_both_ways(daemon, guest, monkeypatch):
    assert guest.cmd("listen 5002")
    with vsx.connect("vm:web:5002", control=daemon.ctl, timeout=10) as s:
        assert s.info().transport == "vm"
        exchange(s, guest, 300000, 200000)
        finish(s, guest)
    # the control socket from the environment, as libvsx reads it
    monkeypatch.setenv("VSXD_CONTROL", daemon.ctl)
    assert guest.cmd("listen 5003")
    with vsx.connect("vm:web:5003", timeout=10) as s:
        exchange(s, guest, 1000, 1000)
        finish(s, guest)


def test_buffer_knob_read_back_and_seen_by_the_guest(daemon, guest, monkeypatch):
    monkeypatch.setenv("VSXD_CONTROL", daemon.ctl)
    assert guest.cmd("listen 5004")
    with vsx.connect("unix:%s:5004" % daemon.uds, buffer=512 << 10, timeout=10) as s:
        assert s.get_buffer(vsx.RX) == 512 << 10
        assert guest.cmd("wait-credit %d" % (512 << 10)), guest.line
        s.set_buffer(vsx.RX, 2 << 20)
        assert s.get_buffer(vsx.RX) == 2 << 20
        assert guest.cmd("wait-credit %d" % (2 << 20)), guest.line
        i = s.info()
        assert i.rx_buffer == 2 << 20 and i.buf_alloc == 2 << 20
        with pytest.raises(vsx.Error) as e:
            s.set_buffer(vsx.TX, 1 << 20)          # the guest's credit bounds sends
        assert e.value.errno == errno.EOPNOTSUPP
        with pytest.raises(vsx.Error) as e:
            s.get_buffer(vsx.TX)
        assert e.value.errno == errno.EOPNOTSUPP
        exchange(s, guest, 100000, 100000)
        finish(s, guest)


def test_info_credit_fields(daemon, guest, monkeypatch):
    monkeypatch.setenv("VSXD_CONTROL", daemon.ctl)
    assert guest.cmd("listen 5005")
    with vsx.connect("unix:%s:5005" % daemon.uds, buffer=1 << 20, timeout=10) as s:
        exchange(s, guest, 4000, 3000)
        i = s.info()
        assert i.credit and i.flags & vsx.INFO_CREDIT and not i.authenticated
        assert i.buf_alloc == 1 << 20                  # what vsxd advertises for us
        assert i.peer_buf_alloc == 256 << 10           # fake_guest's buf_alloc
        assert (i.fwd_cnt, i.peer_fwd_cnt) == (3000, 4000)   # bytes each side took
        assert i.tx_free == i.peer_buf_alloc                 # the guest took all of ours
        assert 0 < i.rx_free <= i.buf_alloc
        finish(s, guest)


def test_refused_port_and_unknown_vm(daemon, guest):
    with pytest.raises(ConnectionRefusedError) as e:
        vsx.connect("unix:%s:5999" % daemon.uds, timeout=10)   # nobody listens
    assert e.value.errno == errno.ECONNREFUSED and isinstance(e.value, vsx.Error)
    with pytest.raises(vsx.Error) as e:
        vsx.connect("vm:nosuchvm:5000", control=daemon.ctl, timeout=10)
    assert e.value.errno == errno.EHOSTUNREACH
    assert "nosuchvm" in e.value.strerror


def test_recv_timeout_and_the_guests_end(daemon, guest):
    assert guest.cmd("listen 5006")
    s = vsx.connect("unix:%s:5006" % daemon.uds, timeout=10)
    assert s.gettimeout() == 10                         # as create_connection's
    s.settimeout(0.2)
    with pytest.raises(TimeoutError) as e:
        s.recv(1)
    assert e.value.errno == errno.ETIMEDOUT
    s.settimeout(10)
    finish(s, guest)


def test_guest_connects_to_a_vsx_listener(daemon, guest):
    with vsx.listen("unix:%s:6001" % daemon.uds) as l:
        assert guest.cmd("gconnect 6001"), guest.line
        l.settimeout(10)
        s, peer = l.accept()
        with s:
            assert s.info().transport == "hybrid"
            assert guest.cmd("gsend 100000")
            got = bytearray()
            while len(got) < 100000:
                got += s.recv(65536)
            assert bytes(got) == pattern(1, 100000)
            s.sendall(pattern(2, 50000))
            assert guest.cmd("grecv 50000"), guest.line
            finish(s, guest)


def state(g):
    """The fake guest's view of its connection, as a dict of ints."""
    assert g.cmd("state"), g.line
    return {k: int(v) for k, v in (f.split("=") for f in g.line.split()[2:])}


def test_seqpacket_keeps_message_bounds_both_ways(daemon, guest):
    """SEQPACKET from a guest to a vsx listener on unix: (its PATH_PORT a
    SOCK_SEQPACKET socket, which vsxd connects for guest SEQPACKET
    sockets): each of the guest's messages is one recv() here, whole, and
    a recv() smaller than a message gets its start (the rest is gone, as
    SOCK_SEQPACKET has it); each send() here is one message to the guest
    (its EOM where the message ends, nowhere else). Connecting is stream
    only: the hybrid CONNECT handshake has no socket type."""
    with pytest.raises(OSError) as e:
        vsx.connect("unix:%s:5004" % daemon.uds, seqpacket=True, timeout=10)
    assert e.value.errno == errno.ESOCKTNOSUPPORT and "only stream" in str(e.value)
    with vsx.listen("unix:%s:6004" % daemon.uds, seqpacket=True) as l:
        assert guest.cmd("seqpacket 512") and guest.cmd("gconnect 6004"), guest.line
        l.settimeout(10)
        s, peer = l.accept()
        with s:
            s.settimeout(10)
            assert s.info().transport == "hybrid"
            # guest -> host: 3 messages of 3000 bytes, each one recv()
            assert guest.cmd("gsend 9000 3000"), guest.line
            want = pattern(1, 12000)
            for k in range(3):
                m = s.recv(65536)
                assert m == want[3000 * k:3000 * (k + 1)], (k, len(m))
            # a recv() smaller than the message: its first bytes, the rest dropped
            assert guest.cmd("gsend 2000 2000"), guest.line
            assert s.recv(100) == want[9000:9100]
            assert guest.cmd("gsend 1000 1000"), guest.line
            assert s.recv(65536) == want[11000:12000]
            # host -> guest: each send() one message, its end the guest's EOM
            sizes = [512, 4096, 1536, 65536, 512, 8192]
            data, off = pattern(2, sum(sizes)), 0
            for n in sizes:
                assert s.send(data[off:off + n]) == n
                off += n
            assert guest.cmd("grecv %d" % off), guest.line
            st = state(guest)
            assert st["msgs"] == len(sizes) and st["bad"] == 0, st
            finish(s, guest)
