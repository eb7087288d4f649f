"""vsx: one socket API for every vsock an agent meets, over libvsx.

Kernel AF_VSOCK (virtio-vsock guests, vhost-vsock hosts, loopback), Hyper-V
hv_sock, hybrid vsock over Unix sockets (Firecracker, Cloud Hypervisor,
vhost-device-vsock, vsxd) and vm:NAME:PORT names served by vsxd, behind
one socket-like type, with one buffer knob and libvsx's errors.

    import vsx
    with vsx.connect("unix:/run/vm3.vsock:5000", timeout=5) as s:
        s.sendall(b"hello")
        print(s.recv(4096), s.info().transport)

Addresses are text, as libvsx parses them (vsx.parse_address):
vsock:CID:PORT (CID a number, host, local or any), hvsock:SERVICE-GUID,
unix:PATH:PORT, vm:NAME:PORT. Errors are vsx.Error, an OSError whose errno
is libvsx's and whose strerror says what went wrong; the errno values with
a builtin subclass raise vsx's subclass of both (vsx.ConnectionRefusedError
is a vsx.Error and a ConnectionRefusedError). vsx.asyncio has asyncio's
streams over the same addresses. The manual is vsx-python(7).
"""
from ._vsx import (  # noqa: F401  (the C half: see _vsx.c)
    AUTH_KEY_MAX, AUTH_KEY_MIN, CID_ANY, CID_HOST, CID_LOCAL, CONTROL_PATH,
    HAVE_AF_VSOCK, HAVE_LOOPBACK, HAVE_VHOST_HOST, HAVE_VIRTIO_GUEST, HAVE_VMBUS,
    HV_SERVICE_TEMPLATE, INFO_AUTH, INFO_CREDIT, PORT_ANY, RX, SHUT_RD, SHUT_RDWR,
    SHUT_WR, TX,
    BlockingIOError, BrokenPipeError, ConnectionAbortedError, ConnectionRefusedError,
    ConnectionResetError, Error, FileNotFoundError, InterruptedError, PermissionError,
    TimeoutError,
    Info, Probe, Socket,
    adopt, connect, format_address, guid_from_port, guid_to_port, listen,
    parse_address, probe, strerror, version,
)

__version__ = version()

# What `from vsx import *` gives: not the error classes, whose names are
# the builtins' (vsx.TimeoutError is a TimeoutError, not the other way).
__all__ = [
    "Error", "Info", "Probe", "Socket", "adopt", "connect", "format_address",
    "guid_from_port", "guid_to_port", "listen", "parse_address", "probe",
    "strerror", "version", "RX", "TX", "SHUT_RD", "SHUT_WR", "SHUT_RDWR",
    "INFO_CREDIT", "INFO_AUTH", "CID_ANY", "CID_HOST", "CID_LOCAL", "PORT_ANY",
]
