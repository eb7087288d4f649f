# vsxd's state record (daemon/state.h, versions 1 to 4) for the tests that
# take one apart or spoil it (restart.py, handoff_prog.py): where each VM's
# and each connection's fields are, and a record sealed again (its length
# and checksum) after a change. Only what those tests need is named.
import struct
import zlib

HDR = 32
V1_CONN = 33       # a connection's addresses and type: all of it in version 1


class Conn:
    """One connection's offsets: start, state (its state byte, version 2
    on: None in 1), twin_id (its u64, version 3 on: None before), end."""

    def __init__(self, start):
        self.start = start
        self.state = self.twin_id = None
        self.end = start


class VM:
    """One VM's offsets: start, flags (its u16 flags), queues_at (its
    first ring), queues ((start, end) of each ring's entry, end before the
    ring's base of version 3), conns (Conn), end."""

    def __init__(self, start):
        self.start = start
        self.flags = self.queues_at = self.end = start
        self.queues = []
        self.conns = []


class Record:
    """version, length, nvms, generation and vms (VM) of a record."""


def _str(buf, o):
    """Just past the str at @o (a u8 length, then that many bytes)."""
    return o + 1 + buf[o]


def _conn(buf, off, version):
    c = Conn(off)
    if version < 2:
        c.end = off + V1_CONN
        return c
    c.state = off + V1_CONN
    # 8 u8 (state .. timer), u32 timer_ms, 9 u32 credit, 2 u64 bytes
    off = _str(buf, _str(buf, off + V1_CONN + 8 + 4 + 36 + 16))   # host_fd, tag
    for _q in range(2):                     # to_host, to_guest
        off += 4 + struct.unpack_from("<I", buf, off)[0]
        off += 4 + 5 * struct.unpack_from("<I", buf, off)[0]
    if version >= 3:
        off = _str(buf, off)                # twin_vm
        c.twin_id = off
        off += 8 + 1                        # twin_id, eom_pending
    if version >= 4:
        off += 1 + 1 + 4                    # why, why_limit, why_err
    c.end = off
    return c


def walk(buf):
    """The record at the start of @buf (bytes that may go on past it),
    walked: a Record whose offsets index @buf. Asserts that it ends where
    its header says."""
    r = Record()
    r.version, r.length, _crc, r.nvms, r.generation = struct.unpack_from("<IIIIQ", buf, 8)
    r.vms = []
    off = HDR
    for _ in range(r.nvms):
        v = VM(off)
        off = _str(buf, _str(buf, off)) + 24    # name, conn, cid, features
        nreg, nq, _flags, nconns = struct.unpack_from("<BBHI", buf, off)
        v.flags = off + 2
        off += 8
        for _ in range(nreg):
            off = _str(buf, off + 32)           # gpa, size, uva, offset, fd
        v.queues_at = off
        for _ in range(nq):
            end = _str(buf, _str(buf, off + 28))    # ..., kick, call
            v.queues.append((off, end))
            off = end + (2 if r.version >= 3 else 0)  # the ring's base
        for _ in range(nconns):
            c = _conn(buf, off, r.version)
            v.conns.append(c)
            off = c.end
        v.end = off
        r.vms.append(v)
    assert off == r.length, ("the record ends at %d, its header says %d" % (off, r.length))
    return r


def make(version, nvms, generation, body):
    """A record of @version whose VM entries are @body."""
    return (b"VSXDSTAT" + struct.pack("<III", version, HDR + len(body), zlib.crc32(body)) +
            struct.pack("<IQ", nvms, generation) + body)


def seal(buf):
    """@buf's record (its length as its header says) with its checksum
    made right again, as bytes."""
    length = struct.unpack_from("<I", buf, 12)[0]
    return bytes(buf[:16]) + struct.pack("<I", zlib.crc32(bytes(buf[HDR:length]))) + \
        bytes(buf[20:length])
