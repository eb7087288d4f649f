/*
 * iovec helpers (iov.c): the arithmetic of the iovec arrays that popped
 * chains (vq.h) carry into guest memory and that the backend's peers read
 * and fill. Pure functions of their arguments: no ring, no guest memory
 * table, no state.
 */
#ifndef VSXU_IOV_H
#define VSXU_IOV_H

#include <stddef.h>
#include <sys/uio.h>

/* Total bytes of @iov[0..n). */
size_t vsxu_iov_size(const struct iovec *iov, unsigned n);
/* Copy out of / into an iovec array, skipping @off bytes; returns bytes. */
size_t vsxu_iov_to_buf(const struct iovec *iov, unsigned n, size_t off,
		      void *buf, size_t len);
size_t vsxu_iov_from_buf(const struct iovec *iov, unsigned n, size_t off,
			const void *buf, size_t len);
/* Build in @dst (at most @max entries) the sub-range [off, off+len) of
 * @src; returns the entries used. */
unsigned vsxu_iov_slice(struct iovec *dst, unsigned max, const struct iovec *src,
		       unsigned n, size_t off, size_t len);

#endif
