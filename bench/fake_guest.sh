# Sourced by bench/sibling.sh and bench/stall.sh: fake guests
# (tests/daemon/fake_guest) driven through a fifo each. Needs $fg_bin (the
# program) and $vsx_prog (the caller's name, for messages).
#
#   fg_tmp NAME               a temporary directory $tmp, removed at exit
#                             with every fake guest and the vsxd in $pid
#                             killed (fds 4-6 are the fifos)
#   fgo NAME FD [PREFIX...]   start fake guest NAME on $tmp/NAME.vhost, its
#                             commands on fd FD (PREFIX: run it under e.g.
#                             nice -n 10); waits for its first line
#   fg NAME COMMAND           send COMMAND, wait for its "ok" (1: not ok)
#   fg_send / fg_wait         the two halves of fg
#   wait_for COMMAND...       until COMMAND succeeds (60 s at most)

fg_tmp() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	pid='' fg_all=''
	trap fg_cleanup EXIT
	trap 'exit 130' INT TERM
}
fg_cleanup() {
	exec 4>&- 5>&- 6>&- 2>/dev/null || :
	for p in $fg_all $pid; do
		kill -KILL "$p" 2>/dev/null || :
	done
	rm -rf "$tmp"
}
wait_for() {
	i=0
	while ! "$@"; do
		i=$((i + 1))
		[ $i -lt 600 ] || return 1
		sleep 0.1
	done
}
answered() { grep -q "^$2 " "$tmp/$1.out"; }
fgo() {
	_n=$1 _fd=$2
	shift 2
	rm -f "$tmp/$_n.in" "$tmp/$_n.out"
	mkfifo "$tmp/$_n.in"
	"$@" "$fg_bin" "$tmp/$_n.vhost" <"$tmp/$_n.in" >"$tmp/$_n.out" 2>&1 &
	eval "${_n}_pid=\$! ${_n}_n=0 ${_n}_fd=$_fd"
	fg_all="$fg_all $!"
	eval "exec $_fd>\"\$tmp/\$_n.in\""
	wait_for answered "$_n" 0
}
fg_send() {
	eval "$1_n=\$((\$$1_n + 1)) ffd=\$$1_fd"
	# shellcheck disable=SC2154 # set by eval
	echo "$2" >&"$ffd"
}
fg_wait() {
	eval "fn=\$$1_n"
	# shellcheck disable=SC2154
	wait_for answered "$1" "$fn" || { echo "$vsx_prog: $1: no answer to #$fn" >&2; return 1; }
	grep -q "^$fn ok" "$tmp/$1.out" || {
		echo "$vsx_prog: $1: $(grep "^$fn " "$tmp/$1.out")" >&2
		return 1
	}
}
fg() { fg_send "$1" "$2" && fg_wait "$1"; }
