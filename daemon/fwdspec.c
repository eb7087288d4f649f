/*
 * Forward specs (forward.h): pure parsers, no I/O.
 *
 * Addresses. tcp:HOST:PORT (HOST a name, an IPv4 address or [IPv6]; PORT
 * 1-65535); unix:PATH a plain Unix stream socket; unix:PATH:PORT (the last
 * ':' followed by a decimal number) or hybrid:PATH:PORT hybrid vsock
 * through libvsx; vsock:CID:PORT (CID a number, host, local or any);
 * hvsock:GUID; vm:NAME:PORT a VM of this vsxd. A plain Unix path cannot
 * end in ":<digits>" (it would read as hybrid).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "config-int.h"
#include "forward.h"
#include "util.h"

void vsxd_endpoint_free(struct vsxd_endpoint *ep)
{
	free(ep->text);
	free(ep->host);
	free(ep->lib);
	memset(ep, 0, sizeof(*ep));
}


#define KNOWN_ADDRS "tcp:HOST:PORT, unix:PATH, unix:PATH:PORT, hybrid:PATH:PORT, " \
		    "vsock:CID:PORT, hvsock:GUID or vm:NAME:PORT"

int vsxd_endpoint_parse(const char *s, size_t len, struct vsxd_endpoint *ep,
			struct vsxd_err *err)
{
	const char *rest, *colon = NULL, *end = s + len, *p;
	char qb[VSXD_QBUF];
	uint64_t v = 0;
	size_t rl, hl;
	int r;

	vsxd_endpoint_free(ep);
	if (!len)
		return vsxd_err_set(err, "empty address (expected " KNOWN_ADDRS ")");
	if (memchr(s, '\0', len) || memchr(s, ',', len))
		return vsxd_err_set(err, "address '%s' contains a NUL byte or a ','", vsxd_quote(qb, s, len));
	rest = memchr(s, ':', len);
	if (!rest)
		return vsxd_err_set(err, "address '%s' has no kind (expected " KNOWN_ADDRS ")",
			    vsxd_quote(qb, s, len));
	rest++;
	rl = (size_t)(end - rest);
	for (p = rest; p < end; p++)
		if (*p == ':')
			colon = p;
#define PFX(k) ((size_t)(rest - s) == strlen(k) && !memcmp(s, k, strlen(k)))
	if (PFX("tcp:")) {
		ep->kind = VSXD_EP_TCP;
		if (!colon || colon == rest)
			return vsxd_err_set(err, "'%s': expected tcp:HOST:PORT", vsxd_quote(qb, s, len));
		r = vsx__parse_dec(colon + 1, (size_t)(end - colon - 1), 65535, &v);
		if (r < 0 || v == 0)
			return vsxd_err_set(err, "'%s': the TCP port must be 1 to 65535", vsxd_quote(qb, s, len));
		ep->port = (uint32_t)v;
		hl = (size_t)(colon - rest);
		p = rest;
		if (hl >= 2 && p[0] == '[' && p[hl - 1] == ']') {
			p++;
			hl -= 2;
		}
		if (!hl)
			return vsxd_err_set(err, "'%s': empty host", vsxd_quote(qb, s, len));
		ep->host = strndup(p, hl);
	} else if (PFX("unix:") || PFX("hybrid:")) {
		bool hybrid = PFX("hybrid:");

		if (colon && vsx__parse_dec(colon + 1, (size_t)(end - colon - 1), 0xFFFFFFFEu, &v) == 0)
			hybrid = true;
		else if (hybrid)
			return vsxd_err_set(err, "'%s': expected hybrid:PATH:PORT", vsxd_quote(qb, s, len));
		hl = hybrid ? (size_t)(colon - rest) : rl;
		if (!hl)
			return vsxd_err_set(err, "'%s': empty path", vsxd_quote(qb, s, len));
		if (hl > SUN_PATH_MAX - (hybrid ? 11 : 0))
			return vsxd_err_set(err, "'%s': the path is too long (at most %zu bytes)",
				    vsxd_quote(qb, s, len), SUN_PATH_MAX - (hybrid ? 11 : 0));
		ep->kind = hybrid ? VSXD_EP_HYBRID : VSXD_EP_UNIX;
		ep->host = strndup(rest, hl);
		if (hybrid) {
			ep->port = (uint32_t)v;
			if (asprintf(&ep->lib, "unix:%s:%u", ep->host ? ep->host : "",
				     ep->port) < 0)
				ep->lib = NULL;
			if (!ep->lib)
				return -ENOMEM;
		}
	} else if (PFX("vsock:")) {
		ep->kind = VSXD_EP_VSOCK;
		if (!colon)
			return vsxd_err_set(err, "'%s': expected vsock:CID:PORT", vsxd_quote(qb, s, len));
		hl = (size_t)(colon - rest);
		if (hl == 3 && !memcmp(rest, "any", 3))
			ep->cid = 0xFFFFFFFFu;
		else if (hl == 4 && !memcmp(rest, "host", 4))
			ep->cid = 2;
		else if (hl == 5 && !memcmp(rest, "local", 5))
			ep->cid = 1;
		else if (vsx__parse_dec(rest, hl, 0xFFFFFFFFu, &v) == 0)
			ep->cid = (uint32_t)v;
		else
			return vsxd_err_set(err, "'%s': CID must be a number, host, local or any",
				    vsxd_quote(qb, s, len));
		if (vsx__parse_dec(colon + 1, (size_t)(end - colon - 1), 0xFFFFFFFEu, &v) < 0)
			return vsxd_err_set(err, "'%s': the port must be a number below 4294967295",
				    vsxd_quote(qb, s, len));
		ep->port = (uint32_t)v;
		ep->lib = strndup(s, len);
	} else if (PFX("hvsock:")) {
		ep->kind = VSXD_EP_HVSOCK;
		if (rl < 36 || rl > 38)
			return vsxd_err_set(err, "'%s': expected hvsock:SERVICE-GUID", vsxd_quote(qb, s, len));
		ep->lib = strndup(s, len);
	} else if (PFX("vm:")) {
		ep->kind = VSXD_EP_VM;
		if (!colon || !vsx__name_ok(rest, (size_t)(colon - rest)))
			return vsxd_err_set(err, "'%s': expected vm:NAME:PORT (NAME: 1 to 64 letters, "
				    "digits, '.', '_' or '-')", vsxd_quote(qb, s, len));
		if (vsx__parse_dec(colon + 1, (size_t)(end - colon - 1), 0xFFFFFFFEu, &v) < 0)
			return vsxd_err_set(err, "'%s': the port must be a number below 4294967295",
				    vsxd_quote(qb, s, len));
		ep->port = (uint32_t)v;
		ep->host = strndup(rest, (size_t)(colon - rest));
	} else {
		return vsxd_err_set(err, "unknown address kind in '%s' (expected " KNOWN_ADDRS ")",
			    vsxd_quote(qb, s, len));
	}
#undef PFX
	ep->text = strndup(s, len);
	if (!ep->text || (ep->kind != VSXD_EP_HVSOCK && ep->kind != VSXD_EP_VSOCK &&
			  !ep->host) ||
	    ((ep->kind == VSXD_EP_VSOCK || ep->kind == VSXD_EP_HVSOCK) && !ep->lib))
		return -ENOMEM;
	return 0;
}

int vsxd_metrics_check(const char *s, size_t len, const char *what,
		       struct vsxd_endpoint *ep, struct vsxd_err *err)
{
	struct vsxd_endpoint tmp = { 0 };
	char qb[VSXD_QBUF];
	int r;

	if (!ep)
		ep = &tmp;
	r = vsxd_endpoint_parse(s, len, ep, err);
	if (r == 0 && ep->kind != VSXD_EP_TCP)
		r = vsxd_err_set(err, "'%s' is not a TCP address (expected tcp:HOST:PORT, "
				 "e.g. tcp:127.0.0.1:9564 or tcp:[::1]:9564)",
				 vsxd_quote(qb, s, len));
	if (r == -EINVAL)
		vsxd__err_prefix(err, "%s", what);
	vsxd_endpoint_free(&tmp);
	return r;
}

static int parse_allow(struct vsxd_forward *f, const char *s, size_t len,
		       struct vsxd_err *err)
{
	const char *p = s, *end = s + len, *w;
	uint32_t *na;
	char qb[VSXD_QBUF];
	uint64_t v;

	for (;;) {
		while (p < end && (*p == '+' || *p == ' ' || *p == ':' || *p == '\t'))
			p++;
		if (p == end)
			break;
		for (w = p; w < end && *w != '+' && *w != ' ' && *w != ':' && *w != '\t'; w++)
			;
		if (vsx__parse_uint(p, (size_t)(w - p), 0xFFFFFFFEu, &v) < 0)
			return vsxd_err_set(err, "allow: '%s' is not a CID (CIDs are numbers joined "
				    "by '+', e.g. allow=3+4)", vsxd_quote(qb, p, (size_t)(w - p)));
		if (f->n_allow >= VSXD_FWD_ALLOW_MAX)
			return vsxd_err_set(err, "allow: more than %u CIDs", VSXD_FWD_ALLOW_MAX);
		na = realloc(f->allow, (f->n_allow + 1) * sizeof(*na));
		if (!na)
			return -ENOMEM;
		f->allow = na;
		f->allow[f->n_allow++] = (uint32_t)v;
		p = w;
	}
	if (!f->n_allow)
		return vsxd_err_set(err, "allow: an empty list (leave allow out to allow every peer)");
	return 0;
}

int vsxd_fwd_set(struct vsxd_forward *f, const char *key, size_t keylen,
		 const char *val, size_t vallen, struct vsxd_err *err)
{
	static const struct {
		const char *name;
		unsigned bit;
	} keys[] = {
		{ "listen", VSXD_FWD_LISTEN }, { "connect", VSXD_FWD_CONNECT },
		{ "allow", VSXD_FWD_ALLOW }, { "auth", VSXD_FWD_AUTH },
		{ "name", VSXD_FWD_NAME },
	};
	unsigned bit = 0;
	char qb[VSXD_QBUF];
	size_t i;
	int r;

	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (vsxd__key_is(key, keylen, keys[i].name))
			bit = keys[i].bit;
	if (!bit)
		return vsxd_err_set(err, "unknown key '%s' (known keys: listen, connect, allow, "
			    "auth, name)", vsxd_quote(qb, key, keylen));
	if (f->set & bit)
		return vsxd_err_set(err, "'%s' given twice", vsxd_quote(qb, key, keylen));
	if (!vallen)
		return vsxd_err_set(err, "empty value for '%s'", vsxd_quote(qb, key, keylen));
	if (memchr(val, '\0', vallen))
		return vsxd_err_set(err, "value of '%s' contains a NUL byte", vsxd_quote(qb, key, keylen));
	switch (bit) {
	case VSXD_FWD_LISTEN:
	case VSXD_FWD_CONNECT:
		r = vsxd_endpoint_parse(val, vallen, bit == VSXD_FWD_LISTEN ? &f->listen
					: &f->connect, err);
		if (r == -EINVAL) {
			struct vsxd_err e = *err;

			snprintf(err->msg, sizeof(err->msg), "%s: %.490s",
				 bit == VSXD_FWD_LISTEN ? "listen" : "connect", e.msg);
		}
		if (r < 0)
			return r;
		break;
	case VSXD_FWD_ALLOW:
		r = parse_allow(f, val, vallen, err);
		if (r < 0)
			return r;
		break;
	case VSXD_FWD_AUTH:
		if (vallen <= 4 || memcmp(val, "psk:", 4))
			return vsxd_err_set(err, "auth '%s': expected auth=psk:PATH (a key file)",
				    vsxd_quote(qb, val, vallen));
		free(f->auth_key);
		f->auth_key = strndup(val + 4, vallen - 4);
		if (!f->auth_key)
			return -ENOMEM;
		break;
	case VSXD_FWD_NAME:
		if (!vsx__name_ok(val, vallen))
			return vsxd_err_set(err, "name '%s' is not valid (1 to %u letters, digits, "
				    "'.', '_' or '-')", vsxd_quote(qb, val, vallen), VSXD_NAME_MAX);
		free(f->name);
		f->name = strndup(val, vallen);
		if (!f->name)
			return -ENOMEM;
		break;
	}
	f->set |= bit;
	return 0;
}

bool vsxd_ep_is_lib(int kind)
{
	return kind == VSXD_EP_HYBRID || kind == VSXD_EP_VSOCK || kind == VSXD_EP_HVSOCK;
}

int vsxd_fwd_finish(struct vsxd_forward *f, struct vsxd_err *err)
{
	size_t n;

	if (!(f->set & VSXD_FWD_LISTEN))
		return vsxd_err_set(err, "missing 'listen' (listen=ADDR,connect=ADDR)");
	if (!(f->set & VSXD_FWD_CONNECT))
		return vsxd_err_set(err, "missing 'connect' (listen=ADDR,connect=ADDR)");
	if (f->listen.kind == VSXD_EP_TCP && f->connect.kind == VSXD_EP_TCP &&
	    !strcmp(f->listen.text, f->connect.text))
		return vsxd_err_set(err, "listen and connect are the same address");
	if (f->n_allow && f->listen.kind != VSXD_EP_VM && f->listen.kind != VSXD_EP_VSOCK)
		return vsxd_err_set(err, "allow= needs a vm: or vsock: listen address (only "
			    "those know the peer's CID)");
	if (f->auth_key && !vsxd_ep_is_lib(f->listen.kind) && !vsxd_ep_is_lib(f->connect.kind))
		return vsxd_err_set(err, "auth= needs a libvsx side (vsock:, hvsock: or "
			    "unix:PATH:PORT): the handshake runs there");
	if (!f->name) {
		/* the listen address names it: unique, and stable across reloads */
		n = strlen(f->listen.text);
		f->name = strndup(f->listen.text, n > VSXD_NAME_MAX ? VSXD_NAME_MAX : n);
		if (!f->name)
			return -ENOMEM;
	}
	return 0;
}

int vsxd_fwd_parse(const char *spec, struct vsxd_forward *f, struct vsxd_err *err)
{
	const char *p = spec, *end = spec + strlen(spec), *ie, *eq;
	char qb[VSXD_QBUF];
	int r;

	memset(f, 0, sizeof(*f));
	if (p == end)
		return vsxd_err_set(err, "empty forward (expected listen=ADDR,connect=ADDR)");
	for (;;) {
		ie = memchr(p, ',', (size_t)(end - p));
		if (!ie)
			ie = end;
		if (ie == p)
			return vsxd_err_set(err, "empty item in '%s' (a ',' too many?)",
				    vsxd_quote(qb, spec, strlen(spec)));
		eq = memchr(p, '=', (size_t)(ie - p));
		if (!eq)
			return vsxd_err_set(err, "'%s' is not KEY=VALUE", vsxd_quote(qb, p, (size_t)(ie - p)));
		r = vsxd_fwd_set(f, p, (size_t)(eq - p), eq + 1, (size_t)(ie - eq - 1), err);
		if (r < 0)
			return r;
		if (ie == end)
			break;
		p = ie + 1;
	}
	return vsxd_fwd_finish(f, err);
}

void vsxd_fwd_free(struct vsxd_forward *f)
{
	free(f->name);
	vsxd_endpoint_free(&f->listen);
	vsxd_endpoint_free(&f->connect);
	free(f->allow);
	free(f->auth_key);
	free(f->origin);
	memset(f, 0, sizeof(*f));
}

static int ep_copy(struct vsxd_endpoint *d, const struct vsxd_endpoint *s)
{
	*d = *s;
	d->text = s->text ? strdup(s->text) : NULL;
	d->host = s->host ? strdup(s->host) : NULL;
	d->lib = s->lib ? strdup(s->lib) : NULL;
	if ((s->text && !d->text) || (s->host && !d->host) || (s->lib && !d->lib))
		return -ENOMEM;
	return 0;
}

int vsxd_fwd_copy(struct vsxd_forward *dst, const struct vsxd_forward *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->set = src->set;
	dst->n_allow = src->n_allow;
	if (ep_copy(&dst->listen, &src->listen) || ep_copy(&dst->connect, &src->connect))
		return -ENOMEM;
	dst->name = src->name ? strdup(src->name) : NULL;
	dst->auth_key = src->auth_key ? strdup(src->auth_key) : NULL;
	dst->origin = src->origin ? strdup(src->origin) : NULL;
	if (src->n_allow) {
		dst->allow = malloc(src->n_allow * sizeof(*dst->allow));
		if (dst->allow)
			memcpy(dst->allow, src->allow, src->n_allow * sizeof(*dst->allow));
	}
	if ((src->name && !dst->name) || (src->auth_key && !dst->auth_key) ||
	    (src->origin && !dst->origin) || (src->n_allow && !dst->allow))
		return -ENOMEM;
	return 0;
}

bool vsxd_fwd_same(const struct vsxd_forward *a, const struct vsxd_forward *b)
{
	return vsxd__str_eq(a->name, b->name) && vsxd__str_eq(a->listen.text, b->listen.text) &&
	       vsxd__str_eq(a->connect.text, b->connect.text) &&
	       vsxd__str_eq(a->auth_key, b->auth_key) && a->n_allow == b->n_allow &&
	       (!a->n_allow || !memcmp(a->allow, b->allow, a->n_allow * sizeof(*a->allow)));
}

int vsxd_fwd_check(const struct vsxd_config *cfg, struct vsxd_err *err)
{
	const struct vsxd_forward *a, *b;
	size_t i, j;

	for (i = 0; i < cfg->n_fwds; i++) {
		a = &cfg->fwds[i];
		for (j = 0; j < i; j++) {
			b = &cfg->fwds[j];
			if (!strcmp(a->listen.text, b->listen.text))
				return vsxd_err_set(err, "%s: listen address '%s' is already the one "
					    "of %s", a->origin, a->listen.text, b->origin);
			if (!strcmp(a->name, b->name))
				return vsxd_err_set(err, "%s: forward name '%s' is already used by %s",
					    a->origin, a->name, b->origin);
		}
	}
	return 0;
}
