# Sourced by the tests that run the vsx Python package of the build tree
# (tests/python.test, tests/vm/python-guest.test): vsx_python_env DIR lays
# the package out in DIR/vsx as pip would (python/vsx/'s files and the
# module make built) and exports what imports it from there, over the
# build's libvsx.so. Needs srcdir (or top_srcdir) and top_builddir;
# PYTHON is the interpreter configure found. Returns 1 (a message
# printed) when the module was not built.
#
# vsx_python_sanitizers: what an interpreter needs to load this build's
# libvsx when the build has ASan (SAN_CFLAGS, from make check): the
# runtime preloaded, since python3 is not linked with it, and leak checks
# off (CPython's arenas are not leaks). tests/python-sdist.test calls it
# alone: its module is pip's build, over the same libvsx.
vsx_python_sanitizers()
{
	case ${SAN_CFLAGS:-} in
	*address*)
		LD_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so)
		case $SAN_CFLAGS in
		*undefined*) LD_PRELOAD="$LD_PRELOAD $(${CC:-cc} -print-file-name=libubsan.so)" ;;
		esac
		export LD_PRELOAD
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 && export ASAN_OPTIONS ;;
	esac
}

vsx_python_env()
{
	_src=${top_srcdir:-${srcdir:-.}}
	_so=$top_builddir/python/vsx/.libs/_vsx.so
	[ -f "$_so" ] || { echo "$_so not built (configure found no python3-dev?)"; return 1; }
	mkdir -p "$1/vsx" &&
		cp "$_src"/python/vsx/*.py "$_src"/python/vsx/*.pyi "$_src"/python/vsx/py.typed \
			"$_so" "$1/vsx/" || return 1
	PYTHON=${PYTHON:-python3}
	PYTHONPATH=$1 PYTHONDONTWRITEBYTECODE=1
	LD_LIBRARY_PATH=$top_builddir/libvsx/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export PYTHON PYTHONPATH PYTHONDONTWRITEBYTECODE LD_LIBRARY_PATH
	vsx_python_sanitizers
}
