# shellcheck shell=sh disable=SC2154 # $W, $bad, $pids are the test's
# QEMU's human monitor for the guest tests (backend.test's boot L,
# upgrade-paused.test), sourced after common.sh. The guest's QEMU runs with
# -monitor unix:$W/NAME.mon,server=on,wait=off; a failure is added to the
# test's $bad; the client's pid joins $pids (what cleanup kills).
#
#   mon NAME CMD    one command (stop, cont, system_reset, ...); its answer
#                   goes to $W/NAME.mon.out

# mon NAME CMD: one command on guest NAME's QEMU monitor; its answer goes to
# $W/NAME.mon.out. One client holds the monitor for the guest's whole life
# (QEMU's monitor takes one client at a time, and a new client right after
# the last one may find no socket): mon_client, started at the first
# command, reads commands from $W/NAME.mon.in and answers each in
# $W/NAME.mon.ack.
mon()
{
	[ -p "$W/$1.mon.in" ] || mon_client "$1" || { bad="$bad no monitor for $1;"; return; }
	if ! kill -0 "$(cat "$W/$1.mon.pid")" 2>/dev/null; then
		bad="$bad monitor command '$2': the monitor client is gone ($(tail -n 1 "$W/$1.mon.ack"));"
		return
	fi
	mo_n=$(($(wc -l <"$W/$1.mon.ack") + 1))
	echo "$2" >"$W/$1.mon.in"
	mo_dl=$(($(date +%s) + 60))
	while [ "$(wc -l <"$W/$1.mon.ack")" -lt "$mo_n" ]; do
		if [ "$(date +%s)" -ge "$mo_dl" ]; then
			bad="$bad monitor command '$2' got no answer;"
			return
		fi
		sleep 0.05
	done
	sed -n "${mo_n}p" "$W/$1.mon.ack" | grep -q '^ok' ||
		bad="$bad monitor command '$2' failed: $(sed -n "${mo_n}p" "$W/$1.mon.ack");"
}

mon_client()
{
	mkfifo "$W/$1.mon.in" && : >"$W/$1.mon.ack" || return 1
	python3 - "$W/$1.mon" "$W/$1.mon.in" "$W/$1.mon.ack" >>"$W/$1.mon.out" 2>&1 <<'PY' &
import socket, sys, time
s = None
for attempt in range(100):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[1])
        break
    except OSError:
        s.close()
        s = None
        time.sleep(0.1)
def prompt():
    b = b""
    while not b.endswith(b"(qemu) "):
        c = s.recv(4096)
        if not c:
            raise OSError("the monitor closed")
        b += c
    return b
ack = open(sys.argv[3], "a", buffering=1)
def connect():
    global s
    for attempt in range(100):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(60)
            s.connect(sys.argv[1])
            prompt()
            return
        except OSError:
            s.close()
            time.sleep(0.1)
    raise OSError("cannot connect to " + sys.argv[1])
try:
    if s is None:
        raise OSError("cannot connect to " + sys.argv[1])
    s.settimeout(60)
    prompt()
    while True:
        with open(sys.argv[2]) as f:   # blocks until mon writes a command
            for line in f:
                for attempt in range(3):
                    try:
                        s.sendall(line.encode())
                        sys.stdout.write(prompt().decode(errors="replace"))
                        break
                    except OSError:
                        # QEMU dropped the client: a new one, the command again
                        # (stop and cont may come twice)
                        s.close()
                        connect()
                else:
                    raise OSError("the monitor keeps dropping us")
                sys.stdout.flush()
                ack.write("ok\n")
except OSError as e:
    ack.write("error: %s\n" % e)
PY
	echo $! >"$W/$1.mon.pid"
	pids="$pids $!"
}
