#!/bin/sh
# What vsxd's sandbox (vsxd(8) SECURITY: the syscall allowlist and the
# filesystem view) costs on the data path: vsxd as it starts by default
# (--seccomp kill) and with --seccomp off (no allowlist, no view),
# alternated round by round in one run, each round a fresh vsxd and one
# vsxbench repetition of guest -> host and host -> guest at 4 KiB and
# 64 KiB writes and the 512-byte round trip. Prints the medians of each
# mode and their ratio (kill / off): throughput, vsxd's CPU per GiB, p50.
#
#   bench/sandbox.sh BUILD [ROUNDS]     (ROUNDS: default 4)
#   VSX_BENCH_SCALE   bytes per throughput run (as vsxbench --scale; 0.5)
#
# Nothing asserts a timing; the exit status says whether every run
# completed with every byte checked.
set -eu
build=$(cd "${1:?usage: bench/sandbox.sh BUILD [ROUNDS]}" && pwd)
rounds=${2:-4}
scale=${VSX_BENCH_SCALE:-0.5}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vsx-sandbox-bench.XXXXXX")
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
raw=$tmp/raw.txt

run_round() {
	mode=$1
	rm -f "$tmp/vhost.sock" "$tmp/vm.vsock" "$tmp/ctl.sock"
	"$build/daemon/vsxd" --seccomp "$mode" \
		--vm "guest-cid=3,socket=$tmp/vhost.sock,uds-path=$tmp/vm.vsock" \
		--control "$tmp/ctl.sock" 2>>"$tmp/vsxd.log" &
	pid=$!
	n=0
	while [ ! -S "$tmp/vhost.sock" ] || [ ! -S "$tmp/ctl.sock" ]; do
		n=$((n + 1))
		[ $n -lt 200 ] && kill -0 "$pid" 2>/dev/null ||
			{ cat "$tmp/vsxd.log" >&2; echo "sandbox.sh: vsxd did not start" >&2; exit 1; }
		sleep 0.05
	done
	"$build/bench/vsxbench" --socket "$tmp/vhost.sock" --uds-path "$tmp/vm.vsock" \
		--pid "$pid" --label "$mode" --reps 1 --scale "$scale" --cases g2h,h2g,lat \
		--sizes 4096,65536 | sed "s/^run /run mode=$mode /" >>"$raw"
	kill -TERM "$pid"
	wait "$pid"
	pid=
}

echo "sandbox.sh: $(nproc) CPUs, $(uname -r), $rounds rounds, scale $scale, load $(cut -d' ' -f1-3 /proc/loadavg)"
r=0
while [ $r -lt "$rounds" ]; do
	r=$((r + 1))
	run_round kill
	run_round off
done
echo "sandbox.sh: load after $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
function med(k,   n, i, j, t, a) {
	n = split(v[k], a, " ")
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^run / && !/ path=socketpair / {
	for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	key = f["case"] " " f["size"]
	cases[key] = 1
	if (f["case"] == "lat") {
		v[f["mode"] " " key " p50"] = v[f["mode"] " " key " p50"] " " f["p50_us"]
		v[f["mode"] " " key " cpu"] = v[f["mode"] " " key " cpu"] " " f["be_cpu_us_per_rt"]
	} else {
		v[f["mode"] " " key " mibs"] = v[f["mode"] " " key " mibs"] " " f["mibs"]
		v[f["mode"] " " key " cpu"] = v[f["mode"] " " key " cpu"] " " f["be_cpu_s_per_gib"]
	}
}
END {
	printf "%-10s %-16s %12s %12s %8s\n", "case", "figure", "kill", "off", "kill/off"
	for (key in cases) {
		split(key, c, " ")
		if (c[1] == "lat") { a = "p50"; an = "p50 us"; b = "cpu"; bn = "vsxd us/rt" }
		else { a = "mibs"; an = "MiB/s"; b = "cpu"; bn = "vsxd s/GiB" }
		ka = med("kill " key " " a); oa = med("off " key " " a)
		kb = med("kill " key " " b); ob = med("off " key " " b)
		printf "%-10s %-16s %12.3f %12.3f %8.3f\n", key, an, ka, oa, oa ? ka / oa : 0
		printf "%-10s %-16s %12.3f %12.3f %8.3f\n", key, bn, kb, ob, ob ? kb / ob : 0
	}
}' "$raw" | sort -k1,2
