#!/bin/sh
# bench/qemu.sh BUILDDIR: in one real QEMU guest, bulk throughput of vsock
# through vsxd against TCP over the guest's virtio-net (QEMU user
# networking), 64 KiB writes, both directions, same boot.
#
# The lab guest of tests/vm (Debian's kernel, busybox initramfs, QEMU TCG
# or KVM) gets a vhost-user-vsock-pci device served by BUILDDIR's vsxd and
# a virtio-net-pci device on -netdev user (slirp: the guest is 10.0.2.15,
# the host's 127.0.0.1 is 10.0.2.2). bench/qperf runs both ends:
#   g2h vsock  guest: connect vsock:2:PORT, send; host: listen on the hybrid
#              socket TMP/vm.vsock_PORT (vsxd connects there), receive
#   g2h tcp    guest: connect tcp:10.0.2.2:HP, send; host: listen
#              127.0.0.1:HP, receive
#   h2g vsock  guest: listen vsock:any:PORT, receive; host: connect
#              TMP/vm.vsock, "CONNECT PORT\n", "OK n\n", send
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
# line. Progress on stderr. Exit status 1 when any run failed or any byte
# mismatched, 2 on bad usage or a setup failure.
#
# Environment:
#   VSX_QEMU_BYTES  bytes per run (default 64M; K, M, G suffixes)
#   VSX_QEMU_REPS   repetitions of each case and path (default 3)
#   VSX_QEMU_KEEP   a directory to copy the console and vsxd logs into
#   and those of tests/vm/run-guest.sh (VSX_KERNEL, VSX_QEMU, VSX_ACCEL...).
set -u
vsx_prog=qemu.sh
[ $# -eq 1 ] || { echo "usage: $0 BUILDDIR" >&2; exit 2; }
B=$(cd "$1" && pwd) || exit 2
S=$(cd "$(dirname "$0")/.." && pwd)
vm=$S/tests/vm
. "$vm/common.sh"

size=65536
VSX_QEMU_BYTES=${VSX_QEMU_BYTES:-64M}
case $VSX_QEMU_BYTES in
*[0-9]K) bytes=$((${VSX_QEMU_BYTES%K} * 1024)) ;;
*[0-9]M) bytes=$((${VSX_QEMU_BYTES%M} * 1048576)) ;;
*[0-9]G) bytes=$((${VSX_QEMU_BYTES%G} * 1073741824)) ;;
*[0-9]) bytes=$VSX_QEMU_BYTES ;;
*) echo "$vsx_prog: VSX_QEMU_BYTES=$VSX_QEMU_BYTES: want a number" >&2; exit 2 ;;
esac
reps=${VSX_QEMU_REPS:-3}
case $reps in '' | *[!0-9]* | 0) echo "$vsx_prog: bad VSX_QEMU_REPS" >&2; exit 2 ;; esac

qperf=$B/bench/qperf
vsxd=$B/daemon/vsxd
[ -x "$qperf" ] || { echo "$vsx_prog: no $qperf (run make in $B)" >&2; exit 2; }
[ -x "$vsxd" ] || { echo "$vsx_prog: no $vsxd (run make in $B)" >&2; exit 2; }
qemu=${VSX_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || { echo "$vsx_prog: no $qemu" >&2; exit 2; }
kernel=$(vsx_kernel) || exit 2
mem=512M cpus=2
accel=${VSX_ACCEL:-}
if [ -z "$accel" ]; then
	accel=tcg
	[ -e /dev/kvm ] && (: <>/dev/kvm) 2>/dev/null && accel=kvm
fi

# Unix socket paths are short: keep them out of the build tree.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vsx-qemu.XXXXXX") || exit 2
vsxd_pid='' guest_pid='' hpids=''
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

hp_g2h=$("$qperf" freeport) && hp_h2g=$("$qperf" freeport) || exit 2
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

# vsock ports: g2h 6000+rep, h2g 6100+rep
vport() { if [ "$1" = g2h ]; then echo $((6000 + $2)); else echo $((6100 + $2)); fi; }

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
		l=$c-$p-$r
		case $c-$p in
		g2h-vsock) a="-w 120000 connect vsock:2:$(vport g2h "$r") send" ;;
		g2h-tcp) a="-w 120000 connect tcp:10.0.2.2:$hp_g2h send" ;;
		h2g-vsock) a="listen vsock:any:$(vport h2g "$r") recv" ;;
		h2g-tcp) a="listen tcp:0.0.0.0:$gport recv" ;;
		esac
		echo "r $l qperf -l $l -t 300 $a $bytes"
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

"$vm/mkinitramfs.sh" -q -o "$tmp/guest.cpio.gz" -c "$B/bench" \
	-m failover -m net_failover -m virtio_net \
	-e "$(cat "$tmp/guest.sh")" "$qperf" || { log "mkinitramfs.sh failed"; exit 2; }

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

failed=0
: > "$tmp/results"
while read -r c p r; do
	l=$c-$p-$r
	line=''
	if [ "$c" = g2h ]; then
		if [ "$p" = vsock ]; then
			a="unix:$tmp/vm.vsock_$(vport g2h "$r")"
		else
			a="tcp:127.0.0.1:$hp_g2h"
		fi
		"$qperf" -l "$l" -t 300 listen "$a" recv "$bytes" >"$tmp/$l.out" 2>&1 &
		hpids=$!
		hwait $!
		hpids=''
		if ! wait_console "^VSX-RESULT $l [0-9]+" 60; then
			log "$l: the guest gave no result"
			failed=1
		fi
		line=$(grep -a "^qperf-result label=$l role=recv " "$tmp/$l.out")
		[ "$hw_st" = 0 ] || line=''
		other=$(grep -a "^qperf-result label=$l role=send " "$tmp/console.log")
	else
		if ! wait_console "qperf\\[$l\\]: listening" 300; then
			log "$l: the guest listener did not start"
			failed=1
			break
		fi
		if [ "$p" = vsock ]; then
			a="hybrid:$tmp/vm.vsock:$(vport h2g "$r")"
		else
			a="tcp:127.0.0.1:$hp_h2g"
		fi
		"$qperf" -l "$l" -w 30000 -t 300 connect "$a" send "$bytes" \
			>"$tmp/$l.out" 2>&1 &
		hpids=$!
		hwait $!
		hpids=''
		if ! wait_console "^VSX-RESULT $l [0-9]+" 60; then
			log "$l: the guest gave no result"
			failed=1
		fi
		line=$(grep -a "^qperf-result label=$l role=recv " "$tmp/console.log")
		other=$(grep -a "^qperf-result label=$l role=send " "$tmp/$l.out")
	fi
	gst=$(sed -n "s/^VSX-RESULT $l \([0-9][0-9]*\).*/\1/p" "$tmp/console.log")
	if [ -z "$line" ] || [ "$hw_st" != 0 ] || [ "$gst" != 0 ]; then
		log "$l: FAILED (host qperf status $hw_st, guest status ${gst:-none})"
		grep -a "qperf\\[$l\\]" "$tmp/$l.out" "$tmp/console.log" | sed 's/^/    /' >&2
		failed=1
		continue
	fi
	secs=$(echo "$line" | sed -n 's/.* secs=\([^ ]*\).*/\1/p')
	mibs=$(echo "$line" | sed -n 's/.* mibs=\([^ ]*\).*/\1/p')
	got=$(echo "$line" | sed -n 's/.* bytes=\([^ ]*\).*/\1/p')
	echo "qemu case=$c path=$p size=$size rep=$r bytes=$got secs=$secs mibs=$mibs"
	echo "$c $p $mibs" >> "$tmp/results"
	log "$l: receiver $mibs MiB/s; sender (connected to receiver's EOF):" \
		"$(echo "$other" | sed -n 's/.* secs=\([^ ]*\) mibs=\([^ ]*\).*/\2 MiB\/s in \1 s/p')"
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
