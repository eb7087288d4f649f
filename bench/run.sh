#!/bin/sh
# bench/run.sh [BUILDDIR]: run vsx's benchmarks against a fresh vsxd and
# record them.
#
# Builds nothing beyond `make` of the programs it runs (vsxbench, qperf,
# vsxd, vsxctl) in BUILDDIR (default: $VSX_BUILDDIR, else the current
# directory). Starts vsxd on temporary paths, runs bench/vsxbench against
# it, a fresh vsxd for each phase, so that `perf stat`, when it works here,
# counts vsxd's system calls per case:
#   idle      10,000 idle connections
#   mem       the 1-byte flood
#   g2h, h2g  throughput at 64 B, 4 KiB, 64 KiB, 256 KiB, default buffers
#             (vsxd tx-buffer-size and guest buf_alloc 256 KiB)
#   g2h, h2g  4 KiB, 64 KiB, 256 KiB at 2 MiB buffers: vsxd
#             tx-buffer-size=2M, vsxbench --buffer 2097152 (guest buf_alloc,
#             host program's and socketpair's SO_SNDBUF/SO_RCVBUF)
#   lat       512 B ping-pong; again with vsxd --poll-us 50 when this vsxd
#             has that option
#   sibling   bench/sibling.sh: vsxd's CPU per GiB between two sibling
#             VMs (fake guests) on two worker threads and on one
#   churn     bench/churn.py: vsxd's CPU per connection open+close with 0
#             and with 2,000 other connections open, file descriptor store
#             on and off
#   multivm   1, 2, 4, 8 VMs on one vsxd (VSX_BENCH_VMS), each its own
#             vsxbench process (guest and host program), 64 KiB writes
#             guest -> host, then host -> guest, all VMs at once; beside the
#             same number of socketpair processes; with vsxd --threads 1 and
#             its default when this vsxd has --threads, else once
#   qemu      bench/qemu.sh: vsock through vsxd against TCP over virtio-net
#             in one real QEMU guest (skipped, and said so, when QEMU or a
#             kernel is missing)
# and writes
#   bench/results/latest.txt   the raw output, with the setup and load
#   bench/RESULTS.md           the tables (medians, ratios to socketpair)
#   bench/throughput.png       when gnuplot is installed
# in the source tree (or in $VSX_BENCH_OUT).
#
# Environment: VSX_BENCH_REPS (3), VSX_BENCH_SCALE (1: bytes per run),
# VSX_BENCH_IDLE (10000: idle connections), VSX_BENCH_PERF (auto; 0: no
# perf stat), VSX_BENCH_BUFFER (2097152: the larger buffer, bytes; 0: no
# such runs), VSX_BENCH_POLL_US (50: vsxd --poll-us of the second latency
# run; 0: none), VSX_BENCH_QEMU (auto; 0: no real-QEMU phase),
# VSX_QEMU_BYTES (32M here: bytes per qemu.sh run), VSX_QEMU_REPS (3),
# VSX_BENCH_VMS (1,2,4,8: VM counts of the multi-VM phase), VSX_BENCH_PHASES
# (idle,mem,throughput,buffer,lat,multivm,sibling,churn,qemu: the phases run, e.g.
# "multivm" alone; "buffer" is the larger-buffer throughput set),
# VSX_BENCH_WAIT_LOAD (e.g. 0.5: first wait, up to 10 minutes, for the
# 1-minute load average to fall below it), VSX_BENCH_REPORT=FILE (run
# nothing: write RESULTS.md and the plot from FILE, a latest.txt, again).
# Benchmarks only report: the exit status says whether every run completed
# and every byte checked, never whether a figure was good.
set -eu

src=${VSX_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${1:-${VSX_BUILDDIR:-$(pwd)}}
build=$(cd "$build" && pwd)
out=${VSX_BENCH_OUT:-$src/bench}
reps=${VSX_BENCH_REPS:-3}
scale=${VSX_BENCH_SCALE:-1}
bigbuf=${VSX_BENCH_BUFFER:-2097152}
poll_us=${VSX_BENCH_POLL_US:-50}
qemu_bytes=${VSX_QEMU_BYTES:-32M}
all_phases=idle,mem,throughput,buffer,lat,multivm,sibling,churn,qemu
phases=${VSX_BENCH_PHASES:-$all_phases}
mv_vms=${VSX_BENCH_VMS:-1,2,4,8}
for p in $(printf '%s' "$phases" | tr , ' '); do
	case ",$all_phases," in
	*",$p,"*) ;;
	*) echo "run.sh: VSX_BENCH_PHASES: unknown phase '$p' (of $all_phases)" >&2; exit 2;;
	esac
done
for n in $(printf '%s' "$mv_vms" | tr , ' '); do
	case $n in
	'' | *[!0-9]* | 0*) echo "run.sh: VSX_BENCH_VMS=$mv_vms: want VM counts 1 to 64, e.g. 1,2,4,8" >&2; exit 2;;
	esac
	if [ "$n" -gt 64 ]; then
		echo "run.sh: VSX_BENCH_VMS=$mv_vms: at most 64 VMs" >&2
		exit 2
	fi
done
case $bigbuf in
'' | *[!0-9]*) echo "run.sh: VSX_BENCH_BUFFER=$bigbuf: want a number of bytes" >&2; exit 2;;
esac
case $poll_us in
'' | *[!0-9]*) echo "run.sh: VSX_BENCH_POLL_US=$poll_us: want a number of µs" >&2; exit 2;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vsxbench.XXXXXX")
pid=
ppid=
mvpids=
cleanup() {
	for p in $mvpids; do
		kill -TERM "$p" 2>/dev/null || :
		wait "$p" 2>/dev/null || :
	done
	if [ -n "$ppid" ]; then
		kill -INT "$ppid" 2>/dev/null || :
		wait "$ppid" 2>/dev/null || :
	fi
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || :
		wait "$pid" 2>/dev/null || :
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

raw=$tmp/latest.txt
: >"$raw"
log() { printf '%s\n' "$*" >>"$raw"; }
say() { printf 'run.sh: %s\n' "$*" >&2; }
# want PHASE: PHASE is in VSX_BENCH_PHASES
want() {
	case ",$phases," in
	*",$1,"*) return 0;;
	esac
	return 1
}

# vsxd options for the idle phase: its per-VM connection limit above the
# connections held (when this vsxd has the option).
idle=${VSX_BENCH_IDLE:-10000}
idle_opts=
if "$build/daemon/vsxd" --help 2>&1 | grep -q -- --max-conns-per-vm; then
	idle_opts="--max-conns-per-vm $((idle + 100))"
fi
# A descriptor per held connection, in vsxd and in vsxbench.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || :
# Adaptive busy-polling of vsxd's event loop (newer vsxd only).
has_poll=no
if "$build/daemon/vsxd" --help 2>&1 | grep -q -- --poll-us; then
	has_poll=yes
fi

# perf stat on vsxd: system calls by kind, page faults, context switches.
perf_events=raw_syscalls:sys_enter,syscalls:sys_enter_sendmsg,syscalls:sys_enter_readv,syscalls:sys_enter_recvmsg,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_brk,syscalls:sys_enter_mmap,page-faults,context-switches
use_perf=no
# shellcheck disable=SC2166
if [ "${VSX_BENCH_PERF:-auto}" != 0 ] && command -v perf >/dev/null 2>&1 &&
   perf stat -x, -e "$perf_events" true >/dev/null 2>&1; then
	use_perf=yes
fi

perf_start() {
	[ $use_perf = yes ] || return 0
	rm -f "$tmp/perf.out"
	perf stat -x, -e "$perf_events" -p "$pid" -o "$tmp/perf.out" 2>/dev/null &
	ppid=$!
	# perf creates its output file first, then attaches: give it time
	n=0
	while [ ! -e "$tmp/perf.out" ] && [ $n -lt 50 ]; do
		sleep 0.1
		n=$((n + 1))
	done
	sleep 0.3
}

# perf_stop CASE SIZE [KEY=VALUE...]: one "perf case=CASE size=SIZE
# [KEY=VALUE...] ..." line of counts in the raw output (the keys tell the
# buffer= and poll_us= runs apart).
perf_stop() {
	[ -n "$ppid" ] || return 0
	# A background job starts with SIGINT ignored until perf installs its
	# handler: on a loaded machine the first SIGINT can come before that.
	# Ask again every second while perf runs (not yet a zombie); after 30
	# s, SIGTERM (its counts are then lost).
	kill -INT "$ppid" 2>/dev/null || :
	n=0
	while [ -e "/proc/$ppid" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$ppid/status" 2>/dev/null; do
		n=$((n + 1))
		if [ $n -ge 300 ]; then
			kill -TERM "$ppid" 2>/dev/null || :
			break
		fi
		[ $((n % 10)) != 0 ] || kill -INT "$ppid" 2>/dev/null || :
		sleep 0.1
	done
	wait "$ppid" 2>/dev/null || :
	ppid=
	[ -s "$tmp/perf.out" ] || return 0
	c=$1 s=$2
	shift 2
	awk -F, -v c="$c" -v s="$s" -v extra="$*" '
	$3 != "" && $1 ~ /^[0-9]+$/ {
		k = $3; sub(/^.*sys_enter_/, "", k); sub(/^raw_syscalls:sys_enter$/, "syscalls", k)
		gsub(/-/, "_", k); out = out " " k "=" $1
	}
	END { print "perf case=" c " size=" s (extra != "" ? " " extra : "") out }' \
		"$tmp/perf.out" >>"$raw"
}

# start_vsxd [OPTION...]: a fresh vsxd with one VM; $vm_keys (",key=value...")
# is appended to its --vm.
vm_keys=
start_vsxd() {
	rm -f "$tmp/vhost.sock" "$tmp/vm.vsock" "$tmp/ctl.sock"
	"$build/daemon/vsxd" "$@" \
		--vm "guest-cid=3,socket=$tmp/vhost.sock,uds-path=$tmp/vm.vsock$vm_keys" \
		--control "$tmp/ctl.sock" 2>>"$tmp/vsxd.log" &
	pid=$!
	wait_vsxd "$tmp/vhost.sock" "$tmp/ctl.sock"
}

# wait_vsxd SOCKET...: the vsxd just started ($pid) has made them all.
wait_vsxd() {
	w=0
	for sock in "$@"; do
		while [ ! -S "$sock" ]; do
			w=$((w + 1))
			if [ $w -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
				cat "$tmp/vsxd.log" >&2
				echo "run.sh: vsxd did not start" >&2
				exit 1
			fi
			sleep 0.05
		done
	done
}

stop_vsxd() {
	kill -TERM "$pid"
	st=0
	wait "$pid" || st=$?
	pid=
	log "vsxd exit=$st"
}

# vsxd's own accounting of queued bytes. `vsxctl list` is tried first;
# per-connection `show` is the fallback (a list reply of more than 64 lines
# is refused by libvsx's reply parser: EPROTO with 4 or more connections).
ctl="'$build/tools/vsxctl/vsxctl' -j -c '$tmp/ctl.sock'"
queued_cmd="$ctl list 2>/dev/null || { for i in \$(seq 1 64); do $ctl show \$i 2>/dev/null; done; true; }"

bench() {
	log "load $(cut -d' ' -f1-3 /proc/loadavg)"
	if ! "$build/bench/vsxbench" --socket "$tmp/vhost.sock" --uds-path "$tmp/vm.vsock" \
		--pid "$pid" --label vsxd --reps "$reps" --scale "$scale" \
		--queued-cmd "$queued_cmd" \
		"$@" >>"$raw" 2>"$tmp/bench.err"; then
		cat "$tmp/bench.err" >&2
		echo "--- vsxd log" >&2
		cat "$tmp/vsxd.log" >&2
		exit 1
	fi
	log "load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# lat_pass [PERF_KEYS]: the ping-pong on the running vsxd, measured with
# nothing attached to vsxd (perf stat's syscall tracepoints add to every
# system call, and a round trip is a dozen of them); then, when perf is in
# use, the same again under perf stat for the counts only (its own
# figures go to a scratch file).
lat_pass() {
	bench --cases lat
	[ $use_perf = yes ] || return 0
	perf_start
	raw_keep=$raw
	raw=$tmp/lat-perf.txt
	bench --cases lat
	raw=$raw_keep
	perf_stop lat 512 "$@"
}

# The real-QEMU phase: bench/qemu.sh boots its own guest and vsxd. Its
# stdout ("qemu-setup", "qemu case=...", "qemu-median ...") goes to the raw
# output; status 2 (no QEMU, no kernel, the guest did not come up) is a
# skip with its reason, status 1 (a run failed, a byte differed) a failure.
qemu_phase() {
	if [ "${VSX_BENCH_QEMU:-auto}" = 0 ]; then
		log "qemu skipped: VSX_BENCH_QEMU=0"
		return 0
	fi
	q=${VSX_QEMU:-qemu-system-x86_64}
	if ! command -v "$q" >/dev/null 2>&1; then
		log "qemu skipped: no $q"
		return 0
	fi
	log "phase qemu (bench/qemu.sh: its own vsxd, defaults; VSX_QEMU_BYTES=$qemu_bytes VSX_QEMU_REPS=${VSX_QEMU_REPS:-3})"
	log "load $(cut -d' ' -f1-3 /proc/loadavg)"
	st=0
	VSX_QEMU_BYTES=$qemu_bytes sh "$src/bench/qemu.sh" "$build" \
		>"$tmp/qemu.out" 2>"$tmp/qemu.err" || st=$?
	log "load $(cut -d' ' -f1-3 /proc/loadavg)"
	case $st in
	0)
		cat "$tmp/qemu.out" >>"$raw";;
	2)
		why=$(grep -v '^[[:space:]]' "$tmp/qemu.err" | tail -n 1 | sed 's/^qemu\.sh: //')
		log "qemu skipped: ${why:-bench/qemu.sh: setup failed (status 2)}"
		say "qemu skipped: ${why:-setup failed}";;
	*)
		cat "$tmp/qemu.out" "$tmp/qemu.err" >&2
		echo "run.sh: bench/qemu.sh failed (status $st)" >&2
		exit 1;;
	esac
}

# ---- The multi-VM phase ----
#
# N VMs in one vsxd (a [vm] section each in a generated vsxd.conf), each
# with its own vsxbench process: its own guest (the driver) and host
# program, so that the benchmark is not one process's bottleneck. One
# direction at a time (each vsxbench drives one connection, as in the
# single-VM phases), all N started together: each gets its connection up
# and waits for a go file (vsxbench --together), and reports its bytes and
# its first and last byte on CLOCK_MONOTONIC; the aggregate is their bytes
# over the span from the first start to the last end. Beside each, N
# vsxbench processes each doing the same bytes over a socketpair, started
# the same way. vsxd's CPU, per thread (utime + stime from
# /proc/PID/task/*/stat), is read just before the go and after the last
# process ends.

# vsxd --threads N (worker threads, each VM's data path on one of them) is
# in newer vsxd only; without it the phase runs once, on the single loop.
has_threads=no
if "$build/daemon/vsxd" --help 2>&1 | grep -q -- --threads; then
	has_threads=yes
fi
# 64 KiB writes; bytes per VM and direction: 1 GiB at scale 1.
mv_size=65536
mv_bytes=$(awk -v s="$scale" -v w=$mv_size 'BEGIN {
	b = int(1073741824 * s / w) * w; if (b < w) b = w; printf "%.0f", b }')
tck=$(getconf CLK_TCK 2>/dev/null || echo 100)

# mv_conf N: $tmp/mv.conf with N VMs, checked by vsxd --check.
mv_conf() {
	{
		echo "# bench/run.sh, multi-VM phase: $1 VMs"
		echo "[daemon]"
		echo "control = $tmp/ctl.sock"
		i=1
		while [ $i -le "$1" ]; do
			echo
			echo "[vm vm$i]"
			echo "guest-cid = $((i + 2))"
			echo "socket = $tmp/vm$i.vhost"
			echo "uds-path = $tmp/vm$i.vsock"
			i=$((i + 1))
		done
	} >"$tmp/mv.conf"
	if ! "$build/daemon/vsxd" --check --config "$tmp/mv.conf" >"$tmp/check.out" 2>&1; then
		cat "$tmp/check.out" >&2
		echo "run.sh: vsxd --check refused the multi-VM vsxd.conf" >&2
		exit 1
	fi
}

# mv_start N [OPTION...]: a fresh vsxd serving $tmp/mv.conf's N VMs.
mv_start() {
	mn=$1
	shift
	i=1
	while [ $i -le "$mn" ]; do
		rm -f "$tmp/vm$i.vhost" "$tmp/vm$i.vsock"
		i=$((i + 1))
	done
	rm -f "$tmp/ctl.sock"
	"$build/daemon/vsxd" --config "$tmp/mv.conf" "$@" 2>>"$tmp/vsxd.log" &
	pid=$!
	set -- "$tmp/ctl.sock"
	i=1
	while [ $i -le "$mn" ]; do
		set -- "$@" "$tmp/vm$i.vhost"
		i=$((i + 1))
	done
	wait_vsxd "$@"
}

# task_cpu PID: "TID COMM TICKS" per thread (utime + stime, clock ticks).
task_cpu() {
	for f in /proc/"$1"/task/*/stat; do
		ts=$(cat "$f" 2>/dev/null) || continue
		tid=${f%/stat}
		tid=${tid##*/}
		comm=${ts#*(}
		comm=$(printf '%s' "${comm%)*}" | tr -c 'A-Za-z0-9_.-' _)
		# after the ")": field 3 (state) ... 14 utime, 15 stime
		# shellcheck disable=SC2086 # the fields: words
		set -- ${ts##*)}
		echo "$tid $comm $((${12} + ${13}))"
	done
}

mv_fail() {
	i=1
	while [ $i -le "$1" ]; do
		cat "$tmp/mv.err.$i" >&2
		i=$((i + 1))
	done
	echo "--- vsxd log" >&2
	cat "$tmp/vsxd.log" >&2
	echo "run.sh: multi-VM phase, $1 VMs: $2" >&2
	exit 1
}

# mv_go N CASE PATH THREADS: N vsxbench processes at once, CASE (g2h, h2g)
# on the N VMs of the running vsxd (PATH vsxd) or over socketpairs (PATH
# socketpair); their "together" lines and one "multivm ..." line of
# aggregates to the raw output.
mv_go() {
	mn=$1 mc=$2 mp=$3 mt=$4
	sync=$tmp/mv.sync
	rm -rf "$sync"
	mkdir "$sync"
	mvpids=
	i=1
	while [ $i -le "$mn" ]; do
		if [ "$mp" = vsxd ]; then
			set -- --socket "$tmp/vm$i.vhost" --uds-path "$tmp/vm$i.vsock" --label "vm$i"
		else
			set -- --socketpair-only --label "pair$i"
		fi
		"$build/bench/vsxbench" "$@" --cases "$mc" --sizes $mv_size --bytes "$mv_bytes" \
			--together "$sync" >"$tmp/mv.out.$i" 2>"$tmp/mv.err.$i" &
		mvpids="$mvpids $!"
		i=$((i + 1))
	done
	# every connection up (vsxbench waits 10 s for the go, then fails)
	w=0
	while [ "$(find "$sync" -name 'ready.*' | wc -l)" -lt "$mn" ]; do
		w=$((w + 1))
		[ $w -le 160 ] || mv_fail "$mn" "not every vsxbench was connected within 8 s"
		sleep 0.05
	done
	[ "$mp" != vsxd ] || task_cpu "$pid" | sort -n >"$tmp/mv.cpu0"
	: >"$sync/go"
	mst=0
	for p in $mvpids; do
		wait "$p" || mst=1
	done
	mvpids=
	[ "$mp" != vsxd ] || task_cpu "$pid" | sort -n >"$tmp/mv.cpu1"
	[ $mst = 0 ] || mv_fail "$mn" "$mc over $mp: a vsxbench failed"
	i=1
	while [ $i -le "$mn" ]; do
		cat "$tmp/mv.out.$i"
		i=$((i + 1))
	done >"$tmp/mv.out"
	cat "$tmp/mv.out" >>"$raw"
	tasks=
	if [ "$mp" = vsxd ]; then
		# per thread, in thread id order: main (the thread whose id is
		# vsxd's pid), w0, w1 ... for vsxd-w0 ..., any other by its name
		tasks=$(awk -v pid="$pid" -v tck="$tck" '
		NR == FNR { before[$1] = $3; next }
		{
			l = $1 == pid ? "main" : $2
			sub(/^vsxd-/, "", l)
			if (l in seen) l = l "/" $1
			seen[l] = 1
			t = ($3 - ($1 in before ? before[$1] : 0)) / tck
			sum += t
			out = out (out == "" ? "" : ",") l ":" sprintf("%.2f", t)
		}
		END { printf "vsxd_cpu_s=%.2f tasks=%s", sum, out }' "$tmp/mv.cpu0" "$tmp/mv.cpu1")
	fi
	awk -v n="$mn" -v c="$mc" -v p="$mp" -v t="$mt" -v tasks="$tasks" '
	function kv(key,   i, m) {
		for (i = 1; i <= NF; i++) {
			m = index($i, "=")
			if (m && substr($i, 1, m - 1) == key)
				return substr($i, m + 1)
		}
		return ""
	}
	/^together / {
		k++
		bytes += kv("bytes"); cpu += kv("self_cpu_s"); m = kv("mibs") + 0
		t0 = kv("t0_ns") + 0; t1 = kv("t1_ns") + 0
		if (k == 1 || t0 < lo) lo = t0
		if (k == 1 || t1 > hi) hi = t1
		if (k == 1 || m < mlo) mlo = m
		if (k == 1 || m > mhi) mhi = m
	}
	END {
		span = (hi - lo) / 1e9
		agg = span > 0 ? bytes / 1048576 / span : 0
		printf "multivm vms=%d threads=%s case=%s path=%s procs=%d bytes=%.0f span_s=%.4f mibs=%.1f proc_min_mibs=%.1f proc_max_mibs=%.1f bench_cpu_s=%.3f%s\n",
			n, t, c, p, k, bytes, span, agg, mlo, mhi, cpu, (tasks != "" ? " " tasks : "")
	}' "$tmp/mv.out" >>"$raw"
}

multivm_phase() {
	if [ $has_threads = yes ]; then
		modes="1 default"
	else
		modes=n/a
	fi
	for vms in $(printf '%s' "$mv_vms" | tr , ' '); do
		mv_conf "$vms"
		for t in $modes; do
			topt=
			[ "$t" != 1 ] || topt="--threads 1"
			say "multivm $vms VMs, threads $t"
			# shellcheck disable=SC2086 # topt: words
			mv_start "$vms" $topt
			log "phase multivm vms=$vms threads=$t (fresh vsxd pid $pid, $vms [vm] sections in its vsxd.conf; options: ${topt:-none})"
			log "load $(cut -d' ' -f1-3 /proc/loadavg)"
			for c in g2h h2g; do
				mv_go "$vms" "$c" vsxd "$t"
				mv_go "$vms" "$c" socketpair "$t"
			done
			log "load $(cut -d' ' -f1-3 /proc/loadavg)"
			stop_vsxd
		done
	done
}

measure() {
	if ! make -C "$build" bench/vsxbench bench/qperf daemon/vsxd tools/vsxctl/vsxctl \
		>"$tmp/make.log" 2>&1; then
		cat "$tmp/make.log" >&2
		echo "run.sh: make failed in $build" >&2
		exit 1
	fi

	if [ -n "${VSX_BENCH_WAIT_LOAD:-}" ]; then
		n=0
		while awk -v max="$VSX_BENCH_WAIT_LOAD" '{ exit !($1 >= max) }' /proc/loadavg &&
		      [ $n -lt 120 ]; do
			sleep 5
			n=$((n + 1))
		done
	fi

	# ---- setup ----
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
	cflags=$(sed -n 's/^CFLAGS = //p' "$build/Makefile" | head -n 1)
	werror=$(sed -n 's/^WARN_CFLAGS = .*-Werror.*/yes/p' "$build/Makefile" | head -n 1)
	san=$(sed -n 's/^SAN_CFLAGS = //p' "$build/Makefile" | head -n 1)
	rev=unknown
	if [ -f "$src/.git/HEAD" ]; then
		head=$(cat "$src/.git/HEAD")
		case $head in
		"ref: "*)
			ref=${head#ref: }
			if [ -f "$src/.git/$ref" ]; then
				rev=$(cut -c1-12 "$src/.git/$ref")
			elif [ -f "$src/.git/packed-refs" ]; then
				rev=$(awk -v r="$ref" '$2 == r { print substr($1, 1, 12) }' \
					"$src/.git/packed-refs")
			fi
			rev="$rev (${ref#refs/heads/}, plus any uncommitted changes)";;
		*) rev=$(printf '%s' "$head" | cut -c1-12);;
		esac
	fi
	log "host nproc=$(nproc) cpu=$cpu"
	log "host kernel=$(uname -r) arch=$(uname -m)"
	log "build cflags=$cflags werror=${werror:-no} sanitizers=${san:-none}"
	log "source rev=$rev"
	log "date $(date -u '+%Y-%m-%d %H:%M UTC')"
	log "params reps=$reps scale=$scale buffer=$bigbuf poll_us=$poll_us phases=$phases vms=$mv_vms mv_bytes=$mv_bytes"
	log "vsxd has_poll_us=$has_poll"
	log "vsxd has_threads=$has_threads"

	log "perf $use_perf"

	# ---- the runs ----
	if want idle; then
		say "idle"
		# shellcheck disable=SC2086 # idle_opts: words
		start_vsxd $idle_opts
		log "phase idle (fresh vsxd pid $pid, options: ${idle_opts:-none})"
		bench --cases idle --idle-conns "$idle"
		stop_vsxd
	fi

	if want mem; then
		say "mem"
		start_vsxd
		log "phase mem (fresh vsxd pid $pid)"
		bench --cases mem
		stop_vsxd
	fi

	if want throughput; then
		for c in g2h h2g; do
			for s in 64 4096 65536 262144; do
				say "$c $s"
				start_vsxd
				log "phase $c $s (fresh vsxd pid $pid)"
				perf_start
				bench --cases "$c" --sizes "$s"
				perf_stop "$c" "$s"
				stop_vsxd
			done
		done
	fi

	# The same at larger buffers on every side: vsxd's credit window, the
	# guest's buf_alloc (and so its TX window), the host program's and
	# the socketpair's socket buffers.
	if want buffer && [ "$bigbuf" != 0 ]; then
		vm_keys=",tx-buffer-size=$bigbuf"
		for c in g2h h2g; do
			for s in 4096 65536 262144; do
				say "$c $s buffer=$bigbuf"
				start_vsxd
				log "phase $c $s buffer=$bigbuf (fresh vsxd pid $pid, --vm tx-buffer-size=$bigbuf)"
				perf_start
				bench --cases "$c" --sizes "$s" --buffer "$bigbuf"
				perf_stop "$c" "$s" "buffer=$bigbuf"
				stop_vsxd
			done
		done
		vm_keys=
	fi

	if want lat; then
		say "lat"
		start_vsxd
		log "phase lat (fresh vsxd pid $pid; perf stat only in a second pass)"
		lat_pass
		stop_vsxd
		if [ "$has_poll" = yes ] && [ "$poll_us" != 0 ]; then
			say "lat poll_us=$poll_us"
			start_vsxd --poll-us "$poll_us"
			log "phase lat poll_us=$poll_us (fresh vsxd pid $pid, options: --poll-us $poll_us; perf stat only in a second pass)"
			lat_pass "poll_us=$poll_us"
			stop_vsxd
		fi
	fi

	if want multivm; then
		multivm_phase
	fi

	if want sibling; then
		say "sibling"
		VSX_SIB_BEFORE='' sh "$src/bench/sibling.sh" "$build" >>"$raw"
	fi

	if want churn; then
		say "churn"
		make -C "$build" -s tests/daemon/loadgen >/dev/null
		VSX_CHURN_BEFORE='' python3 "$src/bench/churn.py" "$build" >>"$raw"
	fi

	if want qemu; then
		say "qemu"
		qemu_phase
	else
		log "qemu skipped: not in VSX_BENCH_PHASES"
	fi
}

mkdir -p "$out/results"
if [ -n "${VSX_BENCH_REPORT:-}" ]; then
	cp "$VSX_BENCH_REPORT" "$raw"
	[ "$VSX_BENCH_REPORT" -ef "$out/results/latest.txt" ] ||
		cp "$raw" "$out/results/latest.txt"
else
	measure
	cp "$raw" "$out/results/latest.txt"
fi
reps=$(sed -n 's/^params reps=\([0-9]*\).*/\1/p' "$raw" | head -n 1)

# The larger buffer of the runs the report is made from.
pb=$(sed -n 's/^params .* buffer=\([0-9]*\).*/\1/p' "$raw" | head -n 1)
[ -z "$pb" ] || bigbuf=$pb

# ---- RESULTS.md ----
awk -v reps="$reps" '
function kv(key,   i, n, a) {
	for (i = 1; i <= NF; i++) {
		n = index($i, "=")
		if (n && substr($i, 1, n - 1) == key)
			return substr($i, n + 1)
	}
	return ""
}
function human(b) {
	b += 0
	if (b >= 1048576) return sprintf("%.4g MiB", b / 1048576)
	if (b >= 1024) return sprintf("%.4g KiB", b / 1024)
	return b " B"
}
function rest(line, word) { return substr(line, length(word) + 2) }
function pkv(line, key,   n, a, i, m) {
	n = split(line, a, " ")
	for (i = 1; i <= n; i++) {
		m = index(a[i], "=")
		if (m && substr(a[i], 1, m - 1) == key)
			return substr(a[i], m + 1)
	}
	return ""
}
function dir(c) { return c == "g2h" ? "guest → host" : "host → guest" }
function bufname(b) { return human(b) " buffers" }
function pollname(p) { return p == "" ? "vsxd, no polling" : "vsxd --poll-us " p }
function per(line, key, div) { return div > 0 ? sprintf("%.2f", pkv(line, key) / div) : "" }
function pline(pk, label, s, div,   l) {
	if (!(pk in perf))
		return
	l = perf[pk]
	printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		label, human(s), per(l, "syscalls", div), per(l, "sendmsg", div), per(l, "readv", div),
		per(l, "recvmsg", div), per(l, "epoll_wait", div), per(l, "epoll_ctl", div),
		per(l, "write", div), per(l, "read", div),
		sprintf("%.2f", (pkv(l, "brk") + pkv(l, "mmap")) / div), per(l, "page_faults", div),
		per(l, "context_switches", div)
}
function tgt(name, want, got, ok, note) {
	printf "| %s | %s | %s | %s | %s |\n", name, want, got, ok ? "met" : "**not met**", note
}
function tphead() {
	print "| direction | payload | data per run | vsxd MiB/s (min–max) | socketpair MiB/s (min–max) | ratio | vsxd CPU s/GiB (user / sys) | guest+host CPU s/GiB | socketpair CPU s/GiB | socketpair writer CPU s/GiB | vsxd / writer CPU | vsxd runs/MiB | guest+host switches/MiB |"
	print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
}
# vsxd CPU per GiB over the socketpair writer'"'"'s (medians); "n/a" for a
# latest.txt from before vsxbench measured the writer on its own.
function cpuratio(be, wr) {
	if (wr == "" || be == "")
		return "n/a"
	return wr + 0 > 0 ? sprintf("%.2f", be / wr) : "n/a"
}
function mibs3(m, lo, hi) { return m " (" lo "–" hi ")" }
# The socket buffers of the host program and the socketpair at buffer b.
function sockdesc(b) {
	if (sb_set[b] == "set")
		return "SO_SNDBUF and SO_RCVBUF " human(b) " (read back: " human(sb_eff[b]) \
			", the kernel doubles it for its bookkeeping" \
			(sb_cap[b] == "yes" ? "; **capped by net.core.wmem_max**" : "") ")"
	if (sb_eff[b] != "")
		return "the kernel default (SO_SNDBUF reads " human(sb_eff[b]) ")"
	return "the kernel default"
}
function qrow(c,   v, t) {
	if (!((c, "vsock") in qm) || !((c, "tcp") in qm))
		return ""
	v = qm[c, "vsock"]; t = qm[c, "tcp"]
	return sprintf("| %s | %s | %s | %s |", dir(c), mibs3(v, qlo[c, "vsock"], qhi[c, "vsock"]),
		mibs3(t, qlo[c, "tcp"], qhi[c, "tcp"]), t > 0 ? sprintf("%.2f", v / t) : "")
}
BEGIN { DEF = 262144 }
/^host nproc=/ { nproc = kv("nproc"); sub(/^host nproc=[0-9]+ cpu=/, ""); cpu = $0 }
/^host kernel=/ { kernel = kv("kernel"); arch = kv("arch") }
/^build / { build = rest($0, "build") }
/^source / { rev = rest($0, "source"); sub(/^rev=/, "", rev) }
/^date / { date = rest($0, "date") }
/^params / { pbuf = kv("buffer"); mvbytes = kv("mv_bytes"); phases = kv("phases") }
/^vsxd has_poll_us=/ { haspoll = kv("has_poll_us") }
/^vsxd has_threads=/ { hasthreads = kv("has_threads") }
/^multivm / {
	k = kv("vms") SUBSEP kv("threads"); p = kv("path"); c = kv("case")
	if (!(k in mvseen)) { mvseen[k] = 1; mvlist[++nmv] = k }
	mvb[k, p] += kv("bytes"); mvs[k, p] += kv("span_s"); mvdir[k, p, c] = kv("mibs")
	mvbench[k, p] += kv("bench_cpu_s")
	if (p == "vsxd") {
		mvcpu[k] += kv("vsxd_cpu_s")
		nt0 = split(kv("tasks"), ta, ",")
		for (i = 1; i <= nt0; i++) {
			m = index(ta[i], ":"); l = substr(ta[i], 1, m - 1)
			if (!((k, l) in tseen)) { tseen[k, l] = 1; tl[k, ++ntl[k]] = l }
			tv[k, l] += substr(ta[i], m + 1)
		}
	}
}
/^load / {
	nload++
	if (nload == 1) load0 = $2 " " $3 " " $4
	if (nload == 1 || $2 + 0 < lmin) lmin = $2 + 0
	if (nload == 1 || $2 + 0 > lmax) lmax = $2 + 0
}
/^phase / { phase = $2; phpoll = kv("poll_us") }
/^perf (yes|no)$/ { perfok = $2 }
/^perf case=/ {
	b = kv("buffer"); if (b == "") b = DEF
	perf[kv("case"), kv("size"), b, kv("poll_us")] = $0
}
/^idle / {
	i_n = kv("conns"); i_want = kv("wanted"); i_ref = kv("refused"); i_secs = kv("secs")
	i_a0 = kv("anon_before_kib"); i_a1 = kv("anon_idle_kib"); i_a2 = kv("anon_after_kib")
	i_r0 = kv("rss_before_kib"); i_r1 = kv("rss_idle_kib"); i_r2 = kv("rss_after_kib")
	i_pa = kv("anon_per_conn_bytes"); i_pr = kv("rss_per_conn_bytes"); i_us = kv("be_us_per_conn")
}
/^setup / {
	if (queue == "") queue = kv("queue_size")
	b = kv("guest_buf")
	if (b != "" && !(b in sb_seen)) {
		sb_seen[b] = 1; sb_set[b] = kv("sockbuf"); sb_eff[b] = kv("sockbuf_eff")
		sb_cap[b] = kv("sockbuf_capped")
	}
}
/^median case=g2h|^median case=h2g/ {
	c = kv("case"); s = kv("size"); b = kv("buffer"); if (b == "") b = DEF
	k = c SUBSEP s SUBSEP b
	wr = kv("pair_writer_cpu_s_per_gib")
	row[k] = sprintf("| %s | %s | %s | %s | %s | %s | %s (%s / %s) | %s | %s | %s | %s | %s | %s |",
		dir(c), human(s), human(kv("bytes")), mibs3(kv("mibs"), kv("min_mibs"), kv("max_mibs")),
		mibs3(kv("pair_mibs"), kv("pair_min_mibs"), kv("pair_max_mibs")), kv("ratio"),
		kv("be_cpu_s_per_gib"), kv("be_user_s_per_gib"), kv("be_sys_s_per_gib"),
		kv("self_cpu_s_per_gib"), kv("pair_cpu_s_per_gib"), (wr != "" ? wr : "n/a"),
		cpuratio(kv("be_cpu_s_per_gib"), wr), kv("be_runs_per_mib"),
		kv("self_cs_per_mib"))
	if (!(b in bseen)) { bseen[b] = 1; blist[++nb] = b }
	border[b, ++nr[b]] = c SUBSEP s
	if (!((c, s) in csseen)) { csseen[c, s] = 1; cslist[++ncs] = c SUBSEP s }
	ratio[k] = kv("ratio"); mibs[k] = kv("mibs"); mib_run[k] = kv("bytes") * reps / 1048576
	tot_cpu[k] = kv("be_cpu_s_per_gib") + kv("self_cpu_s_per_gib")
	pair_mibs[k] = kv("pair_mibs")
}
/^median case=lat/ {
	p = (phase == "lat") ? phpoll : ""
	if (!(p in lseen)) { lseen[p] = 1; llist[++nl] = p }
	lrow[p] = sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |", pollname(p),
		mibs3(kv("p50_us"), kv("min_p50_us"), kv("max_p50_us")), kv("p99_us"),
		mibs3(kv("pair_p50_us"), kv("pair_min_p50_us"), kv("pair_max_p50_us")),
		kv("pair_p99_us"), kv("ratio_p50"), kv("ratio_p99"), kv("be_cpu_us_per_rt"),
		kv("be_runs_per_rt"))
	latn[p] = kv("n"); lat_ratio[p] = kv("ratio_p50"); lat_p50[p] = kv("p50_us")
	lat_pp50[p] = kv("pair_p50_us")
}
/^mem / {
	m_conns = kv("conns"); m_credit = kv("credit"); m_pkts = kv("pkts")
	m_secs = kv("secs"); m_mpps = kv("mpps")
	m_idle = kv("anon_idle_kib"); m_c = kv("anon_conns_kib"); m_f = kv("anon_flood_kib")
	m_after = kv("anon_after_kib"); m_after3 = kv("anon_after3s_kib")
	m_rss_idle = kv("rss_idle_kib")
	m_rss_f = kv("rss_flood_kib"); m_shm = kv("shmem_flood_kib"); m_hwm = kv("hwm_kib")
	m_per = kv("growth_per_conn_from_idle_bytes"); m_per1 = kv("growth_per_conn_bytes")
	m_marg = kv("marginal_per_conn_bytes"); m_mratio = kv("marginal_ratio_to_credit")
	m_half = kv("anon_half_kib")
	m_bound = kv("bound_bytes"); m_ratio = kv("ratio_to_credit")
	m_ok = kv("within_bound"); m_q = kv("queued_total"); m_qpc = kv("queued_per_conn")
	m_ns = kv("be_ns_per_pkt"); m_ppr = kv("be_pkts_per_run")
}
/^qemu-setup / {
	q_kernel = kv("kernel"); q_qemu = kv("qemu"); q_accel = kv("accel"); q_mem = kv("mem")
	q_smp = kv("smp")
}
/^qemu-median / {
	c = kv("case"); pt = kv("path")
	qm[c, pt] = kv("mibs"); qlo[c, pt] = kv("min_mibs"); qhi[c, pt] = kv("max_mibs")
	q_reps = kv("reps"); q_bytes = kv("bytes"); q_size = kv("size")
}
/^qemu skipped: / { q_skip = rest($0, "qemu skipped:") }
END {
	for (i = 1; i <= nl; i++)
		if (llist[i] != "")
			polled = llist[i]
	if (nl == 0)
		nopoll = ""
	else if (haspoll == "no")
		nopoll = "not measured: this vsxd has no `--poll-us`"
	else if (haspoll == "yes" && polled == "")
		nopoll = "not measured: VSX_BENCH_POLL_US=0"
	if (queue == "")
		queue = 128
	print "# vsx benchmarks"
	print ""
	print "Generated by `make bench` (bench/run.sh) on " date "; raw output in"
	print "[results/latest.txt](results/latest.txt). Do not edit by hand: run it again."
	print ""
	print "Every vsxd run is followed, in the same process and minute, by the same"
	print "work over a plain AF_UNIX `socketpair` with the same write size and the"
	print "same socket buffers (the baseline); figures are medians of " reps " such pairs"
	print "(the smallest and largest run in parentheses), ratios are median vsxd /"
	print "median socketpair. Benchmarks only report: no figure is checked against"
	print "a threshold, but every byte is (pattern and count)."
	print ""
	print "## Setup"
	print ""
	print "| | |"
	print "|---|---|"
	print "| machine | " nproc " CPUs, " cpu ", Linux " kernel " " arch " |"
	print "| build | " build " |"
	print "| source | " rev " |"
	print "| load average | " load0 " (1/5/15 min) at the start; the 1-minute figure ranged " lmin "–" lmax " over the " nload " samples before and after each phase (those after a phase count the benchmark itself: 2 to 3 busy threads; QEMU'"'"'s, more). The machine is shared: other processes may have been running, and every figure is affected by them |"
	print "| vsxd | one process, one VM (the multi-VM phase: several), a fresh process per phase; defaults (tx-buffer-size, its credit window, 256 KiB; no polling) unless a table says otherwise |"
	print "| guest | tests/driver (plays QEMU 7.2 and a Linux guest): queue size " queue \
		", event idx, indirect descriptors, 4 KiB RX buffers, buf_alloc the buffer size of the run and a TX credit window of the smaller of vsxd'"'"'s buf_alloc and its own (as Linux limits it), single-threaded, synchronous |"
	print "| host program | a thread of vsxbench on the hybrid socket (`CONNECT` through uds-path for host → guest, a listener on uds-path_PORT for guest → host) |"
	for (i = 1; i <= nb; i++) {
		b = blist[i]
		print "| " bufname(b) " | vsxd tx-buffer-size " human(b) ", guest buf_alloc " human(b) "; host program and both socketpair ends: " sockdesc(b) " |"
	}
	if (polled != "")
		print "| vsxd polling | this vsxd has `--poll-us` (adaptive busy-polling of its event loop after activity): latency measured without it and with `--poll-us " polled "` |"
	else if (nopoll != "")
		print "| vsxd polling | latency without polling only; with polling " nopoll " |"
	print ""
	print "The guest, vsxd and the host program are three runnable threads on " nproc
	print "CPUs; the socketpair baseline has two (writer and reader)."
	print ""
	print "## Throughput"
	if (nb == 0) {
		print ""
		print "Not measured in this run."
	} else {
		print ""
		print "A payload is the write size on the sending side: the guest sends RW"
		print "packets of that size (at most 64 KiB each, within its credit: a 256 KiB"
		print "write is 4 packets), the host `write()`s that size. The receiver reads"
		print "what comes (the host with 256 KiB reads; the guest per 4 KiB RX buffer)."
		print "CPU is per GiB moved: vsxd from /proc/PID (all threads, schedstat; user"
		print "and system from utime/stime ticks), vsxbench (guest + host program) and"
		print "the socketpair run (writer + reader) from getrusage. \"socketpair writer"
		print "CPU\" is the socketpair'"'"'s writer thread alone (CLOCK_THREAD_CPUTIME_ID,"
		print "read in that thread around its writes; its reader spends most of the rest"
		print "of the socketpair figure), and \"vsxd / writer CPU\" is median vsxd CPU over"
		print "median writer CPU: what vsxd spends to relay a byte as a multiple of what"
		print "one writer spends to put it into a socket (issue #17 asks at most 1.5 at"
		print "64 KiB). \"n/a\": a latest.txt from before vsxbench measured the writer."
		print "\"vsxd runs\" counts the times vsxd was switched in (wakeups and returns"
		print "from preemption, schedstat); \"switches\" the context switches of vsxbench"
		print "(getrusage)."
		for (i = 1; i <= nb; i++) {
			b = blist[i]
			print ""
			print "### " bufname(b) (b == DEF ? " (the defaults)" : "")
			print ""
			if (b == DEF)
				print "vsxd tx-buffer-size and the guest'"'"'s buf_alloc 256 KiB (Linux'"'"'s default): a credit window of 256 KiB each way; host program and socketpair sockets: " sockdesc(b) "."
			else
				print "vsxd with `--vm ...,tx-buffer-size=" b "` and vsxbench `--buffer " b "`: a credit window of " human(b) " each way; host program and socketpair sockets: " sockdesc(b) ". vsxd raises its own Unix host socket'"'"'s SO_SNDBUF to a connection'"'"'s buffer (capped by net.core.wmem_max, then doubled by the kernel)."
			print ""
			tphead()
			for (j = 1; j <= nr[b]; j++)
				print row[border[b, j], b]
		}
		if (pbuf == "0") {
			print ""
			print "The set at larger buffers was not run (VSX_BENCH_BUFFER=0)."
		}
		if (nb > 1) {
			print ""
			print "### Ratio to the socketpair, by buffer size"
			print ""
			print "Each socketpair ran with the buffers of its vsxd run (vsxd MiB/s in parentheses)."
			print ""
			hdr = "| direction | payload |"; sep = "|---|---|"
			for (i = 1; i <= nb; i++) {
				hdr = hdr " " bufname(blist[i]) " |"; sep = sep "---|"
			}
			print hdr
			print sep
			for (n = 1; n <= ncs; n++) {
				split(cslist[n], cs, SUBSEP)
				line = "| " dir(cs[1]) " | " human(cs[2]) " |"
				for (i = 1; i <= nb; i++) {
					k = cs[1] SUBSEP cs[2] SUBSEP blist[i]
					line = line " " ((k in ratio) ? ratio[k] " × (" mibs[k] ")" : "not run") " |"
				}
				print line
			}
		}
		if (perfok == "yes") {
			print ""
			print "### vsxd system calls (perf stat)"
			print ""
			print "Counted over the whole vsxd process of each case (its " reps " vsxd runs and the"
			print "idle time of the socketpair runs beside them), per MiB moved (per round"
			print "trip for the latency): what vsxd asks of the kernel, the profile that"
			print "explains the CPU figures above. The ping-pong is counted in a second"
			print "pass on the same vsxd, after the measured one: the tracepoints of perf"
			print "stat add to every system call, and a round trip is a dozen of them."
			print ""
			print "| case | payload | syscalls | sendmsg | readv | recvmsg | epoll_wait | epoll_ctl | write (eventfd) | read (eventfd) | brk + mmap | page faults | context switches |"
			print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
			for (i = 1; i <= nb; i++) {
				b = blist[i]
				for (j = 1; j <= nr[b]; j++) {
					split(border[b, j], cs, SUBSEP)
					k = cs[1] SUBSEP cs[2] SUBSEP b
					pline(k SUBSEP "", dir(cs[1]) ", " bufname(b), cs[2], mib_run[k])
				}
			}
			for (i = 1; i <= nl; i++) {
				p = llist[i]
				pline("lat" SUBSEP 512 SUBSEP DEF SUBSEP p,
				      "512 B ping-pong, per round trip, " pollname(p), 512, latn[p] * reps)
			}
		}
	}
	print ""
	print "## Latency"
	if (nl == 0) {
		print ""
		print "Not measured in this run."
	} else {
		print ""
		print "512-byte ping-pong over one connection: the guest sends 512 bytes, the"
		print "host program reads them and writes them back; " latn[llist[1]] " round trips per run,"
		print "measured in the guest. The baseline is the same ping-pong between two"
		print "threads over a socketpair, run beside each vsxd run. Microseconds; vsxd"
		print "CPU and runs (times switched in) per round trip. Default buffers."
		if (polled != "") {
			print "With `--poll-us " polled "`, vsxd keeps polling its event loop and the guest'"'"'s"
			print "TX ring (the guest'"'"'s kicks off meanwhile) for up to that long after"
			print "activity before it sleeps (adaptive: see vsxd(8)); its CPU per round trip"
			print "includes the polling."
		}
		print ""
		print "| | p50 (min–max of the runs) | p99 | socketpair p50 (min–max) | socketpair p99 | ratio p50 | ratio p99 | vsxd CPU µs/round trip | vsxd runs/round trip |"
		print "|---|---|---|---|---|---|---|---|---|"
		for (i = 1; i <= nl; i++)
			print lrow[llist[i]]
		if (nopoll != "")
			print "| vsxd with polling | " nopoll " | | | | | | | |"
	}
	print ""
	print "## Multi-VM"
	print ""
	if (nmv == 0) {
		print "Not measured in this run."
	} else {
		print "N VMs on one vsxd (a `[vm]` section each in one vsxd.conf), each driven by"
		print "its own vsxbench process (its own guest and host program), all started"
		print "together: " human(mvbytes) " per VM in 64 KiB writes guest → host, then the same"
		print "host → guest (one connection per VM, one direction at a time). Beside each"
		print "direction, N processes each moving the same bytes over a socketpair, started"
		print "the same way. Aggregate MiB/s: the bytes of all N over the span from the"
		print "first start to the last end, both directions together (bytes of both over"
		print "the two spans added; each direction in parentheses). CPU per GiB moved,"
		print "both directions summed: vsxd from /proc/PID/task/*/stat (utime + stime of"
		print "every thread), the vsxbench processes (guest + host program) and the"
		print "socketpair processes (writer + reader) from getrusage. Per thread: vsxd'"'"'s"
		print "CPU seconds over both directions (main: its main thread; wN: worker"
		print "thread vsxd-wN)."
		if (hasthreads == "yes")
			print "Each VM count ran twice, on a fresh vsxd each: with `--threads 1` (every VM'"'"'s data path on one worker) and with vsxd'"'"'s default (one worker per VM, up to the number of CPUs)."
		else
			print "This vsxd has no `--threads` option: one event loop serves every VM (threads: n/a (single loop))."
		print "With " nproc " CPUs the aggregate cannot scale past what " nproc " CPUs give the"
		print "guests, the host programs and vsxd together; the CPU per GiB and its"
		print "spread over vsxd'"'"'s threads are the figures (bench/README.md says what"
		print "a machine with more cores is expected to show)."
		print ""
		print "| VMs | vsxd threads | aggregate MiB/s (g2h / h2g) | socketpair MiB/s (g2h / h2g) | ratio | vsxd CPU s/GiB | guest+host CPU s/GiB | socketpair CPU s/GiB | vsxd CPU per thread |"
		print "|---|---|---|---|---|---|---|---|---|"
		for (i = 1; i <= nmv; i++) {
			k = mvlist[i]
			split(k, kk, SUBSEP)
			tname = kk[2] == "n/a" ? "n/a (single loop)" : kk[2] == "1" ? "1 (`--threads 1`)" : kk[2]
			a = mvs[k, "vsxd"] > 0 ? mvb[k, "vsxd"] / 1048576 / mvs[k, "vsxd"] : 0
			ap = mvs[k, "socketpair"] > 0 ? mvb[k, "socketpair"] / 1048576 / mvs[k, "socketpair"] : 0
			gv = mvb[k, "vsxd"] / 1073741824; gp = mvb[k, "socketpair"] / 1073741824
			tt = ""
			for (j = 1; j <= ntl[k]; j++) {
				l = tl[k, j]
				tt = tt (j > 1 ? ", " : "") l " " sprintf("%.2f", tv[k, l]) " s"
			}
			printf "| %s | %s | %.1f (%s / %s) | %.1f (%s / %s) | %s | %s | %s | %s | %s |\n",
				kk[1], tname, a, mvdir[k, "vsxd", "g2h"], mvdir[k, "vsxd", "h2g"],
				ap, mvdir[k, "socketpair", "g2h"], mvdir[k, "socketpair", "h2g"],
				(ap > 0 ? sprintf("%.3f", a / ap) : ""),
				(gv > 0 ? sprintf("%.3f", mvcpu[k] / gv) : ""),
				(gv > 0 ? sprintf("%.3f", mvbench[k, "vsxd"] / gv) : ""),
				(gp > 0 ? sprintf("%.3f", mvbench[k, "socketpair"] / gp) : ""), tt
		}
	}
	print ""
	print "## Real QEMU guest: vsock through vsxd against TCP over virtio-net"
	print ""
	if (q_bytes != "") {
		print "`bench/qemu.sh` booted one guest (Linux " q_kernel ", QEMU " q_qemu " " toupper(q_accel) ", " q_smp " vCPUs, " q_mem ")"
		print "with a vhost-user-vsock-pci device served by its own vsxd (defaults:"
		print "256 KiB buffers, no polling) and a virtio-net-pci NIC on QEMU user"
		print "networking (slirp). `bench/qperf` at both ends moved " human(q_bytes) " per run in"
		print human(q_size) " writes, every byte checked against the pattern and EOF required"
		print "after the last; the receiver times first to last byte. " q_reps \
			(q_reps == 1 ? " run" : " runs") " per"
		print "direction and path, the paths alternating. MiB/s, medians (min–max)."
		print ""
		print "| direction | vsock through vsxd | TCP over virtio-net | ratio vsock / TCP |"
		print "|---|---|---|---|"
		if ((r = qrow("g2h")) != "") print r
		if ((r = qrow("h2g")) != "") print r
		print ""
		if (q_accel == "tcg") {
			print "Under TCG (no KVM) the guest'"'"'s CPU is emulated: both paths measure the"
			print "emulated guest (its copies, its TCP stack, its virtio drivers) more than"
			print "either device, and neither figure says what vsxd does for a KVM guest."
		}
	} else if (q_skip != "") {
		print "Skipped in this run: " q_skip "."
	} else {
		print "Not measured in this run."
	}
	print ""
	print "## Memory under a 1-byte flood"
	if (m_conns == "") {
		print ""
		print "Not measured in this run."
	} else {
		print ""
		print "The guest opened " m_conns " connections to a host program that accepts"
		print "and never reads, then sent 1-byte RW packets round-robin over the first"
		print "half of them as fast as it could until none had credit left, then the"
		print "same over the second half (" m_pkts " packets"
		print "in " m_secs " s, " m_mpps " M packets/s" (m_ns != "" ? ", vsxd " m_ns " ns of CPU per packet, " m_ppr " packets per time it ran" : "") ")."
		print "vsxd (a fresh process, default buffers) was measured from /proc/PID/status;"
		print "anonymous memory (RssAnon) is what vsxd allocates, the guest memory it maps"
		print "is shared (RssShmem) and counted apart."
		print ""
		print "| | |"
		print "|---|---|"
		print "| credit per connection (vsxd buf_alloc) | " m_credit " bytes |"
		print "| RssAnon idle / connected / first half flooded / all flooded / after close | " m_idle " / " m_c " / " m_half " / " m_f " / " m_after " KiB |"
		print "| VmRSS idle / flooded (RssShmem flooded) | " m_rss_idle " / " m_rss_f " (" m_shm ") KiB |"
		print "| VmHWM (peak RSS) | " m_hwm " KiB |"
		print "| RssAnon growth per connection, from idle | " m_per " bytes (" m_ratio " x credit) |"
		print "| RssAnon growth per connection, from connected | " m_per1 " bytes |"
		print "| marginal: growth per connection of the second half | " m_marg " bytes (" m_mratio " x credit) |"
		print "| bound: 1.25 x credit | " m_bound " bytes: " (m_ok == "yes" ? "within" : "**exceeded**") " |"
		if (m_q != "" && m_q != "unavailable")
			print "| vsxd accounting (vsxctl list: queued) | " m_q " bytes in all, " m_qpc " per connection |"
		else
			print "| vsxd accounting (vsxctl list: queued) | unavailable |"
		print ""
		print "Growth from idle includes memory the first flood touches once for the"
		print "whole VM (the TX batch array of vsxd: 128 descriptor chains, about 1 KiB each);"
		print "the growth per connection of the second half is the marginal cost of a"
		print "flooded connection. After the connections closed, vsxd keeps freed queue"
		print "chunks as spares while traffic goes on and frees them, with malloc_trim,"
		print "after a second of quiet: RssAnon 0.2 s after the close " m_after " KiB, 3 s after " m_after3 " KiB."
	}
	print ""
	print "## Memory per idle connection"
	print ""
	if (i_n == "") {
		print "Not measured in this run."
	} else {
		print "The guest opened " i_n " connections (of " i_want " asked; " i_ref " refused) to a host"
		print "program that accepted them all and then did nothing, in " i_secs " s (vsxd " i_us " µs of CPU"
		print "per connection set up). vsxd was a fresh process, measured from /proc/PID/status"
		print "before the first connection and 0.5 s after the last; kernel memory (socket"
		print "buffers, epoll entries) is not in RSS."
		print ""
		print "| | RssAnon | VmRSS |"
		print "|---|---|---|"
		print "| before (VM up, no connection) | " i_a0 " KiB | " i_r0 " KiB |"
		print "| " i_n " idle connections | " i_a1 " KiB | " i_r1 " KiB |"
		print "| per connection | " i_pa " bytes | " i_pr " bytes |"
		print "| 3 s after the guest reset them all | " i_a2 " KiB | " i_r2 " KiB |"
	}
	print ""
	print "## Targets (issue #4)"
	print ""
	print "| target | wanted | measured | | CPU bound (× socketpair) |"
	print "|---|---|---|---|---|"
	for (n = 1; n <= ncs; n++) {
		split(cslist[n], cs, SUBSEP)
		c = cs[1]; s = cs[2]
		if (s == 4096) want = 0.60
		else if (s >= 65536) want = 0.70
		else if (c == "g2h") want = 1.0
		else continue
		for (i = 1; i <= nb; i++) {
			b = blist[i]
			k = c SUBSEP s SUBSEP b
			if (!(k in ratio))
				continue
			ceil = ""
			if (tot_cpu[k] > 0 && pair_mibs[k] > 0)
				ceil = sprintf("%.2f", nproc / tot_cpu[k] * 1024 / pair_mibs[k])
			tgt(dir(c) " " human(s) " throughput, " bufname(b),
			    "≥ " want " × socketpair", ratio[k] " ×", ratio[k] + 0 >= want, ceil)
		}
	}
	for (i = 1; i <= nl; i++) {
		p = llist[i]
		tgt("512 B ping-pong p50, " pollname(p), "≤ 2 × socketpair",
		    lat_ratio[p] " × (" lat_p50[p] " vs " lat_pp50[p] " µs)", lat_ratio[p] + 0 <= 2, "")
	}
	if (nopoll != "")
		print "| 512 B ping-pong p50, vsxd polling | ≤ 2 × socketpair | " nopoll " | **not done** | |"
	if (i_n != "")
		tgt("RSS per idle connection (" i_n " on one VM)", "≤ 4096 bytes", i_pa " bytes (RssAnon; VmRSS " i_pr ")", i_pa + 0 <= 4096 && i_n + 0 >= 10000, "")
	if (m_conns != "")
		tgt("1-byte flood: RssAnon growth per connection", "≤ 1.25 × credit", m_ratio " × credit", m_ok == "yes", "")
	print "| vsxd CPU time per GiB, each case | reported | see the throughput tables | met | |"
	qname = "real QEMU guest: vsock through vsxd vs TCP over virtio-net, " \
		(q_size != "" ? human(q_size) : "64 KiB") " writes"
	if ((("g2h", "vsock") in qm) && (("g2h", "tcp") in qm) && (("h2g", "vsock") in qm) &&
	    (("h2g", "tcp") in qm) && qm["g2h", "tcp"] > 0 && qm["h2g", "tcp"] > 0) {
		printf "| %s | compared in the same run | guest → host %s vs %s MiB/s (%.2f ×), host → guest %s vs %s MiB/s (%.2f ×)%s | met | |\n",
			qname, qm["g2h", "vsock"], qm["g2h", "tcp"], qm["g2h", "vsock"] / qm["g2h", "tcp"],
			qm["h2g", "vsock"], qm["h2g", "tcp"], qm["h2g", "vsock"] / qm["h2g", "tcp"],
			q_accel == "tcg" ? "; under TCG, bound by the emulated guest" : ""
	} else if (q_skip != "") {
		print "| " qname " | compared in the same run | skipped: " q_skip " | **not done** | |"
	} else {
		print "| " qname " | compared in the same run | not measured in this run | **not done** | |"
	}
	print ""
	print "CPU bound: the vsxd path needs (vsxd + guest + host program) CPU seconds"
	print "per GiB, as measured above; with " nproc " CPUs fully and perfectly shared it"
	print "cannot move more than " nproc " / that GiB/s, shown here as a multiple of the"
	print "measured socketpair throughput. A target above its bound cannot be met"
	print "by scheduling alone: the CPU per byte has to go down. bench/README.md says"
	print "what that CPU is spent on and what limits each gap."
}' "$raw" >"$tmp/RESULTS.md"

# ---- plot ----
if command -v gnuplot >/dev/null 2>&1; then
	# size; vsxd and socketpair MiB/s: g2h, g2h pair, h2g, h2g pair at the
	# default buffers, then the same at $bigbuf ("?": not run)
	awk -v big="$bigbuf" '
	function kv(key,   i, n) {
		for (i = 1; i <= NF; i++) {
			n = index($i, "=")
			if (n && substr($i, 1, n - 1) == key)
				return substr($i, n + 1)
		}
		return ""
	}
	function v(a, s) { return (s in a) ? a[s] : "?" }
	/^median case=g2h|^median case=h2g/ {
		b = kv("buffer"); if (b == "") b = 262144
		s = kv("size"); sz[s] = 1
		if (b == 262144) {
			if (kv("case") == "g2h") { g[s] = kv("mibs"); gp[s] = kv("pair_mibs") }
			else { h[s] = kv("mibs"); hp[s] = kv("pair_mibs") }
		} else if (b == big) {
			if (kv("case") == "g2h") { G[s] = kv("mibs"); GP[s] = kv("pair_mibs") }
			else { H[s] = kv("mibs"); HP[s] = kv("pair_mibs") }
		}
	}
	END {
		for (s in sz)
			print s, v(g, s), v(gp, s), v(h, s), v(hp, s), v(G, s), v(GP, s), v(H, s), v(HP, s)
	}' "$raw" | sort -n >"$tmp/tp.dat"
fi
# no throughput phase in this run (VSX_BENCH_PHASES): no plot
if command -v gnuplot >/dev/null 2>&1 && [ -s "$tmp/tp.dat" ]; then
	bigname=$(awk -v b="$bigbuf" 'BEGIN {
		if (b >= 1048576) printf "%g MiB", b / 1048576; else printf "%g KiB", b / 1024 }')
	bigplot=
	if awk '$6 != "?" || $8 != "?" { f = 1 } END { exit !f }' "$tmp/tp.dat"; then
		bigplot=", \\
     \"\" using 1:6 with linespoints lw 2 pt 7 title \"vsxd guest -> host, $bigname buffers\", \\
     \"\" using 1:8 with linespoints lw 2 pt 7 title \"vsxd host -> guest, $bigname buffers\", \\
     \"\" using 1:7 with linespoints dt 3 pt 7 title \"socketpair, $bigname buffers (beside guest -> host)\", \\
     \"\" using 1:9 with linespoints dt 3 pt 7 title \"socketpair, $bigname buffers (beside host -> guest)\""
	fi
	gnuplot <<EOF
set terminal pngcairo size 1000,720 noenhanced
set output "$tmp/throughput.png"
set title "vsxd throughput vs socketpair (medians of $reps; $(nproc) CPUs)"
set datafile missing "?"
set logscale xy 2
set xlabel "payload (write size), bytes"
set ylabel "MiB/s"
set key below
set xrange [40:420000]
set grid
set xtics ("64 B" 64, "4 KiB" 4096, "64 KiB" 65536, "256 KiB" 262144)
plot "$tmp/tp.dat" using 1:2 with linespoints lw 2 title "vsxd guest -> host, 256 KiB buffers", \\
     "" using 1:4 with linespoints lw 2 title "vsxd host -> guest, 256 KiB buffers", \\
     "" using 1:3 with linespoints dt 2 title "socketpair, default buffers (beside guest -> host)", \\
     "" using 1:5 with linespoints dt 2 title "socketpair, default buffers (beside host -> guest)"$bigplot
EOF
	cp "$tmp/throughput.png" "$out/throughput.png"
	printf '\n![throughput](throughput.png)\n' >>"$tmp/RESULTS.md"
fi

# bench/sibling.sh's lines, when the sibling phase ran
sh "$src/bench/sibling.sh" --md "$raw" >>"$tmp/RESULTS.md"
# bench/churn.py's, when the churn phase ran
python3 "$src/bench/churn.py" --md "$raw" >>"$tmp/RESULTS.md"
cp "$tmp/RESULTS.md" "$out/RESULTS.md"
echo "run.sh: wrote $out/results/latest.txt and $out/RESULTS.md"
