#!/usr/bin/env python3
# bench/churn.py [BUILDDIR]: vsxd's CPU per connection open+close with 0
# and with VSX_CHURN_HOLD (2000) other connections open, the file
# descriptor store on and off (issue #33 item 4: with the store on, 2,000
# open within 1.2x of none).
#
# One VM served by a fresh vsxd per run; tests/daemon/loadgen (the
# in-process test driver: plays QEMU and the guest, and the host programs
# on the hybrid socket) opens and holds the other connections (host ->
# guest, no data), then runs VSX_CHURN_WARM (500) warm-up and
# VSX_CHURN_CYCLES (20000) measured connect/close cycles beside them
# (loadgen's "cycles": half opened by the host, half by the guest, 100
# bytes each way checked, one in ten aborted, 16 in flight each way).
# vsxd's CPU over the measured cycles (all its threads,
# /proc/PID/task/*/schedstat) divided by the cycles is the figure. "Store
# on": vsxd runs under the stand-in service manager of
# tests/daemon/fdstore.py ($NOTIFY_SOCKET, FileDescriptorStoreMax=64, as
# the packaged unit), its device and state memfd stored, each connection
# event recorded; "off": no $NOTIFY_SOCKET. VSX_CHURN_REPS (3) runs of
# each, interleaved; medians and the ratio held/none per vsxd and store.
# VSX_CHURN_BEFORE=PATH: the same runs with another vsxd (a build of
# main: the change's "before"), in the same run.
#
# Output lines (standard output):
#   churn vsxd=NAME store=on|off held=H rep=N us_per_cycle=X wall_us_per_cycle=W
#   churn-median vsxd=NAME store=on|off held=H us_per_cycle=X
#   churn-ratio vsxd=NAME store=on|off held_over_none=R
# --md FILE: the Markdown section of RESULTS.md from FILE's lines.
# The exit status says whether every run checked its bytes and kept its
# held connections, never whether a figure was good.
import os
import statistics
import subprocess
import sys
import tempfile
import time


def md(path):
    runs, med, ratio, setup = [], {}, {}, None
    for line in open(path):
        if line.startswith("churn setup: "):
            setup = line[len("churn setup: "):].strip()
            continue
        f = line.split()
        if not f or f[0] not in ("churn", "churn-median", "churn-ratio"):
            continue
        kv = dict(x.split("=", 1) for x in f[1:] if "=" in x)
        if f[0] == "churn":
            runs.append(kv)
        elif f[0] == "churn-median":
            med[(kv["vsxd"], kv["store"], kv["held"])] = kv["us_per_cycle"]
        else:
            ratio[(kv["vsxd"], kv["store"])] = kv["held_over_none"]
    if not runs:
        return
    held = sorted({r["held"] for r in runs}, key=int)
    print("\n## Connection churn beside open connections (issue #33 item 4)\n")
    print("bench/churn.py: one VM, tests/daemon/loadgen as QEMU, guest and host "
          "programs; %s other connections held open (or none), then connect/close "
          "cycles beside them (half host-, half guest-initiated, 100 B each way, "
          "one in ten aborted); vsxd CPU (all threads, schedstat) per cycle, µs, "
          "median of the runs (min–max). Store on: under tests/daemon/fdstore.py's "
          "stand-in service manager (FileDescriptorStoreMax=64), every connection "
          "event recorded in the state memfd; off: no $NOTIFY_SOCKET. Issue #33 "
          "wants, store on, held ≤ 1.2× none.\n" % held[-1])
    if setup:
        print("Setup: %s.\n" % setup)
    print("| vsxd | store | " + " | ".join("%s open" % h for h in held) +
          " | ratio %s / 0 |" % held[-1])
    print("|---|---|" + "---|" * len(held) + "---|")
    names = []
    for r in runs:
        if r["vsxd"] not in names:
            names.append(r["vsxd"])
    for n in names:
        for st in ("off", "on"):
            cells = []
            for h in held:
                xs = [float(r["us_per_cycle"]) for r in runs
                      if r["vsxd"] == n and r["store"] == st and r["held"] == h]
                cells.append("%s (%.1f–%.1f)" % (med.get((n, st, h), "-"), min(xs), max(xs))
                             if xs else "-")
            print("| %s | %s | %s | %s |" % (n, st, " | ".join(cells),
                                             ratio.get((n, st), "-")))


if len(sys.argv) > 2 and sys.argv[1] == "--md":
    md(sys.argv[2])
    sys.exit(0)

src = os.environ.get("VSX_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("VSX_BUILDDIR", "."))
sys.path.insert(0, os.path.join(src, "tests", "daemon"))
import fdstore  # noqa: E402

HOLD = int(os.environ.get("VSX_CHURN_HOLD", "2000"))
CYCLES = int(os.environ.get("VSX_CHURN_CYCLES", "20000"))
WARM = int(os.environ.get("VSX_CHURN_WARM", "500"))
REPS = int(os.environ.get("VSX_CHURN_REPS", "3"))
LOADGEN = os.path.join(build, "tests", "daemon", "loadgen")
vsxds = [("after", os.path.join(build, "daemon", "vsxd"))]
if os.environ.get("VSX_CHURN_BEFORE"):
    vsxds.insert(0, ("before", os.path.abspath(os.environ["VSX_CHURN_BEFORE"])))
try:
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
except (ImportError, ValueError, OSError):
    pass


def run(vsxd, store, held, tmp):
    conf = os.path.join(tmp, "vsxd.conf")
    vhost, uds = os.path.join(tmp, "web.vhost"), os.path.join(tmp, "web.vsock")
    for p in (vhost, uds, os.path.join(tmp, "notify")):
        if os.path.exists(p):
            os.unlink(p)
    with open(conf, "w") as f:
        f.write("[daemon]\ncontrol = %s\n\n[vm web]\nguest-cid = 3\nsocket = %s\n"
                "uds-path = %s\n" % (os.path.join(tmp, "control"), vhost, uds))
    log = open(os.path.join(tmp, "vsxd.log"), "w")
    svc = proc = None
    if store:
        svc = fdstore.Service([vsxd, "--config", conf], os.path.join(tmp, "notify"),
                              store_max=64, log=log)
        svc.start()
        if not svc.wait(lambda: svc.ready):
            raise RuntimeError("vsxd under the store: no READY=1")
        pid = svc.proc.pid
    else:
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        proc = subprocess.Popen([vsxd, "--config", conf], stdout=log, stderr=log, env=env)
        pid = proc.pid
        end = time.monotonic() + 20
        while not os.path.exists(vhost) and time.monotonic() < end:
            time.sleep(0.05)
    try:
        out = subprocess.run([LOADGEN, "-p", str(pid), "-T", "600", vhost, uds, "churn",
                              str(held), str(CYCLES), str(WARM)],
                             capture_output=True, text=True, timeout=900)
    finally:
        if svc:
            svc.stop()
            svc.close()
        else:
            proc.terminate()
            proc.wait()
        log.close()
    res = None
    for line in out.stdout.splitlines():
        if line.startswith("churn: held="):
            res = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    if out.returncode or not res:
        sys.stderr.write("churn.py: loadgen failed (%d): %s%s\n"
                         % (out.returncode, out.stdout[-400:], out.stderr[-800:]))
        return None
    return res


ok = True
figs = {}
print("churn setup: %d CPUs, load %s (1/5/15 min) at the start, %d cycles (after %d "
      "warm-up) per run, %d runs of each, interleaved, %d connections held; vsxds: %s"
      % (os.cpu_count(), " ".join(open("/proc/loadavg").read().split()[:3]), CYCLES, WARM,
         REPS, HOLD, ", ".join("%s %s" % v for v in vsxds)))
tmp = tempfile.mkdtemp(prefix="vsx-churn.")
sys.stdout.reconfigure(line_buffering=True)
for rep in range(1, REPS + 1):
    for name, vsxd in vsxds:
        for store in (False, True):
            for held in (0, HOLD):
                r = run(vsxd, store, held, tmp)
                st = "on" if store else "off"
                if not r:
                    ok = False
                    continue
                figs.setdefault((name, st, held), []).append(float(r["us_per_cycle"]))
                print("churn vsxd=%s store=%s held=%d rep=%d us_per_cycle=%s "
                      "wall_us_per_cycle=%s" % (name, st, held, rep, r["us_per_cycle"],
                                                r["wall_us_per_cycle"]))
for name, _ in vsxds:
    for st in ("off", "on"):
        m = {}
        for held in (0, HOLD):
            xs = figs.get((name, st, held))
            if xs:
                m[held] = statistics.median(xs)
                print("churn-median vsxd=%s store=%s held=%d us_per_cycle=%.1f"
                      % (name, st, held, m[held]))
        if len(m) == 2 and m[0] > 0:
            print("churn-ratio vsxd=%s store=%s held_over_none=%.2f"
                  % (name, st, m[HOLD] / m[0]))
sys.exit(0 if ok else 1)
