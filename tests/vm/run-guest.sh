#!/bin/sh
# Boot the lab guest under QEMU, stream its console, return its status.
#
#   run-guest.sh [-t SECONDS] [-m MEM] [-s CPUS] [-r] [-c COMMAND] INITRD [-- QEMU-ARG...]
#
#   INITRD       built by mkinitramfs.sh
#   -c COMMAND   run COMMAND in the guest instead of the one baked into INITRD
#   -t SECONDS   overall limit, boot included (default $VSX_VM_TIMEOUT or 300);
#                QEMU is killed when it runs out
#   -m MEM       guest RAM (default 512M; keep it equal to any memory-backend
#                size given after --)
#   -s CPUS      guest CPUs (default 2)
#   -r           a reset reboots the guest (QEMU's system_reset on the
#                monitor) instead of ending QEMU (-no-reboot)
#   -- ARGS      extra QEMU arguments, e.g. a vhost-user-vsock-pci device:
#                -object memory-backend-memfd,id=mem,size=512M,share=on
#                -machine memory-backend=mem -chardev socket,id=c,path=SOCK
#                -device vhost-user-vsock-pci,chardev=c
#
# Environment: VSX_GUEST_KERNEL, VSX_KERNEL, VSX_MODULES (see common.sh), VSX_QEMU (default
# qemu-system-x86_64), VSX_ACCEL (kvm or tcg; by default kvm only when a probe
# shows KVM runs a guest: common.sh, vsx_accel), VSX_APPEND (more kernel command line), VSX_VM_LOG (keep the
# console transcript in this file).
#
# Exit status: the guest command's (from its VSX-GUEST-EXIT=N line; 1 if it
# was 0 but the guest kernel reported a BUG/Oops), or 99 when the guest did
# not boot, did not report, or ran out of time.
set -u
vsx_prog=run-guest.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

timeout_s=${VSX_VM_TIMEOUT:-300} mem=512M cpus=2 cmd='' have_cmd=''
usage()
{
	sed -n '2,/^set -u/{/^set -u/d;s/^# \{0,1\}//;p}' "$0" >&2
	exit 99
}
noreboot=-no-reboot
while getopts t:m:s:c:rh opt; do
	case $opt in
	r) noreboot='' ;;
	t) timeout_s=$OPTARG ;;
	m) mem=$OPTARG ;;
	s) cpus=$OPTARG ;;
	c) cmd=$OPTARG; have_cmd=1 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
initrd=$1
shift
if [ $# -gt 0 ]; then
	[ "$1" = -- ] || usage
	shift
fi

qemu=${VSX_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || vsx_die "no $qemu (apt-get install qemu-system-x86)"
kernel=$(vsx_kernel) || exit 99
[ -r "$kernel" ] || vsx_die "cannot read $kernel (set VSX_KERNEL)"
[ -r "$initrd" ] || vsx_die "cannot read $initrd"

accel=$(vsx_accel) || exit 99
case $accel in
kvm) accel_args="-accel kvm -cpu host" ;;
*) accel_args="-accel tcg,thread=multi -cpu max" ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vsx-guest.XXXXXX")
pidfile=$tmp/qemu.pid
log=${VSX_VM_LOG:-$tmp/console.log}
interrupted()
{
	[ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
	echo "$vsx_prog: interrupted; QEMU stopped" >&2
	rm -rf "$tmp"
	exit 99
}
trap interrupted INT TERM HUP
trap 'rm -rf "$tmp"' EXIT

if [ -n "$have_cmd" ]; then
	mkdir -p "$tmp/ov/etc"
	printf '# written by run-guest.sh -c\n%s\n' "$cmd" > "$tmp/ov/etc/vsx-run"
	(cd "$tmp/ov" && find . -mindepth 1 | cpio --quiet -o -H newc -R 0:0) |
		gzip -1 > "$tmp/ov.cpio.gz"
	cat "$initrd" "$tmp/ov.cpio.gz" > "$tmp/initrd"
	initrd=$tmp/initrd
fi

append="console=ttyS0 quiet loglevel=3 panic=-1 ${VSX_APPEND:-}"
echo "$vsx_prog: booting $(basename "$kernel") ($accel, $cpus CPUs, $mem)," \
	"limit ${timeout_s}s"
start=$(date +%s)
# The console pipeline runs in the background so that a signal to this script
# is handled at once (by `interrupted`, which stops QEMU), not after QEMU ends.
# shellcheck disable=SC2086 # accel_args is split on purpose
{
	timeout -k 5 "$timeout_s" "$qemu" $accel_args -smp "$cpus" -m "$mem" \
		-nographic -nodefaults $noreboot -serial stdio -monitor none \
		-pidfile "$pidfile" -kernel "$kernel" -initrd "$initrd" \
		-append "$append" "$@" </dev/null 2>&1
	{ echo $? > "$tmp/qemu.rc"; } 2>/dev/null
} | sed -u 's/\r$//; s/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g' | tee "$log" &
wait $!
qrc=$(cat "$tmp/qemu.rc" 2>/dev/null || echo 99)
took=$(($(date +%s) - start))

rc=$(sed -n 's/.*VSX-GUEST-EXIT=\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	echo "$vsx_prog: TIMEOUT: the guest did not finish within ${timeout_s}s; QEMU killed"
	exit 99
fi
if [ -z "$rc" ]; then
	echo "$vsx_prog: ERROR: QEMU exited ($qrc) after ${took}s" \
		"without a VSX-GUEST-EXIT line" \
		"(boot failure or guest crash; see the console above)"
	exit 99
fi
if grep -Eq 'VSX-GUEST-KERNEL: .*(BUG:|Oops|general protection|Kernel panic)' "$log"; then
	echo "$vsx_prog: the guest kernel reported a BUG/Oops (VSX-GUEST-KERNEL lines above)"
	[ "$rc" != 0 ] || rc=1
fi
echo "$vsx_prog: guest exited with status $rc after ${took}s"
exit "$rc"
