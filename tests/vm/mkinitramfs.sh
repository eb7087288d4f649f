#!/bin/sh
# Build the lab guest's initramfs: busybox, an /init, the vsock/virtio kernel
# modules, and the given programs with their shared libraries.
#
#   mkinitramfs.sh -o OUT.cpio.gz [-c CACHEDIR] [-L LIBDIR]... [-f SRC:DEST]...
#                  [-e COMMAND] [-m MODULE]... [-q] [PROGRAM...]
#
#   PROGRAM      an ELF program, copied to /bin in the guest with every shared
#                library ldd finds for it (and the dynamic loader). A libtool
#                wrapper script is replaced by the real binary in its .libs/.
#   -L LIBDIR    search LIBDIR too when resolving libraries (LD_LIBRARY_PATH for
#                ldd); libraries land in the guest's /lib either way
#   -f SRC:DEST  copy a file to DEST (absolute, in the guest)
#   -e COMMAND   what the guest runs after boot (sh syntax, in /tmp); its exit
#                status is reported as VSX-GUEST-EXIT=N. Without -e the guest
#                starts a shell on the console (run-guest.sh -c sets it too).
#   -m MODULE    also load kernel module MODULE (MODULE.ko or .ko.xz from the
#                module tree, or built in) after the base ones, in the order
#                given: list its dependencies first (modinfo -F depends), e.g.
#                -m failover -m net_failover -m virtio_net. Goes into this
#                call's archive, so the cached base is the same without it.
#   -q           do not list the libraries copied
#   -c CACHEDIR  where the busybox+modules part is cached (default: the
#                directory of OUT); rebuilt when this script, busybox or the
#                modules change
#
# The result is two gzip'd newc cpio archives concatenated (the cached base,
# then this call's programs), which the kernel unpacks in order. No root
# needed: /dev/console comes from the kernel's built-in initramfs.
set -eu
vsx_prog=mkinitramfs.sh
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

BUSYBOX=${BUSYBOX:-/bin/busybox}
# Load order matters: no modules.dep in the guest.
MODULES="vsock vsock_diag vmw_vsock_virtio_transport_common vsock_loopback
virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
vmw_vsock_virtio_transport"

out='' cache='' libpath='' files='' cmd='' have_cmd='' quiet='' xmods=''
usage()
{
	sed -n '2,/^set -eu/{/^set -eu/d;s/^# \{0,1\}//;p}' "$0" >&2
	exit 2
}
while getopts o:c:L:f:e:m:qh opt; do
	case $opt in
	o) out=$OPTARG ;;
	c) cache=$OPTARG ;;
	L) libpath=${libpath:+$libpath:}$(cd "$OPTARG" && pwd) ;;
	f) files="$files
$OPTARG" ;;
	e) cmd=$OPTARG; have_cmd=1 ;;
	m) xmods="$xmods $OPTARG" ;;
	q) quiet=1 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ -n "$out" ] || usage
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
[ -n "$cache" ] || cache=$(dirname "$out")
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/vsx-initramfs.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

cpio_gz()
{
	# $1: staging dir, $2: output file
	(cd "$1" && find . -mindepth 1 | LC_ALL=C sort |
		cpio --quiet -o -H newc -R 0:0) | gzip -1 > "$2"
}

# Copy module $1 of the guest kernel into directory $2 as $1.ko: a plain .ko,
# or a compressed one (.ko.xz on 6.12, .ko.zst, .ko.gz) decompressed, since
# busybox insmod takes only plain modules. 1: no such module file (it may
# be built in: modules.builtin says).
copy_module()
{
	f=$(find "$moddir/kernel" \( -name "$1.ko" -o -name "$1.ko.xz" -o -name "$1.ko.zst" \
		-o -name "$1.ko.gz" \) | head -n 1)
	case $f in
	'') return 1 ;;
	*.ko) cp "$f" "$2/$1.ko" ;;
	*.xz) xz -dc "$f" > "$2/$1.ko" || vsx_die "$f: cannot decompress (apt-get install xz-utils)" ;;
	*.zst) zstd -qdc "$f" > "$2/$1.ko" || vsx_die "$f: cannot decompress (apt-get install zstd)" ;;
	*.gz) gzip -dc "$f" > "$2/$1.ko" || vsx_die "$f: cannot decompress" ;;
	esac
}

# ---- The cached base: busybox, /init, modules ---------------------------------

write_init()
{
	cat > "$1" <<'EOF'
#!/bin/sh
# vsx lab guest /init (written by tests/vm/mkinitramfs.sh)
export PATH=/bin LD_LIBRARY_PATH=/lib:/usr/local/lib HOME=/tmp TERM=dumb VSX_LAB_GUEST=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm
exec </dev/console >/dev/console 2>&1
for m in $(cat /etc/vsx-modules); do
	[ -f "/lib/modules/vsx/$m.ko" ] || continue    # built into the kernel
	insmod "/lib/modules/vsx/$m.ko" || echo "vsx-init: insmod $m failed"
done
echo "vsx-init: up after $(cut -d' ' -f1 /proc/uptime) s, kernel $(uname -r)"
if [ -f /etc/vsx-run ]; then
	(cd /tmp && exec sh /etc/vsx-run)
	rc=$?
else
	echo "vsx-init: no command (/etc/vsx-run); starting a shell"
	setsid cttyhack sh
	rc=$?
fi
# Oopses and warnings are not printed at loglevel 3: show them here.
dmesg | grep -E -e 'BUG:|Oops|WARNING:|general protection|Call Trace|Kernel panic' \
	-e 'UBSAN|KASAN|refcount_t' |
	sed 's/^/VSX-GUEST-KERNEL: /'
stty -F /dev/console onlcr 2>/dev/null  # tcsetattr(TCSADRAIN): let output drain
echo "VSX-GUEST-EXIT=$rc"
stty -F /dev/console onlcr 2>/dev/null
poweroff -f
EOF
	chmod 755 "$1"
}

moddir=$(vsx_modules_dir) || exit 99
[ -d "$moddir/kernel" ] || vsx_die "no kernel modules in $moddir (set VSX_MODULES)"
[ -x "$BUSYBOX" ] || vsx_die "no $BUSYBOX (apt-get install busybox-static)"

# Key: this script, busybox and the module files (name, size, mtime); one
# base per kernel version.
key=$( {
	cat "$0"
	ls -lL --time-style=+%s "$BUSYBOX"
	find "$moddir/kernel" -name '*.ko*' | LC_ALL=C sort | xargs ls -lL --time-style=+%s
} | sha256sum | cut -c1-16)
kver=${moddir##*/}
base=$cache/vsx-base-$kver-$key.cpio.gz

if [ ! -s "$base" ]; then
	b=$work/base
	mkdir -p "$b/bin" "$b/etc" "$b/lib/modules/vsx" "$b/lib64" "$b/proc" "$b/sys" \
		"$b/dev" "$b/tmp" "$b/run" "$b/root" "$b/usr/local/lib"
	cp "$BUSYBOX" "$b/bin/busybox"
	for a in $("$BUSYBOX" --list); do
		[ "$a" = busybox ] || ln -s busybox "$b/bin/$a"
	done
	write_init "$b/init"
	: > "$b/etc/vsx-modules"
	for m in $MODULES; do
		echo "$m" >> "$b/etc/vsx-modules"
		if copy_module "$m" "$b/lib/modules/vsx"; then
			:
		elif grep -qs "/$m.ko\$" "$moddir/modules.builtin"; then
			:   # built in (6.12: the virtio core)
		else
			echo "$vsx_prog: note: no $m.ko in $moddir; assuming it is built in" >&2
		fi
	done
	cpio_gz "$b" "$work/base.cpio.gz"
	mv -f "$work/base.cpio.gz" "$base"   # atomic: parallel builders agree
	# Keep only the newest base of this kernel (others may be in use).
	for old in "$cache/vsx-base-$kver"-*.cpio.gz; do
		[ "$old" = "$base" ] || rm -f "$old"
	done
fi

# ---- This call's programs, libraries and files ----------------------------------

x=$work/extra
mkdir -p "$x/bin" "$x/lib" "$x/etc"

# $1: file, $2: guest path
put()
{
	mkdir -p "$x$(dirname "$2")"
	cp -L "$1" "$x$2"
	chmod u+w "$x$2"
}

real_binary()
{
	if head -c 4 "$1" | grep -q ELF; then
		echo "$1"
		return
	fi
	d=$(dirname "$1") n=$(basename "$1")
	for c in "$d/.libs/$n" "$d/.libs/lt-$n"; do
		if [ -f "$c" ] && head -c 4 "$c" | grep -q ELF; then
			echo "$vsx_prog: $1 is a libtool wrapper; using $c" >&2
			echo "$c"
			return
		fi
	done
	vsx_die "$1: not an ELF program"
}

for p in "$@"; do
	[ -f "$p" ] || vsx_die "$p: no such program"
	bin=$(real_binary "$p")
	put "$bin" "/bin/$(basename "$p")"
	chmod 755 "$x/bin/$(basename "$p")"
	if ! deps=$(LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
			ldd "$bin" 2>&1); then
		case $deps in
		*"not a dynamic executable"*|*"statically linked"*) continue ;;
		*) vsx_die "ldd $bin: $deps" ;;
		esac
	fi
	echo "$deps" | while read -r a b c rest; do
		case "$a $b $c" in
		*"not found"*) vsx_die "$bin: library $a not found (add -L DIR)" ;;
		linux-vdso.so*|linux-gate.so*) ;;
		"/"*) put "$a" "$a" ;;                       # the dynamic loader
		*" => /"*) put "$c" "/lib/$a"
			[ -n "$quiet" ] ||
				echo "$vsx_prog: $(basename "$p"): $a <- $c" >&2 ;;
		esac
	done
done

echo "$files" | while IFS= read -r spec; do
	[ -n "$spec" ] || continue
	src=${spec%%:*} dst=${spec#*:}
	case $dst in /*) ;; *) vsx_die "-f $spec: DEST must be absolute" ;; esac
	put "$src" "$dst"
done

# -m: the modules join the load list (this archive's /etc/vsx-modules
# replaces the base's when the kernel unpacks it).
if [ -n "$xmods" ]; then
	mkdir -p "$x/lib/modules/vsx"
	for m in $MODULES $xmods; do
		echo "$m"
	done > "$x/etc/vsx-modules"
	for m in $xmods; do
		if ! copy_module "$m" "$x/lib/modules/vsx" &&
		   ! grep -qs "/$m.ko\$" "$moddir/modules.builtin"; then
			vsx_die "-m $m: no $m.ko in $moddir, nor built in"
		fi
	done
fi

if [ -n "$have_cmd" ]; then
	printf '# written by mkinitramfs.sh -e\n%s\n' "$cmd" > "$x/etc/vsx-run"
fi

cpio_gz "$x" "$work/extra.cpio.gz"
cat "$base" "$work/extra.cpio.gz" > "$out.tmp"
mv -f "$out.tmp" "$out"
