/* SPDX-License-Identifier: MIT */
/*
 * jsonl.c - a strict JSON reader for one trace line; see jsonl.h.
 *
 * Recursive descent over the line's bytes (RFC 8259 grammar); values of
 * fields we do not read are validated and skipped, nesting at most
 * MAX_DEPTH deep.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"

#define MAX_DEPTH 64
#define MAX_KEY 64

struct cur {
	const char *s, *p, *end;
	char *err;
	size_t errlen;
	int rc; /* 0, -1 invalid, -2 out of memory */
};

/* Records the first error (with the cursor's column) and returns c->rc. */
__attribute__((format(printf, 2, 3))) static int fail(struct cur *c,
						      const char *fmt, ...)
{
	va_list ap;
	int n;

	if (c->rc)
		return c->rc;
	n = snprintf(c->err, c->errlen,
		     "column %zu: ", (size_t)(c->p - c->s) + 1);
	if (n < 0 || (size_t)n >= c->errlen)
		n = 0;
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	c->rc = -1;
	return -1;
}

/* ch as an error message shows it: itself if printable ASCII, else a
 * \xNN escape, so that an ESC or BEL of the input does not reach the
 * terminal and a NUL does not cut the message short. */
static const char *shown(char ch, char buf[5])
{
	unsigned char u = (unsigned char)ch;

	if (u >= 0x20 && u < 0x7f) {
		buf[0] = ch;
		buf[1] = '\0';
	} else {
		snprintf(buf, 5, "\\x%02x", u);
	}
	return buf;
}

/* Skips JSON whitespace. */
static void skip_ws(struct cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' ||
				 *c->p == '\r' || *c->p == '\n'))
		c->p++;
}

bool jsonl_blank(const char *line, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' &&
		    line[i] != '\n')
			return false;
	return true;
}

/* Whether the next byte is ch (nothing consumed). */
static bool peek(struct cur *c, char ch)
{
	return c->p < c->end && *c->p == ch;
}

/* Consumes optional whitespace and ch; -1 (error recorded) if ch is not
 * next. */
static int expect(struct cur *c, char ch)
{
	char b[5];

	skip_ws(c);
	if (!peek(c, ch)) {
		if (c->p == c->end)
			return fail(c,
				    "expected '%c', found the end of the "
				    "line",
				    ch);
		return fail(c, "expected '%c', found '%s'", ch,
			    shown(*c->p, b));
	}
	c->p++;
	return 0;
}

/* The value of a hex digit, or -1. */
static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * Reads a string at c->p (after optional whitespace).  If out is not
 * NULL, its decoded bytes (up to cap - 1, NUL-terminated; longer keys are
 * truncated and flagged by *truncated) are stored there; \u escapes other
 * than ASCII are stored as '?' (field names are ASCII).
 */
static int read_string(struct cur *c, char *out, size_t cap, bool *truncated)
{
	size_t n = 0;
	char b[5];

	if (truncated)
		*truncated = false;
	if (expect(c, '"'))
		return -1;
	for (;;) {
		unsigned char ch;

		if (c->p == c->end)
			return fail(c, "unterminated string");
		ch = (unsigned char)*c->p++;
		if (ch == '"')
			break;
		if (ch < 0x20)
			return fail(c, "control character in a string");
		if (ch == '\\') {
			if (c->p == c->end)
				return fail(c, "unterminated string");
			ch = (unsigned char)*c->p++;
			switch (ch) {
			case '"':
			case '\\':
			case '/':
				break;
			case 'b':
				ch = '\b';
				break;
			case 'f':
				ch = '\f';
				break;
			case 'n':
				ch = '\n';
				break;
			case 'r':
				ch = '\r';
				break;
			case 't':
				ch = '\t';
				break;
			case 'u': {
				unsigned v = 0;

				for (int i = 0; i < 4; i++) {
					int h = c->p < c->end ? hexval(*c->p)
							      : -1;

					if (h < 0)
						return fail(c,
							    "bad \\u escape");
					v = v * 16 + (unsigned)h;
					c->p++;
				}
				ch = v < 0x80 ? (unsigned char)v : '?';
				break;
			}
			default:
				c->p--;
				return fail(c, "bad escape '\\%s'",
					    shown((char)ch, b));
			}
		}
		if (out) {
			if (n + 1 < cap)
				out[n++] = (char)ch;
			else if (truncated)
				*truncated = true;
		}
	}
	if (out)
		out[n] = '\0';
	return 0;
}

/* A parsed JSON number. */
struct num {
	double d;
	bool integer; /* no fraction or exponent */
	bool negative;
	bool u64_ok; /* integer and its magnitude fits in uint64_t */
	uint64_t u;  /* magnitude, when u64_ok */
};

/* Reads a JSON number into *v; -1 (error recorded) if there is none. */
static int read_number(struct cur *c, struct num *v)
{
	const char *start;
	char buf[64];
	size_t len;

	skip_ws(c);
	start = c->p;
	v->negative = peek(c, '-');
	if (v->negative)
		c->p++;
	if (peek(c, '0')) {
		c->p++;
	} else if (c->p < c->end && *c->p >= '1' && *c->p <= '9') {
		while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
			c->p++;
	} else {
		c->p = start;
		return fail(c, "expected a number");
	}
	v->integer = true;
	if (peek(c, '.')) {
		c->p++;
		v->integer = false;
		if (!(c->p < c->end && *c->p >= '0' && *c->p <= '9'))
			return fail(c, "expected a digit after '.'");
		while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
			c->p++;
	}
	if (peek(c, 'e') || peek(c, 'E')) {
		c->p++;
		v->integer = false;
		if (peek(c, '+') || peek(c, '-'))
			c->p++;
		if (!(c->p < c->end && *c->p >= '0' && *c->p <= '9'))
			return fail(c, "expected a digit in the exponent");
		while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
			c->p++;
	}
	len = (size_t)(c->p - start);
	if (len >= sizeof(buf)) {
		c->p = start;
		return fail(c, "number too long");
	}
	memcpy(buf, start, len);
	buf[len] = '\0';
	v->d = strtod(buf, NULL);
	v->u64_ok = false;
	if (v->integer) {
		char *end;

		errno = 0;
		v->u = strtoull(buf + v->negative, &end, 10);
		v->u64_ok = errno == 0;
	}
	return 0;
}

/* Validates and skips any JSON value; 0 or -1 (error recorded). */
static int skip_value(struct cur *c, int depth);

/* Consumes the literal lit (true, false, null) or records an error. */
static int skip_literal(struct cur *c, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
		return fail(c, "invalid value");
	c->p += n;
	return 0;
}

/* Validates and skips an object or array starting at c->p. */
static int skip_container(struct cur *c, int depth, bool object)
{
	char close = object ? '}' : ']';

	if (depth >= MAX_DEPTH)
		return fail(c, "nested more than %d deep", MAX_DEPTH);
	c->p++;
	skip_ws(c);
	if (peek(c, close)) {
		c->p++;
		return 0;
	}
	for (;;) {
		if (object) {
			if (read_string(c, NULL, 0, NULL) || expect(c, ':'))
				return -1;
		}
		if (skip_value(c, depth + 1))
			return -1;
		skip_ws(c);
		if (peek(c, ',')) {
			c->p++;
			continue;
		}
		return expect(c, close);
	}
}

static int skip_value(struct cur *c, int depth)
{
	struct num v;

	skip_ws(c);
	if (c->p == c->end)
		return fail(c, "expected a value, found the end of the line");
	switch (*c->p) {
	case '"':
		return read_string(c, NULL, 0, NULL);
	case '{':
		return skip_container(c, depth, true);
	case '[':
		return skip_container(c, depth, false);
	case 't':
		return skip_literal(c, "true");
	case 'f':
		return skip_literal(c, "false");
	case 'n':
		return skip_literal(c, "null");
	default:
		return read_number(c, &v);
	}
}

/* Reads an integer in [lo, hi] for field name. */
static int read_int(struct cur *c, const char *name, int64_t lo, int64_t hi,
		    int64_t *out)
{
	const char *at;
	struct num v;

	skip_ws(c);
	at = c->p;
	if (read_number(c, &v))
		return -1;
	if (!v.integer || !v.u64_ok || v.u > (uint64_t)INT64_MAX ||
	    (v.negative ? -(int64_t)v.u : (int64_t)v.u) < lo ||
	    (v.negative ? -(int64_t)v.u : (int64_t)v.u) > hi) {
		c->p = at;
		return fail(c, "\"%s\" must be an integer in [%lld, %lld]",
			    name, (long long)lo, (long long)hi);
	}
	*out = v.negative ? -(int64_t)v.u : (int64_t)v.u;
	return 0;
}

/* Reads the hash_ids array into r; 0, -1 (invalid) or -2 (memory). */
static int read_hash_ids(struct cur *c, struct trace_rec *r)
{
	skip_ws(c);
	if (!peek(c, '['))
		return fail(c, "\"hash_ids\" must be an array of integers");
	c->p++;
	r->nhash = 0;
	skip_ws(c);
	if (peek(c, ']')) {
		c->p++;
		return 0;
	}
	for (;;) {
		const char *at;
		struct num v;

		skip_ws(c);
		at = c->p;
		if (read_number(c, &v))
			return -1;
		if (!v.integer || !v.u64_ok || (v.negative && v.u)) {
			c->p = at;
			return fail(c, "\"hash_ids\" entries must be integers "
				       "in [0, 2^64)");
		}
		if (r->nhash == r->cap) {
			uint32_t ncap = r->cap ? r->cap * 2 : 64;
			uint64_t *n = r->cap < (1u << 30)
					      ? realloc(r->hash_ids,
							ncap * sizeof(*n))
					      : NULL;

			if (!n) {
				snprintf(c->err, c->errlen,
					 "out of memory for %u hash ids", ncap);
				c->rc = -2;
				return -2;
			}
			r->hash_ids = n;
			r->cap = ncap;
		}
		r->hash_ids[r->nhash++] = v.u;
		skip_ws(c);
		if (peek(c, ',')) {
			c->p++;
			continue;
		}
		return expect(c, ']');
	}
}

enum field {
	F_TIMESTAMP,
	F_INPUT,
	F_OUTPUT,
	F_HASH_IDS,
	F_N,
	F_PRIORITY,
	F_HBT,
	NUM_FIELDS
};

static const char *const field_name[NUM_FIELDS] = {
	"timestamp", "input_length", "output_length",	  "hash_ids",
	"n",	     "priority",     "hash_block_tokens",
};

/* Reads field f's value into r, checking its type and range. */
static int read_field(struct cur *c, enum field f, struct trace_rec *r)
{
	int64_t v;

	switch (f) {
	case F_TIMESTAMP: {
		const char *at;
		struct num n;

		skip_ws(c);
		at = c->p;
		if (read_number(c, &n))
			return -1;
		if (n.negative || !isfinite(n.d)) {
			c->p = at;
			return fail(c, "\"timestamp\" must be a number >= 0");
		}
		r->timestamp = n.d;
		return 0;
	}
	case F_INPUT:
		if (read_int(c, field_name[f], 1, INT32_MAX, &v))
			return -1;
		r->input_length = (uint32_t)v;
		return 0;
	case F_OUTPUT:
		if (read_int(c, field_name[f], 0, INT32_MAX, &v))
			return -1;
		r->output_length = (uint32_t)v;
		return 0;
	case F_HASH_IDS:
		return read_hash_ids(c, r);
	case F_N:
		if (read_int(c, field_name[f], 1, 256, &v))
			return -1;
		r->n = (uint32_t)v;
		return 0;
	case F_PRIORITY:
		if (read_int(c, field_name[f], INT32_MIN, INT32_MAX, &v))
			return -1;
		r->priority = (int32_t)v;
		return 0;
	case F_HBT:
		if (read_int(c, field_name[f], 1, 1 << 20, &v))
			return -1;
		r->hash_block_tokens = (uint32_t)v;
		r->has_hash_block_tokens = true;
		return 0;
	case NUM_FIELDS:
		break;
	}
	return fail(c, "internal error: unknown field");
}

int jsonl_parse_trace_line(const char *line, size_t len, struct trace_rec *r,
			   char *err, size_t errlen)
{
	struct cur c = {line, line, line + len, err, errlen, 0};
	bool seen[NUM_FIELDS] = {false};

	r->n = 1;
	r->priority = 0;
	r->hash_block_tokens = 512;
	r->has_hash_block_tokens = false;
	r->nhash = 0;
	if (expect(&c, '{'))
		return c.rc;
	skip_ws(&c);
	if (peek(&c, '}')) {
		c.p++;
	} else {
		for (;;) {
			char key[MAX_KEY];
			const char *at;
			bool trunc;
			int f;

			skip_ws(&c);
			at = c.p;
			if (read_string(&c, key, sizeof(key), &trunc) ||
			    expect(&c, ':'))
				return c.rc;
			for (f = 0; f < NUM_FIELDS; f++)
				if (!trunc && !strcmp(key, field_name[f]))
					break;
			if (f < NUM_FIELDS) {
				if (seen[f]) {
					c.p = at;
					fail(&c, "duplicate field \"%s\"",
					     field_name[f]);
					return c.rc;
				}
				seen[f] = true;
				if (read_field(&c, (enum field)f, r))
					return c.rc;
			} else if (skip_value(&c, 1)) {
				return c.rc;
			}
			skip_ws(&c);
			if (peek(&c, ',')) {
				c.p++;
				continue;
			}
			if (expect(&c, '}'))
				return c.rc;
			break;
		}
	}
	skip_ws(&c);
	if (c.p != c.end) {
		char b[5];

		fail(&c, "unexpected '%s' after the object", shown(*c.p, b));
		return c.rc;
	}
	for (int f = 0; f < F_N; f++)
		if (!seen[f]) {
			fail(&c, "missing field \"%s\"", field_name[f]);
			return c.rc;
		}
	return 0;
}

void trace_rec_free(struct trace_rec *r)
{
	free(r->hash_ids);
	r->hash_ids = NULL;
	r->nhash = r->cap = 0;
}
