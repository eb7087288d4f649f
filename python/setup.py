# Builds vsx._vsx against the installed libvsx, found through pkg-config
# (libvsx-dev: <vsx/vsx.h>, libvsx.pc); $PKG_CONFIG_PATH may point at an
# uninstalled tree's. `pip install .` here, or of the sdist, on a machine
# with libvsx-dev; pyproject.toml holds the rest of the metadata.
import shlex
import subprocess

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config"] + list(args) + ["libvsx"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("vsx: pkg-config cannot find libvsx (install libvsx-dev, or set "
                         "PKG_CONFIG_PATH): %s" % e)
    return shlex.split(out)


def version():
    return pkg_config("--modversion")[0]


cflags = pkg_config("--cflags")
libs = pkg_config("--libs")
setup(
    version=version(),
    ext_modules=[Extension(
        "vsx._vsx", ["vsx/_vsx.c"],
        include_dirs=[f[2:] for f in cflags if f.startswith("-I")],
        extra_compile_args=[f for f in cflags if not f.startswith("-I")] +
        ["-std=gnu11", "-fvisibility=hidden"],
        library_dirs=[f[2:] for f in libs if f.startswith("-L")],
        libraries=[f[2:] for f in libs if f.startswith("-l")],
        extra_link_args=[f for f in libs if not f.startswith(("-L", "-l"))],
    )],
)
