#!/usr/bin/env python3
"""Write the seed corpus fuzz/corpus/<target>/ (run from anywhere:
python3 fuzz/mkseeds.py). The binary formats are the harnesses' own,
documented at the top of each fuzz/fuzz_<target>.c."""
import os
import struct

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(TOP, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- addr ----
for i, a in enumerate([
        "vsock:3:1234", "vsock:host:any", "vsock:local:22", "vsock:any:5000",
        "vsock:4294967295:4294967294", "vsock:4294967296:1", "vsock:3:",
        "hvsock:00000808-facb-11e6-bd58-64006a7986d3",
        "hvsock:{3049197c-facb-11e6-bd58-64006a7986d3}",
        "unix:/run/vsx/web.vsock:1234", "unix:relative:path:with:colons:any",
        "vm:web:22", "vm:a.b-c_d:any", "vm::1", "tcp:1.2.3.4:80"]):
    put("addr", "a%02d" % i, a)

# ---- connect ----
for i, l in enumerate([
        "CONNECT 1234\n", "CONNECT 0\n", "CONNECT 4294967294\n",
        "CONNECT 4294967295\n", "CONNECT 1234\nhello after the line",
        "CONNECT  12\n", "CONNECT 0001234\n", "connect 1234\n",
        "CONNECT 12345678901234567890\n", "CONNECT 1234"]):
    put("connect", "c%02d" % i, l)

# ---- ctl: mode byte, then text ----
REQ = [
    "vsx-control=1\ncmd=status\n",
    "vsx-control=1\ncmd=vms\n",
    "vsx-control=1\ncmd=list\nvm=web\n",
    "vsx-control=1\ncmd=show\nid=1\n",
    "vsx-control=1\ncmd=set-buffer\nvm=web\nrx=65536\n",
    "vsx-control=1\ncmd=set-buffer\nid=3\nrx=4096\n",
    "vsx-control=1\ncmd=set-buffer\nvm=web\nhost-port=1024\nrx=1M\n",
    "vsx-control=1\ncmd=close\nid=1\nreset=1\n",
    "vsx-control=1\ncmd=resolve\nvm=web\n",
    "vsx-control=1\ncmd=resolve\nvm=cid4\n",
    "vsx-control=2\ncmd=status\n",
    "cmd=status\nvsx-control=1\n",
    "vsx-control=1\ncmd=list\ncmd=list\n",
    "vsx-control=1\ncmd=frobnicate\n",
    "vsx-control=1\ncmd=list\nBAD KEY=1\n",
]
for i, r in enumerate(REQ):
    put("ctl", "req%02d" % i, b"\x00" + r.encode())
put("ctl", "reply00", b"\x01version=0.1.0\nuptime=5\nvms=2\nconns=0\nerrno=0\n")
put("ctl", "reply01", b"\x01conn=7\nvm=web\ntype=stream\nstate=established\n"
    b"guest-port=1024\npeer=host:1234\nconn=8\nvm=db\nerrno=0\n")
put("ctl", "reply02", b"\x01error=no such connection\nerrno=2\n")
put("ctl", "stream00", b"\x02" + "".join(r + "\n" for r in REQ).encode())
put("ctl", "stream01", b"\x02\n" + (REQ[4] + "\n").encode() + b"x" * 40 + b"\n\n")

# ---- config: mode byte, then text ----
CONF = """# /etc/vsxd.conf
[daemon]
log = syslog
log-level = info
control = /run/vsx/control.sock
control-allow-uid = 1000, 1001 1002

[vm web]
guest-cid = 3
socket = /run/vsx/web.vhost
uds-path = /run/vsx/web.vsock
tx-buffer-size = 1M
queue-size = 256
groups = front

[vm db]
guest_cid = 0x4
socket = /run/vsx/db.vhost
uds-path = /run/vsx/db.vsock
groups = front+back

[vm]
guest-cid = 5
socket = /run/vsx/vm5.vhost
uds-path = /run/vsx/vm5.vsock
"""
put("config", "file00", b"\x00" + CONF.encode())
put("config", "file01", b"\x00[vm a]\nguest-cid = 3\nsocket = /a\nuds-path = /b\n"
    b"[vm a]\nguest-cid = 3\nsocket = /a\nuds-path = /b\n")
put("config", "file02", b"\x00[daemon]\nlog = nowhere\n[bogus]\nx=1\n")
put("config", "file05", b"\x00[daemon]\nmetrics = tcp:[::1]:9100\ncontrol = /c\n")
put("config", "vm00", b"\x01guest-cid=3,socket=/run/a.vhost,uds-path=/run/a.vsock")
put("config", "vm01", b"\x01name=web,guest-cid=4294967294,socket=/s,uds-path=/u,"
    b"tx-buffer-size=64K,queue-size=1024,groups=a+b")
put("config", "vm02", b"\x01guest-cid=2,socket=,uds-path=/u,guest-cid=3")
put("config", "argv00", b"\x02" + b"\0".join([
    b"--vm", b"guest-cid=3,socket=/a,uds-path=/b", b"--vm=guest-cid=4,socket=/c,uds-path=/d",
    b"--control", b"/run/vsx/ctl", b"--control-allow-uid=1000", b"--syslog", b"-vv"]))
put("config", "argv01", b"\x02" + b"\0".join([
    b"--guest-cid", b"3", b"--socket", b"/tmp/vhost4.socket", b"--uds-path",
    b"/tmp/vm4.vsock", b"--tx-buffer-size=1G", b"--queue-size", b"512"]))
put("config", "argv02", b"\x02" + b"\0".join([b"--config", b"/etc/vsxd.conf", b"-h", b"-V",
                                              b"--help", b"--bogus", b"-x"]))
put("config", "argv03", b"\x02" + b"\0".join([b"--metrics", b"tcp:127.0.0.1:9100",
                                              b"--control", b"/c"]))
for i, v in enumerate(["64K", "1G", "0x1000", "1048576", "3KiB", "error", "debug",
                       "1000, 1001 0", "4294967295"]):
    put("config", "val%02d" % i, b"\x03" + v.encode())

# ---- vq ----
def desc(addr, ln, flags, nxt):
    return struct.pack("<QIHH", addr, ln, flags, nxt)

def vq_seed(lognum, flags, descs, avail_ring, avail_idx, ops, regions=((0x1000, 0, 0xffff),),
            last_avail=0, used_idx=0):
    num = 1 << lognum
    b = bytes([flags | (lognum << 4), len(regions) - 1])
    for lo, hi, size in regions:
        b += struct.pack("<IHH", lo, hi, size)
    b += struct.pack("<HH", last_avail, used_idx)
    dt = b"".join(descs).ljust(16 * num, b"\0")[:16 * num]
    ring = b"".join(struct.pack("<H", x) for x in avail_ring)
    av = (struct.pack("<HH", 0, avail_idx) + ring).ljust(6 + 2 * num, b"\0")
    return b + dt + av + ops

POP, PUSH, FLUSH, UNPOP, NOTIFY = b"\x00", b"\x02", b"\x03", b"\x04", b"\x05"
def push(n): return PUSH + struct.pack("<I", n)
def wmem(region, off, data): return bytes([6 | (region << 3)]) + struct.pack("<HB", off, len(data)) + data
def wavail(off, data): return bytes([7 | ((len(data) - 1) << 3)]) + struct.pack("<H", off) + data

# a Linux-like TX chain (header, payload) and an RX buffer; EVENT_IDX
put("vq", "chain", vq_seed(4, 1, [desc(0x1000, 44, 1, 1), desc(0x1100, 100, 0, 0),
                                  desc(0x2000, 4096, 2, 0)], [0, 2], 2,
                           POP + POP + push(0) + push(4096) + FLUSH + NOTIFY + POP))
# indirect table in guest memory
ind = desc(0x1000, 44, 1, 1) + desc(0x1200, 64, 1, 2) + desc(0x3000, 512, 2, 0)
put("vq", "indirect", vq_seed(3, 3, [desc(0x4000, len(ind), 4, 0)], [0], 1,
                              wmem(0, 0x3000, ind) + POP + push(512) + FLUSH))
# two regions, a buffer crossing from one to the next
put("vq", "regions", vq_seed(2, 2, [desc(0x1ff0, 32, 0, 0)], [0], 1,
                             POP + push(0) + FLUSH,
                             regions=((0x1000, 0, 0x0fff), (0x2000, 0, 0x0fff))))
# a loop, an index too far ahead, unpop
put("vq", "loop", vq_seed(2, 0, [desc(0x1000, 8, 1, 1), desc(0x1008, 8, 1, 0)], [0], 1,
                          POP + POP))
put("vq", "badidx", vq_seed(2, 4, [desc(0x1000, 8, 0, 0)], [0], 200, POP + FLUSH))
put("vq", "unpop", vq_seed(2, 1, [desc(0x1000, 8, 0, 0), desc(0x1000, 8, 2, 0)], [0, 1], 1,
                           POP + UNPOP + POP + push(8) + FLUSH + wavail(2, b"\x02\x00")
                           + wavail(6, b"\x01\x00") + POP + push(8) + FLUSH,
                           last_avail=0xffff, used_idx=0xfffe))

# ---- vhost_user ----
MEM = 256 * 1024
def vmsg(req, payload=b"", nfds=0, kind=0, flags=1, size=None):
    if size is None:
        size = len(payload)
    return bytes([0, nfds | (kind << 4), req, flags]) + struct.pack("<H", size) + payload

def u64(v): return struct.pack("<Q", v)
def state(i, n): return struct.pack("<II", i, n)
def vaddr(i, desc_, used, avail): return struct.pack("<IIQQQQ", i, 0, desc_, used, avail, 0)
def gwrite(off, data): return b"\x04" + struct.pack("<IB", off, len(data)) + data

UVA = 0x7f0000000000
GPA = 0x100000
FEAT = (1 << 32) | (1 << 29) | (1 << 28) | (1 << 30) | (1 << 1)
def qemu_start(feat=FEAT, pf=(1 << 3) | (1 << 9) | (1 << 13), need_reply=True):
    s = vmsg(1) + vmsg(15) + vmsg(16, u64(pf)) + vmsg(3) + vmsg(1)
    for q in range(2):
        s += vmsg(13, u64(q), 1, 1) + vmsg(14, u64(q), 1, 1)
    s += vmsg(24, struct.pack("<III", 0, 8, 0) + b"\0" * 8)
    s += vmsg(2, u64(feat))
    s += vmsg(5, struct.pack("<II", 1, 0) + struct.pack("<QQQQ", GPA, MEM, UVA, 0), 1, 0,
              flags=9 if need_reply else 1)
    for q in range(2):
        base = q * 0x4000
        s += vmsg(8, state(q, 256)) + vmsg(10, state(q, 0))
        s += vmsg(9, vaddr(q, UVA + base, UVA + base + 0x2000, UVA + base + 0x1000))
        s += vmsg(12, u64(q), 1, 1)
    for q in range(2):
        s += vmsg(18, state(q, 1))
    for q in range(2):
        s += vmsg(13, u64(q), 1, 1)
    return s

def tx_chain():
    # TX ring (queue 1): desc table at 0x4000, avail at 0x5000
    return (gwrite(0x4000, desc(GPA + 0x10000, 44, 0, 0)) +
            gwrite(0x5000, struct.pack("<HHH", 0, 1, 0)) + b"\x05")

put("vhost_user", "qemu72", qemu_start() + tx_chain())
put("vhost_user", "qemu72_stop", qemu_start() + tx_chain() + vmsg(18, state(0, 0)) +
    vmsg(11, state(0, 0)) + vmsg(11, state(1, 0)) + vmsg(4))
put("vhost_user", "qemu72_reconnect", qemu_start() + b"\x06" + qemu_start(need_reply=False))
put("vhost_user", "no_protocol_features", vmsg(1) + vmsg(3) + vmsg(2, u64(1 << 32)) +
    vmsg(5, struct.pack("<II", 1, 0) + struct.pack("<QQQQ", 0, MEM, UVA, 0), 1, 0) +
    vmsg(8, state(0, 8)) + vmsg(9, vaddr(0, UVA, UVA + 0x200, UVA + 0x100)) +
    vmsg(12, u64(0), 1, 1) + vmsg(8, state(1, 8)) +
    vmsg(9, vaddr(1, UVA + 0x1000, UVA + 0x1200, UVA + 0x1100)) + vmsg(12, u64(1 | 0x100)))
put("vhost_user", "two_regions", vmsg(1) + vmsg(2, u64(FEAT)) +
    vmsg(5, struct.pack("<II", 2, 0) + struct.pack("<QQQQ", 0, 0x10000, UVA, 0) +
         struct.pack("<QQQQ", 0x100000, 0x10000, UVA + 0x100000, 0x20000), 2, 0) +
    vmsg(5, struct.pack("<II", 2, 0) + struct.pack("<QQQQ", 0, 0x10000, UVA, 0) +
         struct.pack("<QQQQ", 0x100000, 0x8000, UVA + 0x100000, 0x20000), 2, 0, flags=9))
put("vhost_user", "bad_framing", vmsg(1) + vmsg(1, size=4096) + b"\x06" +
    b"\x07\x05\x01\x00\x00\x00\x01" + b"\x07\x07\x00\x00\x08\x00\x00\x00\x00")
put("vhost_user", "unknown", vmsg(99, flags=9) + vmsg(34, flags=9) + vmsg(25, b"\0" * 20) +
    vmsg(17) + vmsg(12, u64(0), 9, 2))

# ---- engine ----
def pkt(vm, src_port, dst_port, typ, op, flags=0, buf_alloc=262144, fwd_cnt=0,
        payload=b"", dst=0, layout=0, raw_dst=None):
    # mode: bit0 own src cid, bits1-2 dst (0 host, 1 sibling, 2 u64), bit4 honest len
    mode = 1 | (dst << 1) | 16 | (layout << 5)
    b = bytes([0 | (vm << 4), mode])
    if dst == 2:
        b += u64(raw_dst)
    b += struct.pack("<IIHHIII", src_port, dst_port, typ, op, flags, buf_alloc, fwd_cnt)
    b += struct.pack("<H", len(payload)) + payload
    return b

REQUEST, RESPONSE, RST, SHUTDOWN, RW, CUPD, CREQ = 1, 2, 3, 4, 5, 6, 7
RX = b"\x06"
ACCEPT, HREAD, TIMERS, RUN = b"\x07", b"\x09", b"\x0c", b"\x0d"
def hwrite(i, data): return b"\x08" + struct.pack("<BH", i, len(data)) + data
def hshut(i, how): return b"\x0a" + bytes([i | (how << 6)])
def hybrid(vm, line): return bytes([0x0b | (vm << 4)]) + bytes([len(line)]) + line

put("engine", "stream_to_host",
    pkt(0, 40000, 1234, 1, REQUEST) + RX + ACCEPT +
    pkt(0, 40000, 1234, 1, RW, payload=b"hello host" * 10) +
    pkt(0, 40000, 1234, 1, RW, payload=b"x" * 3000, layout=3) + HREAD +
    hwrite(0, b"hello guest" * 50) + RUN + RX +
    pkt(0, 40000, 1234, 1, CUPD, fwd_cnt=550) + pkt(0, 40000, 1234, 1, CREQ) + RX +
    pkt(0, 40000, 1234, 1, SHUTDOWN, flags=3) + RX + hshut(0, 2) + RUN + RX + TIMERS + RX)
put("engine", "seqpacket_to_host",
    pkt(0, 40001, 5000, 2, REQUEST) + RX + ACCEPT +
    pkt(0, 40001, 5000, 2, RW, flags=0, payload=b"part1", layout=1) +
    pkt(0, 40001, 5000, 2, RW, flags=3, payload=b"end", layout=2) + HREAD +
    hwrite(0, b"message back") + RUN + RX + pkt(0, 40001, 5000, 2, RST) + RX)
put("engine", "hybrid",
    hybrid(0, b"CONNECT 7000\n") + RUN + RX +
    pkt(0, 7000, 1024, 1, RESPONSE) + RUN + RX + HREAD +
    hwrite(0, b"data from host") + RUN + RX +
    pkt(0, 7000, 1024, 1, RW, payload=b"reply from guest") + HREAD +
    hshut(0, 0) + RUN + RX + pkt(0, 7000, 1024, 1, SHUTDOWN, flags=3) + RX + TIMERS)
put("engine", "hybrid_refused",
    hybrid(1, b"CONNECT 7000\n") + hybrid(1, b"CONNECT 99999999999\n") +
    hybrid(1, b"GARBAGE") + RUN + RX + pkt(1, 7000, 1024, 1, RST) + RX + TIMERS + RUN)
put("engine", "sibling",
    pkt(0, 50000, 80, 1, REQUEST, dst=1) + RX +
    pkt(1, 80, 50000, 1, RESPONSE, dst=1, raw_dst=None) + RX +
    pkt(0, 50000, 80, 1, RW, dst=1, payload=b"to sibling" * 100) + RX +
    pkt(1, 80, 50000, 1, CUPD, dst=1, fwd_cnt=1000) + RX +
    pkt(1, 80, 50000, 1, RW, dst=1, payload=b"back") + RX +
    pkt(0, 50000, 80, 1, SHUTDOWN, dst=1, flags=3) + RX + TIMERS + RX)
put("engine", "hostile",
    pkt(0, 1, 1234, 1, RW, payload=b"no connection") + RX +
    pkt(0, 2, 1234, 9, REQUEST) + pkt(0, 3, 1234, 1, 99) + pkt(0, 4, 9999, 1, REQUEST) +
    pkt(0, 5, 1234, 1, REQUEST, dst=2, raw_dst=77) + RX +
    pkt(0, 6, 1234, 1, REQUEST, buf_alloc=0) + RX + ACCEPT +
    pkt(0, 6, 1234, 1, RW, payload=b"y" * 5000) + RX + RST.to_bytes(1, "little"))
put("engine", "restart",
    pkt(0, 40000, 1234, 1, REQUEST) + RX + ACCEPT + hwrite(0, b"z" * 3000) + RUN +
    b"\x0e" + RX + hwrite(0, b"after") + RUN + RX + b"\x0f" + RX +
    pkt(0, 40000, 1234, 1, RW, payload=b"stale") + RX)

# ---- state (daemon/state.h's record; the first byte picks the mode) ----
def sstr(s): return bytes([len(s)]) + s.encode()


def sbytes(data, ends=()):
    b = struct.pack("<I", len(data)) + data + struct.pack("<I", len(ends))
    for end, flags in ends:
        b += struct.pack("<IB", end, flags)
    return b


def state_conn2(i, seq, peer=1, host_fd=None):
    """What version 2 adds to a connection (state.h): busy ones hold bytes
    both ways, half-closed ones their shutdown bits, connecting ones a
    timer."""
    kind = i % 4
    state = [2, 2, 3, 1][kind]
    flags = 0x10 | 0x2 | (1 if i & 1 else 0) | (8 if seq and kind == 1 else 0)
    guest_shut, host_shut = [(0, 0), (0, 0), (2, 0), (0, 0)][kind]
    timer, timer_ms = (1, 2500) if kind == 3 else (0, 0)
    b = struct.pack("<BBBBBBBBI", state, flags, guest_shut, host_shut, 0,
                    4 if kind == 1 else 0, peer, timer, timer_ms)
    b += struct.pack("<9I", 262144, (0xfffffff0 + i) & 0xffffffff,
                     (0xfffffff0 + i - (7 if kind == 1 else 0)) & 0xffffffff,
                     100, 262144, 0x3fff0, 65536, 17 + i, 4000 + i)
    b += struct.pack("<QQ", 4000 + i, 1 << 33)
    if host_fd is None:
        host_fd = "conn.%d.host" % (i + 1) if peer != 2 else ""
    b += sstr(host_fd) + sstr("fwd-%d" % i if i % 3 == 0 else "")
    if kind == 1:
        to_host = b"seven b" if not seq else b"one" + b"four"
        to_guest = b"queued for the guest" if not seq else b"abcdefg"
        b += sbytes(to_host, [(3, 1), (7, 3)] if seq else [])
        b += sbytes(to_guest, [(7, 1)] if seq else [])
    else:
        b += sbytes(b"") + sbytes(b"")
    return b


def state_conn3(i, peer, twin):
    """What version 3 adds: a sibling's twin (connection i + 1 of VM
    @twin), a pending message end on a seqpacket one."""
    if peer != 2 or not twin:
        return sstr("") + struct.pack("<QB", 0, 0)
    return sstr(twin) + struct.pack("<QB", i + 1, 3 if i & 1 else 0)


def state_conn4(i):
    """What version 4 adds: why a connection ends, once known (a closing
    one: the guest shut it down; one in seven: an error, ENOMEM)."""
    if i % 7 == 6:
        return struct.pack("<BBI", 16, 0, 12)
    return struct.pack("<BBI", 1 if i % 4 == 2 else 0, 0, 0)


def state_vm(name, nconns, nq=2, nreg=1, version=4, peer=1, twin="", paused=False):
    """A VM record; version 3 adds the paused flag and each ring's base
    (a paused VM's rings stopped: no kick, disabled, at their base) and
    each connection's twin."""
    b = sstr(name) + sstr("vm.%s.conn" % name) + struct.pack("<QQQ", 3, 0x130000000, 0x203)
    b += struct.pack("<BBHI", nreg, nq, 1 if paused else 0, nconns)
    for i in range(nreg):
        b += struct.pack("<QQQQ", i << 32, 0x40000000, 0x7f0000000000 + (i << 32), 0)
        b += sstr("vm.%s.mem%d" % (name, i))
    for i in range(nq):
        b += struct.pack("<BBHQQQ", i, 0 if paused else 1, 256, 0x1000 * (i + 1),
                         0x1800 * (i + 1), 0x2000 * (i + 1))
        b += sstr("" if paused else "vm.%s.kick%d" % (name, i))
        b += sstr("vm.%s.call%d" % (name, i))
        if version >= 3:
            b += struct.pack("<H", 300 + i if paused else 0)
    for i in range(nconns):
        seq = i & 1
        b += struct.pack("<QQQIIB", i + 1, 3, 2, 1024 + i, 5000, 1 + seq)
        if version >= 2:
            b += state_conn2(i, seq, peer)
        if version >= 3:
            b += state_conn3(i, peer, twin)
        if version >= 4:
            b += state_conn4(i)
    return b


def state_rec(vms, gen=1, version=4):
    import zlib
    body = b"".join(vms)
    hdr = struct.pack("<8sIIIIQ", b"VSXDSTAT", version, 32 + len(body),
                      zlib.crc32(body), len(vms), gen)
    return hdr + body


put("state", "empty", b"\x01" + state_rec([]))
put("state", "one_vm", b"\x01" + state_rec([state_vm("web", 3)], gen=7))
put("state", "two_vms", b"\x01" + state_rec([state_vm("a", 0, nq=3, nreg=8),
                                              state_vm("cid5", 40, nq=1)]))
put("state", "siblings", b"\x01" + state_rec([state_vm("a", 8, peer=2, twin="b"),
                                               state_vm("b", 8, peer=2, twin="a")]))
put("state", "resealed", b"\x00" + state_rec([state_vm("web", 2)]))
put("state", "version5", b"\x01" + state_rec([state_vm("web", 1)], version=5))
# the release before's records (version 3: no end reasons); a paused VM
# (its rings stopped) next to a running one
put("state", "v3_paused", b"\x01" + state_rec([state_vm("web", 3, version=3, paused=True),
                                                state_vm("db", 2, version=3)], version=3))
put("state", "v3_resealed", b"\x00" + state_rec([state_vm("web", 2, version=3,
                                                           paused=True)], version=3))
# the release before's records (version 2: no sibling twins)
put("state", "v2_one_vm", b"\x01" + state_rec([state_vm("web", 3, version=2)], gen=7,
                                               version=2))
put("state", "v2_siblings", b"\x01" + state_rec([state_vm("a", 8, peer=2, version=2),
                                                  state_vm("b", 8, peer=2, version=2)],
                                                 version=2))
put("state", "truncated", b"\x01" + state_rec([state_vm("web", 5)])[:-7])
# the release before's records (connections by their addresses)
put("state", "v1_one_vm", b"\x01" + state_rec([state_vm("web", 3, version=1)], gen=7,
                                               version=1))
put("state", "v1_two_vms", b"\x01" + state_rec([state_vm("a", 0, nq=3, nreg=8, version=1),
                                                 state_vm("cid5", 40, nq=1, version=1)],
                                                version=1))
put("state", "v1_resealed", b"\x00" + state_rec([state_vm("web", 2, version=1)], version=1))
# a version 2 body under a version 1 header, and the other way round; a
# version 3 body under a version 2 header, a version 4 one under a 3
put("state", "v2_as_v1", b"\x00" + state_rec([state_vm("web", 2, version=2)], version=1))
put("state", "v1_as_v2", b"\x00" + state_rec([state_vm("web", 2, version=1)], version=2))
put("state", "v3_as_v2", b"\x00" + state_rec([state_vm("web", 2, version=3)], version=2))
put("state", "v4_as_v3", b"\x00" + state_rec([state_vm("web", 7)], version=3))


# the counters record (state.h; first byte bit 1), 12 counters, 16 reasons
def counters_rec(vms, nglobals=12, nreasons=16):
    import zlib
    body = b"".join(struct.pack("<Q", 1000 + i) for i in range(nglobals))
    for name in vms:
        body += sstr(name) + struct.pack("<4Q", 12, 1 << 35, 77, 3)
        body += b"".join(struct.pack("<Q", i) for i in range(3 * nreasons))
    rest = struct.pack("<IHHI", len(vms), nglobals, nreasons, 0) + body
    return (struct.pack("<8sII", b"VSXDCNTS", 1, 20 + len(rest)) +
            struct.pack("<I", zlib.crc32(rest)) + rest)


put("state", "counters", b"\x03" + counters_rec(["web", "db"]))
put("state", "counters_none", b"\x03" + counters_rec([]))
put("state", "counters_later", b"\x03" + counters_rec(["web"], nglobals=14, nreasons=20))
put("state", "counters_resealed", b"\x02" + counters_rec(["web"]))


# the relays record (state.h; first byte bit 2): entries with bytes held
# each way, one half-closed, one a libvsx side; one entry with a later
# release's field at its end
def relay_entry(rid, fwd, held0=b"", held1=b"", flags0=0, flags1=0, kind1=1,
                extra=b""):
    e = struct.pack("<Q", rid) + sstr(fwd) + sstr("tcp:127.0.0.1:%d" % (40000 + rid))
    e += bytes([rid & 1])
    e += bytes([1]) + sstr("relay.%d.0" % rid) + bytes([kind1]) + sstr("relay.%d.1" % rid)
    for fl, held in ((flags0, held0), (flags1, held1)):
        e += bytes([fl]) + struct.pack("<QI", 1 << 33, len(held)) + held
    e += extra
    return struct.pack("<I", len(e)) + e


def relays_rec(entries, nended=0):
    import zlib
    rest = struct.pack("<III", len(entries), nended, 0) + b"".join(entries)
    return (struct.pack("<8sII", b"VSXDRLYS", 1, 20 + len(rest)) +
            struct.pack("<I", zlib.crc32(rest)) + rest)


put("state", "relays", b"\x05" + relays_rec([
    relay_entry(7, "web", b"x" * 300, b"y" * 65536),
    relay_entry(9, "tcp:127.0.0.1:5000", b"", b"tail", flags0=3, flags1=1, kind1=2)],
    nended=2))
put("state", "relays_none", b"\x05" + relays_rec([], nended=1))
put("state", "relays_later", b"\x05" + relays_rec([relay_entry(3, "db", extra=b"\0" * 9)]))
put("state", "relays_resealed", b"\x04" + relays_rec([relay_entry(4, "web", b"abc")]))
