# shellcheck shell=sh disable=SC2154 # $log, $t0, $W are the script's
# A Debian 12 tree booted with systemd-nspawn, systemd 252 as its PID 1,
# for the tests that need a real service manager (scripts/test-upgrade,
# scripts/test-libvirt); sourced. The script sets $log (its log file) and
# $t0 (its start, date +%s) first, and calls ct_kill from its cleanup.
#
#   say TEXT, ok TEXT, bad TEXT   a line to the terminal and $log; ok and
#                                 bad count a check
#   check DESCRIPTION COMMAND...  ok if COMMAND succeeds, else bad
#   finish                        the summary line ("NAME: N passed, M
#                                 failed"), exit 0 only with no failure
#   ct_tree ROOT PACKAGES         debootstrap bookworm into ROOT (minbase,
#                                 systemd, dbus and PACKAGES, comma
#                                 separated) unless ROOT has them already
#   ct_boot ROOT BINDS...         boot ROOT (--bind=HOST:GUEST each), wait
#                                 until systemd says running or degraded;
#                                 exit 77 (SKIP) if nspawn cannot boot here
#   ct COMMAND...                 run COMMAND in the container's namespaces
#   ct_poweroff                   systemctl poweroff, and wait for the end
#   ct_kill                       end the container whatever its state
pass=0 fail=0 nspawn_pid='' init=''
: >"$log"
say() { echo "$ct_name: $*" | tee -a "$log"; }
ok() { pass=$((pass + 1)); echo "ok: $*" | tee -a "$log"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*" | tee -a "$log"; }
check() { d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }
finish()
{
	say "done in $(($(date +%s) - t0)) s"
	echo "${ct_name#test-}: $pass passed, $fail failed" | tee -a "$log"
	[ "$fail" = 0 ]
	exit
}
ct() { nsenter -t "$init" -a "$@"; }

ct_tree()
{
	command -v systemd-nspawn >/dev/null || apt-get install -y systemd-container >/dev/null
	command -v debootstrap >/dev/null || apt-get install -y debootstrap >/dev/null
	want="systemd,systemd-sysv,dbus${2:+,$2}"
	[ -x "$1/lib/systemd/system/systemd" ] || [ -x "$1/lib/systemd/systemd" ] &&
		[ "$(cat "$1.packages" 2>/dev/null)" = "$want" ] && return 0
	mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources \
		2>/dev/null | head -n 1)
	say "debootstrap bookworm ($want) into $1 (${mirror:-deb.debian.org})"
	rm -rf "$1"
	debootstrap --variant=minbase --include="$want" bookworm "$1" \
		"${mirror:-http://deb.debian.org/debian}" >"$1.debootstrap.log" 2>&1 ||
		{ tail -20 "$1.debootstrap.log"; bad "debootstrap"; finish; }
	echo "$want" >"$1.packages"
}

ct_boot()
{
	r=$1
	shift
	binds=''
	for b in "$@"; do binds="$binds --bind=$b"; done
	say "systemd-nspawn --boot $r (log: $W/nspawn.log)"
	# shellcheck disable=SC2086 # a list of options
	# (nspawn's own syscall filter lacks Landlock's calls, which vsxd's
	# sandbox makes: sandbox.c)
	systemd-nspawn -D "$r" --register=no --keep-unit --boot --console=pipe \
		--system-call-filter='landlock_create_ruleset landlock_add_rule landlock_restrict_self' \
		$binds --resolv-conf=copy-host >"$W/nspawn.log" 2>&1 </dev/null &
	nspawn_pid=$!
	n=0 st=''
	while [ "$n" -lt 300 ]; do
		init=$(pgrep -P "$nspawn_pid" | head -n 1)
		if [ -n "$init" ]; then
			st=$(ct systemctl is-system-running 2>/dev/null)
			case $st in running|degraded) break ;; esac
		fi
		kill -0 "$nspawn_pid" 2>/dev/null || break
		n=$((n + 1))
		sleep 0.1
	done
	case $st in
	running|degraded) ok "the container booted: $(ct systemctl --version | head -n 1) as PID 1 ($st)" ;;
	*)
		cat "$W/nspawn.log"
		echo "SKIP: $ct_name: systemd-nspawn cannot boot a container here" | tee -a "$log"
		exit 77
		;;
	esac
}

ct_poweroff()
{
	ct systemctl poweroff >/dev/null 2>&1
	n=0
	while kill -0 "$nspawn_pid" 2>/dev/null && [ "$n" -lt 300 ]; do n=$((n + 1)); sleep 0.1; done
	check "the container powered off" sh -c "! kill -0 $nspawn_pid 2>/dev/null"
}

ct_kill()
{
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		kill -TERM "$nspawn_pid" 2>/dev/null
		n=0
		while kill -0 "$nspawn_pid" 2>/dev/null && [ "$n" -lt 100 ]; do
			n=$((n + 1)); sleep 0.1
		done
		kill -KILL "$nspawn_pid" 2>/dev/null
	fi
}
