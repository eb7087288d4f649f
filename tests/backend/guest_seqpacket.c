/*
 * guest_seqpacket: run inside the lab guest only (engine_guest.test). A
 * SOCK_SEQPACKET connection to the host (CID 2) port PORT, served by vsxd,
 * whose host side echoes record by record: every message must come back
 * whole, with its size, whatever RX buffers and credit made of it.
 *
 *   guest_seqpacket PORT
 *
 * Refuses to run outside the guest (no VSX_LAB_GUEST=1): AF_VSOCK on the
 * build machine belongs to the infrastructure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 1, 100, 4052, 4096, 4097, 10000, 65536, 100000,
					200000 };
	static unsigned char out[200000], in[300000];
	struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = 2 };
	const char *lab = getenv("VSX_LAB_GUEST");
	unsigned i, round;
	int fd, bad = 0;

	if (!lab || strcmp(lab, "1")) {
		fprintf(stderr, "guest_seqpacket: only inside the lab guest\n");
		return 2;
	}
	if (argc != 2)
		return 2;
	a.svm_port = (unsigned)strtoul(argv[1], NULL, 10);
	fd = socket(AF_VSOCK, SOCK_SEQPACKET, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("guest_seqpacket: connect");
		return 1;
	}
	for (round = 0; round < 3; round++) {
		for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			size_t n = sizes[i], k;
			ssize_t r;

			for (k = 0; k < n; k++)
				out[k] = (unsigned char)(k * 31 + i + round);
			if (send(fd, out, n, 0) != (ssize_t)n) {
				perror("guest_seqpacket: send");
				return 1;
			}
			r = recv(fd, in, sizeof(in), 0);
			if (r != (ssize_t)n || memcmp(in, out, n)) {
				printf("guest_seqpacket: %zu-byte message: got %zd bytes%s\n",
				       n, r, r == (ssize_t)n ? " (different)" : "");
				bad++;
			}
		}
	}
	close(fd);
	printf("guest_seqpacket: %s\n", bad ? "FAILED" : "27 messages came back whole");
	return bad ? 1 : 0;
}
