/*
 * Fuzz target: the hybrid CONNECT line (transports/virtio/backend/uds.c,
 * vsxb__host_parse_connect), fed as a host program's stream is: bytes up to
 * the first newline, at most VSX_HYBRID_CONNECT_MAX of them, as hs_cb takes them.
 * An accepted line must be exactly "CONNECT <port>\n" with the port below
 * 2^32-1 written in plain decimal.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend-int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t take = nl ? (size_t)(nl - data) + 1 : size;
	char back[VSX_HYBRID_CONNECT_MAX + 16];
	uint32_t port = 0;
	char *line;
	int n;

	if (take > VSX_HYBRID_CONNECT_MAX)
		take = VSX_HYBRID_CONNECT_MAX; /* hs_cb never collects more */
	line = malloc(take ? take : 1); /* exact size: overreads show */
	if (!line)
		return 0;
	memcpy(line, data, take);
	if (vsxb__host_parse_connect(line, take, &port) == 0) {
		if (port == UINT32_MAX)
			abort();
		/* the line is "CONNECT " + digits + "\n" (leading zeros allowed) */
		n = snprintf(back, sizeof(back), "%" PRIu32, port);
		if (take < 10 || memcmp(line, "CONNECT ", 8) || line[take - 1] != '\n')
			abort();
		for (size_t i = 8; i < take - 1; i++)
			if (line[i] < '0' || line[i] > '9')
				abort();
		if ((size_t)n > take - 9)
			abort();
	}
	free(line);
	return 0;
}
