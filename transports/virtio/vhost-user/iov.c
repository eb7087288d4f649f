/*
 * iovec arithmetic (iov.h): sizes, copies at an offset, sub-ranges. Over
 * any iovec array; nothing here knows of rings or guest memory.
 */
#include <stdbool.h>
#include <string.h>

#include "iov.h"

size_t vsxu_iov_size(const struct iovec *iov, unsigned n)
{
	size_t s = 0;

	for (unsigned i = 0; i < n; i++)
		s += iov[i].iov_len;
	return s;
}

/* Copy between @buf and the bytes of @iov from @off on: into the iovecs
 * when @into_iov, out of them otherwise. Returns the bytes copied. */
static size_t iov_copy(const struct iovec *iov, unsigned n, size_t off,
		       char *buf, size_t len, bool into_iov)
{
	size_t done = 0;

	for (unsigned i = 0; i < n && done < len; i++) {
		size_t l = iov[i].iov_len, c;
		char *p;

		if (off >= l) {
			off -= l;
			continue;
		}
		p = (char *)iov[i].iov_base + off;
		c = l - off;
		if (c > len - done)
			c = len - done;
		if (into_iov)
			memcpy(p, buf + done, c);
		else
			memcpy(buf + done, p, c);
		done += c;
		off = 0;
	}
	return done;
}

size_t vsxu_iov_to_buf(const struct iovec *iov, unsigned n, size_t off,
		      void *buf, size_t len)
{
	return iov_copy(iov, n, off, buf, len, false);
}

size_t vsxu_iov_from_buf(const struct iovec *iov, unsigned n, size_t off,
			const void *buf, size_t len)
{
	/* @buf is only read: iov_copy writes into the iovecs */
	return iov_copy(iov, n, off, (char *)buf, len, true);
}

unsigned vsxu_iov_slice(struct iovec *dst, unsigned max, const struct iovec *src,
		       unsigned n, size_t off, size_t len)
{
	unsigned k = 0;

	for (unsigned i = 0; i < n && len && k < max; i++) {
		size_t l = src[i].iov_len, c;

		if (off >= l) {
			off -= l;
			continue;
		}
		c = l - off;
		if (c > len)
			c = len;
		dst[k].iov_base = (char *)src[i].iov_base + off;
		dst[k].iov_len = c;
		k++;
		len -= c;
		off = 0;
	}
	return k;
}
