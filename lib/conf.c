/* SPDX-License-Identifier: MIT */
/*
 * conf.c - runtime tuning: the keys, their defaults and ranges, the
 * parser of `key:value,key:value` strings, and the once-only read of
 * the application's `kvp_conf` and the environment's KVP_CONF.
 * Floor 1 of lib/ (doc/architecture.md, "Layers"): calls only libc.
 *
 * The grammar is jemalloc's MALLOC_CONF: pairs separated by commas, a
 * key of letters, digits and underscores, a colon, and a value running
 * to the next comma.  kvpool also skips blanks (space, tab, newline)
 * around pairs, keys and values, so a string may be wrapped.  A pair
 * that cannot be applied (empty, no colon, a bad key, an unknown key, a
 * value that is not a number or a boolean, out of its range) is
 * reported in one line and skipped; the pairs after it still apply.
 */
/* First: config.h defines _GNU_SOURCE, which secure_getenv needs. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "conf.h"
#include "kvpool.h"

/*
 * The application's string (jemalloc's malloc_conf).  Weak, so that an
 * application's own definition wins: linked statically, a strong
 * definition overrides a weak one without a clash; linked dynamically,
 * the executable's definition comes first in the symbol lookup (the
 * symbol has default visibility, so the library reads it through its
 * GOT, not a local reference).
 */
KVP_API const char *kvp_conf __attribute__((weak)) = NULL;

enum conf_type { CONF_U32, CONF_BOOL };

struct conf_def {
	const char *name;
	enum conf_type type;
	uint32_t def, min, max;
};

/* The model fuzz's small pools (tests/model.c) evict ahead as well. */
#ifndef KVP_FAULT_INJECTION
#define CONF_EVICT_AHEAD_SHARE_DEFAULT 256u
#else
#define CONF_EVICT_AHEAD_SHARE_DEFAULT 1u
#endif

/* kvpool(3) documents every key; keep the two in step. */
static const struct conf_def conf_defs[CONF_NKEYS] = {
	[CONF_AUTO_CACHE_MAX] = {"auto_cache_max", CONF_U32, 128, 0,
				 KVP_MAX_CACHE_BLOCKS},
	[CONF_EVICT_AHEAD_MAX] = {"evict_ahead_max", CONF_U32, 128, 0,
				  CONF_EVICT_AHEAD_LIMIT},
	[CONF_EVICT_AHEAD_SHARE] = {"evict_ahead_share", CONF_U32,
				    CONF_EVICT_AHEAD_SHARE_DEFAULT, 1,
				    1u << 20},
	[CONF_IDLE_BATCH] = {"idle_batch", CONF_U32, CONF_IDLE_BATCH_LIMIT, 1,
			     CONF_IDLE_BATCH_LIMIT},
	[CONF_PREFIX_SLOTS_PER_BLOCK] = {"prefix_slots_per_block", CONF_U32, 4,
					 4, 64},
	[CONF_SEQMAP_GROW_RATIO] = {"seqmap_grow_ratio", CONF_U32, 32, 1,
				    65536},
	[CONF_SEQMAP_KEEP_RATIO] = {"seqmap_keep_ratio", CONF_U32, 256, 1,
				    65536},
	[CONF_SEQMAP_SHRINK_PERIOD_US] = {"seqmap_shrink_period_us", CONF_U32,
					  5000, 0, 60000000},
	[CONF_ABORT_CONF] = {"abort_conf", CONF_BOOL, 0, 0, 1},
	[CONF_CONFIRM_CONF] = {"confirm_conf", CONF_BOOL, 0, 0, 1},
};

void conf_defaults(struct conf *c)
{
	for (int k = 0; k < CONF_NKEYS; k++)
		c->val[k] = conf_defs[k].def;
	c->applied = 0;
}

static bool is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static bool is_key_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') || ch == '_';
}

/* [*p, *e) without the blanks at either end. */
static void trim(const char **p, const char **e)
{
	while (*p < *e && is_blank(**p))
		(*p)++;
	while (*e > *p && is_blank((*e)[-1]))
		(*e)--;
}

static bool equals(const char *p, size_t n, const char *word)
{
	return strlen(word) == n && memcmp(p, word, n) == 0;
}

/* Decimal digits only (no sign, no blank): false on anything else or on
 * overflow of 64 bits. */
static bool parse_u64(const char *p, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		if (v > (UINT64_MAX - (uint64_t)(p[i] - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	*out = v;
	return true;
}

/* The value v[0..vn) for key d, into *out; or false with why filled in. */
static bool parse_value(const struct conf_def *d, const char *v, size_t vn,
			uint32_t *out, char *why, size_t whylen)
{
	uint64_t x;

	if (vn == 0) {
		snprintf(why, whylen, "%s has an empty value", d->name);
		return false;
	}
	if (d->type == CONF_BOOL) {
		if (equals(v, vn, "true")) {
			*out = 1;
			return true;
		}
		if (equals(v, vn, "false")) {
			*out = 0;
			return true;
		}
		snprintf(why, whylen, "%s takes true or false", d->name);
		return false;
	}
	if (!parse_u64(v, vn, &x)) {
		snprintf(why, whylen, "%s takes a decimal number from %u to %u",
			 d->name, d->min, d->max);
		return false;
	}
	if (x < d->min || x > d->max) {
		snprintf(why, whylen, "%s out of range (%u to %u)", d->name,
			 d->min, d->max);
		return false;
	}
	*out = (uint32_t)x;
	return true;
}

/* Applies the pair [p, e) (trimmed) to c; false with why filled in. */
static bool apply_pair(struct conf *c, const char *p, const char *e, char *why,
		       size_t whylen)
{
	const char *k = p, *ke = p, *v;
	uint32_t x;

	if (p == e) {
		snprintf(why, whylen, "empty pair");
		return false;
	}
	while (ke < e && is_key_char(*ke))
		ke++;
	v = ke;
	while (v < e && is_blank(*v))
		v++;
	if (ke == k) {
		snprintf(why, whylen, "a key is letters, digits and _");
		return false;
	}
	if (v == e) {
		snprintf(why, whylen, "no ':' after the key");
		return false;
	}
	if (*v != ':') {
		snprintf(why, whylen,
			 "a key is letters, digits and _, then ':'");
		return false;
	}
	v++;
	trim(&v, &e);
	for (int i = 0; i < CONF_NKEYS; i++) {
		const struct conf_def *d = &conf_defs[i];

		if (!equals(k, (size_t)(ke - k), d->name))
			continue;
		if (!parse_value(d, v, (size_t)(e - v), &x, why, whylen))
			return false;
		c->val[i] = x;
		c->applied |= 1u << i;
		return true;
	}
	snprintf(why, whylen, "unknown key %.*s",
		 (int)(ke - k > 64 ? 64 : ke - k), k);
	return false;
}

unsigned conf_parse(struct conf *c, const char *source, const char *s,
		    conf_report_fn report, void *arg)
{
	unsigned rejected = 0;
	const char *p = s;

	if (!s)
		return 0;
	/* Blank or empty: no pairs (and not one empty pair). */
	while (is_blank(*p))
		p++;
	if (!*p)
		return 0;
	for (p = s;;) {
		const char *comma = strchr(p, ','), *q = p, *e;
		char why[128];

		e = comma ? comma : p + strlen(p);
		trim(&q, &e);
		if (!apply_pair(c, q, e, why, sizeof(why))) {
			rejected++;
			if (report)
				report(arg, source, q, (size_t)(e - q), why);
		}
		if (!comma)
			return rejected;
		p = comma + 1;
	}
}

/*
 * The default report: one line on stderr, the pair shown as written
 * but for control characters (as '?') and cut at 80 bytes, so that it
 * stays one line.
 */
static void report_stderr(void *arg, const char *source, const char *pair,
			  size_t len, const char *why)
{
	char shown[81];
	size_t n = len < 80 ? len : 80;

	(void)arg;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)pair[i];

		shown[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	shown[n] = '\0';
	fprintf(stderr, "<kvpool>: %s: \"%s%s\": %s; ignored\n", source, shown,
		len > n ? "..." : "", why);
}

/* The value of key k in c, as a pair would write it. */
static const char *value_text(const struct conf *c, int k, char buf[16])
{
	if (conf_defs[k].type == CONF_BOOL)
		return c->val[k] ? "true" : "false";
	snprintf(buf, 16, "%u", c->val[k]);
	return buf;
}

static struct conf conf_effective;
static pthread_once_t conf_once = PTHREAD_ONCE_INIT;

static void conf_load(void)
{
	/* The weak global, then the environment (secure_getenv: not for a
	 * set-user-ID program, as jemalloc's MALLOC_CONF). */
	const char *names[2] = {"kvp_conf", "KVP_CONF"};
	const char *strings[2] = {kvp_conf, secure_getenv("KVP_CONF")};
	const char *from[CONF_NKEYS] = {NULL};
	struct conf *c = &conf_effective;
	unsigned errors = 0;

	conf_defaults(c);
	for (int i = 0; i < 2; i++) {
		c->applied = 0;
		errors += conf_parse(c, names[i], strings[i], report_stderr,
				     NULL);
		for (int k = 0; k < CONF_NKEYS; k++)
			if (c->applied & (1u << k))
				from[k] = names[i];
	}
	c->applied = 0;
	for (int k = 0; k < CONF_NKEYS; k++)
		if (from[k])
			c->applied |= 1u << k;
	if (conf_val(c, CONFIRM_CONF))
		for (int k = 0; k < CONF_NKEYS; k++)
			if (from[k]) {
				char buf[16];

				fprintf(stderr,
					"<kvpool>: confirm_conf: %s:%s (from "
					"%s)\n",
					conf_defs[k].name,
					value_text(c, k, buf), from[k]);
			}
	if (errors && conf_val(c, ABORT_CONF)) {
		fprintf(stderr,
			"<kvpool>: abort_conf:true and %u invalid pair%s "
			"above: aborting\n",
			errors, errors > 1 ? "s" : "");
		abort();
	}
}

const struct conf *conf_get(void)
{
	kvp_check_pthread(pthread_once(&conf_once, conf_load));
	return &conf_effective;
}

int conf_write(const struct conf *c, FILE *f)
{
	char buf[16];

	for (int k = 0; k < CONF_NKEYS; k++)
		fprintf(f, "%s:%s\n", conf_defs[k].name, value_text(c, k, buf));
	return ferror(f) ? -EIO : 0;
}

KVP_API int kvp_conf_write(FILE *f)
{
	if (!f)
		return -EINVAL;
	return conf_write(conf_get(), f);
}
