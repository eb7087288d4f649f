#!/bin/sh
# bench/run.sh [BUILDDIR]: run vsx's benchmarks against a fresh vsxd and
# record them.
#
# Builds nothing beyond `make` of the three programs it runs (vsxbench,
# vsxd, vsxctl) in BUILDDIR (default: $VSX_BUILDDIR, else the current
# directory). Starts vsxd on temporary paths, runs bench/vsxbench against
# it, a fresh vsxd for each phase (10,000 idle connections; the 1-byte
# flood; then each throughput case and the latency, so that `perf stat`,
# when it works here, counts vsxd's system calls per case), stops vsxd,
# and writes
#   bench/results/latest.txt   the raw output, with the setup and load
#   bench/RESULTS.md           the tables (medians, ratios to socketpair)
#   bench/throughput.png       when gnuplot is installed
# in the source tree (or in $VSX_BENCH_OUT).
#
# Environment: VSX_BENCH_REPS (3), VSX_BENCH_SCALE (1: bytes per run),
# VSX_BENCH_IDLE (10000: idle connections), VSX_BENCH_PERF (auto; 0: no
# perf stat),
# VSX_BENCH_WAIT_LOAD (e.g. 0.5: first wait, up to 10 minutes, for the
# 1-minute load average to fall below it), VSX_BENCH_REPORT=FILE (run
# nothing: write RESULTS.md and the plot from FILE, a latest.txt, again).
# Benchmarks only report: the
# exit status says whether every run completed and every byte checked,
# never whether a figure was good.
set -eu

src=${VSX_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${1:-${VSX_BUILDDIR:-$(pwd)}}
build=$(cd "$build" && pwd)
out=${VSX_BENCH_OUT:-$src/bench}
reps=${VSX_BENCH_REPS:-3}
scale=${VSX_BENCH_SCALE:-1}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vsxbench.XXXXXX")
pid=
ppid=
cleanup() {
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

# vsxd options for the idle phase: its per-VM connection limit above the
# connections held (when this vsxd has the option).
idle=${VSX_BENCH_IDLE:-10000}
idle_opts=
if "$build/daemon/vsxd" --help 2>&1 | grep -q -- --max-conns-per-vm; then
	idle_opts="--max-conns-per-vm $((idle + 100))"
fi
# A descriptor per held connection, in vsxd and in vsxbench.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || :

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
	perf stat -x, -e "$perf_events" -p "$pid" -o "$tmp/perf.out" 2>/dev/null &
	ppid=$!
	sleep 0.2
}

# perf_stop CASE SIZE: one "perf ..." line of counts in the raw output.
perf_stop() {
	[ -n "$ppid" ] || return 0
	kill -INT "$ppid" 2>/dev/null || :
	wait "$ppid" 2>/dev/null || :
	ppid=
	awk -F, -v c="$1" -v s="$2" '
	$3 != "" && $1 ~ /^[0-9]+$/ {
		k = $3; sub(/^.*sys_enter_/, "", k); sub(/^raw_syscalls:sys_enter$/, "syscalls", k)
		gsub(/-/, "_", k); out = out " " k "=" $1
	}
	END { print "perf case=" c " size=" s out }' "$tmp/perf.out" >>"$raw"
}

start_vsxd() {
	rm -f "$tmp/vhost.sock" "$tmp/vm.vsock" "$tmp/ctl.sock"
	"$build/daemon/vsxd" "$@" \
		--vm "guest-cid=3,socket=$tmp/vhost.sock,uds-path=$tmp/vm.vsock" \
		--control "$tmp/ctl.sock" 2>>"$tmp/vsxd.log" &
	pid=$!
	n=0
	while [ ! -S "$tmp/vhost.sock" ] || [ ! -S "$tmp/ctl.sock" ]; do
		n=$((n + 1))
		if [ $n -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
			cat "$tmp/vsxd.log" >&2
			echo "run.sh: vsxd did not start" >&2
			exit 1
		fi
		sleep 0.05
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

measure() {
	if ! make -C "$build" bench/vsxbench daemon/vsxd tools/vsxctl/vsxctl \
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
	log "params reps=$reps scale=$scale"

	log "perf $use_perf"

	# ---- the runs ----
	# shellcheck disable=SC2086 # idle_opts: words
	start_vsxd $idle_opts
	log "phase idle (fresh vsxd pid $pid, options: ${idle_opts:-none})"
	bench --cases idle --idle-conns "$idle"
	stop_vsxd

	start_vsxd
	log "phase mem (fresh vsxd pid $pid)"
	bench --cases mem
	stop_vsxd

	for c in g2h h2g; do
		for s in 64 4096 65536 262144; do
			start_vsxd
			log "phase $c $s (fresh vsxd pid $pid)"
			perf_start
			bench --cases "$c" --sizes "$s"
			perf_stop "$c" "$s"
			stop_vsxd
		done
	done
	start_vsxd
	log "phase lat (fresh vsxd pid $pid)"
	perf_start
	bench --cases lat
	perf_stop lat 512
	stop_vsxd
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
function per(line, key, div) { return div > 0 ? sprintf("%.2f", pkv(line, key) / div) : "" }
function pline(c, s, div, unit,   l) {
	if (!((c, s) in perf))
		return
	l = perf[c, s]
	printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		c == "g2h" ? "guest → host" : (c == "h2g" ? "host → guest" : "512 B ping-pong " unit),
		human(s), per(l, "syscalls", div), per(l, "sendmsg", div), per(l, "readv", div),
		per(l, "recvmsg", div), per(l, "epoll_wait", div), per(l, "epoll_ctl", div),
		per(l, "write", div), per(l, "read", div),
		sprintf("%.2f", (pkv(l, "brk") + pkv(l, "mmap")) / div), per(l, "page_faults", div),
		per(l, "context_switches", div)
}
function tgt(name, want, got, ok, note) {
	printf "| %s | %s | %s | %s | %s |\n", name, want, got, ok ? "met" : "**not met**", note
}
/^host nproc=/ { nproc = kv("nproc"); sub(/^host nproc=[0-9]+ cpu=/, ""); cpu = $0 }
/^host kernel=/ { kernel = kv("kernel"); arch = kv("arch") }
/^build / { build = rest($0, "build") }
/^source / { rev = rest($0, "source"); sub(/^rev=/, "", rev) }
/^date / { date = rest($0, "date") }
/^load / {
	nload++
	if (nload == 1) load0 = $2 " " $3 " " $4
	if (nload == 1 || $2 + 0 < lmin) lmin = $2 + 0
	if (nload == 1 || $2 + 0 > lmax) lmax = $2 + 0
}
/^perf (yes|no)$/ { perfok = $2 }
/^perf case=/ {
	pc = kv("case") SUBSEP kv("size")
	perf[pc] = $0
}
/^idle / {
	i_n = kv("conns"); i_want = kv("wanted"); i_ref = kv("refused"); i_secs = kv("secs")
	i_a0 = kv("anon_before_kib"); i_a1 = kv("anon_idle_kib"); i_a2 = kv("anon_after_kib")
	i_r0 = kv("rss_before_kib"); i_r1 = kv("rss_idle_kib"); i_r2 = kv("rss_after_kib")
	i_pa = kv("anon_per_conn_bytes"); i_pr = kv("rss_per_conn_bytes"); i_us = kv("be_us_per_conn")
}
/^setup / { queue = kv("queue_size"); gbuf = kv("guest_buf") }
/^median case=g2h|^median case=h2g/ {
	c = kv("case"); s = kv("size")
	row[c, s] = sprintf("| %s | %s | %s | %s | %s | %s | %s (%s / %s) | %s | %s | %s | %s |",
		c == "g2h" ? "guest → host" : "host → guest", human(s),
		human(kv("bytes")), kv("mibs") " (" kv("min_mibs") "–" kv("max_mibs") ")",
		kv("pair_mibs") " (" kv("pair_min_mibs") "–" kv("pair_max_mibs") ")", kv("ratio"),
		kv("be_cpu_s_per_gib"), kv("be_user_s_per_gib"), kv("be_sys_s_per_gib"),
		kv("self_cpu_s_per_gib"), kv("pair_cpu_s_per_gib"), kv("be_runs_per_mib"),
		kv("self_cs_per_mib"))
	order[++nrow] = c SUBSEP s
	ratio[c, s] = kv("ratio"); mib_run[c, s] = kv("bytes") * reps / 1048576
	tot_cpu[c, s] = kv("be_cpu_s_per_gib") + kv("self_cpu_s_per_gib")
	pair_mibs[c, s] = kv("pair_mibs"); be_cpu[c, s] = kv("be_cpu_s_per_gib")
}
/^median case=lat/ {
	lat = sprintf("| vsxd | %s (%s–%s) | %s |\n| socketpair | %s (%s–%s) | %s |\n| ratio | %s | %s |",
		kv("p50_us"), kv("min_p50_us"), kv("max_p50_us"), kv("p99_us"),
		kv("pair_p50_us"), kv("pair_min_p50_us"), kv("pair_max_p50_us"),
		kv("pair_p99_us"), kv("ratio_p50"), kv("ratio_p99"))
	latn = kv("n"); latcpu = kv("be_cpu_us_per_rt"); latruns = kv("be_runs_per_rt")
	lat_ratio = kv("ratio_p50"); lat_p50 = kv("p50_us"); lat_pp50 = kv("pair_p50_us")
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
END {
	print "# vsx benchmarks"
	print ""
	print "Generated by `make bench` (bench/run.sh) on " date "; raw output in"
	print "[results/latest.txt](results/latest.txt). Do not edit by hand: run it again."
	print ""
	print "Every vsxd run is followed, in the same process and minute, by the same"
	print "work over a plain AF_UNIX `socketpair` with the same write size (the"
	print "baseline); figures are medians of " reps " such pairs (the smallest and"
	print "largest run in parentheses), ratios are median vsxd / median"
	print "socketpair. Benchmarks only report: no figure is checked against a"
	print "threshold, but every byte is (pattern and count)."
	print ""
	print "## Setup"
	print ""
	print "| | |"
	print "|---|---|"
	print "| machine | " nproc " CPUs, " cpu ", Linux " kernel " " arch " |"
	print "| build | " build " |"
	print "| source | " rev " |"
	print "| load average | " load0 " (1/5/15 min) at the start; the 1-minute figure ranged " lmin "–" lmax " over the " nload " samples before and after each phase (those after a phase count the benchmark itself: 2 to 3 busy threads). The machine is shared: other processes may have been running, and every figure is affected by them |"
	print "| vsxd | one process, one VM, defaults: tx-buffer-size (credit) 256 KiB |"
	print "| guest | tests/driver (plays QEMU 7.2 and a Linux 6.1 guest): queue size " queue \
		", event idx, indirect descriptors, 4 KiB RX buffers, buf_alloc " gbuf \
		", single-threaded, synchronous |"
	print "| host program | a thread of vsxbench on the hybrid socket (`CONNECT` through uds-path for host → guest, a listener on uds-path_PORT for guest → host) |"
	print ""
	print "The guest, vsxd and the host program are three runnable threads on " nproc
	print "CPUs; the socketpair baseline has two (writer and reader)."
	print ""
	print "## Throughput"
	print ""
	print "A payload is the write size on the sending side: the guest sends RW"
	print "packets of that size (at most 64 KiB each, within its credit: a 256 KiB"
	print "write is 4 packets), the host `write()`s that size. The receiver reads"
	print "what comes (the host with 256 KiB reads; the guest per 4 KiB RX buffer)."
	print "CPU is per GiB moved: vsxd from /proc/PID (all threads, schedstat; user"
	print "and system from utime/stime ticks), vsxbench (guest + host program) and"
	print "the socketpair run (writer + reader) from getrusage. \"vsxd runs\" counts"
	print "the times vsxd was switched in (wakeups and returns from preemption,"
	print "schedstat); \"switches\" the context switches of vsxbench (getrusage)."
	print ""
	print "| direction | payload | data per run | vsxd MiB/s (min–max) | socketpair MiB/s (min–max) | ratio | vsxd CPU s/GiB (user / sys) | guest+host CPU s/GiB | socketpair CPU s/GiB | vsxd runs/MiB | guest+host switches/MiB |"
	print "|---|---|---|---|---|---|---|---|---|---|---|"
	for (i = 1; i <= nrow; i++)
		print row[order[i]]
	if (perfok == "yes") {
		print ""
		print "### vsxd system calls (perf stat)"
		print ""
		print "Counted over the whole vsxd process of each case (its " reps " vsxd runs and the"
		print "idle time of the socketpair runs beside them), per MiB moved (per round"
		print "trip for the latency): what vsxd asks of the kernel, the profile that"
		print "explains the CPU figures above."
		print ""
		print "| case | payload | syscalls | sendmsg | readv | recvmsg | epoll_wait | epoll_ctl | write (eventfd) | read (eventfd) | brk + mmap | page faults | context switches |"
		print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
		for (i = 1; i <= nrow; i++) {
			split(order[i], cs, SUBSEP)
			pline(cs[1], cs[2], mib_run[cs[1], cs[2]], "per MiB")
		}
		if ((("lat", 512) in perf))
			pline("lat", 512, latn * reps, "per round trip")
	}
	print ""
	print "## Latency"
	print ""
	print "512-byte ping-pong over one connection: the guest sends 512 bytes, the"
	print "host program reads them and writes them back; " latn " round trips per run,"
	print "measured in the guest. The baseline is the same ping-pong between two"
	print "threads over a socketpair. Microseconds."
	print ""
	print "| | p50 (min–max of the runs) | p99 |"
	print "|---|---|---|"
	print lat
	if (latcpu != "")
		print "\nvsxd per round trip: " latcpu " µs of CPU, switched in " latruns " times."
	print ""
	print "## Memory under a 1-byte flood"
	print ""
	print "The guest opened " m_conns " connections to a host program that accepts"
	print "and never reads, then sent 1-byte RW packets round-robin over the first"
	print "half of them as fast as it could until none had credit left, then the"
	print "same over the second half (" m_pkts " packets"
	print "in " m_secs " s, " m_mpps " M packets/s" (m_ns != "" ? ", vsxd " m_ns " ns of CPU per packet, " m_ppr " packets per time it ran" : "") ")."
	print "vsxd (a fresh process) was measured from /proc/PID/status; anonymous"
	print "memory (RssAnon) is what vsxd allocates, the guest memory it maps is"
	print "shared (RssShmem) and counted apart."
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
	for (i = 1; i <= nrow; i++) {
		split(order[i], cs, SUBSEP)
		c = cs[1]; s = cs[2]
		if (s == 4096) want = 0.60
		else if (s >= 65536) want = 0.70
		else if (c == "g2h") want = 1.0
		else continue
		ceil = ""
		if (tot_cpu[c, s] > 0 && pair_mibs[c, s] > 0)
			ceil = sprintf("%.2f", nproc / tot_cpu[c, s] * 1024 / pair_mibs[c, s])
		tgt((c == "g2h" ? "guest → host " : "host → guest ") human(s) " throughput",
		    "≥ " want " × socketpair", ratio[c, s] " ×", ratio[c, s] + 0 >= want, ceil)
	}
	if (lat_ratio != "")
		tgt("512 B ping-pong p50", "≤ 2 × socketpair", lat_ratio " × (" lat_p50 " vs " lat_pp50 " µs)", lat_ratio + 0 <= 2, "")
	if (i_n != "")
		tgt("RSS per idle connection (" i_n " on one VM)", "≤ 4096 bytes", i_pa " bytes (RssAnon; VmRSS " i_pr ")", i_pa + 0 <= 4096 && i_n + 0 >= 10000, "")
	tgt("1-byte flood: RssAnon growth per connection", "≤ 1.25 × credit", m_ratio " × credit", m_ok == "yes", "")
	print "| vsxd CPU time per GiB, each case | reported | see the throughput table | met | |"
	print "| real QEMU guest: vsock through vsxd vs TCP over virtio-net, 64 KiB writes | same run | not measured by this script | **not done** | |"
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
	awk '
	function kv(key,   i, n) {
		for (i = 1; i <= NF; i++) {
			n = index($i, "=")
			if (n && substr($i, 1, n - 1) == key)
				return substr($i, n + 1)
		}
		return ""
	}
	/^median case=g2h/ { g[kv("size")] = kv("mibs"); gp[kv("size")] = kv("pair_mibs") }
	/^median case=h2g/ { h[kv("size")] = kv("mibs"); hp[kv("size")] = kv("pair_mibs") }
	END { for (s in g) print s, g[s], gp[s], h[s], hp[s] }' "$raw" | sort -n >"$tmp/tp.dat"
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$tmp/throughput.png"
set title "vsxd throughput vs socketpair (medians of $reps; $(nproc) CPUs)"
set logscale xy 2
set xlabel "payload (write size), bytes"
set ylabel "MiB/s"
set key bottom right
set xrange [40:420000]
set grid
set xtics ("64 B" 64, "4 KiB" 4096, "64 KiB" 65536, "256 KiB" 262144)
plot "$tmp/tp.dat" using 1:2 with linespoints lw 2 title "vsxd guest -> host", \
     "" using 1:4 with linespoints lw 2 title "vsxd host -> guest", \
     "" using 1:3 with linespoints dt 2 title "socketpair (beside guest -> host)", \
     "" using 1:5 with linespoints dt 2 title "socketpair (beside host -> guest)"
EOF
	cp "$tmp/throughput.png" "$out/throughput.png"
	printf '\n![throughput](throughput.png)\n' >>"$tmp/RESULTS.md"
fi

cp "$tmp/RESULTS.md" "$out/RESULTS.md"
echo "run.sh: wrote $out/results/latest.txt and $out/RESULTS.md"
