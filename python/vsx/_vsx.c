/*
 * vsx._vsx: the CPython extension over libvsx (<vsx/vsx.h>, the installed
 * library's public API and nothing else), which python/vsx/__init__.py
 * re-exports. vsx-python(7) is its manual.
 *
 * Blocking. Every libvsx socket this module holds is non-blocking
 * (VSX_O_NONBLOCK); the socket module's three modes are made here, as
 * CPython's socketmodule.c makes them: a call is tried, and when it would
 * block and the socket's timeout allows, the thread waits in poll() for
 * the descriptor, with the GIL released, then tries again, until the
 * timeout (measured over the whole call, as sendall's is) runs out.
 *
 * Threads. libvsx allows one thread at a time per socket, and Python code
 * may share a socket between threads (one reading, one writing). So each
 * Socket has a lock held around every libvsx call on it, and that lock is
 * never held while waiting for the descriptor: a reader waiting for bytes
 * does not keep a writer out. libvsx calls are made with the GIL released
 * (the lock is taken after the GIL is let go, so neither waits for the
 * other while holding one), because some of them take time even on a
 * non-blocking socket: vsx_close's linger, vsx_info's and vsx_set_buffer's
 * round trip to vsxd, the key handshake of vsx_accept. close() detaches
 * the vsx_sock under the GIL, then takes the lock, so that it frees the
 * socket only after a call another thread is in has returned; a call finds
 * the pointer again under the lock, and a closed socket raises EBADF.
 *
 * Errors. libvsx returns a negative errno and keeps, per thread, the
 * detail of the last failure (vsx_strerror). The detail is copied on the
 * thread that failed, right after the call and before the lock is let go,
 * and raised as vsx.Error (an OSError) or the subclass for that errno,
 * which also derives from the builtin one (vsx.ConnectionRefusedError is
 * a ConnectionRefusedError): e.errno is libvsx's errno, e.strerror its
 * message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <structmember.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <vsx/vsx.h>

PyMODINIT_FUNC PyInit__vsx(void);

#define MSG_MAX 384 /* vsx_strerror's longest text, NUL included */

/* ---- Errors ------------------------------------------------------------- */

static PyObject *vsx_error; /* vsx.Error */

/* The errno values with a builtin OSError subclass, and ours for them. */
static struct errclass {
	int err;
	const char *name;
	PyObject **builtin;
	PyObject *cls;
} errclasses[] = {
	{ ECONNREFUSED, "ConnectionRefusedError", &PyExc_ConnectionRefusedError, NULL },
	{ ECONNRESET, "ConnectionResetError", &PyExc_ConnectionResetError, NULL },
	{ ECONNABORTED, "ConnectionAbortedError", &PyExc_ConnectionAbortedError, NULL },
	{ EPIPE, "BrokenPipeError", &PyExc_BrokenPipeError, NULL },
	{ ETIMEDOUT, "TimeoutError", &PyExc_TimeoutError, NULL },
	{ EAGAIN, "BlockingIOError", &PyExc_BlockingIOError, NULL },
	{ ENOENT, "FileNotFoundError", &PyExc_FileNotFoundError, NULL },
	{ EACCES, "PermissionError", &PyExc_PermissionError, NULL },
	{ EINTR, "InterruptedError", &PyExc_InterruptedError, NULL },
};

/* Raise @err (a positive or negative errno) with message @msg: the class
 * for that errno, else vsx.Error. Returns NULL, for `return raise(...)`. */
static PyObject *raise_err(int err, const char *msg)
{
	PyObject *cls = vsx_error, *exc;
	size_t i;

	if (err < 0)
		err = -err;
	for (i = 0; i < sizeof(errclasses) / sizeof(errclasses[0]); i++)
		if (errclasses[i].err == err)
			cls = errclasses[i].cls;
	exc = PyObject_CallFunction(cls, "is", err, msg);
	if (exc) {
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* The message of a failure @r of the libvsx call this thread just made. */
static void note(char msg[MSG_MAX], long r)
{
	if (r < 0)
		snprintf(msg, MSG_MAX, "%s", vsx_strerror((int)r));
}

static PyObject *raise_closed(void)
{
	return raise_err(EBADF, "the socket is closed");
}

static PyObject *raise_timeout(void)
{
	return raise_err(ETIMEDOUT, "timed out");
}

/* An int argument, or -1 with an exception set (PyLong_AsInt is 3.13's). */
static int int_arg(PyObject *o, int *out)
{
	long v = PyLong_AsLong(o);

	if (v == -1 && PyErr_Occurred())
		return -1;
	if (v < INT_MIN || v > INT_MAX) {
		PyErr_SetString(PyExc_OverflowError, "value out of range");
		return -1;
	}
	*out = (int)v;
	return 0;
}

/* ---- Time --------------------------------------------------------------- */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * A timeout argument as the socket module takes it: None (-1: block), or
 * a number of seconds >= 0. Returns 0, or -1 with an exception set.
 */
static int timeout_arg(PyObject *o, double *out)
{
	double t;

	if (o == Py_None) {
		*out = -1.0;
		return 0;
	}
	t = PyFloat_AsDouble(o);
	if (t == -1.0 && PyErr_Occurred()) {
		PyErr_SetString(PyExc_TypeError, "timeout must be None or a number of seconds");
		return -1;
	}
	if (isnan(t) || t < 0) {
		PyErr_SetString(PyExc_ValueError, "timeout value out of range");
		return -1;
	}
	*out = t;
	return 0;
}

/* Milliseconds for libvsx: at least 1 (0 means its default there). */
static int seconds_ms(double t)
{
	double ms = ceil(t * 1000.0);

	return ms < 1 ? 1 : ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ---- The Socket type ---------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	vsx_sock *s;            /* NULL once closed */
	PyThread_type_lock lock; /* held around every libvsx call on s */
	double timeout;         /* -1: blocking; 0: non-blocking; > 0: seconds */
	int fd;                 /* vsx_fd(s) while open, for the waits */
	int wake;               /* eventfd close() signals, made by the first
				   wait; -1 until then; closed at dealloc */
} SockObject;

static PyTypeObject Sock_Type;

/* Run @stmt with the GIL released and the socket's lock held, @vs being
 * the socket as it is then (NULL: closed meanwhile; @stmt is skipped). */
#define LOCKED(self, vs, stmt)                                          \
	do {                                                            \
		Py_BEGIN_ALLOW_THREADS                                  \
		PyThread_acquire_lock((self)->lock, WAIT_LOCK);        \
		(vs) = (self)->s;                                       \
		if (vs) {                                               \
			stmt;                                           \
		}                                                       \
		PyThread_release_lock((self)->lock);                    \
		Py_END_ALLOW_THREADS                                    \
	} while (0)

/* A new Socket owning @s, blocking (timeout None), or NULL (and @s
 * closed: it is never leaked). */
static PyObject *sock_wrap(vsx_sock *s)
{
	SockObject *o = PyObject_New(SockObject, &Sock_Type);

	if (!o) {
		Py_BEGIN_ALLOW_THREADS
		vsx_close(s);
		Py_END_ALLOW_THREADS
		return NULL;
	}
	o->s = s;
	o->timeout = -1.0;
	o->fd = vsx_fd(s);
	o->wake = -1;
	o->lock = PyThread_allocate_lock();
	if (!o->lock) {
		o->s = NULL;
		Py_DECREF(o);
		Py_BEGIN_ALLOW_THREADS
		vsx_close(s);
		Py_END_ALLOW_THREADS
		return PyErr_NoMemory();
	}
	return (PyObject *)o;
}

/*
 * Wait until the descriptor has @events or the deadline (now() seconds;
 * < 0: none) passes, with the GIL released: 1 ready (or an error or
 * hang-up the next call will report), 0 timed out, -1 an exception
 * (a signal handler raised).
 */
static int wait_fd(SockObject *self, short events, double deadline)
{
	struct pollfd p[2] = { { .fd = self->fd, .events = events } };
	int r, ms;

	if (self->wake < 0) {
		self->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (self->wake < 0) {
			raise_err(errno, strerror(errno));
			return -1;
		}
	}
	p[1] = (struct pollfd){ .fd = self->wake, .events = POLLIN };
	for (;;) {
		if (!self->s)
			return 1; /* the call that follows raises EBADF */
		ms = -1;
		if (deadline >= 0) {
			double left = deadline - now();

			if (left <= 0)
				return 0;
			ms = seconds_ms(left);
		}
		Py_BEGIN_ALLOW_THREADS
		r = poll(p, 2, ms);
		Py_END_ALLOW_THREADS
		if (r > 0)
			return 1;
		if (r == 0) {
			if (deadline >= 0 && now() >= deadline)
				return 0;
			continue;
		}
		if (errno != EINTR) {
			raise_err(errno, strerror(errno));
			return -1;
		}
		if (PyErr_CheckSignals() < 0)
			return -1;
	}
}

/* The deadline of a call that starts now on @self: -1 when it may block
 * for ever. */
static double deadline_of(const SockObject *self)
{
	return self->timeout > 0 ? now() + self->timeout : -1.0;
}

/*
 * After a call returned -EAGAIN: wait as the timeout says. 1: try again;
 * 0: an exception is set (BlockingIOError on a non-blocking socket,
 * TimeoutError, or what a signal handler raised).
 */
static int again(SockObject *self, short events, double deadline, const char *msg)
{
	int r;

	if (self->timeout == 0) {
		raise_err(EAGAIN, msg);
		return 0;
	}
	r = wait_fd(self, events, deadline);
	if (r == 0)
		raise_timeout();
	return r > 0;
}

static void Sock_dealloc(SockObject *self)
{
	vsx_sock *s = self->s;

	if (s) {
		PyObject *et, *ev, *tb;

		/* The warning must not replace an exception being raised. */
		PyErr_Fetch(&et, &ev, &tb);
		if (PyErr_WarnFormat(PyExc_ResourceWarning, 1, "unclosed vsx socket %R",
				     (PyObject *)self) < 0)
			PyErr_WriteUnraisable((PyObject *)self);
		PyErr_Restore(et, ev, tb);
		self->s = NULL;
		Py_BEGIN_ALLOW_THREADS
		vsx_close(s);
		Py_END_ALLOW_THREADS
	}
	if (self->wake >= 0)
		close(self->wake);
	if (self->lock)
		PyThread_free_lock(self->lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Sock_repr(SockObject *self)
{
	if (!self->s)
		return PyUnicode_FromString("<vsx.Socket [closed]>");
	return PyUnicode_FromFormat("<vsx.Socket fd=%d>", self->fd);
}

PyDoc_STRVAR(send_doc,
"send(data) -> int\n\n"
"Send bytes from a bytes-like object; return how many were sent. libvsx's\n"
"vsx_send(3) sends as much as the transport takes at once, so this is\n"
"all of it or what fitted before the socket would block. Waits as the\n"
"socket's timeout says while nothing can be sent. A peer that went is\n"
"BrokenPipeError (EPIPE), never SIGPIPE.");

static PyObject *Sock_send(SockObject *self, PyObject *arg)
{
	double deadline = deadline_of(self);
	char msg[MSG_MAX] = "";
	Py_buffer b;
	vsx_sock *vs;
	ssize_t r;

	if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
		return NULL;
	for (;;) {
		r = -EBADF;
		LOCKED(self, vs, r = vsx_send(vs, b.buf, (size_t)b.len); note(msg, r));
		if (!vs) {
			PyBuffer_Release(&b);
			return raise_closed();
		}
		if (r != -EAGAIN || b.len == 0)
			break;
		if (!again(self, POLLOUT, deadline, msg)) {
			PyBuffer_Release(&b);
			return NULL;
		}
	}
	PyBuffer_Release(&b);
	if (r < 0)
		return raise_err((int)r, msg);
	return PyLong_FromSsize_t(r);
}

PyDoc_STRVAR(sendall_doc,
"sendall(data) -> None\n\n"
"Send all of data, waiting whenever the socket would block; the timeout,\n"
"when there is one, bounds the whole call. On an error, some of the\n"
"data may have been sent.");

static PyObject *Sock_sendall(SockObject *self, PyObject *arg)
{
	double deadline = deadline_of(self);
	char msg[MSG_MAX] = "";
	Py_ssize_t done = 0;
	Py_buffer b;
	vsx_sock *vs;
	ssize_t r;

	if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
		return NULL;
	while (done < b.len) {
		r = -EBADF;
		LOCKED(self, vs,
		       r = vsx_send(vs, (const char *)b.buf + done, (size_t)(b.len - done));
		       note(msg, r));
		if (!vs) {
			PyBuffer_Release(&b);
			return raise_closed();
		}
		if (r > 0) {
			done += r;
			continue;
		}
		if (r == -EAGAIN && again(self, POLLOUT, deadline, msg))
			continue;
		PyBuffer_Release(&b);
		return r == -EAGAIN ? NULL : raise_err((int)r, msg);
	}
	PyBuffer_Release(&b);
	Py_RETURN_NONE;
}

/* One receive of up to @len bytes into @buf, waiting as the timeout says:
 * the count (0 at the peer's end), or -1 with an exception set. */
static Py_ssize_t recv_some(SockObject *self, void *buf, size_t len)
{
	double deadline = deadline_of(self);
	char msg[MSG_MAX] = "";
	vsx_sock *vs;
	ssize_t r;

	for (;;) {
		r = -EBADF;
		LOCKED(self, vs, r = vsx_recv(vs, buf, len); note(msg, r));
		if (!vs) {
			raise_closed();
			return -1;
		}
		if (r >= 0)
			return r;
		if (r != -EAGAIN) {
			raise_err((int)r, msg);
			return -1;
		}
		if (!again(self, POLLIN, deadline, msg))
			return -1;
	}
}

PyDoc_STRVAR(recv_doc,
"recv(bufsize) -> bytes\n\n"
"Receive up to bufsize bytes (vsx_recv(3)); b'' means the peer shut down\n"
"its sending side. Waits as the socket's timeout says. A peer's reset\n"
"is ConnectionResetError.");

static PyObject *Sock_recv(SockObject *self, PyObject *arg)
{
	Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError), r;
	PyObject *out;

	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "negative buffersize in recv");
		return NULL;
	}
	out = PyBytes_FromStringAndSize(NULL, n);
	if (!out)
		return NULL;
	if (n == 0)
		return out;
	r = recv_some(self, PyBytes_AS_STRING(out), (size_t)n);
	if (r < 0) {
		Py_DECREF(out);
		return NULL;
	}
	if (r != n)
		_PyBytes_Resize(&out, r);
	return out;
}

PyDoc_STRVAR(recv_into_doc,
"recv_into(buffer, nbytes=0) -> int\n\n"
"Receive up to nbytes bytes (0: the buffer's size) into a writable\n"
"bytes-like object; return how many were received (0: the peer's end).");

static PyObject *Sock_recv_into(SockObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "buffer", "nbytes", NULL };
	Py_ssize_t n = 0, r;
	Py_buffer b;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "w*|n:recv_into", kwlist, &b, &n))
		return NULL;
	if (n < 0 || n > b.len) {
		PyBuffer_Release(&b);
		PyErr_SetString(PyExc_ValueError, n < 0 ? "negative buffersize in recv_into"
					      : "buffer too small for requested bytes");
		return NULL;
	}
	if (n == 0)
		n = b.len;
	r = n ? recv_some(self, b.buf, (size_t)n) : 0;
	PyBuffer_Release(&b);
	return r < 0 ? NULL : PyLong_FromSsize_t(r);
}

PyDoc_STRVAR(accept_doc,
"accept() -> (Socket, str)\n\n"
"Accept one connection on a listener (vsx_accept(3)): the new socket,\n"
"blocking, and its peer's address text ('' when the transport does not\n"
"know it). It inherits the listener's options and buffer settings. On a\n"
"listener with a key, the handshake runs here, for at most the connect\n"
"timeout; PermissionError (EACCES) or TimeoutError then mean that this\n"
"one connection failed and was closed: accept again.");

static PyObject *Sock_accept(SockObject *self, PyObject *unused)
{
	double deadline = deadline_of(self);
	char msg[MSG_MAX] = "";
	struct vsx_info info;
	vsx_sock *vs, *ns = NULL;
	PyObject *o;
	int r;

	for (;;) {
		r = -EBADF;
		LOCKED(self, vs, r = vsx_accept(vs, &ns); note(msg, r));
		if (!vs)
			return raise_closed();
		if (r != -EAGAIN)
			break;
		if (!again(self, POLLIN, deadline, msg))
			return NULL;
	}
	if (r < 0)
		return raise_err(r, msg);
	/* A fresh socket no other thread can see yet: no lock to take. */
	Py_BEGIN_ALLOW_THREADS
	r = vsx_info(ns, &info);
	Py_END_ALLOW_THREADS
	if (r < 0)
		info.peer[0] = '\0';
	o = sock_wrap(ns);
	if (!o)
		return NULL;
	return Py_BuildValue("(Ns)", o, info.peer);
}

PyDoc_STRVAR(shutdown_doc,
"shutdown(how) -> None\n\n"
"Shut down receiving (socket.SHUT_RD), sending (socket.SHUT_WR) or both\n"
"(socket.SHUT_RDWR); vsx.SHUT_RD, SHUT_WR and SHUT_RDWR (the bits\n"
"info().shut_local reports) are taken too (vsx_shutdown(3)).");

static PyObject *Sock_shutdown(SockObject *self, PyObject *arg)
{
	char msg[MSG_MAX] = "";
	int how, r = -EBADF;
	vsx_sock *vs;

	if (int_arg(arg, &how) < 0)
		return NULL;
	LOCKED(self, vs, r = vsx_shutdown(vs, how); note(msg, r));
	if (!vs)
		return raise_closed();
	if (r < 0)
		return raise_err(r, msg);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(close_doc,
"close() -> bool\n\n"
"Bounded graceful close (vsx_close(3)): shut down sending, wait for the\n"
"peer's end for at most the linger time (8 s unless connect() or\n"
"listen() said otherwise), discarding what it still sends, then release\n"
"the socket. True when the peer finished in time, False when the\n"
"connection was reset instead. The socket is closed either way; closing\n"
"a closed socket does nothing (and returns True).");

static PyObject *Sock_close(SockObject *self, PyObject *unused)
{
	vsx_sock *s = self->s;
	int r = 0;

	if (!s)
		Py_RETURN_TRUE;
	self->s = NULL;
	self->fd = -1;
	if (self->wake >= 0)
		(void)!write(self->wake, &(uint64_t){ 1 }, sizeof(uint64_t));
	Py_BEGIN_ALLOW_THREADS
	/* Wait for a call another thread is in on s. */
	PyThread_acquire_lock(self->lock, WAIT_LOCK);
	PyThread_release_lock(self->lock);
	r = vsx_close(s);
	Py_END_ALLOW_THREADS
	return PyBool_FromLong(r == 0);
}

static PyObject *Sock_fileno(SockObject *self, PyObject *unused)
{
	return PyLong_FromLong(self->s ? self->fd : -1);
}

PyDoc_STRVAR(fileno_doc,
"fileno() -> int\n\n"
"The socket's descriptor (vsx_fd(3)), for selectors, select and asyncio:\n"
"readable when recv() or accept() has something, writable when send()\n"
"can move bytes. The Socket owns it: do not close it or read from it.\n"
"-1 once closed.");

PyDoc_STRVAR(settimeout_doc,
"settimeout(value) -> None\n\n"
"As socket.settimeout: None blocks, 0.0 makes the socket non-blocking\n"
"(BlockingIOError when a call would block), a positive number of seconds\n"
"bounds each call (TimeoutError, errno ETIMEDOUT, when it runs out).");

static PyObject *Sock_settimeout(SockObject *self, PyObject *arg)
{
	double t;

	if (timeout_arg(arg, &t) < 0)
		return NULL;
	self->timeout = t;
	Py_RETURN_NONE;
}

static PyObject *Sock_gettimeout(SockObject *self, PyObject *unused)
{
	if (self->timeout < 0)
		Py_RETURN_NONE;
	return PyFloat_FromDouble(self->timeout);
}

static PyObject *Sock_setblocking(SockObject *self, PyObject *arg)
{
	int b = PyObject_IsTrue(arg);

	if (b < 0)
		return NULL;
	self->timeout = b ? -1.0 : 0.0;
	Py_RETURN_NONE;
}

static PyObject *Sock_getblocking(SockObject *self, PyObject *unused)
{
	return PyBool_FromLong(self->timeout != 0);
}

PyDoc_STRVAR(set_buffer_doc,
"set_buffer(which, nbytes) -> None\n\n"
"The unified buffer knob (vsx_set_buffer(3)): which is vsx.RX, vsx.TX or\n"
"both. On kernel virtio-vsock RX is the credit advertised to the peer\n"
"(SO_VM_SOCKETS_BUFFER_SIZE); on Hyper-V the VMBus ring sizes, fixed when\n"
"the connection opens; on hybrid and vm: sockets vsxd is asked to change\n"
"the credit it advertises to the guest for this connection. Errors:\n"
"EINVAL (0 or more than 4294967295 bytes), EOPNOTSUPP (the transport has\n"
"no such buffer: hybrid has no TX), EISCONN (vmbus, connected).");

static PyObject *Sock_set_buffer(SockObject *self, PyObject *args)
{
	char msg[MSG_MAX] = "";
	unsigned long long n;
	int which, r = -EBADF;
	vsx_sock *vs;

	if (!PyArg_ParseTuple(args, "iK:set_buffer", &which, &n))
		return NULL;
	if (n > SIZE_MAX)
		n = SIZE_MAX; /* libvsx refuses it with EINVAL */
	LOCKED(self, vs, r = vsx_set_buffer(vs, which, (size_t)n); note(msg, r));
	if (!vs)
		return raise_closed();
	if (r < 0)
		return raise_err(r, msg);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(get_buffer_doc,
"get_buffer(which) -> int\n\n"
"What is really in force for which (exactly one of vsx.RX and vsx.TX),\n"
"in bytes (vsx_get_buffer(3)). A hybrid socket knows its RX buffer only\n"
"once set through vsxd (ENODATA before).");

static PyObject *Sock_get_buffer(SockObject *self, PyObject *arg)
{
	char msg[MSG_MAX] = "";
	int which, r = -EBADF;
	size_t n = 0;
	vsx_sock *vs;

	if (int_arg(arg, &which) < 0)
		return NULL;
	LOCKED(self, vs, r = vsx_get_buffer(vs, which, &n); note(msg, r));
	if (!vs)
		return raise_closed();
	if (r < 0)
		return raise_err(r, msg);
	return PyLong_FromSize_t(n);
}

/* vsx.Info: struct vsx_info as a named tuple. */
static PyStructSequence_Field info_fields[] = {
	{ "transport", "the transport's name: virtio, vmbus, hybrid, vm" },
	{ "local", "the local address text, or ''" },
	{ "peer", "the peer's address text, or ''" },
	{ "type", "socket.SOCK_STREAM or socket.SOCK_SEQPACKET" },
	{ "state", "none, listening, connecting, connected, closing or closed" },
	{ "shut_local", "vsx.SHUT_RD | vsx.SHUT_WR done by us" },
	{ "bytes_sent", "bytes sent through this socket" },
	{ "bytes_received", "bytes received through this socket" },
	{ "rx_buffer", "as get_buffer(vsx.RX); 0 when unknown" },
	{ "tx_buffer", "as get_buffer(vsx.TX); 0 when unknown" },
	{ "flags", "vsx.INFO_CREDIT | vsx.INFO_AUTH" },
	{ "credit", "True when the credit fields below are known" },
	{ "authenticated", "the peer proved the pre-shared key" },
	{ "buf_alloc", "credit: our buffer (None unless credit)" },
	{ "fwd_cnt", "credit: bytes we consumed" },
	{ "peer_buf_alloc", "credit: the peer's buffer" },
	{ "peer_fwd_cnt", "credit: bytes the peer consumed" },
	{ "tx_free", "credit: what we may still send" },
	{ "rx_free", "credit: what the peer may still send" },
	{ NULL, NULL },
};

static PyStructSequence_Desc info_desc = {
	"vsx.Info",
	"What vsx_info(3) knows of a socket. The credit fields are None unless\n"
	"credit is True: hybrid and vm: connections that a vsxd serves.",
	info_fields,
	19,
};

static PyTypeObject *Info_Type;

static const char *state_name(int state)
{
	static const char *const names[] = {
		[VSX_STATE_NONE] = "none",
		[VSX_STATE_LISTENING] = "listening",
		[VSX_STATE_CONNECTING] = "connecting",
		[VSX_STATE_CONNECTED] = "connected",
		[VSX_STATE_CLOSING] = "closing",
		[VSX_STATE_CLOSED] = "closed",
	};

	return state >= 0 && state < (int)(sizeof(names) / sizeof(names[0])) && names[state]
		       ? names[state] : "unknown";
}

PyDoc_STRVAR(info_doc,
"info() -> vsx.Info\n\n"
"Describe the socket (vsx_info(3)): transport, addresses, state,\n"
"counters, buffers, and the credit state where the transport knows it.\n"
"On hybrid and vm: connections vsxd is asked for the credit, a round trip\n"
"of at most 1 s; a server that is not vsxd leaves credit False.");

static PyObject *Sock_info(SockObject *self, PyObject *unused)
{
	char msg[MSG_MAX] = "";
	struct vsx_info i;
	int r = -EBADF, k = 0, credit;
	vsx_sock *vs;
	PyObject *o;

	LOCKED(self, vs, r = vsx_info(vs, &i); note(msg, r));
	if (!vs)
		return raise_closed();
	if (r < 0)
		return raise_err(r, msg);
	o = PyStructSequence_New(Info_Type);
	if (!o)
		return NULL;
	credit = (i.flags & VSX_INFO_CREDIT) != 0;
#define SET(v) PyStructSequence_SetItem(o, k++, (v))
#define CREDIT(f) SET(credit ? PyLong_FromUnsignedLong(f) : Py_NewRef(Py_None))
	SET(PyUnicode_FromString(i.transport));
	SET(PyUnicode_FromString(i.local));
	SET(PyUnicode_FromString(i.peer));
	SET(PyLong_FromLong(i.type));
	SET(PyUnicode_FromString(state_name(i.state)));
	SET(PyLong_FromUnsignedLong(i.shut_local));
	SET(PyLong_FromUnsignedLongLong(i.bytes_sent));
	SET(PyLong_FromUnsignedLongLong(i.bytes_received));
	SET(PyLong_FromSize_t(i.rx_buffer));
	SET(PyLong_FromSize_t(i.tx_buffer));
	SET(PyLong_FromUnsignedLong(i.flags));
	SET(PyBool_FromLong(credit));
	SET(PyBool_FromLong((i.flags & VSX_INFO_AUTH) != 0));
	CREDIT(i.buf_alloc);
	CREDIT(i.fwd_cnt);
	CREDIT(i.peer_buf_alloc);
	CREDIT(i.peer_fwd_cnt);
	CREDIT(i.tx_free);
	CREDIT(i.rx_free);
#undef CREDIT
#undef SET
	if (PyErr_Occurred()) {
		Py_DECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *Sock_enter(SockObject *self, PyObject *unused)
{
	return Py_NewRef(self);
}

static PyObject *Sock_exit(SockObject *self, PyObject *args)
{
	PyObject *r = Sock_close(self, NULL);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_NONE;
}

static PyObject *Sock_closed(SockObject *self, void *unused)
{
	return PyBool_FromLong(self->s == NULL);
}

static PyObject *Sock_timeout(SockObject *self, void *unused)
{
	return Sock_gettimeout(self, NULL);
}

static PyMethodDef Sock_methods[] = {
	{ "send", (PyCFunction)Sock_send, METH_O, send_doc },
	{ "sendall", (PyCFunction)Sock_sendall, METH_O, sendall_doc },
	{ "recv", (PyCFunction)Sock_recv, METH_O, recv_doc },
	{ "recv_into", (PyCFunction)(void (*)(void))Sock_recv_into,
	  METH_VARARGS | METH_KEYWORDS, recv_into_doc },
	{ "accept", (PyCFunction)Sock_accept, METH_NOARGS, accept_doc },
	{ "shutdown", (PyCFunction)Sock_shutdown, METH_O, shutdown_doc },
	{ "close", (PyCFunction)Sock_close, METH_NOARGS, close_doc },
	{ "fileno", (PyCFunction)Sock_fileno, METH_NOARGS, fileno_doc },
	{ "settimeout", (PyCFunction)Sock_settimeout, METH_O, settimeout_doc },
	{ "gettimeout", (PyCFunction)Sock_gettimeout, METH_NOARGS,
	  "gettimeout() -> float or None\n\nThe timeout settimeout() set: None blocks." },
	{ "setblocking", (PyCFunction)Sock_setblocking, METH_O,
	  "setblocking(flag) -> None\n\nsetblocking(True) is settimeout(None), "
	  "setblocking(False) settimeout(0.0)." },
	{ "getblocking", (PyCFunction)Sock_getblocking, METH_NOARGS,
	  "getblocking() -> bool\n\nFalse when the timeout is 0.0." },
	{ "set_buffer", (PyCFunction)Sock_set_buffer, METH_VARARGS, set_buffer_doc },
	{ "get_buffer", (PyCFunction)Sock_get_buffer, METH_O, get_buffer_doc },
	{ "info", (PyCFunction)Sock_info, METH_NOARGS, info_doc },
	{ "__enter__", (PyCFunction)Sock_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Sock_exit, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Sock_getset[] = {
	{ "closed", (getter)Sock_closed, NULL, "True once close() ran", NULL },
	{ "timeout", (getter)Sock_timeout, NULL, "as gettimeout()", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject Sock_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "vsx.Socket",
	.tp_basicsize = sizeof(SockObject),
	.tp_dealloc = (destructor)Sock_dealloc,
	.tp_repr = (reprfunc)Sock_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A libvsx stream socket, made by vsx.connect(), vsx.listen(), accept()\n"
		  "or vsx.adopt(); socket-like. Not constructible directly.",
	.tp_methods = Sock_methods,
	.tp_getset = Sock_getset,
};

/* ---- Module functions --------------------------------------------------- */

/* A buffer size option @what: None (0, the transport's default) or 1 to
 * 4294967295 bytes, as struct vsx_opts takes them (else EINVAL). */
static int size_opt(PyObject *v, const char *what, size_t *out)
{
	unsigned long long n;
	char msg[64];

	if (v == Py_None)
		return 0;
	n = PyLong_AsUnsignedLongLong(v);
	if (n == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	if (n == 0 || n > UINT32_MAX) {
		snprintf(msg, sizeof(msg), "%s: 1 to 4294967295 bytes", what);
		raise_err(EINVAL, msg);
		return -1;
	}
	*out = (size_t)n;
	return 0;
}

/*
 * The keyword options connect() and listen() share, into *@o: @timeout
 * in seconds (< 0: libvsx's default); @transport and @control are kept
 * alive by the caller's arguments, the key file's name by *@key_bytes,
 * which the caller releases.
 */
static int opts_from(struct vsx_opts *o, double timeout, PyObject *linger,
		     PyObject *buffer, PyObject *tx_buffer, int seqpacket,
		     const char *transport, const char *control, PyObject *key_file,
		     PyObject **key_bytes)
{
	double t;

	memset(o, 0, sizeof(*o));
	o->flags = VSX_O_NONBLOCK | (seqpacket ? VSX_O_SEQPACKET : 0);
	if (timeout >= 0)
		o->connect_timeout_ms = seconds_ms(timeout);
	if (linger != Py_None) {
		t = PyFloat_AsDouble(linger);
		if (t == -1.0 && PyErr_Occurred())
			return -1;
		if (isnan(t)) {
			PyErr_SetString(PyExc_ValueError, "linger must be a number of seconds");
			return -1;
		}
		/* 0 would be libvsx's default: a linger of 0 is "do not wait". */
		o->linger_ms = t <= 0 ? -1 : seconds_ms(t);
	}
	if (size_opt(buffer, "buffer", &o->rx_buffer) < 0 ||
	    size_opt(tx_buffer, "tx_buffer", &o->tx_buffer) < 0)
		return -1;
	o->transport = transport;
	o->control_path = control;
	if (key_file != Py_None) {
		if (!PyUnicode_FSConverter(key_file, key_bytes))
			return -1;
		o->auth_key_file = PyBytes_AS_STRING(*key_bytes);
	}
	return 0;
}

/* An address argument: a str without NUL (TypeError, ValueError). */
static const char *addr_arg(PyObject *addr)
{
	const char *text;
	Py_ssize_t n;

	if (!PyUnicode_Check(addr)) {
		PyErr_Format(PyExc_TypeError, "address must be a str such as 'unix:PATH:PORT', "
			     "not %.100s", Py_TYPE(addr)->tp_name);
		return NULL;
	}
	text = PyUnicode_AsUTF8AndSize(addr, &n);
	if (text && strlen(text) != (size_t)n) {
		PyErr_SetString(PyExc_ValueError, "address contains a NUL character");
		return NULL;
	}
	return text;
}

typedef int (*open_fn)(const char *, const struct vsx_opts *, vsx_sock **);

static PyObject *open_sock(open_fn fn, const char *fname, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "address", "timeout", "buffer", "tx_buffer", "key_file",
				  "linger", "backlog", "seqpacket", "transport", "control",
				  NULL };
	PyObject *addr, *timeout = Py_None, *buffer = Py_None, *tx = Py_None;
	PyObject *key_file = Py_None, *linger = Py_None, *key_bytes = NULL;
	const char *text, *transport = NULL, *control = NULL;
	char msg[MSG_MAX] = "", fmt[64];
	struct vsx_opts o;
	int backlog = 0, seqpacket = 0, r;
	double t = -1.0;
	vsx_sock *s = NULL;
	PyObject *out;

	snprintf(fmt, sizeof(fmt), "O|$OOOOOipzz:%s", fname);
	if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &addr, &timeout, &buffer,
					 &tx, &key_file, &linger, &backlog, &seqpacket,
					 &transport, &control))
		return NULL;
	if (!(text = addr_arg(addr)))
		return NULL;
	if (timeout_arg(timeout, &t) < 0)
		return NULL;
	if (opts_from(&o, t, linger, buffer, tx, seqpacket, transport, control,
		      key_file, &key_bytes) < 0) {
		Py_XDECREF(key_bytes);
		return NULL;
	}
	o.backlog = backlog;
	Py_BEGIN_ALLOW_THREADS
	r = fn(text, &o, &s);
	note(msg, r);
	Py_END_ALLOW_THREADS
	Py_XDECREF(key_bytes);
	if (r < 0)
		return raise_err(r, msg);
	out = sock_wrap(s);
	if (out)
		((SockObject *)out)->timeout = t;
	return out;
}

PyDoc_STRVAR(connect_doc,
"connect(address, *, timeout=None, buffer=None, tx_buffer=None,\n"
"        key_file=None, linger=None, seqpacket=False, transport=None,\n"
"        control=None) -> Socket\n\n"
"Connect to address (vsx_connect(3)): 'vsock:CID:PORT' (CID a number,\n"
"host, local or any), 'hvsock:SERVICE-GUID', 'unix:PATH:PORT' (hybrid\n"
"vsock: CONNECT PORT through the Unix socket PATH) or 'vm:NAME:PORT' (a\n"
"VM of the local vsxd). timeout bounds the connect (None: libvsx's 2 s)\n"
"and then becomes the socket's timeout, as socket.create_connection's\n"
"does. buffer (tx_buffer) is the RX (TX) buffer applied before the\n"
"connection is handed out, as set_buffer(). key_file names a pre-shared\n"
"key (vsx_auth(7)): the peer must prove it. linger bounds close() in\n"
"seconds (None: 8 s; 0 or less: close does not wait). transport forces\n"
"a transport by name; control is vsxd's control socket for vm:\n"
"addresses (None: $VSXD_CONTROL, else /run/vsxd/control).\n\n"
"Errors are vsx.Error (OSError) with libvsx's errno: ConnectionRefusedError\n"
"(nobody listens, or the peer refused), TimeoutError, EHOSTUNREACH (vm:\n"
"a name vsxd does not know), ENODEV (no transport on this machine for\n"
"the address), EPROTO, PermissionError, EINVAL (a bad address: its text\n"
"says which part). A non-str address is TypeError.");

static PyObject *vsx_py_connect(PyObject *mod, PyObject *args, PyObject *kw)
{
	return open_sock(vsx_connect, "connect", args, kw);
}

PyDoc_STRVAR(listen_doc,
"listen(address, *, backlog=0, buffer=None, tx_buffer=None,\n"
"       key_file=None, timeout=None, linger=None, seqpacket=False,\n"
"       transport=None) -> Socket\n\n"
"Listen on address (vsx_listen(3)): 'vsock:any:PORT', or 'unix:PATH:PORT',\n"
"which binds PATH_PORT: the hybrid convention for host-side listeners,\n"
"where vsxd connects when a guest connects to host port PORT. backlog 0\n"
"is 128. Accepted sockets inherit buffer, key_file and linger. timeout\n"
"bounds the key handshake of each accept() and is the listener's own\n"
"timeout for accept().");

static PyObject *vsx_py_listen(PyObject *mod, PyObject *args, PyObject *kw)
{
	return open_sock(vsx_listen, "listen", args, kw);
}

PyDoc_STRVAR(adopt_doc,
"adopt(sock_or_fd, *, linger=None) -> Socket\n\n"
"Wrap a connected or listening socket (vsx_adopt(3)): a socket.socket or\n"
"a descriptor, AF_VSOCK (the kernel transport) or AF_UNIX (a hybrid\n"
"stream whose CONNECT handshake is done), so that the buffer knob,\n"
"info() and the bounded close apply to it. On success the new Socket\n"
"owns the descriptor: a socket.socket is detached (it no longer closes\n"
"it). On failure nothing changes. linger <= 0: close() neither shuts\n"
"down nor waits (for a duplicate of a descriptor another process owns).\n"
"Errors: EBADF, ENOTSOCK, EAFNOSUPPORT (another family), ENOTCONN.");

static PyObject *vsx_py_adopt(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "sock", "linger", NULL };
	PyObject *what, *linger = Py_None, *key = NULL, *out, *r;
	char msg[MSG_MAX] = "";
	struct vsx_opts o;
	vsx_sock *s = NULL;
	int fd, rc, fl, is_sock;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$O:adopt", kwlist, &what, &linger))
		return NULL;
	is_sock = !PyLong_Check(what);
	fd = PyObject_AsFileDescriptor(what);
	if (fd < 0)
		return NULL;
	if (opts_from(&o, -1.0, linger, Py_None, Py_None, 0, NULL, NULL, Py_None,
		      &key) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = vsx_adopt(fd, &o, &s);
	note(msg, rc);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return raise_err(rc, msg);
	/* Ours from now on: the waits are poll()'s (see the top). */
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	out = sock_wrap(s);
	if (out && is_sock) {
		r = PyObject_CallMethod(what, "detach", NULL);
		if (!r) {
			/* Both would close it: the descriptor stays the
			 * caller's, and the vsx_sock around it is left
			 * (libvsx has no call that frees one without closing
			 * its descriptor). */
			((SockObject *)out)->s = NULL;
			Py_DECREF(out);
			return NULL;
		}
		Py_DECREF(r);
	}
	return out;
}

/* vsx.Probe */
static PyStructSequence_Field probe_fields[] = {
	{ "have", "vsx.HAVE_* bits" },
	{ "local_cid", "this machine's CID, None when it cannot be known" },
	{ "transport", "what connect() picks for vsock: addresses ('' if none)" },
	{ "virtio_guest", "a virtio-vsock device (virtio id 19)" },
	{ "vhost_host", "/dev/vhost-vsock: a vhost-vsock host" },
	{ "loopback", "the vsock_loopback transport" },
	{ "vmbus", "VMBus: a Hyper-V (or WSL2) guest" },
	{ "af_vsock", "the kernel's vsock core is loaded" },
	{ NULL, NULL },
};

static PyStructSequence_Desc probe_desc = {
	"vsx.Probe", "What vsx_probe(3) found on this machine.", probe_fields, 8,
};

static PyTypeObject *Probe_Type;

PyDoc_STRVAR(probe_doc,
"probe() -> vsx.Probe\n\n"
"Which vsock transports this machine has (vsx_probe(3)): reads sysfs and,\n"
"in a guest with a transport, asks /dev/vsock for the local CID.\n"
"$VSX_SYSROOT, when set, is prefixed to every path read.");

static PyObject *vsx_py_probe(PyObject *mod, PyObject *unused)
{
	char msg[MSG_MAX] = "";
	struct vsx_probe p;
	PyObject *o;
	int r, k = 0;

	Py_BEGIN_ALLOW_THREADS
	r = vsx_probe(&p);
	note(msg, r);
	Py_END_ALLOW_THREADS
	if (r < 0)
		return raise_err(r, msg);
	o = PyStructSequence_New(Probe_Type);
	if (!o)
		return NULL;
#define SET(v) PyStructSequence_SetItem(o, k++, (v))
	SET(PyLong_FromUnsignedLong(p.have));
	SET(p.local_cid == VSX_CID_ANY ? Py_NewRef(Py_None) : PyLong_FromUnsignedLong(p.local_cid));
	SET(PyUnicode_FromString(p.transport));
	SET(PyBool_FromLong(p.have & VSX_HAVE_VIRTIO_GUEST));
	SET(PyBool_FromLong(p.have & VSX_HAVE_VHOST_HOST));
	SET(PyBool_FromLong(p.have & VSX_HAVE_LOOPBACK));
	SET(PyBool_FromLong(p.have & VSX_HAVE_VMBUS));
	SET(PyBool_FromLong(p.have & VSX_HAVE_AF_VSOCK));
#undef SET
	if (PyErr_Occurred()) {
		Py_DECREF(o);
		return NULL;
	}
	return o;
}

PyDoc_STRVAR(parse_doc,
"parse_address(text) -> (kind, cid, port, guid, path)\n\n"
"Parse an address as vsx_addr_parse(3) does, without connecting: kind is\n"
"'vsock', 'hvsock', 'unix' or 'vm'; cid an int (vsock, else None); port\n"
"an int (for hvsock the GUID's first field); guid the service GUID text\n"
"(hvsock, else None); path the Unix path or VM name (else None). EINVAL\n"
"(vsx.Error) for anything else, saying which part is wrong.");

static PyObject *vsx_py_parse(PyObject *mod, PyObject *arg)
{
	char msg[MSG_MAX] = "", guid[VSX_GUID_STRLEN];
	static const char *const kinds[] = { NULL, "vsock", "hvsock", "unix", "vm" };
	struct vsx_addr a;
	const char *text;
	int r;

	if (!(text = addr_arg(arg)))
		return NULL;
	r = vsx_addr_parse(text, &a);
	note(msg, r);
	if (r < 0)
		return raise_err(r, msg);
	if (a.kind < 1 || a.kind > 4)
		return raise_err(EINVAL, "unknown address kind");
	vsx_guid_format(a.guid, 0, guid, sizeof(guid));
	return Py_BuildValue("(sNkNN)", kinds[a.kind],
			     a.kind == VSX_ADDR_VSOCK ? PyLong_FromUnsignedLong(a.cid)
						      : Py_NewRef(Py_None),
			     (unsigned long)a.port,
			     a.kind == VSX_ADDR_HVSOCK ? PyUnicode_FromString(guid)
						       : Py_NewRef(Py_None),
			     a.kind == VSX_ADDR_UNIX || a.kind == VSX_ADDR_VM
				     ? PyUnicode_DecodeFSDefault(a.path) : Py_NewRef(Py_None));
}

PyDoc_STRVAR(format_doc,
"format_address(text) -> str\n\n"
"The canonical text of an address (vsx_addr_format(3)): 'vsock:2:5000'\n"
"for 'vsock:host:5000', a GUID in lower case without braces.");

static PyObject *vsx_py_format(PyObject *mod, PyObject *arg)
{
	char msg[MSG_MAX] = "", out[VSX_ADDR_STRLEN];
	struct vsx_addr a;
	const char *text;
	int r;

	if (!(text = addr_arg(arg)))
		return NULL;
	r = vsx_addr_parse(text, &a);
	if (r >= 0)
		r = vsx_addr_format(&a, out, sizeof(out));
	note(msg, r);
	if (r < 0)
		return raise_err(r, msg);
	return PyUnicode_DecodeFSDefault(out);
}

PyDoc_STRVAR(guid_from_port_doc,
"guid_from_port(port) -> str\n\n"
"The Hyper-V service GUID of vsock port port (vsx_guid_from_port(3)): the\n"
"port in hex in the first field of 00000000-facb-11e6-bd58-64006a7986d3.");

static PyObject *vsx_py_guid_from_port(PyObject *mod, PyObject *arg)
{
	unsigned long port = PyLong_AsUnsignedLong(arg);
	char out[VSX_GUID_STRLEN];
	uint8_t g[16];

	if (port == (unsigned long)-1 && PyErr_Occurred())
		return NULL;
	if (port > UINT32_MAX) {
		PyErr_SetString(PyExc_OverflowError, "a port is 0 to 4294967295");
		return NULL;
	}
	vsx_guid_from_port((uint32_t)port, g);
	vsx_guid_format(g, 0, out, sizeof(out));
	return PyUnicode_FromString(out);
}

PyDoc_STRVAR(guid_to_port_doc,
"guid_to_port(guid) -> int\n\n"
"The vsock port of a service GUID (vsx_guid_to_port(3)); EINVAL when the\n"
"text is no GUID or the GUID is not of the template (it has no port).");

static PyObject *vsx_py_guid_to_port(PyObject *mod, PyObject *arg)
{
	char msg[MSG_MAX] = "";
	const char *text;
	uint32_t port;
	uint8_t g[16];
	int r;

	if (!PyUnicode_Check(arg)) {
		PyErr_SetString(PyExc_TypeError, "a GUID is a str");
		return NULL;
	}
	if (!(text = PyUnicode_AsUTF8(arg)))
		return NULL;
	r = vsx_guid_parse(text, g);
	if (r < 0)
		return raise_err(r, "not a GUID: 8-4-4-4-12 hex digits, braces optional");
	r = vsx_guid_to_port(g, &port);
	note(msg, r);
	if (r < 0)
		return raise_err(r, msg);
	return PyLong_FromUnsignedLong(port);
}

static PyObject *vsx_py_version(PyObject *mod, PyObject *unused)
{
	return PyUnicode_FromString(vsx_version());
}

static PyObject *vsx_py_strerror(PyObject *mod, PyObject *arg)
{
	int e;

	if (int_arg(arg, &e) < 0)
		return NULL;
	return PyUnicode_FromString(vsx_strerror(e));
}

static PyMethodDef vsx_methods[] = {
	{ "connect", (PyCFunction)(void (*)(void))vsx_py_connect, METH_VARARGS | METH_KEYWORDS,
	  connect_doc },
	{ "listen", (PyCFunction)(void (*)(void))vsx_py_listen, METH_VARARGS | METH_KEYWORDS,
	  listen_doc },
	{ "adopt", (PyCFunction)(void (*)(void))vsx_py_adopt, METH_VARARGS | METH_KEYWORDS,
	  adopt_doc },
	{ "probe", vsx_py_probe, METH_NOARGS, probe_doc },
	{ "parse_address", vsx_py_parse, METH_O, parse_doc },
	{ "format_address", vsx_py_format, METH_O, format_doc },
	{ "guid_from_port", vsx_py_guid_from_port, METH_O, guid_from_port_doc },
	{ "guid_to_port", vsx_py_guid_to_port, METH_O, guid_to_port_doc },
	{ "version", vsx_py_version, METH_NOARGS,
	  "version() -> str\n\nlibvsx's release, of the library actually loaded." },
	{ "strerror", vsx_py_strerror, METH_O,
	  "strerror(errno) -> str\n\nvsx_strerror(3) of an errno (either sign)." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef vsx_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "vsx._vsx",
	.m_doc = "The C half of the vsx package: see help(vsx) and vsx-python(7).",
	.m_size = -1,
	.m_methods = vsx_methods,
};

PyMODINIT_FUNC PyInit__vsx(void)
{
	static const struct { const char *name; long v; } consts[] = {
		{ "RX", VSX_RX }, { "TX", VSX_TX },
		{ "SHUT_RD", VSX_SHUT_RD }, { "SHUT_WR", VSX_SHUT_WR },
		{ "SHUT_RDWR", VSX_SHUT_RDWR },
		{ "INFO_CREDIT", VSX_INFO_CREDIT }, { "INFO_AUTH", VSX_INFO_AUTH },
		{ "HAVE_VIRTIO_GUEST", VSX_HAVE_VIRTIO_GUEST },
		{ "HAVE_VHOST_HOST", VSX_HAVE_VHOST_HOST },
		{ "HAVE_LOOPBACK", VSX_HAVE_LOOPBACK }, { "HAVE_VMBUS", VSX_HAVE_VMBUS },
		{ "HAVE_AF_VSOCK", VSX_HAVE_AF_VSOCK },
		{ "CID_LOCAL", VSX_CID_LOCAL }, { "CID_HOST", VSX_CID_HOST },
		{ "CID_ANY", VSX_CID_ANY }, { "PORT_ANY", VSX_PORT_ANY },
		{ "AUTH_KEY_MIN", VSX_AUTH_KEY_MIN }, { "AUTH_KEY_MAX", VSX_AUTH_KEY_MAX },
	};
	PyObject *m, *dict;
	size_t i;

	if (PyType_Ready(&Sock_Type) < 0)
		return NULL;
	m = PyModule_Create(&vsx_module);
	if (!m)
		return NULL;
	Info_Type = PyStructSequence_NewType(&info_desc);
	Probe_Type = PyStructSequence_NewType(&probe_desc);
	if (!Info_Type || !Probe_Type)
		goto fail;
	dict = Py_BuildValue("{ss}", "__module__", "vsx");
	if (!dict)
		goto fail;
	vsx_error = PyErr_NewExceptionWithDoc("vsx.Error",
		"A libvsx failure: errno is libvsx's errno, strerror its message "
		"(vsx_strerror(3): which field of an address, which transport refused "
		"and why).", PyExc_OSError, dict);
	if (!vsx_error)
		goto fail_dict;
	for (i = 0; i < sizeof(errclasses) / sizeof(errclasses[0]); i++) {
		char name[64];
		PyObject *bases = PyTuple_Pack(2, vsx_error, *errclasses[i].builtin);

		if (!bases)
			goto fail_dict;
		snprintf(name, sizeof(name), "vsx.%s", errclasses[i].name);
		errclasses[i].cls = PyErr_NewException(name, bases, dict);
		Py_DECREF(bases);
		if (!errclasses[i].cls ||
		    PyModule_AddObjectRef(m, errclasses[i].name, errclasses[i].cls) < 0)
			goto fail_dict;
	}
	Py_DECREF(dict);
	if (PyModule_AddObjectRef(m, "Error", vsx_error) < 0 ||
	    PyModule_AddObjectRef(m, "Socket", (PyObject *)&Sock_Type) < 0 ||
	    PyModule_AddObjectRef(m, "Info", (PyObject *)Info_Type) < 0 ||
	    PyModule_AddObjectRef(m, "Probe", (PyObject *)Probe_Type) < 0)
		goto fail;
	for (i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
		if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0)
			goto fail;
	if (PyModule_AddStringConstant(m, "CONTROL_PATH", VSX_CONTROL_PATH) < 0 ||
	    PyModule_AddStringConstant(m, "HV_SERVICE_TEMPLATE", VSX_HV_SERVICE_TEMPLATE) < 0)
		goto fail;
	return m;

fail_dict:
	Py_DECREF(dict);
fail:
	Py_DECREF(m);
	return NULL;
}
