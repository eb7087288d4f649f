# What the vsx package's tests share (tests/python.test runs them): the
# guards that keep them off this machine's vsock, the summary line
# scripts/summarize counts, and a real vsxd with fake_guest (the helpers
# of tests/daemon/vsxdtest.py, reused as they are).
import errno
import os
import subprocess
import sys
import tempfile

import pytest

SRCDIR = os.environ.get("VSX_TEST_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRCDIR, "tests", "daemon"))
import vsxdtest  # noqa: E402

# The host's vsock belongs to the infrastructure, never to a test: probe()
# reads an empty tree unless a test makes its own, and a vsock: or hvsock:
# address given to connect or listen fails the test before libvsx sees it.
os.environ["VSX_SYSROOT"] = tempfile.mkdtemp(prefix="vsx-py-sysroot.")
import vsx  # noqa: E402
import vsx._vsx  # noqa: E402


def _hosted(fn):
    def guarded(address, *args, **kw):
        if isinstance(address, str) and address.startswith(("vsock:", "hvsock:")):
            raise AssertionError("a host test used %r: vsock addresses only in guests" % address)
        return fn(address, *args, **kw)
    guarded.__doc__ = fn.__doc__
    return guarded


vsx.connect = vsx._vsx.connect = _hosted(vsx._vsx.connect)
vsx.listen = vsx._vsx.listen = _hosted(vsx._vsx.listen)

pattern = vsxdtest.pattern


def need_auth(tmp_path):
    """Skip unless this libvsx has peer authentication (OpenSSL): without
    it every key option fails with ENOTSUP (vsx_auth(7))."""
    k = tmp_path / "probe.key"
    k.write_bytes(b"k" * 32)
    k.chmod(0o600)
    try:
        vsx.listen("unix:%s:1" % (tmp_path / "probe"), key_file=str(k)).close()
    except OSError as e:
        if e.errno == errno.ENOTSUP:
            pytest.skip("libvsx built without OpenSSL: keys are ENOTSUP")
        raise


def pytest_terminal_summary(terminalreporter):
    """The line scripts/summarize counts, and a SKIP line per case left
    out (build-aux/tee-driver counts those)."""
    st = terminalreporter.stats
    for r in st.get("skipped", []):
        why = r.longrepr[2] if isinstance(r.longrepr, tuple) else str(r.longrepr)
        terminalreporter.write_line("SKIP: %s: %s" % (r.nodeid.split("::")[-1], why))
    passed = len(st.get("passed", []))
    failed = len(st.get("failed", [])) + len(st.get("error", []))
    terminalreporter.write_line("%d passed, %d failed" % (passed, failed))


class Daemon:
    """A vsxd serving VM web (guest-cid 3) on Unix sockets in a temporary
    directory (vsxdtest.Setup's vsxd.conf): .uds its uds-path, .ctl its
    control socket, .vhost the vhost-user socket fake_guest plays QEMU on."""

    def __init__(self):
        try:
            self.t = vsxdtest.Setup("python")
        except SystemExit:
            pytest.skip("no vsxd, fake_guest or vsxctl in this build")
        self.uds, self.ctl, self.vhost = self.t.uds, self.t.ctl, self.t.vhost
        self.log = open(self.t.log_path, "w")
        self.p = subprocess.Popen([self.t.vsxd, "--config", self.t.conf], stdout=self.log,
                                  stderr=self.log)
        if not vsxdtest.wait_for(lambda: vsxdtest.status(self.t.vsxctl, self.ctl).get("pid")):
            self.stop()
            pytest.fail("vsxd did not serve: " + open(self.t.log_path).read())

    def guest(self):
        g = vsxdtest.Guest(self.t.fg, self.vhost)
        assert g.line == "0 ok cid=3", g.line
        return g

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def guest(daemon):
    """A fresh fake guest on the daemon's VM for each test."""
    g = daemon.guest()
    yield g
    g.close()
    g.p.stdin.close()       # vsxdtest.Guest leaves its pipes to the exit
    g.p.stdout.close()
