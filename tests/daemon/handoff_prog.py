#!/usr/bin/env python3
# A stand-in for the new vsxd of a live handoff (tests/daemon/handoff.py):
# run with vsxd's arguments and the descriptors a handoff passes
# ($LISTEN_FDS, $LISTEN_FDNAMES, $VSXD_HANDOFF_FD), it does what the end of
# its own file name says (a copy named handoff-MODE), then (some modes) runs
# the real vsxd, $HANDOFF_VSXD, in its place (same pid, same descriptors):
#
#   slow      wait 1 s first (programs connecting meanwhile wait in the backlogs)
#   crash     read the state record, then die of SIGSEGV
#   exit      exit 3 at once, without a word
#   hang      say nothing, exit nothing (vsxd kills it after its timeout)
#   corrupt   flip a byte inside the record (its checksum no longer matches)
#   version   make the record's version 99
#   badconn   the first connection's state 9 (version 2 or 3), the checksum
#             made right again: only the field check can refuse it
#   twin      the first connection's twin_id +1000 (version 3: a sibling
#             half naming a connection its twin's VM does not have), the
#             checksum made right again (sibhandoff.py)
#   badpaused the first VM's paused flag set on its running device's
#             record (its rings have kicks), the checksum made right again
import os
import signal
import sys
import time

mode = os.path.basename(sys.argv[0]).rsplit("-", 1)[-1]
names = os.environ.get("LISTEN_FDNAMES", "").split(":")
state = 3 + names.index("state") if "state" in names else -1

if mode == "slow":
    time.sleep(1.0)
elif mode == "crash":
    os.pread(state, 1 << 20, 0)
    os.kill(os.getpid(), signal.SIGSEGV)
elif mode == "exit":
    sys.exit(3)
elif mode == "hang":
    time.sleep(60)
    sys.exit(0)
elif mode == "corrupt":
    b = os.pread(state, 1, 40)
    os.pwrite(state, bytes([b[0] ^ 0xFF]), 40)
elif mode == "version":
    os.pwrite(state, (99).to_bytes(4, "little"), 8)
elif mode == "badpaused":
    import struct
    import zlib
    buf = bytearray(os.pread(state, 64 << 20, 0))
    length = struct.unpack_from("<I", buf, 12)[0]
    off = 32 + 1 + buf[32]
    off += 1 + buf[off] + 24                 # VM 0: name, conn, cid, features
    buf[off + 2] |= 1                        # its flags: paused
    struct.pack_into("<I", buf, 16, zlib.crc32(bytes(buf[32:length])))
    os.pwrite(state, bytes(buf[:length]), 0)
elif mode in ("badconn", "twin"):
    import struct
    import zlib
    buf = bytearray(os.pread(state, 64 << 20, 0))
    version, length = struct.unpack_from("<II", buf, 8)

    def sstr(o):
        return o + 1 + buf[o]
    off = sstr(sstr(32)) + 24               # VM 0: name, conn, cid, features
    nreg, nq, _r, nconns = struct.unpack_from("<BBHI", buf, off)
    off += 8
    for _ in range(nreg):
        off = sstr(off + 32)
    for _ in range(nq):
        off = sstr(sstr(off + 28)) + (2 if version >= 3 else 0)  # v3: the ring's base
    if nconns and mode == "twin":
        off = sstr(sstr(off + 33 + 8 + 4 + 36 + 16))   # host_fd, tag
        for _q in range(2):                 # to_host, to_guest
            qlen = struct.unpack_from("<I", buf, off)[0]
            off += 4 + qlen
            off += 4 + 5 * struct.unpack_from("<I", buf, off)[0]
        off = sstr(off)                     # twin_vm
        struct.pack_into("<Q", buf, off, struct.unpack_from("<Q", buf, off)[0] + 1000)
    elif nconns:
        buf[off + 33] = 9                   # the state byte after the type
    if nconns:
        struct.pack_into("<I", buf, 16, zlib.crc32(bytes(buf[32:length])))
        os.pwrite(state, bytes(buf[:length]), 0)
os.execv(os.environ["HANDOFF_VSXD"], [os.environ["HANDOFF_VSXD"]] + sys.argv[1:])
