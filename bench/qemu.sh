#!/bin/sh
# bench/qemu.sh BUILDDIR: in one real QEMU guest, bulk throughput of vsock
# through vsxd against TCP over the guest's virtio-net (QEMU user
# networking), 64 KiB writes, both directions, same boot.
#
# The lab guest of tests/vm (Debian's kernel, busybox initramfs, QEMU TCG
# or KVM) gets a vhost-user-vsock-pci device served by BUILDDIR's vsxd and
# a virtio-net-pci device on -netdev user (slirp: the guest is 10.0.2.15,
# the host's 127.0.0.1 is 10.0.2.2). bench/qperf runs both ends:
#   g2h vsock  guest: connect vsock:2:PORT, send; host: listen
#              unix:TMP/vm.vsock:PORT (libvsx binds TMP/vm.vsock_PORT, where
#              vsxd connects), receive
#   g2h tcp    guest: connect tcp:10.0.2.2:HP, send; host: listen
#              127.0.0.1:HP, receive
#   h2g vsock  guest: listen vsock:any:PORT, receive; host: connect
#              unix:TMP/vm.vsock:PORT (libvsx: "CONNECT PORT\n", "OK n\n"), send
#   h2g tcp    guest: listen 0.0.0.0:7000, receive; host: connect to
#              127.0.0.1:HP2, forwarded by -netdev user,hostfwd=...
# Each run moves VSX_QEMU_BYTES in 65536-byte writes; the receiver checks
# every byte against a pattern and times first byte to last byte. Runs go
# rep by rep, the paths alternating (vsock first on odd reps, tcp first on
# even ones). Nothing here opens AF_VSOCK on the build machine: the host
# side of vsock is Unix sockets at vsxd's uds-path.
#
# Output (stdout): "qemu case=C path=P size=65536 rep=N bytes=B secs=S
# mibs=M" per run, "qemu-median case=C path=P size=65536 reps=N bytes=B
# mibs=M min_mibs=A max_mibs=B" per case and path, and one "qemu-setup"
# line. Progress on stderr. Exit status 0 when every run passed, 1 when any
# run failed or any byte mismatched, 2 on bad usage or a setup failure (no
# QEMU, kernel, modules or busybox; vsxd or the guest did not come up), with
# the reason on stderr. Every exit stops the QEMU and vsxd it started.
#
# Environment:
#   VSX_QEMU_BYTES  bytes per run (default 64M; K, M, G suffixes)
#   VSX_QEMU_REPS   repetitions of each case and path (default 3)
#   VSX_QEMU_KEEP   a directory to copy the console and vsxd logs into
#   and those of tests/vm/run-guest.sh (VSX_KERNEL, VSX_QEMU, VSX_ACCEL...).
set -u
vsx_prog=qemu.sh
# setup_fail REASON: a setup failure (exit 2), REASON one line on stderr.
setup_fail() { echo "$vsx_prog: $*" >&2; exit 2; }
[ $# -eq 1 ] || setup_fail "usage: $0 BUILDDIR"
B=$(cd "$1" 2>/dev/null && pwd) || setup_fail "$1: no such build directory"
S=$(cd "$(dirname "$0")/.." && pwd)
vm=$S/tests/vm
# shellcheck source-path=SCRIPTDIR source=../tests/vm/common.sh
. "$vm/common.sh"

size=65536
VSX_QEMU_BYTES=${VSX_QEMU_BYTES:-64M}
n=${VSX_QEMU_BYTES%[KMG]}
case $n in
'' | *[!0-9]*) setup_fail "VSX_QEMU_BYTES=$VSX_QEMU_BYTES: want a number of bytes" \
	"(K, M, G suffixes)" ;;
esac
case $VSX_QEMU_BYTES in
*K) bytes=$((n * 1024)) ;;
*M) bytes=$((n * 1048576)) ;;
*G) bytes=$((n * 1073741824)) ;;
*) bytes=$n ;;
esac
[ "$bytes" -gt 0 ] 2>/dev/null ||
	setup_fail "VSX_QEMU_BYTES=$VSX_QEMU_BYTES: want more than 0 bytes"
reps=${VSX_QEMU_REPS:-3}
case $reps in
'' | *[!0-9]* | 0*) setup_fail "VSX_QEMU_REPS=$reps: want a number from 1" ;;
esac

qperf=$B/bench/qperf
vsxd=$B/daemon/vsxd
[ -x "$qperf" ] || setup_fail "no $qperf (run make in $B)"
[ -x "$vsxd" ] || setup_fail "no $vsxd (run make in $B)"
qemu=${VSX_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || setup_fail "no $qemu (apt-get install qemu-system-x86)"
kernel=$(vsx_kernel 2>&1) || setup_fail "${kernel#"$vsx_prog: "}"
[ -r "$kernel" ] || setup_fail "cannot read the guest kernel $kernel (set VSX_KERNEL)"
moddir=$(vsx_modules_dir 2>&1) || setup_fail "${moddir#"$vsx_prog: "}"
[ -d "$moddir/kernel" ] || setup_fail "no kernel modules in $moddir (set VSX_MODULES)"
[ -x "${BUSYBOX:-/bin/busybox}" ] ||
	setup_fail "no ${BUSYBOX:-/bin/busybox} (apt-get install busybox-static)"
mem=512M cpus=2
# One probe (common.sh, vsx_accel), and run-guest.sh runs what it chose.
accel=$(vsx_accel) || exit 2
export VSX_ACCEL=$accel

# Unix socket paths are short: keep them out of the build tree.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vsx-qemu.XXXXXX") || setup_fail "mktemp failed"
vsxd_pid='' guest_pid='' hpids=''
# shellcheck disable=SC2317 # reached through the trap
cleanup()
{
	for p in $hpids; do
		kill "$p" 2>/dev/null
	done
	# run-guest.sh stops QEMU on SIGTERM (its trap kills QEMU's pid).
	[ -n "$guest_pid" ] && kill -TERM "$guest_pid" 2>/dev/null
	[ -n "$vsxd_pid" ] && kill -TERM "$vsxd_pid" 2>/dev/null
	[ -n "$guest_pid" ] && wait "$guest_pid" 2>/dev/null
	[ -n "$vsxd_pid" ] && wait "$vsxd_pid" 2>/dev/null
	if [ -n "${VSX_QEMU_KEEP:-}" ]; then
		mkdir -p "$VSX_QEMU_KEEP" &&
			cp "$tmp/console.log" "$tmp/vsxd.log" "$tmp/run.out" \
				"$VSX_QEMU_KEEP/" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 2' INT TERM HUP

log() { echo "$vsx_prog: $*" >&2; }

# ---- The plan: one line per run, in order -----------------------------------

if ! hp_g2h=$("$qperf" freeport) || ! hp_h2g=$("$qperf" freeport); then
	setup_fail "$qperf freeport failed"
fi
[ "$hp_g2h" != "$hp_h2g" ] || hp_h2g=$("$qperf" freeport)
gport=7000
r=1
: > "$tmp/plan"
while [ "$r" -le "$reps" ]; do
	if [ $((r % 2)) = 1 ]; then order="vsock tcp"; else order="tcp vsock"; fi
	for c in g2h h2g; do
		for p in $order; do
			echo "$c $p $r" >> "$tmp/plan"
		done
	done
	r=$((r + 1))
done

# ends C P R: the two ends of run R of case C over path P. Sets g_end (the
# guest qperf's arguments before BYTES) and h_role, h_addr, h_dir and h_wait
# (the host's). The guest connects with a long -w (the host may not listen
# yet); the host connects only once the guest says it listens. vsock ports:
# g2h 6000+rep, h2g 6100+rep.
ends()
{
	case $1-$2 in
	g2h-vsock)
		g_end="-w 120000 connect vsock:2:$((6000 + $3)) send"
		h_role=listen h_addr="unix:$tmp/vm.vsock:$((6000 + $3))" ;;
	g2h-tcp)
		g_end="-w 120000 connect tcp:10.0.2.2:$hp_g2h send"
		h_role=listen h_addr="tcp:127.0.0.1:$hp_g2h" ;;
	h2g-vsock)
		g_end="listen vsock:any:$((6100 + $3)) recv"
		h_role=connect h_addr="unix:$tmp/vm.vsock:$((6100 + $3))" ;;
	h2g-tcp)
		g_end="listen tcp:0.0.0.0:$gport recv"
		h_role=connect h_addr="tcp:127.0.0.1:$hp_h2g" ;;
	esac
	if [ "$h_role" = listen ]; then
		h_dir=recv h_wait=0
	else
		h_dir=send h_wait=30000
	fi
}

# The guest's script: network up, then its end of each run.
{
	cat <<EOF
n=\$(ls /sys/class/net | grep -v '^lo\$' | head -n 1)
ip link set dev lo up
ip link set dev "\$n" up && ip addr add 10.0.2.15/24 dev "\$n" &&
	ip route add default via 10.0.2.2 || { echo "VSX-NET-FAILED \$n"; exit 3; }
echo "VSX-NET \$n \$(cat /sys/class/net/\$n/address) driver=\$(basename \$(readlink /sys/class/net/\$n/device/driver))"
r() { t=\$1; shift; "\$@"; echo "VSX-RESULT \$t \$?"; }
EOF
	while read -r c p r; do
		ends "$c" "$p" "$r"
		echo "r $c-$p-$r qperf -l $c-$p-$r -t 300 $g_end $bytes"
	done < "$tmp/plan"
	echo "exit 0"
} > "$tmp/guest.sh"

# ---- vsxd and the guest ------------------------------------------------------

"$vsxd" --control "$tmp/ctl" \
	--vm "guest-cid=3,socket=$tmp/vhost.sock,uds-path=$tmp/vm.vsock" \
	>"$tmp/vsxd.log" 2>&1 &
vsxd_pid=$!
dl=$(($(date +%s) + 20))
while [ ! -S "$tmp/vhost.sock" ] || [ ! -S "$tmp/vm.vsock" ]; do
	if ! kill -0 "$vsxd_pid" 2>/dev/null || [ "$(date +%s)" -ge "$dl" ]; then
		log "vsxd did not start; its log:"
		cat "$tmp/vsxd.log" >&2
		exit 2
	fi
	sleep 0.05
done
log "vsxd (pid $vsxd_pid) serving CID 3 at $tmp/vm.vsock"

# qperf goes in with libvsx.so (and what that needs), found through -L.
"$vm/mkinitramfs.sh" -q -o "$tmp/guest.cpio.gz" -c "$B/bench" -L "$B/libvsx/.libs" \
	-m failover -m net_failover -m virtio_net \
	-e "$(cat "$tmp/guest.sh")" "$qperf" || setup_fail "mkinitramfs.sh failed"

VSX_VM_LOG=$tmp/console.log "$vm/run-guest.sh" -t 900 -m "$mem" -s "$cpus" \
	"$tmp/guest.cpio.gz" -- \
	-object "memory-backend-memfd,id=mem,size=$mem,share=on" \
	-machine memory-backend=mem \
	-chardev "socket,id=c0,path=$tmp/vhost.sock" \
	-device vhost-user-vsock-pci,chardev=c0 \
	-netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$hp_h2g-:$gport" \
	-device virtio-net-pci,netdev=n0 >"$tmp/run.out" 2>&1 &
guest_pid=$!
log "guest booting ($accel, $cpus CPUs, $mem); $reps rep(s) of $bytes bytes per run"

# wait_console REGEX SECONDS: 0 once the console shows REGEX, 1 when the
# guest ended or the time ran out first.
wait_console()
{
	wc_dl=$(($(date +%s) + $2))
	while :; do
		grep -aEq -- "$1" "$tmp/console.log" 2>/dev/null && return 0
		if ! kill -0 "$guest_pid" 2>/dev/null; then
			grep -aEq -- "$1" "$tmp/console.log" 2>/dev/null && return 0
			return 1
		fi
		[ "$(date +%s)" -ge "$wc_dl" ] && return 1
		sleep 0.1
	done
}

# hwait PID: wait for a host qperf (it ends itself within -t); killed when
# the guest has been gone for 10 s. Status in $hw_st.
hwait()
{
	hw_n=0
	while kill -0 "$1" 2>/dev/null; do
		if ! kill -0 "$guest_pid" 2>/dev/null; then
			hw_n=$((hw_n + 1))
			[ "$hw_n" -gt 100 ] && kill "$1" 2>/dev/null
		fi
		sleep 0.1
	done
	wait "$1"
	hw_st=$?
}

if ! wait_console '^VSX-NET ' 300; then
	log "the guest's network did not come up; console:"
	tail -n 30 "$tmp/console.log" >&2
	exit 2
fi
log "guest up: $(grep -a '^VSX-NET ' "$tmp/console.log" | head -n 1)"

# run_one C P R: the host's end of run R of case C over path P, against the
# guest's end that the guest script runs in the same order. Prints the
# run's "qemu case=..." line and records its figure, or logs why it failed
# and sets failed=1. Returns 1 when the runs cannot go on (the guest never
# started listening).
run_one()
{
	ro_l=$1-$2-$3
	ends "$1" "$2" "$3"
	if [ "$h_role" = connect ] &&
	   ! wait_console "qperf\\[$ro_l\\]: listening" 300; then
		log "$ro_l: the guest listener did not start"
		failed=1
		return 1
	fi
	"$qperf" -l "$ro_l" -w "$h_wait" -t 300 "$h_role" "$h_addr" "$h_dir" "$bytes" \
		>"$tmp/$ro_l.out" 2>&1 &
	hpids=$!
	hwait $!
	hpids=''
	if ! wait_console "^VSX-RESULT $ro_l [0-9]+" 60; then
		log "$ro_l: the guest gave no result"
		failed=1
	fi
	# Each end's qperf-result line: the host's in its output file, the
	# guest's on the console.
	if [ "$h_dir" = recv ]; then
		ro_rf=$tmp/$ro_l.out ro_sf=$tmp/console.log
	else
		ro_rf=$tmp/console.log ro_sf=$tmp/$ro_l.out
	fi
	ro_line=$(grep -a "^qperf-result label=$ro_l role=recv " "$ro_rf")
	ro_other=$(grep -a "^qperf-result label=$ro_l role=send " "$ro_sf")
	ro_gst=$(sed -n "s/^VSX-RESULT $ro_l \([0-9][0-9]*\).*/\1/p" "$tmp/console.log")
	if [ -z "$ro_line" ] || [ "$hw_st" != 0 ] || [ "$ro_gst" != 0 ]; then
		log "$ro_l: FAILED (host qperf status $hw_st, guest status ${ro_gst:-none})"
		grep -a "qperf\\[$ro_l\\]" "$tmp/$ro_l.out" "$tmp/console.log" |
			sed 's/^/    /' >&2
		failed=1
		return 0
	fi
	ro_secs=$(echo "$ro_line" | sed -n 's/.* secs=\([^ ]*\).*/\1/p')
	ro_mibs=$(echo "$ro_line" | sed -n 's/.* mibs=\([^ ]*\).*/\1/p')
	ro_got=$(echo "$ro_line" | sed -n 's/.* bytes=\([^ ]*\).*/\1/p')
	echo "qemu case=$1 path=$2 size=$size rep=$3 bytes=$ro_got secs=$ro_secs mibs=$ro_mibs"
	echo "$1 $2 $ro_mibs" >> "$tmp/results"
	ro_other=$(echo "$ro_other" |
		sed -n 's/.* secs=\([^ ]*\) mibs=\([^ ]*\).*/\2 MiB\/s in \1 s/p')
	log "$ro_l: receiver $ro_mibs MiB/s; sender (connected to receiver's EOF): $ro_other"
}

failed=0
: > "$tmp/results"
while read -r c p r; do
	run_one "$c" "$p" "$r" || break
done < "$tmp/plan"

if ! wait_console '^VSX-GUEST-EXIT=' 120; then
	log "the guest did not finish"
	failed=1
fi
wait "$guest_pid"
gst=$?
guest_pid=''
[ "$gst" = 0 ] || { log "run-guest.sh ended with status $gst"; failed=1; }
kill -TERM "$vsxd_pid" 2>/dev/null
wait "$vsxd_pid"
vst=$?
vsxd_pid=''
[ "$vst" = 0 ] || { log "vsxd ended with status $vst"; failed=1; }

for c in g2h h2g; do
	for p in vsock tcp; do
		awk -v c="$c" -v p="$p" '$1 == c && $2 == p { print $3 }' "$tmp/results" |
			sort -g | awk -v c="$c" -v p="$p" -v s="$size" -v b="$bytes" '
			{ v[NR] = $1 }
			END {
				if (NR == 0) exit
				m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
				printf "qemu-median case=%s path=%s size=%d reps=%d bytes=%d " \
					"mibs=%.2f min_mibs=%.2f max_mibs=%.2f\n",
					c, p, s, NR, b, m, v[1], v[NR]
			}'
	done
done
qv=$("$qemu" --version 2>/dev/null | sed -n '1s/^QEMU emulator version \([^ ]*\).*/\1/p')
echo "qemu-setup kernel=$(basename "$kernel" | sed 's/^vmlinuz-//') qemu=$qv accel=$accel" \
	"net=virtio-net-pci+user vsock=vhost-user-vsock-pci+vsxd mem=$mem smp=$cpus" \
	"host_cpus=$(nproc)"
[ "$failed" = 0 ] || { log "FAILED: see above"; exit 1; }
exit 0
