/* SPDX-License-Identifier: MIT */
/*
 * conf.h - runtime tuning (KVP_CONF), in jemalloc's MALLOC_CONF style.
 * Floor 1 of lib/ (doc/architecture.md, "Layers"): calls nothing but
 * libc; the files that size or pace something read it at creation.
 *
 * The values are read once, by the first conf_get() (the first pool's
 * creation, or whatever needs them earlier): the built-in defaults, then
 * the application's `kvp_conf` string, then the environment's KVP_CONF.
 * Each source is a list of `key:value` pairs separated by commas.  The
 * files that use a value copy it into their own structs when they create
 * them (a pool, a manager's tables), so no hot path reads this.
 *
 * Synchronisation: conf_get() may run in any thread at any time; the
 * first call reads the sources under pthread_once, and the struct it
 * returns never changes afterwards.  conf_defaults() and conf_parse()
 * work on the caller's struct (the unit tests and the fuzz target).
 */
#ifndef KVP_CONF_H
#define KVP_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Every key, in the order kvp_conf_write() prints them. */
enum conf_key {
	CONF_AUTO_CACHE_MAX,
	CONF_EVICT_AHEAD_MAX,
	CONF_EVICT_AHEAD_SHARE,
	CONF_IDLE_BATCH,
	CONF_PREFIX_SLOTS_PER_BLOCK,
	CONF_SEQMAP_GROW_RATIO,
	CONF_SEQMAP_KEEP_RATIO,
	CONF_SEQMAP_SHRINK_PERIOD_US,
	CONF_ABORT_CONF,
	CONF_CONFIRM_CONF,
	CONF_NKEYS
};

/* The compile-time bounds that stack buffers are sized by. */
#define CONF_EVICT_AHEAD_LIMIT 512u
#define CONF_IDLE_BATCH_LIMIT 256u

struct conf {
	/* The values, indexed by enum conf_key (booleans are 0 or 1). */
	uint32_t val[CONF_NKEYS];
	/* Bit k: key k was applied by the last conf_parse() calls (the
	 * caller clears it between sources). */
	uint32_t applied;
};

/* The value of key k in the effective configuration. */
#define conf_val(c, k) ((c)->val[CONF_##k])

/*
 * A rejected pair: source names where it came from ("KVP_CONF",
 * "kvp_conf"), pair[0..len) is the pair as written (blanks around it
 * trimmed; not NUL-terminated) and why says what is wrong, naming the
 * key when there is one.
 */
typedef void (*conf_report_fn)(void *arg, const char *source, const char *pair,
			       size_t len, const char *why);

/* The built-in defaults, nothing applied. */
void conf_defaults(struct conf *c);

/*
 * Applies the pairs of s to c, left to right (a later pair of a key
 * overrides an earlier one); a rejected pair changes nothing and is
 * reported once through report.  Returns the number of pairs rejected.
 * s may be NULL (no pairs).
 */
unsigned conf_parse(struct conf *c, const char *source, const char *s,
		    conf_report_fn report, void *arg);

/* The configuration in effect, read on the first call (see above). */
const struct conf *conf_get(void);

/* Writes c as `key:value` lines.  0, or -EIO if f reports an error. */
int conf_write(const struct conf *c, FILE *f);

#endif /* KVP_CONF_H */
