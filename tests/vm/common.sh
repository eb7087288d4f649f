# Shared by the tests/vm scripts (sourced, POSIX sh): which kernel the guest
# boots and where its modules are.
#
#   VSX_GUEST_KERNEL  the series the lab boots: 6.1 (default) or 6.12, Debian
#                 12's two kernels. 6.1 is the one in /boot (linux-image-amd64);
#                 6.12 (security suite) is unpacked by scripts/install-deps
#                 under $VSX_LAB_KERNELS (default /opt/vsx-lab/kernels), not
#                 installed: it is a guest kernel only.
#   VSX_KERNEL    the kernel image (default: the newest of that series in
#                 /boot or under $VSX_LAB_KERNELS)
#   VSX_MODULES   its module tree (default: lib/modules/VERSION beside the
#                 image's boot/, VERSION taken from the name vmlinuz-VERSION)
#
# A test run on a kernel other than the default keeps its files apart:
# vsx_out prints the directory for them.

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
	series=${VSX_GUEST_KERNEL:-6.1}
	case $series in
	6.1|6.12) ;;
	*) vsx_die "VSX_GUEST_KERNEL=$series: 6.1 or 6.12" ;;
	esac
	# "6.1.*" does not match 6.12.N: the dot after the series is literal
	k=$(for f in /boot/vmlinuz-"$series".* \
		"${VSX_LAB_KERNELS:-/opt/vsx-lab/kernels}"/*/boot/vmlinuz-"$series".*; do
		[ -f "$f" ] && echo "${f##*/vmlinuz-} $f"
	done | sort -V | tail -n 1 | cut -d' ' -f2)
	[ -n "$k" ] || vsx_die "no $series guest kernel in /boot or ${VSX_LAB_KERNELS:-/opt/vsx-lab/kernels} (scripts/install-deps fetches it; or set VSX_KERNEL)"
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
	echo "${k%/boot/vmlinuz-*}/lib/modules/${k##*/vmlinuz-}"
}

# Where a test keeps its images, consoles and logs: tests/vm of the build
# tree for the default kernel, tests/vm/k<SERIES> for another one (so that
# both can run at once under make -j).
vsx_out()
{
	case ${VSX_GUEST_KERNEL:-6.1} in
	6.1) echo "$top_builddir/tests/vm" ;;
	*) mkdir -p "$top_builddir/tests/vm/k$VSX_GUEST_KERNEL" &&
		echo "$top_builddir/tests/vm/k$VSX_GUEST_KERNEL" ;;
	esac
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
	if ! k=$(vsx_kernel 2>&1); then
		# CI installs every kernel (scripts/install-deps): not a skip there
		[ -n "${CI:-}" ] && { echo "$vsx_prog: $k"; exit 99; }
		echo "$vsx_prog: SKIP: $k"
		exit 77
	fi
	if [ ! -r "$k" ]; then
		echo "$vsx_prog: SKIP: cannot read the guest kernel $k (set VSX_KERNEL)"
		exit 77
	fi
	echo "$vsx_prog: guest kernel ${k##*/vmlinuz-} ($k)"
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
