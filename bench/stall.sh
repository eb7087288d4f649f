#!/bin/sh
# bench/stall.sh [BUILDDIR]: what a busy worker costs another VM's packets
# (issue #33 item 1: "a borrower holds up to 8 rooms until its whole round
# ends, so a busy worker can stall idle workers' own kicks").
#
# One vsxd with its default two workers (vsxctl vms shows the placement,
# checked): VMs a (w0), b (w1), x (w0, idle) and c (w1), each a fake guest
# but c, which loadgen drives: VSX_STALL_N (20000) round trips of one byte,
# host -> vsxd -> c's guest -> vsxd -> host, one at a time; their p50, p99,
# p99.9 and the largest. Four cases, each a fresh vsxd:
#   idle       nothing else moves
#   borrowed   b sends VSX_STALL_BYTES (4 GiB) to its sibling a in 4 KiB
#              packets while the round trips run, and c is placed on w0,
#              the worker whose room b's worker borrows to write into a's
#              RX ring (config order a, b, c)
#   borrower   the same transfer, c on w1 with b (config order a, b, x, c)
#   together   the same transfer with a and b on one worker (w0: config
#              order a, c, b): no room is borrowed, c's worker is idle
# "borrowed" against "together" is the stall the borrowed room adds.
# The fake guests run under nice -n 10 (they make and check every byte,
# and would take most of the two CPUs otherwise); loadgen and vsxd do not.
#
# Output lines: stall case=NAME c=WORKER n=N p50_us=... p99_us=... p999_us=...
# max_us=... bytes=B (the transfer's, all of it checked) under_transfer=yes
# (every round trip ran while the transfer did; no: it ended first). The exit status
# says whether every run moved and checked its bytes, never whether a
# figure was good.
set -eu

src=${VSX_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${1:-${VSX_BUILDDIR:-$(pwd)}}
build=$(cd "$build" && pwd)
n=${VSX_STALL_N:-20000}
bytes=${VSX_STALL_BYTES:-4294967296}
fg_bin=$build/tests/daemon/fake_guest
lg=$build/tests/daemon/loadgen
vsxctl=$build/tools/vsxctl/vsxctl
make -C "$build" -s daemon/vsxd tests/daemon/fake_guest tests/daemon/loadgen \
	tools/vsxctl/vsxctl >/dev/null

vsx_prog=stall.sh
# shellcheck source=bench/fake_guest.sh
. "$src/bench/fake_guest.sh"
fg_tmp vsxstall
a_pid='' b_pid='' x_pid=''

vm() { echo "--vm guest-cid=$2,socket=$tmp/$1.vhost,uds-path=$tmp/$1.vsock,name=$1"; }

# run CASE ORDER BUSY: a vsxd with the VMs in ORDER (names of a b c x),
# the transfer when BUSY is 1
run() {
	case_=$1 order=$2 busy=$3
	args=''
	for v in $order; do
		case $v in a) cid=3 ;; b) cid=4 ;; c) cid=5 ;; x) cid=6 ;; esac
		args="$args $(vm $v $cid)"
	done
	# shellcheck disable=SC2086 # one word per option
	"$build/daemon/vsxd" --control "$tmp/control" $args 2>"$tmp/log" &
	pid=$!
	wait_for test -S "$tmp/control"
	fgo a 4 nice -n 10
	fgo b 5 nice -n 10
	case $order in *x*) fgo x 6 nice -n 10 ;; esac
	cw=$("$vsxctl" -c "$tmp/control" vms | awk '$1 == "c" { print $3 }')
	bg='' over=-
	if [ "$busy" = 1 ]; then
		fg a "listen 5000"
		fg b "peer 3"
		fg b "gconnect 5000"
		# in 64 MiB commands (a fake guest's command waits 10 s at most)
		(
			left=$bytes
			while [ "$left" -gt 0 ]; do
				k=$((left < 67108864 ? left : 67108864))
				fg b "gsend $k 4096" || exit 1
				left=$((left - k))
			done
		) &
		bg=$!
		sleep 1     # the transfer under way
	fi
	"$lg" -T 600 "$tmp/c.vhost" "$tmp/c.vsock" pingpong "$n" >"$tmp/pp" 2>&1 ||
		{ cat "$tmp/pp" >&2; echo "stall.sh: $case_: loadgen failed" >&2; return 1; }
	if [ -n "$bg" ]; then
		# the round trips were all measured under the transfer (yes), or
		# it ended first (no: make VSX_STALL_BYTES larger)
		over=no
		kill -0 "$bg" 2>/dev/null && over=yes
		wait "$bg" || { echo "stall.sh: $case_: the transfer failed" >&2; return 1; }
		fg a "grecv $bytes" || return 1
	fi
	for f in a b x; do
		eval "fp=\$${f}_pid"
		[ -n "$fp" ] && fg_send $f quit
	done
	exec 4>&- 5>&- 6>&- 2>/dev/null || :
	wait $a_pid $b_pid $x_pid 2>/dev/null || :
	a_pid='' b_pid='' x_pid='' fg_all=''
	kill -TERM "$pid"
	wait "$pid" || :
	pid=''
	rm -f "$tmp/control"
	sed -n "s/^pingpong n=\([0-9]*\) size=1 \(.*\)/stall case=$case_ c=$cw n=\1 \2 bytes=$((busy * bytes)) under_transfer=$over/p" \
		"$tmp/pp"
}

run idle "a b c" 0
run borrowed "a b c" 1
run borrower "a b x c" 1
run together "a c b" 1
