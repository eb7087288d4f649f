# shellcheck shell=sh disable=SC2154,SC2034 # $W, $peer, $log are the test's; $hw is read by it
# The steps the vsxd-lifecycle guest tests share (restart.test, upgrade.test,
# upgrade-fail.test, upgrade-sib.test), sourced after common.sh. They use the test's $W (its
# temporary directory), $peer (vsx_peer), $pids (what cleanup kills) and
# $log (vsxd's log).
#
#   until_ok SECONDS COMMAND...   poll COMMAND every 0.1 s for up to SECONDS
#   note WHY / end WHAT           collect failures, then one TAP line for
#                                 WHAT (with vsxd's log's tail on failure)
#   hpeer TAG ARGS...             a host vsx_peer in the background, its
#                                 output in $W/TAG.out
#   hp_alive TAG, hp_wait TAG SECONDS   still running / its exit status in
#                                 $hw ("hung" when killed after SECONDS)

until_ok()
{
	uo_dl=$(($(date +%s) + $1))
	shift
	while ! "$@"; do
		[ "$(date +%s)" -ge "$uo_dl" ] && return 1
		sleep 0.1
	done
	return 0
}

bad=''
note() { bad="$bad $*;"; }
end()
{
	if [ -z "$bad" ]; then
		vsx_result 0 "$1"
	else
		vsx_result 1 "$1:$bad"
		echo "# vsxd's log (last 30 lines):"
		tail -n 30 "$log" | sed 's/^/#   | /'
	fi
	bad=''
}

hpeer()
{
	hp_tag=$1
	shift
	"$peer" -l "$hp_tag" "$@" >"$W/$hp_tag.out" 2>&1 &
	echo $! >"$W/$hp_tag.pid"
	pids="$pids $!"
}
hp_alive() { kill -0 "$(cat "$W/$1.pid")" 2>/dev/null; }
hp_wait()
{
	hw_dl=$(($(date +%s) + $2))
	while hp_alive "$1" && [ "$(date +%s)" -lt "$hw_dl" ]; do
		sleep 0.1
	done
	if hp_alive "$1"; then
		kill -KILL "$(cat "$W/$1.pid")"
		wait "$(cat "$W/$1.pid")" 2>/dev/null
		hw=hung
		return 1
	fi
	wait "$(cat "$W/$1.pid")"
	hw=$?
}
