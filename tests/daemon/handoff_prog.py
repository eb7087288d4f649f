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
elif mode in ("badpaused", "badconn", "twin"):
    import struct
    import staterec                        # (copied beside this file)
    buf = bytearray(os.pread(state, 64 << 20, 0))
    vm = staterec.walk(buf).vms[0]
    if mode == "badpaused":
        buf[vm.flags] |= 1                  # its flags: paused
    elif vm.conns and mode == "twin":
        c = vm.conns[0]
        struct.pack_into("<Q", buf, c.twin_id, struct.unpack_from("<Q", buf, c.twin_id)[0] + 1000)
    elif vm.conns:
        buf[vm.conns[0].state] = 9
    if mode == "badpaused" or vm.conns:
        os.pwrite(state, staterec.seal(buf), 0)
os.execv(os.environ["HANDOFF_VSXD"], [os.environ["HANDOFF_VSXD"]] + sys.argv[1:])
