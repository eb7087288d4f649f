# Shared by the tests/vm scripts (sourced, POSIX sh): which kernel the guest
# boots and where its modules are.
#
#   VSX_KERNEL    the kernel image (default: the 6.1 kernel in /boot, else the
#                 newest /boot/vmlinuz-*)
#   VSX_MODULES   its module tree (default: /lib/modules/VERSION, VERSION taken
#                 from the image name vmlinuz-VERSION)

: "${vsx_prog:=vsx}"

vsx_die()
{
	echo "$vsx_prog: $*" >&2
	exit 99
}

# Print the kernel image path.
vsx_kernel()
{
	if [ -n "${VSX_KERNEL:-}" ]; then
		echo "$VSX_KERNEL"
		return
	fi
	k=$(ls -1 /boot/vmlinuz-6.1.* 2>/dev/null | sort -V | tail -n 1)
	[ -n "$k" ] || k=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
	[ -n "$k" ] || vsx_die "no /boot/vmlinuz-* (set VSX_KERNEL)"
	echo "$k"
}

# Print the module directory matching the kernel image.
vsx_modules_dir()
{
	if [ -n "${VSX_MODULES:-}" ]; then
		echo "$VSX_MODULES"
		return
	fi
	k=$(vsx_kernel) || exit 99
	echo "/lib/modules/${k##*/vmlinuz-}"
}

# For make check: exit 77 (SKIP) with a reason when this machine cannot run
# the lab guest at all (no QEMU, kernel or busybox). Anything else that goes
# wrong later is an error, not a skip.
vsx_lab_or_skip()
{
	q=${VSX_QEMU:-qemu-system-x86_64}
	if ! command -v "$q" >/dev/null 2>&1; then
		echo "$vsx_prog: SKIP: no $q (apt-get install qemu-system-x86)"
		exit 77
	fi
	k=$(vsx_kernel 2>&1) || { echo "$vsx_prog: SKIP: $k"; exit 77; }
	if [ ! -r "$k" ]; then
		echo "$vsx_prog: SKIP: cannot read the guest kernel $k (set VSX_KERNEL)"
		exit 77
	fi
	if [ ! -x "${BUSYBOX:-/bin/busybox}" ]; then
		echo "$vsx_prog: SKIP: no ${BUSYBOX:-/bin/busybox} (apt-get install busybox-static)"
		exit 77
	fi
}

# The trees, from make check's environment (AM_TESTS_ENVIRONMENT).
vsx_need_trees()
{
	if [ -z "${top_srcdir:-}" ] || [ -z "${top_builddir:-}" ]; then
		echo "$vsx_prog: run through make check, or set top_srcdir and top_builddir" >&2
		exit 99
	fi
}
