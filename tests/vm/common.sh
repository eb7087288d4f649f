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

# Print the accelerator the lab guest runs under, kvm or tcg, and say on
# stderr, in one line, which and why.
#   VSX_ACCEL=kvm|tcg  forces it; nothing is probed
#   VSX_KVM_DEV        the KVM device to look at (default /dev/kvm; tests
#                      point it elsewhere)
#   VSX_ACCEL_CACHE    a file that keeps the decision for this QEMU, device
#                      and boot of the host (make check and scripts/test set
#                      it: one probe per run)
# A /dev/kvm that opens is not enough: under a nested hypervisor QEMU may
# abort setting up the vCPU ("error: failed to set MSR 0x10a ...", an
# assertion in kvm_buf_set_msrs). So KVM is chosen only when it really runs
# a guest: the guest kernel, booted with the lab's machine arguments (-cpu
# host, 2 CPUs, 512 MiB of shared memfd memory) and no root file system,
# must reach its "Kernel panic" and QEMU must end cleanly, within 10 s
# (about 1 s where KVM works). Anything else is TCG.
vsx_accel()
{
	case ${VSX_ACCEL:-} in
	kvm | tcg)
		echo "$vsx_prog: accelerator $VSX_ACCEL (set by VSX_ACCEL)" >&2
		echo "$VSX_ACCEL"
		return 0 ;;
	'') ;;
	*) vsx_die "VSX_ACCEL=$VSX_ACCEL: want kvm or tcg" ;;
	esac
	_q=${VSX_QEMU:-qemu-system-x86_64}
	_dev=${VSX_KVM_DEV:-/dev/kvm}
	_key="$(command -v "$_q") $_dev $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
	_cache=${VSX_ACCEL_CACHE:-}
	if [ -n "$_cache" ] && [ -r "$_cache" ] && [ "$(sed -n 1p "$_cache")" = "$_key" ]; then
		_accel=$(sed -n 2p "$_cache")
		_why="$(sed -n 3p "$_cache") (probed once, kept in $_cache)"
	else
		vsx_probe_kvm "$_q" "$_dev"
		if [ -n "$_cache" ]; then
			printf '%s\n%s\n%s\n' "$_key" "$_accel" "$_why" >"$_cache.$$" &&
				mv -f "$_cache.$$" "$_cache"
		fi
	fi
	echo "$vsx_prog: accelerator $_accel: $_why" >&2
	echo "$_accel"
}

# vsx_probe_kvm QEMU DEVICE: set _accel and _why (see vsx_accel).
vsx_probe_kvm()
{
	if [ ! -e "$2" ]; then
		_accel=tcg _why="no $2"
		return
	fi
	if ! (: <>"$2") 2>/dev/null; then
		_accel=tcg _why="$2 does not open read-write"
		return
	fi
	if ! _k=$(vsx_kernel 2>/dev/null) || [ ! -r "$_k" ]; then
		_accel=tcg _why="$2 opens, but there is no guest kernel to probe KVM with"
		return
	fi
	_rc=0
	_out=$(timeout -k 2 10 "$1" -accel kvm -cpu host -smp 2 -m 512M \
		-object memory-backend-memfd,id=mem,size=512M,share=on \
		-machine memory-backend=mem -nographic -nodefaults -no-reboot \
		-serial stdio -monitor none -kernel "$_k" \
		-append "console=ttyS0 panic=-1 loglevel=1" </dev/null 2>&1) || _rc=$?
	if [ "$_rc" -eq 0 ] && printf '%s\n' "$_out" | grep -q 'Kernel panic'; then
		_accel=kvm _why="KVM ran a probe guest"
		return
	fi
	_err=$(printf '%s\n' "$_out" | tr -d '\r' | grep -v '^ *$' |
		grep -m 1 -iE 'error|assert|fail|abort' || :)
	case $_rc in
	124 | 137) _how="did not finish within 10 s" ;;
	134) _how="aborted" ;;
	*) _how="exited $_rc" ;;
	esac
	_accel=tcg
	_why="$2 opens but KVM cannot run a guest here: the probe QEMU $_how${_err:+ ($_err)}"
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

# TAP-style checks for the test scripts: vsx_check DESCRIPTION 'SHELL CODE'
# evaluates the code and counts it; vsx_summary prints "N passed, M failed"
# and returns 0 only when nothing failed.
vsx_pass=0 vsx_fail=0
vsx_result()
{
	if [ "$1" = 0 ]; then
		vsx_pass=$((vsx_pass + 1))
		echo "ok $((vsx_pass + vsx_fail)) - $2"
	else
		vsx_fail=$((vsx_fail + 1))
		echo "not ok $((vsx_pass + vsx_fail)) - $2"
	fi
}
vsx_check()
{
	_what=$1
	shift
	if eval "$*"; then vsx_result 0 "$_what"; else vsx_result 1 "$_what"; fi
}
vsx_summary()
{
	echo "$vsx_pass passed, $vsx_fail failed"
	[ "$vsx_fail" = 0 ]
}
# vsx_skip DESCRIPTION: a check this run leaves out, and why. Counted as a
# skip, not a pass (build-aux/tee-driver, scripts/summarize).
vsx_skip()
{
	echo "SKIP: $1"
}
