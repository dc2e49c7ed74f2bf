/* SPDX-License-Identifier: MIT */
/*
 * fuzz_api.c - differential fuzzing of kvpool's public API against the
 * reference model (tests/model.h).
 *
 * The input's first bytes configure a pool (size, tokens per block, thread
 * cache, an ID-only or data-owning layout, KVP_POOL_ZERO) and up to two
 * managers over it; the rest is a program of API calls, one opcode byte
 * and a few argument bytes each, valid and invalid alike: unknown ids,
 * NULL pointers the header lists as -EINVAL, huge token counts, ids out of
 * range, double frees, configurations out of range.  Each call runs on
 * the library and on the model; every return code is compared, and after
 * every call the whole observable state: each block's reference count,
 * the pool's free and counter statistics, each sequence's info and block
 * table, the managers' statistics and the order of the access clocks.  A
 * mismatch prints the program so far and aborts.
 *
 * Fork-heavy inputs (the third byte's high bits 110x) swap the op mix
 * for fork_ops: ids that name live sequences and fresh fork targets,
 * fork trees many levels deep with live siblings whose nodes are then
 * truncated (to 0, to block boundaries, inside shared blocks) and
 * appended again, trimmed, preempted, freed under their forks or written
 * (-EBUSY on a shared block), forks of prefix-cache hits committed by the
 * fork, and kvp_manager_check at the end.
 *
 * Built with -DKVP_FAULT_INJECTION (as `make fuzz` and `make check` do),
 * one opcode makes the k-th host allocation of the next call fail: that
 * call must then either succeed as the model says (the library tolerates
 * the failure) or return -ENOMEM, if kvpool.h lists it, and change
 * nothing.
 *
 * Entry points: LLVMFuzzerTestOneInput for libFuzzer (`make fuzz`), and
 * tests/fuzz_main.c replays files or random inputs without libFuzzer.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "model.h"
#ifdef KVP_FAULT_INJECTION
#include "fault.h"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OPS 400
#define NMGR 2
#define NIDS 8
#define MAX_BLOCKS 40
#define MAX_LIST 8
#define MAX_LISTED 4096 /* kvp_manager_seqs's buffer */

static const uint64_t seq_ids[NIDS] = {1, 2, 3, 4, 5, 0, UINT64_MAX,
				       1ull << 63};
/* Fork-heavy inputs (see LLVMFuzzerTestOneInput): room for a fork tree
 * of many live siblings and levels. */
#define NFORK_IDS 16
static const uint64_t fork_ids[NFORK_IDS] = {
	1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0, UINT64_MAX};

/* ------------------------------------------------------------ input */

struct rd {
	const uint8_t *p;
	size_t n;
};

static uint8_t u8(struct rd *r)
{
	if (!r->n)
		return 0;
	r->n--;
	return *r->p++;
}

static uint16_t u16(struct rd *r)
{
	uint16_t lo = u8(r);

	return (uint16_t)(lo | (uint16_t)u8(r) << 8);
}

static uint32_t u32(struct rd *r)
{
	uint32_t lo = u16(r);

	return lo | (uint32_t)u16(r) << 16;
}

static const float floats[] = {-1.0f, 0.0f,  0.1f,    0.25f, 0.5f,
			       0.75f, 0.9f,  1.0f,    1.0001f, NAN,
			       -NAN,  INFINITY, -INFINITY, -0.0f, 1e-9f,
			       0.01f};

static float fl(struct rd *r)
{
	return floats[u8(r) % (sizeof(floats) / sizeof(floats[0]))];
}

/* ------------------------------------------------------------ world */

struct mgr_entry;

struct world {
	struct kvp_pool *pool;
	struct model_pool *mp;
	struct kvp_manager *m[NMGR];
	struct model_mgr *mm[NMGR];
	uint32_t nb, bt;
	size_t row; /* row bytes of a data-owning pool, else 0 */
	uint32_t layers;
	/* References taken with kvp_pool_alloc / kvp_block_ref: a multiset
	 * of block ids, each entry one reference. */
	uint32_t raw[4 * MAX_BLOCKS];
	uint32_t nraw;
	int op;
	bool fault_armed;
	/* A call left a state the model cannot know (kvp_seq_commit's
	 * partial -ENOMEM): stop comparing, just clean up. */
	bool lost_track;
	/* A fork-heavy input: its own op mix (fork_ops), ids that pick
	 * live sequences and fresh fork targets, token counts at block
	 * boundaries, and kvp_manager_check at the end. */
	bool forky;
	bool force_prefix;   /* the slots' managers cache prefixes */
	const uint64_t *ids; /* seq_ids or fork_ids */
	int nids;
	/* The pool and managers come from caches (see below): their
	 * counters start where the last input left them. */
	int pool_slot;
	struct mgr_entry *slot_entry[NMGR];
	struct kvp_pool_stats pool_base;
	struct kvp_stats mgr_base[NMGR];
};

/* Events (see below): the library's, split per hash, and their check. */
static void on_event(const struct kvp_event *ev, void *arg);
static void check_events(struct world *w);
static uint32_t nlib_events;

static char trace[MAX_OPS + 64][200];
static int trace_all = -1; /* KVP_FUZZ_TRACE set: print every input's */
static int ntrace;
static FILE *devnull_w, *devnull_r;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * Whether note() records the calls: formatting every call was half of an
 * execution's time, so libFuzzer and --random runs leave it off
 * (KVP_FUZZ_TRACE turns it on), and tests/fuzz_main.c turns it on to
 * replay files, such as the input a failed run left in fuzz-artifacts/.
 */
static int record_calls = -1;

void fuzz_api_record_calls(int on);
void fuzz_api_record_calls(int on)
{
	record_calls = on;
}

static void note(const char *fmt, ...)
{
	va_list ap;

	if (!record_calls || ntrace >= (int)(sizeof(trace) / sizeof(trace[0])))
		return;
	va_start(ap, fmt);
	vsnprintf(trace[ntrace++], sizeof(trace[0]), fmt, ap);
	va_end(ap);
}

static void mismatch(const char *fmt, ...) __attribute__((format(printf, 1, 2),
							 noreturn));
static void mismatch(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "\n=== fuzz_api: library and model disagree\n");
	if (record_calls)
		fprintf(stderr, "--- calls (library return value last):\n");
	else
		fprintf(stderr, "--- calls not recorded: replay the input with"
				" tests/fuzz_replay FILE to see them\n");
	for (int i = 0; i < ntrace; i++)
		fprintf(stderr, "  %3d %s\n", i, trace[i]);
	fprintf(stderr, "--- mismatch: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	abort();
}

#define EXPECT_RC(what, lib, model)                                          \
	do {                                                                 \
		if ((lib) != (model))                                        \
			mismatch("%s: library %d (%s), model %d (%s)", what, \
				 (lib), kvp_strerror(lib), (model),          \
				 kvp_strerror(model));                       \
	} while (0)

/*
 * kvp_block_refcount counts a block's holders: the chunks of block ids
 * and the tails of tables that hold it, and raw references (kvpool.h).
 * The model counts sequences (and raw references), an upper bound that
 * a fork's shared chunks go below.  They agree exactly on errors and on
 * free blocks; a held block has between one holder and the model's
 * count.  (That sharing is right is checked apart: kvp_manager_check
 * counts every chunk's holders, and the model predicts every
 * copy-on-write and every -EBUSY write.)
 */
static bool refcount_agrees(int lib, int model)
{
	return model <= 0 ? lib == model : lib >= 1 && lib <= model;
}

#define EXPECT_EQ(what, lib, model)                                          \
	do {                                                                 \
		unsigned long long l_ = (unsigned long long)(lib);           \
		unsigned long long m_ = (unsigned long long)(model);         \
		if (l_ != m_)                                                \
			mismatch("%s: library %llu, model %llu", what, l_,   \
				 m_);                                        \
	} while (0)

/*
 * Whether the call that returned rc failed because of an injected
 * allocation failure, in which case the model must not run (nothing may
 * have changed).  -ENOMEM is accepted only from functions whose comment
 * in kvpool.h lists it (`documented`).
 */
static bool failed_by_fault(struct world *w, int rc, bool documented,
			    const char *what)
{
#ifdef KVP_FAULT_INJECTION
	bool fired = w->fault_armed && fault_fired();

	if (rc == -ENOMEM && fired && !documented)
		mismatch("%s: -ENOMEM, which kvpool.h does not list, after"
			 " the injected failure in %s", what, fault_site());
	return rc == -ENOMEM && fired;
#else
	(void)w;
	(void)rc;
	(void)documented;
	(void)what;
	return false;
#endif
}

/* Removes one reference of block b from the raw multiset. */
static void raw_drop(struct world *w, uint32_t b)
{
	for (uint32_t i = 0; i < w->nraw; i++)
		if (w->raw[i] == b) {
			w->raw[i] = w->raw[--w->nraw];
			return;
		}
	mismatch("harness: block %u is not held raw", b);
}

static void raw_add(struct world *w, uint32_t b)
{
	if (w->nraw < sizeof(w->raw) / sizeof(w->raw[0]))
		w->raw[w->nraw++] = b;
}

/* ------------------------------------------------------------ state */

static int cmp_access(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Compares everything observable; aborts on the first difference. */
static void check_state(struct world *w)
{
	struct kvp_pool_stats ls, ms;
	uint64_t clocks[NMGR * NFORK_IDS][2];
	int nclocks = 0;
	char what[96];

	if (model_error(w->mp))
		mismatch("the library made an illegal choice: %s",
			 model_error(w->mp));
	check_events(w);
	memset(&ls, 0xA5, sizeof(ls));
	kvp_pool_stats(w->pool, &ls);
	model_pool_stats(w->mp, &ms);
	EXPECT_EQ("pool stats: total", ls.total, ms.total);
	EXPECT_EQ("pool stats: free", ls.free, ms.free);
	EXPECT_EQ("pool stats: used", ls.used, ms.used);
	EXPECT_EQ("pool stats: allocs", ls.allocs - w->pool_base.allocs,
		  ms.allocs);
	EXPECT_EQ("pool stats: frees", ls.frees - w->pool_base.frees, ms.frees);
	EXPECT_EQ("pool stats: evictable", ls.evictable, ms.evictable);
	EXPECT_EQ("pool stats: cache_evictions",
		  ls.cache_evictions - w->pool_base.cache_evictions,
		  ms.cache_evictions);
	if (ls.in_thread_caches > ls.free)
		mismatch("pool stats: %llu parked > %llu free",
			 (unsigned long long)ls.in_thread_caches,
			 (unsigned long long)ls.free);
	for (uint32_t b = 0; b < w->nb; b++) {
		int lrc = kvp_block_refcount(w->pool, b),
		    mrc = model_block_refcount(w->mp, b);

		if (!refcount_agrees(lrc, mrc)) {
			snprintf(what, sizeof(what), "kvp_block_refcount(%u)",
				 b);
			EXPECT_RC(what, lrc, mrc);
		}
	}
	for (int i = 0; i < NMGR; i++) {
		struct kvp_stats lst, mst;

		if (!w->m[i])
			continue;
		for (int j = 0; j < w->nids; j++) {
			struct kvp_seq_info li, mi;
			uint32_t lb[MAX_BLOCKS + 1], mb[MAX_BLOCKS + 1], ln = 0,
							       mn = 0;
			int lrc, mrc;

			/* The EXPECT macros evaluate `what` (SEQ_WHAT:
			 * formatting, a third of an execution's time if
			 * done for every call) only on a mismatch. */
#define SEQ_WHAT(call)                                                         \
	(snprintf(what, sizeof(what), call "(m%d, %llu)", i,                   \
		  (unsigned long long)w->ids[j]),                              \
	 what)
			lrc = kvp_seq_info(w->m[i], w->ids[j], &li);
			mrc = model_seq_info(w->mm[i], w->ids[j], false, &mi);
			EXPECT_RC(SEQ_WHAT("kvp_seq_info"), lrc, mrc);
			if (lrc)
				continue;
			EXPECT_EQ(SEQ_WHAT("kvp_seq_info"), li.num_tokens,
				  mi.num_tokens);
			EXPECT_EQ(SEQ_WHAT("kvp_seq_info"), li.num_blocks,
				  mi.num_blocks);
			EXPECT_EQ(SEQ_WHAT("kvp_seq_info"), li.access_count,
				  mi.access_count);
			EXPECT_EQ(SEQ_WHAT("kvp_seq_info"), li.priority,
				  mi.priority);
			clocks[nclocks][0] = mi.last_access;
			clocks[nclocks++][1] = li.last_access;
			lrc = kvp_seq_blocks(w->m[i], w->ids[j], lb,
					     MAX_BLOCKS + 1, &ln);
			mrc = model_seq_blocks(w->mm[i], w->ids[j], false,
					       MAX_BLOCKS + 1, false, mb, &mn);
			EXPECT_RC(SEQ_WHAT("kvp_seq_blocks"), lrc, mrc);
			EXPECT_EQ(SEQ_WHAT("kvp_seq_blocks"), ln, mn);
			for (uint32_t k = 0; k < ln; k++)
				if (lb[k] != mb[k])
					mismatch("%s: entry %u: library block"
						 " %u, model %u",
						 SEQ_WHAT("kvp_seq_blocks"), k,
						 lb[k], mb[k]);
#undef SEQ_WHAT
		}
		memset(&lst, 0xA5, sizeof(lst));
		kvp_manager_stats(w->m[i], &lst);
		model_manager_stats(w->mm[i], &mst);
#define SAME(f)                                                              \
	EXPECT_EQ("kvp_manager_stats: " #f, lst.f - w->mgr_base[i].f, mst.f)
		SAME(sequences);
		SAME(tokens);
		SAME(seq_creates);
		SAME(seq_frees);
		SAME(appends);
		SAME(forks);
		SAME(evictions);
		SAME(cow_copies);
		SAME(blocks_allocated);
		SAME(blocks_released);
		SAME(prefix_queries);
		SAME(prefix_hits);
		SAME(prefix_cached_blocks);
		SAME(prefix_commits);
		SAME(prefix_evictions);
		SAME(prefix_pinned);
		SAME(retention_clock);
#undef SAME
		EXPECT_EQ("kvp_manager_stats: blocks_used", lst.blocks_used,
			  mst.blocks_used);
		EXPECT_EQ("kvp_manager_stats: blocks_total", lst.blocks_total,
			  mst.blocks_total);
		EXPECT_EQ("kvp_manager_stats: bytes_per_block",
			  lst.bytes_per_block, mst.bytes_per_block);
	}
	/* The access clocks: the library's in the model's order, strictly
	 * increasing (one thread: every access gets a later tick). */
	qsort(clocks, (size_t)nclocks, sizeof(clocks[0]), cmp_access);
	for (int i = 1; i < nclocks; i++)
		if (clocks[i][1] <= clocks[i - 1][1])
			mismatch("access clocks out of order: the model's"
				 " %llu-th access has library clock %llu,"
				 " not after %llu",
				 (unsigned long long)clocks[i][0],
				 (unsigned long long)clocks[i][1],
				 (unsigned long long)clocks[i - 1][1]);
}

/* ------------------------------------------------------------ decoding */

static int mgr_index(struct rd *r)
{
	return u8(r) % NMGR;
}

/*
 * A sequence id of manager i.  A fork-heavy input mostly names a live
 * one, often among the newest (the leaves of a fork tree: forking them
 * makes the tree deep), and sometimes any id of its table.
 */
static uint64_t seq_id(struct world *w, int i, struct rd *r)
{
	uint8_t b = u8(r);
	const struct model_mgr *mm = w->mm[i];

	if (!w->forky)
		return seq_ids[b % NIDS];
	if (mm && mm->nseqs && b < 96) {
		uint32_t newest = mm->nseqs < 3 ? mm->nseqs : 3;

		return mm->seqs[mm->nseqs - 1 - b % newest].id;
	}
	if (mm && mm->nseqs && b < 208)
		return mm->seqs[b % mm->nseqs].id;
	return w->ids[b % (uint32_t)w->nids];
}

/* A fork's target: in a fork-heavy input mostly an id manager i does
 * not use (the fork succeeds and the tree grows). */
static uint64_t fork_dst(struct world *w, int i, struct rd *r)
{
	uint8_t b;

	if (!w->forky || !w->mm[i])
		return seq_id(w, i, r);
	b = u8(r);
	if (b >= 224)
		return w->ids[b % (uint32_t)w->nids]; /* may be -EEXIST */
	for (int k = 0; k < w->nids; k++) {
		uint64_t id = w->ids[(b + k) % w->nids];

		if (!model_seq_find(w->mm[i], id))
			return id;
	}
	return w->ids[b % (uint32_t)w->nids];
}

/*
 * A token count for truncating sequence ms of a fork-heavy input: 0, a
 * block boundary, one token either side of one, inside a block (shared
 * or not), or the length unchanged.
 */
static uint32_t fork_cut(struct world *w, struct rd *r,
			 const struct model_seq *ms)
{
	uint8_t b = u8(r), v = u8(r);
	uint32_t nb = ms->nblocks, k = nb ? v % (nb + 1) : 0, t;

	switch (b % 6) {
	case 0:
		return 0;
	case 1:
		t = k * w->bt;
		break;
	case 2:
		t = k * w->bt + 1;
		break;
	case 3:
		t = k ? k * w->bt - 1 : 0;
		break;
	case 4:
		t = k * w->bt + (w->bt > 1 ? 1 + b / 6 % (w->bt - 1) : 0);
		break;
	default:
		return ms->tokens;
	}
	return t <= ms->tokens ? t : ms->tokens;
}

/* A token count: mostly small, sometimes at or past the limits. */
static uint32_t tokens(struct world *w, struct rd *r)
{
	uint8_t b = u8(r);

	if (b < 150)
		return b % (3 * w->bt + 1);
	if (b < 200)
		return (b - 150) % (w->nb + 2) * w->bt;
	if (b < 230)
		return u16(r) % (w->nb * w->bt + 2 * w->bt);
	switch (b % 8) {
	case 0:
		return UINT32_MAX;
	case 1:
		return UINT32_MAX - 1;
	case 2:
		return UINT32_MAX - w->bt;
	case 3:
		return w->nb * w->bt;
	case 4:
		return w->nb * w->bt + 1;
	case 5:
		return INT32_MAX;
	case 6:
		return 1u << 31;
	default:
		return u32(r);
	}
}

static int32_t priority(struct rd *r)
{
	static const int32_t special[] = {0, 1, -1, INT32_MAX, INT32_MIN};
	uint8_t b = u8(r);

	if (b < 5)
		return special[b];
	return (int32_t)b - 128;
}

/* A block id: held raw, free, held by a sequence, or out of range. */
enum pick { PICK_RAW, PICK_FREE, PICK_ANY, PICK_OOR };

static uint32_t block_id(struct world *w, struct rd *r, enum pick *kind)
{
	uint8_t b = u8(r);
	uint32_t v = u8(r);

	switch (b % 4) {
	case 0:
		if (w->nraw) {
			*kind = PICK_RAW;
			return w->raw[v % w->nraw];
		}
		/* fall through */
	case 1:
		for (uint32_t i = 0; i < w->nb; i++) {
			uint32_t id = (v + i) % w->nb;

			if (model_block_refcount(w->mp, id) == 0) {
				*kind = PICK_FREE;
				return id;
			}
		}
		/* fall through */
	case 2:
		*kind = PICK_ANY;
		return v % w->nb;
	default:
		*kind = PICK_OOR;
		switch (v % 4) {
		case 0:
			return w->nb;
		case 1:
			return w->nb + 1;
		case 2:
			return KVP_MAX_BLOCKS;
		default:
			return UINT32_MAX;
		}
	}
}

/* ------------------------------------------------------------ setup */

static const uint32_t bts[] = {1, 2, 3, 4, 5, 8, 16, 7};
static const uint32_t nbs[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 17, 24, 31,
			       32, MAX_BLOCKS};

/* Data-owning layouts: a few, so that the pool cache below keeps most
 * configurations an input can name. */
static void make_layout(struct rd *r, struct kvp_layout *l)
{
	static const struct kvp_layout layouts[] = {
		{1, 1, 2, KVP_F16}, {2, 1, 1, KVP_U8}, {2, 1, 2, KVP_F64},
		{1, 1, 1, KVP_F32}};

	*l = layouts[u8(r) % 4];
}

/* kvp_manager_create's return for cfg on this input's pool (the model's
 * config check cannot see the pool's size, which the pin cap needs). */
static int mgr_config_rc(const struct world *w,
			 const struct kvp_manager_config *cfg, bool null_out)
{
	int rc = model_manager_config_rc(cfg, null_out);

	return rc ? rc : model_manager_pins_rc(cfg, w->nb);
}

/*
 * A manager configuration: a valid one, or with `wild` (or a bit of the
 * input) anything from the tables of interesting values.
 */
static struct kvp_manager_config mgr_config(struct world *w, struct rd *r,
					    bool wild)
{
	/* Few valid ones, so that the cache below keeps them all. */
	static const float thresholds[] = {0.0f, 0.5f, 1.0f, 0.25f};
	static const float watermarks[] = {0.0f, 0.1f, 1e-9f, 0.5f};
	struct kvp_manager_config c, canon;
	uint8_t b = u8(r), t = u8(r), m = (uint8_t)(t * 7 + b);

	memset(&c, 0, sizeof(c));
	c.pool = w->pool;
	c.policy = (enum kvp_policy)(b % 4);
	c.eviction_threshold = thresholds[t % 4];
	c.watermark = watermarks[t % 4];
	if ((b & 4) || (w->force_prefix && !wild))
		c.flags = KVP_PREFIX_CACHE;
	/* Pin caps of prefix-caching managers: the default (a quarter of
	 * the pool) or 1. */
	c.max_pinned = (c.flags & KVP_PREFIX_CACHE) && (m & 8) ? 1 : 0;
	canon = c;
	if (wild || (b & 0xE0) == 0xE0) {
		static const int bad_policy[] = {4, -1, 100, 0, 1, 2, 3, 0};
		static const uint32_t bad_flags[] = {0, KVP_PREFIX_CACHE, 2,
						     1u << 31};

		c.policy = (enum kvp_policy)bad_policy[(b >> 2) % 8];
		c.flags = bad_flags[(t >> 3) % 4];
		c.eviction_threshold = floats[t % 16];
		c.watermark = floats[m % 16];
		if ((b & 0x10) && (t & 0x80))
			c.pool = NULL;
		/* The pool's size, or one more (-EINVAL). */
		if ((m & 0x30) == 0x30)
			c.max_pinned = w->nb + (m & 1);
		/* A wild configuration that happens to be valid becomes
		 * the valid one of the same bytes: the slots' managers
		 * then come from the 48 valid configurations, which the
		 * cache below keeps all of (a manager outside it would
		 * cost a destroy, 10 ms or more). */
		if (!wild && mgr_config_rc(w, &c, false) == 0)
			return canon;
	}
	return c;
}


/*
 * Caches.  kvp_manager_destroy waits for an RCU barrier, and liburcu's
 * call_rcu worker batches callbacks every 10 ms, so destroying the
 * managers of every input would hold the fuzzer to about 50 inputs a
 * second.  Pools and managers are therefore kept across inputs, keyed by
 * their configuration: an input starts from an entry's pool with every
 * block free and managers without sequences, compares counters from
 * where they stand (w->pool_base, w->mgr_base), and ends by freeing every
 * sequence and raw reference it made ("closing" a manager frees its
 * sequences as kvp_manager_destroy would).  Real destroys happen when an
 * entry is evicted, and then the pool must be whole.
 */
#define POOL_CACHE 1024
#define MGRS_PER_POOL 96 /* 2 slots x the 48 valid configurations */

struct pool_key {
	uint32_t num_blocks, block_tokens, cache_blocks, flags;
	struct kvp_layout layout; /* zero for an ID-only pool */
};

struct mgr_key {
	enum kvp_policy policy;
	float threshold, watermark;
	uint32_t flags, max_pinned;
};

struct mgr_entry {
	struct kvp_manager *m;
	struct mgr_key key;
	uint64_t stamp;
	bool busy; /* in a slot of the running input */
};

static struct pool_entry {
	struct kvp_pool *pool;
	struct pool_key key;
	uint64_t stamp;
	struct mgr_entry mgrs[MGRS_PER_POOL];
} *pools;

static uint64_t stamp;

static bool mgr_key_eq(const struct mgr_key *a, const struct mgr_key *b)
{
	return a->policy == b->policy && a->threshold == b->threshold &&
	       a->watermark == b->watermark && a->flags == b->flags &&
	       a->max_pinned == b->max_pinned;
}

/* Returns an entry of pool entry pe for a new manager, destroying the
 * least recently used idle one if all are taken. */
static struct mgr_entry *mgr_free_entry(struct pool_entry *pe)
{
	struct mgr_entry *best = NULL;

	for (int e = 0; e < MGRS_PER_POOL; e++) {
		struct mgr_entry *me = &pe->mgrs[e];

		if (!me->m)
			return me;
		if (!me->busy && (!best || me->stamp < best->stamp))
			best = me;
	}
	kvp_manager_destroy(best->m);
	memset(best, 0, sizeof(*best));
	return best;
}

static void pool_evict(struct pool_entry *pe)
{
	struct kvp_pool_stats st;

	for (int e = 0; e < MGRS_PER_POOL; e++)
		kvp_manager_destroy(pe->mgrs[e].m);
	kvp_pool_stats(pe->pool, &st);
	if (st.free != st.total || kvp_pool_check(pe->pool) != 0)
		mismatch("a cached pool is not whole after kvp_manager_destroy"
			 " of its managers: %llu of %llu free",
			 (unsigned long long)st.free,
			 (unsigned long long)st.total);
	kvp_pool_unref(pe->pool);
	memset(pe, 0, sizeof(*pe));
}

/* The cached pool of configuration c, created if needed; -1 if the
 * library refused c (compared with the model by the caller). */
static int pool_get(const struct kvp_pool_config *c, int *rc)
{
	struct pool_key key;
	int e, best = 0;

	if (!pools) {
		pools = calloc(POOL_CACHE, sizeof(*pools));
		if (!pools)
			abort();
	}
	memset(&key, 0, sizeof(key));
	key.num_blocks = c->num_blocks;
	key.block_tokens = c->block_tokens;
	key.cache_blocks = c->cache_blocks;
	key.flags = c->flags;
	if (c->layout)
		key.layout = *c->layout;
	*rc = 0;
	for (e = 0; e < POOL_CACHE && pools[e].pool; e++)
		if (!memcmp(&pools[e].key, &key, sizeof(key))) {
			pools[e].stamp = ++stamp;
			return e;
		}
	if (e == POOL_CACHE) {
		for (e = 1; e < POOL_CACHE; e++)
			if (pools[e].stamp < pools[best].stamp)
				best = e;
		pool_evict(&pools[best]);
		/* Keep the used entries first: move the last one here. */
		pools[best] = pools[POOL_CACHE - 1];
		memset(&pools[POOL_CACHE - 1], 0, sizeof(pools[0]));
		e = POOL_CACHE - 1;
	}
	*rc = kvp_pool_create(c, &pools[e].pool);
	if (*rc)
		return -1;
	pools[e].key = key;
	pools[e].stamp = ++stamp;
	return e;
}

/* Puts a manager of configuration c in slot i (none if c is refused). */
static void mgr_open(struct world *w, int i, struct rd *r)
{
	struct kvp_manager_config c = mgr_config(w, r, false);
	int mrc = mgr_config_rc(w, &c, false), rc = 0, e;
	struct pool_entry *pe = &pools[w->pool_slot];
	struct mgr_key key = {.policy = c.policy,
			      .threshold = c.eviction_threshold,
			      .watermark = c.watermark,
			      .flags = c.flags,
			      .max_pinned = c.max_pinned};
	struct mgr_entry *me = NULL;

	for (e = 0; e < MGRS_PER_POOL && mrc == 0; e++)
		if (pe->mgrs[e].m && !pe->mgrs[e].busy &&
		    mgr_key_eq(&pe->mgrs[e].key, &key)) {
			me = &pe->mgrs[e];
			break;
		}
	if (!me) {
		struct kvp_manager *m = NULL;

		rc = kvp_manager_create(&c, &m);
		if (rc == 0) {
			me = mgr_free_entry(pe);
			me->m = m;
			me->key = key;
		}
	}
	note("kvp_manager_create(slot %d, policy %d, threshold %g, watermark"
	     " %g, flags %#x%s) = %d%s",
	     i, (int)c.policy, (double)c.eviction_threshold,
	     (double)c.watermark, c.flags, c.pool ? "" : ", pool NULL", rc,
	     me && rc == 0 && me->stamp ? " (cached)" : "");
	if (failed_by_fault(w, rc, true, "kvp_manager_create"))
		return;
	EXPECT_RC("kvp_manager_create", rc, mrc);
	if (rc)
		return;
	me->busy = true;
	me->stamp = ++stamp;
	w->slot_entry[i] = me;
	w->m[i] = me->m;
	/* A cached manager's policy may have been changed by an earlier
	 * input (op_control): it is its configuration's again. */
	EXPECT_RC("kvp_manager_set_policy (opening a slot)",
		  kvp_manager_set_policy(w->m[i], c.policy), 0);
	w->mm[i] = model_mgr_new(w->mp, &c);
	EXPECT_RC("kvp_manager_set_event_cb",
		  kvp_manager_set_event_cb(w->m[i], on_event,
					   (void *)(intptr_t)i),
		  0);
	kvp_manager_stats(w->m[i], &w->mgr_base[i]);
	if (w->mgr_base[i].sequences != 0)
		mismatch("a cached manager still has %llu sequences",
			 (unsigned long long)w->mgr_base[i].sequences);
}

/* Frees every sequence of slot i's manager, as kvp_manager_destroy
 * would, and returns the manager to the cache. */
static void mgr_close(struct world *w, int i)
{
	struct model_mgr *mm = w->mm[i];

	note("(slot %d closed: its sequences freed, its cache reset)", i);
	while (mm->nseqs) {
		uint64_t id = mm->seqs[mm->nseqs - 1].id;

		EXPECT_RC("kvp_seq_free (closing a slot)",
			  kvp_seq_free(w->m[i], id), model_seq_free(mm, id));
	}
	if (mm->flags & KVP_PREFIX_CACHE)
		EXPECT_RC("kvp_prefix_reset (closing a slot)",
			  kvp_prefix_reset(w->m[i]), model_prefix_reset(mm));
	if (!w->lost_track)
		check_events(w);
	nlib_events = 0;
	w->mp->nevents = 0;
	(void)kvp_manager_set_event_cb(w->m[i], NULL, NULL);
	w->slot_entry[i]->busy = false;
	model_mgr_delete(mm);
	w->m[i] = NULL;
	w->mm[i] = NULL;
}

/* ------------------------------------------------------------ ops */

static void op_create(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	uint32_t t = tokens(w, r), tab[MAX_BLOCKS + 1], n = 0;
	int rc = kvp_seq_create(w->m[i], id, t), mrc;

	note("kvp_seq_create(m%d, %llu, %u) = %d", i, (unsigned long long)id,
	     t, rc);
	if (failed_by_fault(w, rc, true, "kvp_seq_create"))
		return;
	if (rc == 0 && kvp_seq_blocks(w->m[i], id, tab, MAX_BLOCKS + 1, &n))
		mismatch("kvp_seq_blocks after a create failed");
	mrc = model_seq_create(w->mm[i], id, t, rc == 0 ? tab : NULL);
	EXPECT_RC("kvp_seq_create", rc, mrc);
}

static void op_append(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	uint8_t v = u8(r);
	uint32_t t = (v & 0x80) ? tokens(w, r) : v % (2 * w->bt + 1);
	uint32_t cap = (v >> 4) % 3, lncow = 0xDEAD, mncow = 0xDEAD;
	bool null_cow = (v & 0x08) && !(v & 0x04);
	bool null_ncow = (v & 0x04) && (v & 0x08);
	struct kvp_copy lcow[2], mcow;
	uint32_t tab[MAX_BLOCKS + 1], n = 0;
	int rc, mrc;

	if (null_cow && (v & 0x02))
		cap = 0; /* NULL with cap 0 is valid */
	memset(lcow, 0xEE, sizeof(lcow));
	rc = kvp_seq_append(w->m[i], id, t, null_cow ? NULL : lcow, cap,
			    null_ncow ? NULL : &lncow);
	note("kvp_seq_append(m%d, %llu, %u, cow %s, cap %u, ncow %s) = %d"
	     " (ncow %u)",
	     i, (unsigned long long)id, t, null_cow ? "NULL" : "buf", cap,
	     null_ncow ? "NULL" : "ptr", rc, lncow);
	if (failed_by_fault(w, rc, true, "kvp_seq_append"))
		return;
	if (rc == 0 && kvp_seq_blocks(w->m[i], id, tab, MAX_BLOCKS + 1, &n))
		mismatch("kvp_seq_blocks after an append failed");
	mrc = model_seq_append(w->mm[i], id, t, null_cow, cap,
			       rc == 0 ? tab : NULL, &mcow, &mncow);
	EXPECT_RC("kvp_seq_append", rc, mrc);
	if (!null_ncow && mncow != 0xDEAD)
		EXPECT_EQ("kvp_seq_append: *ncow", lncow, mncow);
	if (rc == 0 && mncow == 1) {
		EXPECT_EQ("kvp_seq_append: cow.src", lcow[0].src, mcow.src);
		EXPECT_EQ("kvp_seq_append: cow.dst", lcow[0].dst, mcow.dst);
		EXPECT_EQ("kvp_seq_append: cow.tokens", lcow[0].tokens,
			  mcow.tokens);
	}
}

/*
 * kvp_seq_append_ex: the append the model predicts, and a report that
 * agrees with it: the token count, the blocks added (plus a copy's), and
 * the last block as the table read back has it.
 */
static void op_append_ex(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	uint8_t v = u8(r);
	uint32_t t = (v & 0x80) ? tokens(w, r) : v % (2 * w->bt + 1);
	uint32_t cap = (v >> 4) % 2, lncow = 0xDEAD, mncow = 0xDEAD, n0 = 0;
	const struct model_seq *ms =
		w->mm[i] ? model_seq_find(w->mm[i], id) : NULL;
	struct kvp_append_info in, was;
	struct kvp_copy lcow[1], mcow;
	uint32_t tab[MAX_BLOCKS + 1], n = 0;
	bool null_info = (v & 0x0F) == 0x0F;
	int rc, mrc;

	if (ms)
		n0 = ms->nblocks;
	memset(&in, 0xEE, sizeof(in));
	was = in;
	rc = kvp_seq_append_ex(w->m[i], id, t, lcow, cap, &lncow,
			       null_info ? NULL : &in);
	note("kvp_seq_append_ex(m%d, %llu, %u, cap %u, info %s) = %d"
	     " (ncow %u, last %u, tokens %u, new %u)",
	     i, (unsigned long long)id, t, cap, null_info ? "NULL" : "ptr", rc,
	     lncow, in.last_block, in.num_tokens, in.new_blocks);
	if (failed_by_fault(w, rc, true, "kvp_seq_append_ex"))
		return;
	if (null_info) {
		EXPECT_RC("kvp_seq_append_ex(info NULL)", rc, -EINVAL);
		return;
	}
	if (rc == 0 && kvp_seq_blocks(w->m[i], id, tab, MAX_BLOCKS + 1, &n))
		mismatch("kvp_seq_blocks after an append failed");
	mrc = model_seq_append(w->mm[i], id, t, false, cap,
			       rc == 0 ? tab : NULL, &mcow, &mncow);
	EXPECT_RC("kvp_seq_append_ex", rc, mrc);
	if (rc != 0) {
		if (memcmp(&in, &was, sizeof(in)))
			mismatch("kvp_seq_append_ex wrote *info and failed");
		return;
	}
	ms = model_seq_find(w->mm[i], id);
	EXPECT_EQ("kvp_seq_append_ex: num_tokens", in.num_tokens, ms->tokens);
	EXPECT_EQ("kvp_seq_append_ex: new_blocks", in.new_blocks,
		  ms->nblocks - n0 + mncow);
	EXPECT_EQ("kvp_seq_append_ex: last_block", in.last_block,
		  n ? tab[n - 1] : KVP_NO_BLOCK);
	if (mncow == 1)
		EXPECT_EQ("kvp_seq_append_ex: cow.dst", lcow[0].dst, mcow.dst);
}

static int cmp_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * A scheduler's controls: a policy change (out-of-range ones refused),
 * the next victim named and kept, the list of sequences (as a set), a
 * reservation (which the model cannot see: only its errors).
 */
static void op_control(struct world *w, struct rd *r)
{
	static const int policies[] = {0, 1, 2, 3, 4, -1, 1, 3};
	int i = mgr_index(r);
	uint8_t v = u8(r);
	uint64_t id = seq_id(w, i, r), lv = 0xDEAD, mv = 0xDEAD;
	static uint64_t lids[MAX_LISTED], mids[MAX_LISTED];
	uint32_t ln = 0xDEAD, mn = 0xDEAD, cap, t;
	int rc, p;

	switch (v % 4) {
	case 0:
		p = policies[(v >> 2) % 8];
		rc = kvp_manager_set_policy(w->m[i], (enum kvp_policy)p);
		note("kvp_manager_set_policy(m%d, %d) = %d", i, p, rc);
		EXPECT_RC("kvp_manager_set_policy", rc,
			  model_set_policy(w->mm[i], p));
		break;
	case 1:
		rc = kvp_evict_peek(w->m[i], (v & 4) ? NULL : &lv);
		note("kvp_evict_peek(m%d) = %d (victim %llu)", i, rc,
		     (unsigned long long)lv);
		EXPECT_RC("kvp_evict_peek", rc,
			  model_evict_peek(w->mm[i], v & 4, &mv));
		if (rc == 0)
			EXPECT_EQ("kvp_evict_peek: victim", lv, mv);
		break;
	case 2:
		cap = (v & 4) ? (v >> 3) % 4 : MAX_LISTED;
		rc = kvp_manager_seqs(w->m[i], lids, cap, &ln);
		note("kvp_manager_seqs(m%d, cap %u) = %d (n %u)", i, cap, rc,
		     ln);
		EXPECT_RC("kvp_manager_seqs", rc,
			  model_seqs(w->mm[i], false, cap, false, mids, &mn));
		EXPECT_EQ("kvp_manager_seqs: *n", ln, mn);
		if (rc == 0) {
			qsort(lids, ln, sizeof(*lids), cmp_id);
			qsort(mids, mn, sizeof(*mids), cmp_id);
			for (uint32_t k = 0; k < ln; k++)
				EXPECT_EQ("kvp_manager_seqs: id", lids[k],
					  mids[k]);
		}
		break;
	default:
		t = (v & 4) ? tokens(w, r) : (uint32_t)u8(r) * w->bt;
		rc = kvp_seq_reserve(w->m[i], id, t);
		note("kvp_seq_reserve(m%d, %llu, %u) = %d", i,
		     (unsigned long long)id, t, rc);
		if (failed_by_fault(w, rc, true, "kvp_seq_reserve"))
			return;
		EXPECT_RC("kvp_seq_reserve", rc,
			  model_seq_reserve(w->mm[i], id, t));
	}
}

static int do_fork(struct world *w, int i, uint64_t s, uint64_t d)
{
	int rc = kvp_seq_fork(w->m[i], s, d);

	note("kvp_seq_fork(m%d, %llu, %llu) = %d", i, (unsigned long long)s,
	     (unsigned long long)d, rc);
	if (failed_by_fault(w, rc, true, "kvp_seq_fork"))
		return rc;
	EXPECT_RC("kvp_seq_fork", rc, model_seq_fork(w->mm[i], s, d));
	return rc;
}

static void op_fork(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t s = seq_id(w, i, r), d = fork_dst(w, i, r);

	do_fork(w, i, s, d);
}

/*
 * kvp_seq_fork_n: up to 8 children, mostly ids the manager does not use
 * and distinct (success), sometimes a repeat or a taken id (-EEXIST),
 * KVP_FORK_KEEP_SOURCE or a bad flag, n = 0 or NULL dsts (-EINVAL).
 */
static void op_fork_n(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t s = seq_id(w, i, r), dsts[8];
	uint8_t v = u8(r);
	uint32_t n = v & 0x08 ? v % 8 : 1 + v % 8, flags;
	const uint64_t *dp = dsts;
	int rc;

	flags = v & 0x10 ? KVP_FORK_KEEP_SOURCE : 0;
	if ((v & 0xE0) == 0xE0)
		flags |= 1u << (u8(r) % 32);
	for (uint32_t k = 0; k < n; k++) {
		uint64_t d = fork_dst(w, i, r);

		/* Mostly distinct: the next id of the table not chosen. */
		for (uint32_t tries = 0; !(v & 0x20) && tries < 32; tries++) {
			bool dup = false;

			for (uint32_t j = 0; j < k; j++)
				dup |= dsts[j] == d;
			if (!dup)
				break;
			d = w->ids[(k + tries) % (uint32_t)w->nids];
		}
		dsts[k] = d;
	}
	if (n && (v & 0xC0) == 0xC0 && (v & 0x07) == 0x07)
		dp = NULL;
	rc = kvp_seq_fork_n(w->m[i], s, dp, n, flags);
	note("kvp_seq_fork_n(m%d, %llu, %u ids, flags %#x) = %d", i,
	     (unsigned long long)s, n, flags, rc);
	if (failed_by_fault(w, rc, true, "kvp_seq_fork_n"))
		return;
	EXPECT_RC("kvp_seq_fork_n", rc,
		  model_seq_fork_n(w->mm[i], s, dp, n, flags));
}

static void op_free(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	int rc = kvp_seq_free(w->m[i], id);

	note("kvp_seq_free(m%d, %llu) = %d", i, (unsigned long long)id, rc);
	if (failed_by_fault(w, rc, false, "kvp_seq_free"))
		return;
	EXPECT_RC("kvp_seq_free", rc, model_seq_free(w->mm[i], id));
}

static int do_truncate(struct world *w, int i, uint64_t id, uint32_t t)
{
	int rc = kvp_seq_truncate(w->m[i], id, t);

	note("kvp_seq_truncate(m%d, %llu, %u) = %d", i, (unsigned long long)id,
	     t, rc);
	if (failed_by_fault(w, rc, true, "kvp_seq_truncate"))
		return rc;
	EXPECT_RC("kvp_seq_truncate", rc, model_seq_truncate(w->mm[i], id, t));
	return rc;
}

static void op_truncate(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	uint8_t v = u8(r);
	const struct model_seq *ms =
		w->mm[i] ? model_seq_find(w->mm[i], id) : NULL;
	uint32_t t;
	int rc;

	if (ms && v < 200)
		t = w->forky ? fork_cut(w, r, ms)
			     : ms->tokens - v % (ms->tokens + 1);
	else
		t = tokens(w, r);
	rc = do_truncate(w, i, id, t);
	(void)rc;
}

static void op_trim(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	const struct model_seq *ms =
		w->mm[i] ? model_seq_find(w->mm[i], id) : NULL;
	uint32_t sink, win;
	bool null_ev;
	uint32_t lev = 0xDEAD, mev = 0xDEAD;
	int rc;

	if (w->forky && ms) {
		/* Sinks of a block or two (one token past a boundary too),
		 * and a window a whole or half number of blocks: the
		 * trimmed middle is often shared with forks. */
		uint8_t a = u8(r), b = u8(r);

		sink = (a % 3) * w->bt + ((a & 4) ? 1 : 0);
		win = (b % (ms->nblocks + 1)) * w->bt +
		      ((b & 0x80) ? w->bt / 2 : 0);
	} else {
		sink = tokens(w, r);
		win = tokens(w, r);
	}
	null_ev = u8(r) & 1;
	rc = kvp_seq_stream_trim(w->m[i], id, sink, win, null_ev ? NULL : &lev);

	note("kvp_seq_stream_trim(m%d, %llu, sink %u, window %u, %s) = %d"
	     " (evicted %u)",
	     i, (unsigned long long)id, sink, win, null_ev ? "NULL" : "ptr",
	     rc, lev);
	if (failed_by_fault(w, rc, true, "kvp_seq_stream_trim"))
		return;
	EXPECT_RC("kvp_seq_stream_trim", rc,
		  model_seq_stream_trim(w->mm[i], id, sink, win, &mev));
	if (rc == 0 && !null_ev)
		EXPECT_EQ("kvp_seq_stream_trim: *evicted_tokens", lev, mev);
}

static void op_priority(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	int32_t p = priority(r);
	int rc = kvp_seq_set_priority(w->m[i], id, p);

	note("kvp_seq_set_priority(m%d, %llu, %d) = %d", i,
	     (unsigned long long)id, p, rc);
	EXPECT_RC("kvp_seq_set_priority", rc,
		  model_seq_set_priority(w->mm[i], id, p));
}

/* The NULL-argument variants of info and blocks (check_state does the
 * valid ones after every call). */
static void op_query(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	uint8_t v = u8(r);
	uint32_t lb[MAX_BLOCKS + 1], mb[MAX_BLOCKS + 1], ln = 0xDEAD,
						      mn = 0xDEAD;
	uint32_t cap = u8(r) % (MAX_BLOCKS + 1);
	bool null_ids = v & 1, null_n = v & 2;
	int rc, mrc;

	if (v & 4) {
		struct kvp_seq_info li, mi;

		rc = kvp_seq_info(w->m[i], id, null_ids ? NULL : &li);
		note("kvp_seq_info(m%d, %llu, %s) = %d", i,
		     (unsigned long long)id, null_ids ? "NULL" : "ptr", rc);
		EXPECT_RC("kvp_seq_info", rc,
			  model_seq_info(w->mm[i], id, null_ids, &mi));
		return;
	}
	if (null_ids && (v & 8))
		cap = 0;
	rc = kvp_seq_blocks(w->m[i], id, null_ids ? NULL : lb, cap,
			    null_n ? NULL : &ln);
	note("kvp_seq_blocks(m%d, %llu, %s, cap %u, %s) = %d (n %u)", i,
	     (unsigned long long)id, null_ids ? "NULL" : "buf", cap,
	     null_n ? "NULL" : "ptr", rc, ln);
	mrc = model_seq_blocks(w->mm[i], id, null_ids, cap, null_n, mb, &mn);
	EXPECT_RC("kvp_seq_blocks", rc, mrc);
	if ((rc == 0 || rc == -ENOBUFS) && !null_n)
		EXPECT_EQ("kvp_seq_blocks: *n", ln, mn);
	if (rc == 0)
		for (uint32_t k = 0; k < ln; k++)
			EXPECT_EQ("kvp_seq_blocks: ids", lb[k], mb[k]);
}

static void op_admit(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint32_t t = tokens(w, r);
	int rc = kvp_admit(w->m[i], t);

	note("kvp_admit(m%d, %u) = %d", i, t, rc);
	EXPECT_RC("kvp_admit", rc, model_admit(w->mm[i], t));
}

static void op_evict(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint8_t v = u8(r);
	uint64_t lv = 0xDEAD, mv = 0xDEAD;
	int rc;

	if (v & 1) {
		rc = kvp_evict(w->m[i], (v & 2) ? NULL : &lv);
		note("kvp_evict(m%d, %s) = %d (victim %llu)", i,
		     (v & 2) ? "NULL" : "ptr", rc, (unsigned long long)lv);
		EXPECT_RC("kvp_evict", rc, model_evict(w->mm[i], &mv));
		if (rc == 0 && !(v & 2))
			EXPECT_EQ("kvp_evict: victim", lv, mv);
	} else {
		float target = fl(r);
		uint32_t cap = (v >> 2) % 4, ln = 0xDEAD, mn = 0xDEAD;
		uint64_t lvs[4], mvs[4];
		bool null_v = (v & 2) && !(v & 0x40);
		bool null_n = (v & 0x40) && (v & 0x80);

		if (null_v && (v & 0x20))
			cap = 0;
		rc = kvp_evict_until(w->m[i], target, null_v ? NULL : lvs, cap,
				     null_n ? NULL : &ln);
		note("kvp_evict_until(m%d, %g, %s, cap %u, %s) = %d (n %u)",
		     i, (double)target, null_v ? "NULL" : "buf", cap,
		     null_n ? "NULL" : "ptr", rc, ln);
		EXPECT_RC("kvp_evict_until", rc,
			  model_evict_until(w->mm[i], target, null_v, cap,
					    null_n, mvs, &mn));
		if (rc >= 0) {
			EXPECT_EQ("kvp_evict_until: *n", ln, mn);
			for (uint32_t k = 0; k < ln; k++)
				EXPECT_EQ("kvp_evict_until: victim", lvs[k],
					  mvs[k]);
		}
	}
}

static uint32_t seq_list(struct world *w, int i, struct rd *r, uint64_t *seqs)
{
	uint32_t n = u8(r) % 5;

	for (uint32_t k = 0; k < n; k++)
		seqs[k] = seq_id(w, i, r);
	return n;
}

static void op_export(struct world *w, struct rd *r)
{
	enum { ROWS = 4, COLS = MAX_BLOCKS + 2 };
	int i = mgr_index(r);
	uint8_t v = u8(r);
	uint64_t seqs[ROWS];
	uint32_t nseq = seq_list(w, i, r, seqs);
	bool null_seqs = (v & 0x80) != 0;
	int rc, mrc;

	if (null_seqs && (v & 0x40))
		nseq = 0;
	switch (v % 3) {
	case 0: {
		static int32_t lt[ROWS * COLS], mt[ROWS * COLS];
		uint32_t stride = u8(r) % COLS;
		bool null_table = v & 4;
		int32_t pad = (v & 8) ? -1 : 0x7EADBEEF;

		rc = kvp_export_block_table(w->m[i], null_seqs ? NULL : seqs,
					    nseq, null_table ? NULL : lt,
					    stride, pad);
		note("kvp_export_block_table(m%d, %u seqs%s, %s, stride %u)"
		     " = %d",
		     i, nseq, null_seqs ? " NULL" : "",
		     null_table ? "NULL" : "buf", stride, rc);
		mrc = model_export_block_table(w->mm[i], seqs, nseq, null_seqs,
					       null_table, mt, stride, pad);
		EXPECT_RC("kvp_export_block_table", rc, mrc);
		if (rc == 0 && !null_table)
			for (uint32_t k = 0; k < nseq * stride; k++)
				EXPECT_EQ("kvp_export_block_table: entry",
					  lt[k], mt[k]);
		break;
	}
	case 1: {
		static int32_t lp[ROWS + 1], mp[ROWS + 1], li[ROWS * COLS],
			mi[ROWS * COLS], ll[ROWS], ml[ROWS];
		uint32_t cap = u8(r) % (ROWS * COLS);
		bool null_indptr = (v & 0x0C) == 0x04;
		bool null_indices = (v & 0x0C) == 0x08;
		bool null_lpl = (v & 0x0C) == 0x0C && (v & 0x10);

		rc = kvp_export_csr(w->m[i], null_seqs ? NULL : seqs, nseq,
				    null_indptr ? NULL : lp,
				    null_indices ? NULL : li, cap,
				    null_lpl ? NULL : ll);
		note("kvp_export_csr(m%d, %u seqs%s, indptr %s, indices %s,"
		     " cap %u, last_page_len %s) = %d",
		     i, nseq, null_seqs ? " NULL" : "",
		     null_indptr ? "NULL" : "buf",
		     null_indices ? "NULL" : "buf", cap,
		     null_lpl ? "NULL" : "buf", rc);
		mrc = model_export_csr(w->mm[i], seqs, nseq, null_seqs,
				       null_indptr, null_indices, null_lpl, mp,
				       mi, cap, ml);
		EXPECT_RC("kvp_export_csr", rc, mrc);
		if (rc == 0 && !null_indices) {
			for (uint32_t k = 0; k <= nseq; k++)
				EXPECT_EQ("kvp_export_csr: indptr", lp[k],
					  mp[k]);
			for (int32_t k = 0; k < lp[nseq]; k++)
				EXPECT_EQ("kvp_export_csr: indices", li[k],
					  mi[k]);
			for (uint32_t k = 0; k < nseq; k++)
				EXPECT_EQ("kvp_export_csr: last_page_len",
					  ll[k], ml[k]);
		}
		break;
	}
	default: {
		static int64_t ls[MAX_BLOCKS * 16 + 8], ms[MAX_BLOCKS * 16 + 8];
		uint64_t id = seq_id(w, i, r);
		uint32_t first = tokens(w, r);
		uint32_t n = u16(r) % (w->nb * w->bt + 4);
		bool null_slots = v & 4;

		if (null_slots && (v & 8))
			n = 0;
		rc = kvp_export_slot_mapping(w->m[i], id, first, n,
					     null_slots ? NULL : ls);
		note("kvp_export_slot_mapping(m%d, %llu, %u, %u, %s) = %d", i,
		     (unsigned long long)id, first, n,
		     null_slots ? "NULL" : "buf", rc);
		mrc = model_export_slot_mapping(w->mm[i], id, first, n,
						null_slots, ms);
		EXPECT_RC("kvp_export_slot_mapping", rc, mrc);
		if (rc == 0)
			for (uint32_t k = 0; k < n; k++)
				EXPECT_EQ("kvp_export_slot_mapping: slot",
					  ls[k], ms[k]);
	}
	}
}

static void op_raw_alloc(struct world *w, struct rd *r)
{
	uint8_t v = u8(r);
	uint32_t n = u8(r) % (w->nb + 2), ids[MAX_BLOCKS + 2];
	bool null_pool = (v & 3) == 3, null_ids = (v & 3) == 2;
	int rc, mrc;

	if (v & 4)
		n = (v & 8) ? UINT32_MAX : w->nb + 1;
	rc = kvp_pool_alloc(null_pool ? NULL : w->pool, n,
			    null_ids ? NULL : ids);
	note("kvp_pool_alloc(%s, %u, %s) = %d", null_pool ? "NULL" : "pool",
	     n, null_ids ? "NULL" : "buf", rc);
	if (failed_by_fault(w, rc, false, "kvp_pool_alloc"))
		return;
	mrc = model_pool_alloc(w->mp, null_pool, null_ids, n,
			       rc == 0 ? ids : NULL);
	EXPECT_RC("kvp_pool_alloc", rc, mrc);
	if (rc == 0)
		for (uint32_t k = 0; k < n; k++)
			raw_add(w, ids[k]);
}

static void op_raw_free(struct world *w, struct rd *r)
{
	uint8_t v = u8(r);
	uint32_t n = u8(r) % (MAX_LIST + 1), ids[MAX_LIST];
	bool null_pool = (v & 3) == 3, null_ids = (v & 3) == 2;
	int rc, mrc, alt;
	uint32_t k;

	/* Never a sequence's block: freeing one is a caller bug that
	 * kvpool.h does not define. */
	for (k = 0; k < n; k++) {
		enum pick kind;

		ids[k] = block_id(w, r, &kind);
		if (kind == PICK_ANY && model_block_refcount(w->mp, ids[k]))
			ids[k] = w->nb;
	}
	rc = kvp_pool_free(null_pool ? NULL : w->pool, null_ids ? NULL : ids,
			   n);
	note("kvp_pool_free(%s, %s, %u: %u %u %u %u ...) = %d",
	     null_pool ? "NULL" : "pool", null_ids ? "NULL" : "ids", n,
	     n > 0 ? ids[0] : 0, n > 1 ? ids[1] : 0, n > 2 ? ids[2] : 0,
	     n > 3 ? ids[3] : 0, rc);
	mrc = model_pool_free(w->mp, null_pool, null_ids, ids, n, &alt);
	if (!(rc == alt && alt < 0))
		EXPECT_RC("kvp_pool_free", rc, mrc);
	if (rc == 0)
		for (k = 0; k < n; k++)
			raw_drop(w, ids[k]);
}

static void op_raw_ref(struct world *w, struct rd *r)
{
	uint8_t v = u8(r);
	enum pick kind;
	uint32_t id = block_id(w, r, &kind);
	int rc;

	if (kind == PICK_ANY && model_block_refcount(w->mp, id))
		id = w->nb; /* never a sequence's block */
	if (v & 1) {
		rc = kvp_block_refcount((v & 2) ? NULL : w->pool, id);
		note("kvp_block_refcount(%s, %u) = %d",
		     (v & 2) ? "NULL" : "pool", id, rc);
		if (!refcount_agrees(rc, model_block_refcount(
						 (v & 2) ? NULL : w->mp, id)))
			EXPECT_RC("kvp_block_refcount", rc,
				  model_block_refcount((v & 2) ? NULL : w->mp,
						       id));
		return;
	}
	rc = kvp_block_ref((v & 2) ? NULL : w->pool, id);
	note("kvp_block_ref(%s, %u) = %d", (v & 2) ? "NULL" : "pool", id, rc);
	EXPECT_RC("kvp_block_ref", rc,
		  model_block_ref((v & 2) ? NULL : w->mp, id));
	if (rc == 0)
		raw_add(w, id);
}

static void fill(struct rd *r, uint8_t *buf, size_t n)
{
	for (size_t k = 0; k < n; k++)
		buf[k] = u8(r);
}

static void op_data(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	uint8_t v = u8(r);
	const struct model_seq *ms =
		w->mm[i] ? model_seq_find(w->mm[i], id) : NULL;
	uint32_t pos = (ms && ms->tokens && !(v & 0x80))
			       ? u8(r) % ms->tokens
			       : tokens(w, r);
	uint32_t layer = (v & 0x40) ? ((v & 0x20) ? UINT32_MAX : w->layers)
				    : u8(r) % (w->layers ? w->layers : 1);
	bool null_buf = (v & 0x18) == 0x18;
	uint8_t k[MODEL_MAX_ROW], vv[MODEL_MAX_ROW], mk[MODEL_MAX_ROW],
		mv[MODEL_MAX_ROW];
	int rc, mrc;

	/* A fork-heavy input mostly writes: -EBUSY on a shared block. */
	switch (w->forky && (v & 0x04) ? 0 : v % 3) {
	case 0:
		fill(r, k, w->row);
		fill(r, vv, w->row);
		rc = kvp_seq_write(w->m[i], id, pos, layer, null_buf ? NULL : k,
				   vv);
		note("kvp_seq_write(m%d, %llu, pos %u, layer %u%s) = %d", i,
		     (unsigned long long)id, pos, layer,
		     null_buf ? ", k NULL" : "", rc);
		EXPECT_RC("kvp_seq_write", rc,
			  model_seq_write(w->mm[i], id, pos, layer,
					  null_buf ? NULL : k, vv));
		break;
	case 1: {
		bool known[2];

		memset(k, 0x5A, sizeof(k));
		memset(vv, 0x5A, sizeof(vv));
		rc = kvp_seq_read(w->m[i], id, pos, layer, k,
				  null_buf ? NULL : vv);
		note("kvp_seq_read(m%d, %llu, pos %u, layer %u%s) = %d", i,
		     (unsigned long long)id, pos, layer,
		     null_buf ? ", v NULL" : "", rc);
		mrc = model_seq_read(w->mm[i], id, pos, layer, null_buf, mk,
				     mv, known);
		EXPECT_RC("kvp_seq_read", rc, mrc);
		if (rc == 0 && known[0] && memcmp(k, mk, w->row))
			mismatch("kvp_seq_read: K row differs");
		if (rc == 0 && known[1] && memcmp(vv, mv, w->row))
			mismatch("kvp_seq_read: V row differs");
		break;
	}
	default: {
		static uint8_t lk[MAX_BLOCKS * 16 * MODEL_MAX_ROW],
			lv[MAX_BLOCKS * 16 * MODEL_MAX_ROW],
			gk[MAX_BLOCKS * 16 * MODEL_MAX_ROW],
			gv[MAX_BLOCKS * 16 * MODEL_MAX_ROW];
		static bool known[MAX_BLOCKS * 16];

		rc = kvp_seq_gather(w->m[i], id, layer, lk,
				    null_buf ? NULL : lv);
		note("kvp_seq_gather(m%d, %llu, layer %u%s) = %d", i,
		     (unsigned long long)id, layer,
		     null_buf ? ", v NULL" : "", rc);
		mrc = model_seq_gather(w->mm[i], id, layer, null_buf, gk, gv,
				       known);
		EXPECT_RC("kvp_seq_gather", rc, mrc);
		if (rc == 0)
			for (uint32_t t = 0; t < ms->tokens; t++) {
				size_t at = (size_t)t * w->row;

				if (known[t] && (memcmp(lk + at, gk + at,
							w->row) ||
						 memcmp(lv + at, gv + at,
							w->row)))
					mismatch("kvp_seq_gather: token %u"
						 " differs", t);
			}
	}
	}
}

static void op_checks(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint8_t v = u8(r);
	int rc, mrc;

	switch (v % 6) {
	case 5:
		rc = kvp_manager_set_event_cb(NULL, on_event, NULL);
		note("kvp_manager_set_event_cb(NULL) = %d", rc);
		EXPECT_RC("kvp_manager_set_event_cb", rc, -EINVAL);
		break;
	case 0:
		rc = kvp_pool_check((v & 8) ? NULL : w->pool);
		note("kvp_pool_check(%s) = %d", (v & 8) ? "NULL" : "pool", rc);
		if (failed_by_fault(w, rc, true, "kvp_pool_check"))
			return;
		EXPECT_RC("kvp_pool_check", rc, (v & 8) ? -EINVAL : 0);
		break;
	case 1:
		/* -EFAULT prints details: only now and then.  And it walks
		 * every manager of the pool (the cache keeps up to 64 per
		 * pool): 85% of a long run's time if done every time. */
		if (model_pool_raw_refs(w->mp) && (v & 0xF0) != 0xF0)
			return;
		if ((v & 0x30) != 0x30)
			return;
		rc = kvp_manager_check(w->m[i]);
		note("kvp_manager_check(m%d) = %d", i, rc);
		if (failed_by_fault(w, rc, true, "kvp_manager_check"))
			return;
		EXPECT_RC("kvp_manager_check", rc,
			  model_manager_check(w->mm[i]));
		break;
	case 2: {
		FILE *f = (v & 8) ? NULL : (v & 16) ? devnull_r : devnull_w;

		rc = kvp_manager_dump(w->m[i], f);
		note("kvp_manager_dump(m%d, %s) = %d", i,
		     !f ? "NULL" : f == devnull_r ? "read-only" : "/dev/null",
		     rc);
		mrc = !w->m[i] || !f ? -EINVAL : f == devnull_r ? -EIO : 0;
		clearerr(devnull_r);
		EXPECT_RC("kvp_manager_dump", rc, mrc);
		break;
	}
	case 3: {
		struct kvp_pool_stats st;

		note("kvp_thread_flush()");
		kvp_thread_flush();
		kvp_pool_stats(w->pool, &st);
		EXPECT_EQ("kvp_pool_stats after kvp_thread_flush: parked",
			  st.in_thread_caches, 0);
		break;
	}
	default: {
		struct kvp_pool *p = kvp_pool_ref(w->pool);

		note("kvp_pool_ref + kvp_pool_unref");
		if (p != w->pool)
			mismatch("kvp_pool_ref returned another pointer");
		kvp_pool_unref(p);
		if (kvp_pool_ref(NULL) != NULL)
			mismatch("kvp_pool_ref(NULL) is not NULL");
		kvp_pool_unref(NULL);
	}
	}
}

/* Pool and manager configurations, valid or not, created and dropped. */
static void op_configs(struct world *w, struct rd *r)
{
	static const uint32_t cfg_nbs[] = {0, 1, 5, 64, KVP_MAX_BLOCKS + 1,
					   UINT32_MAX, 3, 2};
	static const uint32_t btv[] = {0, 1, 16, UINT32_MAX, 3, 1u << 31};
	static const uint32_t caches[] = {0, 1, 2, 3, 65, 4097, UINT32_MAX, 4};
	static const uint32_t flags[] = {0, 1, 2, 3, 4, 1u << 31, 0, 1};
	static const uint32_t dims[] = {0, 1, 2, UINT32_MAX, 1u << 20, 7};
	static const int dtypes[] = {0, 1, 2, 3, 4, 5, -1, 1000};
	uint8_t v = u8(r);

	if (v & 1) {
		struct kvp_manager_config c = mgr_config(w, r, true);
		struct kvp_manager *m = NULL;
		bool null_cfg = (v & 6) == 6, null_out = (v & 6) == 4;
		int rc;

		/* A valid one would cost a destroy (10 ms or more, see the
		 * caches): the slots' managers are the valid ones. */
		if (mgr_config_rc(w, null_cfg ? NULL : &c, null_out) == 0)
			return;
		rc = kvp_manager_create(null_cfg ? NULL : &c,
					null_out ? NULL : &m);

		note("kvp_manager_create(%s, policy %d, threshold %g,"
		     " watermark %g, flags %#x, %s) = %d",
		     null_cfg ? "NULL" : "cfg", (int)c.policy,
		     (double)c.eviction_threshold, (double)c.watermark,
		     c.flags, null_out ? "NULL" : "out", rc);
		if (failed_by_fault(w, rc, true, "kvp_manager_create"))
			return;
		EXPECT_RC("kvp_manager_create", rc,
			  mgr_config_rc(w, null_cfg ? NULL : &c, null_out));
		kvp_manager_destroy(m);
	} else {
		struct kvp_pool_config c;
		struct kvp_layout l;
		struct kvp_pool *p = NULL;
		bool null_cfg = (v & 6) == 6, null_out = (v & 6) == 4;
		size_t arena = 0;
		int rc, mrc;

		memset(&c, 0, sizeof(c));
		c.num_blocks = cfg_nbs[u8(r) % 8];
		c.block_tokens = btv[u8(r) % 6];
		c.cache_blocks = caches[u8(r) % 8];
		c.flags = flags[u8(r) % 8];
		c.device_id = -1;
		if (v & 8) {
			l.num_layers = dims[u8(r) % 6];
			l.num_kv_heads = dims[u8(r) % 6];
			l.head_dim = dims[u8(r) % 6];
			l.dtype = (enum kvp_dtype)dtypes[u8(r) % 8];
			c.layout = &l;
			/* An upper bound (8-byte elements), saturating. */
			arena = 16;
			if (__builtin_mul_overflow(arena, (size_t)l.num_layers,
						   &arena) ||
			    __builtin_mul_overflow(arena,
						   (size_t)l.num_kv_heads,
						   &arena) ||
			    __builtin_mul_overflow(arena, (size_t)l.head_dim,
						   &arena) ||
			    __builtin_mul_overflow(arena,
						   (size_t)c.block_tokens,
						   &arena) ||
			    __builtin_mul_overflow(arena, (size_t)c.num_blocks,
						   &arena))
				arena = SIZE_MAX;
		}
		rc = kvp_pool_create(null_cfg ? NULL : &c, null_out ? NULL : &p);
		note("kvp_pool_create(%s, %u blocks, %u tokens, cache %u, flags"
		     " %#x, layout %u x %u x %u of dtype %d, %s) = %d",
		     null_cfg ? "NULL" : "cfg", c.num_blocks, c.block_tokens,
		     c.cache_blocks, c.flags, c.layout ? l.num_layers : 0,
		     c.layout ? l.num_kv_heads : 0, c.layout ? l.head_dim : 0,
		     c.layout ? (int)l.dtype : -1, null_out ? "NULL" : "out",
		     rc);
		if (failed_by_fault(w, rc, true, "kvp_pool_create"))
			return;
		mrc = model_pool_config_rc(null_cfg ? NULL : &c, null_out);
		/* A valid arena too large for this machine may not map. */
		if (!(mrc == 0 && rc == -ENOMEM && arena > (1u << 30)))
			EXPECT_RC("kvp_pool_create", rc, mrc);
		kvp_pool_unref(p);
	}
}

static void op_mgr_reopen(struct world *w, struct rd *r)
{
	int i = mgr_index(r);

	if (w->m[i])
		mgr_close(w, i);
	mgr_open(w, i, r);
}

/* Without the hook, the opcode only reads its byte: inputs keep their
 * meaning in every build. */
static void op_fault(struct world *w, struct rd *r)
{
	unsigned long nth = 1 + u8(r) % 4;

#ifdef KVP_FAULT_INJECTION
	note("(the next call's allocation #%lu fails)", nth);
	fault_arm(nth);
	w->fault_armed = true;
#else
	(void)w;
	(void)nth;
#endif
}

/* ------------------------------------------------------------ prefix */

#define NCHAINS 4
#define MAX_HASHES (MAX_BLOCKS + 4)

/*
 * Block hash i of chain c (opaque to kvpool: no need to run
 * kvp_hash_blocks).  Chain 3 shares its first two blocks with chain 0,
 * then diverges: a partial hit.
 */
static struct kvp_hash chain_hash(unsigned c, unsigned i)
{
	struct kvp_hash h;

	if (c == 3 && i < 2)
		c = 0;
	memset(&h, 0, sizeof(h));
	h.b[0] = (uint8_t)(c + 1);
	h.b[1] = (uint8_t)i;
	h.b[9] = 0x5A;
	return h;
}

static uint32_t chain(struct rd *r, struct kvp_hash *h, unsigned *c)
{
	uint8_t b = u8(r);
	uint32_t n = u8(r) % MAX_HASHES;

	*c = b % NCHAINS;
	for (uint32_t i = 0; i < n; i++)
		h[i] = chain_hash(*c, i);
	return n;
}

static void op_create_cached(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	struct kvp_hash h[MAX_HASHES];
	unsigned c;
	uint32_t nh = chain(r, h, &c), t = tokens(w, r), lc = 0xDEAD,
		 mc = 0xDEAD;
	uint32_t tab[MAX_BLOCKS + 1], n = 0;
	uint8_t v = u8(r);
	bool null_h = (v & 3) == 3, null_c = (v & 3) == 2;
	int rc, mrc;

	if (null_h && (v & 4))
		nh = 0;
	rc = kvp_seq_create_cached(w->m[i], id, null_h ? NULL : h, nh, t,
				   null_c ? NULL : &lc);
	note("kvp_seq_create_cached(m%d, %llu, %s%u hashes of chain %u,"
	     " %u tokens, %s) = %d (cached %u)",
	     i, (unsigned long long)id, null_h ? "NULL, " : "", nh, c, t,
	     null_c ? "NULL" : "ptr", rc, lc);
	if (failed_by_fault(w, rc, true, "kvp_seq_create_cached"))
		return;
	if (rc == 0 && kvp_seq_blocks(w->m[i], id, tab, MAX_BLOCKS + 1, &n))
		mismatch("kvp_seq_blocks after a cached create failed");
	mrc = model_seq_create_cached(w->mm[i], id, h, nh, null_h, t,
				      rc == 0 ? tab : NULL, &mc);
	EXPECT_RC("kvp_seq_create_cached", rc, mrc);
	if (rc == 0 && !null_c)
		EXPECT_EQ("kvp_seq_create_cached: *cached_tokens", lc, mc);
}

/* kvp_prefix_match: the hit a cached create would take, taken by no
 * one. */
static void op_prefix_match(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	struct kvp_hash h[MAX_HASHES];
	unsigned c;
	uint32_t nh = chain(r, h, &c), lc = 0xDEAD, mc = 0xDEAD;
	uint8_t v = u8(r);
	bool null_h = (v & 3) == 3, null_c = (v & 3) == 2;
	int rc;

	if (null_h && (v & 4))
		nh = 0;
	rc = kvp_prefix_match(w->m[i], null_h ? NULL : h, nh,
			      null_c ? NULL : &lc);
	note("kvp_prefix_match(m%d, %s%u hashes of chain %u, %s) = %d"
	     " (cached %u)",
	     i, null_h ? "NULL, " : "", nh, c, null_c ? "NULL" : "ptr", rc,
	     lc);
	EXPECT_RC("kvp_prefix_match", rc,
		  model_prefix_match(w->mm[i], h, nh, null_h, null_c, &mc));
	if (rc == 0)
		EXPECT_EQ("kvp_prefix_match: *cached_blocks", lc, mc);
}

static void op_commit(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	struct kvp_hash h[MAX_HASHES];
	unsigned c;
	uint32_t nh = chain(r, h, &c);
	uint8_t v = u8(r);
	bool null_h = (v & 7) == 7;
	int rc;

	if (null_h && (v & 8))
		nh = 0;
	rc = kvp_seq_commit(w->m[i], id, null_h ? NULL : h, nh);
	note("kvp_seq_commit(m%d, %llu, %s%u hashes of chain %u) = %d", i,
	     (unsigned long long)id, null_h ? "NULL, " : "", nh, c, rc);
	/* -ENOMEM keeps what was registered before it (kvpool.h): the
	 * model cannot know how much, so the input stops comparing. */
	if (failed_by_fault(w, rc, true, "kvp_seq_commit")) {
		w->lost_track = true;
		return;
	}
	EXPECT_RC("kvp_seq_commit", rc,
		  model_seq_commit(w->mm[i], id, h, nh, null_h));
}

/* Retention ranges from the input: up to 3, a priority or two past the
 * last valid one, durations from none to for ever. */
static uint32_t ranges(struct world *w, struct rd *r, struct kvp_retention *rg)
{
	static const uint32_t prios[] = {0,  1,  2,  5, 14, KVP_RETAIN_PIN,
					 KVP_RETAIN_PIN, 3, 16, 1};
	static const uint64_t durs[] = {0, 0, 1, 2, 3, 5, UINT64_MAX, 8};
	uint32_t n = u8(r) % 4;

	for (uint32_t k = 0; k < n; k++) {
		uint8_t a = u8(r), b = u8(r);

		rg[k].first_token = (a % 4) * w->bt + (a & 0x40 ? 1 : 0);
		rg[k].num_tokens = (b % 4) * w->bt + (b & 0x40 ? w->bt / 2 : 0);
		rg[k].priority = prios[u8(r) % 10];
		rg[k].duration = durs[u8(r) % 8];
	}
	return n;
}

static void op_commit_retained(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = seq_id(w, i, r);
	struct kvp_hash h[MAX_HASHES];
	struct kvp_retention rg[3] = {{0}};
	unsigned c;
	uint32_t nh = chain(r, h, &c), nrg = ranges(w, r, rg), lu = 0xDEAD,
		 mu = 0xDEAD;
	uint8_t v = u8(r);
	bool null_h = (v & 7) == 7, null_rg = (v & 0x18) == 0x18,
	     null_u = v & 0x20;
	int rc;

	rc = kvp_seq_commit_retained(w->m[i], id, null_h ? NULL : h, nh,
				     null_rg ? NULL : rg, nrg,
				     null_u ? NULL : &lu);
	note("kvp_seq_commit_retained(m%d, %llu, %s%u hashes of chain %u, "
	     "%s%u ranges, prio %u..) = %d (unpinned %u)",
	     i, (unsigned long long)id, null_h ? "NULL, " : "", nh, c,
	     null_rg ? "NULL, " : "", nrg, nrg ? rg[0].priority : 0, rc, lu);
	if (failed_by_fault(w, rc, true, "kvp_seq_commit_retained")) {
		w->lost_track = true;
		return;
	}
	EXPECT_RC("kvp_seq_commit_retained", rc,
		  model_seq_commit_retained(w->mm[i], id, h, nh, null_h, rg,
					    nrg, null_rg, null_u ? NULL : &mu));
	if (rc >= 0 && !null_u)
		EXPECT_EQ("kvp_seq_commit_retained: *unpinned", lu, mu);
}

/* Advances a retention clock: small steps, or past its end (-ERANGE). */
static void op_tick(struct world *w, struct rd *r)
{
	static const uint64_t steps[] = {0, 1, 1, 2, 3, 5, 1ull << 56,
					 UINT64_MAX};
	int i = mgr_index(r);
	uint8_t v = u8(r);
	uint64_t st = steps[v % 8], ln = 0xDEAD, mn = 0xDEAD;
	bool null_now = v & 8;
	int rc = kvp_manager_tick(w->m[i], st, null_now ? NULL : &ln);

	note("kvp_manager_tick(m%d, %llu) = %d", i, (unsigned long long)st,
	     rc);
	EXPECT_RC("kvp_manager_tick", rc,
		  model_manager_tick(w->mm[i], st, null_now ? NULL : &mn));
	/* The library's clock of a cached manager did not start at 0. */
	if (rc == 0 && !null_now)
		EXPECT_EQ("kvp_manager_tick: *now",
			  ln - w->mgr_base[i].retention_clock, mn);
}

static void op_retention(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint8_t a = u8(r), b = u8(r);
	struct kvp_hash h = chain_hash(a % NCHAINS, b % MAX_HASHES);
	uint32_t lp = 0xDEAD, mp = 0xDEAD;
	uint64_t le = 0xDEAD, me = 0xDEAD;
	bool null_h = (a & 0xF0) == 0xF0;
	int rc = kvp_prefix_retention(w->m[i], null_h ? NULL : &h, &lp, &le);

	note("kvp_prefix_retention(m%d, %shash %u/%u) = %d (prio %u, expires "
	     "%llu)",
	     i, null_h ? "NULL " : "", a % NCHAINS, b % MAX_HASHES, rc, lp,
	     (unsigned long long)le);
	EXPECT_RC("kvp_prefix_retention", rc,
		  model_prefix_retention(w->mm[i], null_h ? NULL : &h, &mp,
					 &me));
	if (rc == 0) {
		EXPECT_EQ("kvp_prefix_retention: priority", lp, mp);
		EXPECT_EQ("kvp_prefix_retention: expires",
			  le ? le - w->mgr_base[i].retention_clock : 0, me);
	}
}

static void op_prefix_reset(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	int rc = kvp_prefix_reset(w->m[i]);

	note("kvp_prefix_reset(m%d) = %d", i, rc);
	EXPECT_RC("kvp_prefix_reset", rc, model_prefix_reset(w->mm[i]));
}

/* ------------------------------------------------------------ events */

struct lib_event {
	int slot;
	enum kvp_event_type type;
	struct kvp_hash hash;
	bool has_parent;
	struct kvp_hash parent;
};

static struct lib_event lib_events[MODEL_MAX_EVENTS];
static uint32_t nlib_events;
static uint32_t event_bt; /* the running input's block_tokens */

/* The slot managers' callback: events split into one entry per hash. */
static void on_event(const struct kvp_event *ev, void *arg)
{
	int slot = (int)(intptr_t)arg;

	if (ev->type == KVP_EVENT_CLEARED) {
		if (nlib_events < MODEL_MAX_EVENTS)
			lib_events[nlib_events++] = (struct lib_event){
				.slot = slot, .type = ev->type};
		return;
	}
	if (ev->type == KVP_EVENT_STORED &&
	    (ev->block_tokens != event_bt ||
	     ev->num_tokens != ev->nhashes * event_bt))
		mismatch("STORED event: block_tokens %u, num_tokens %u for %u"
			 " hashes of %u tokens",
			 ev->block_tokens, ev->num_tokens, ev->nhashes,
			 event_bt);
	if (!ev->nhashes || !ev->hashes)
		mismatch("event %d with no hashes", (int)ev->type);
	for (uint32_t k = 0; k < ev->nhashes; k++) {
		struct lib_event *e;

		if (nlib_events == MODEL_MAX_EVENTS)
			return;
		e = &lib_events[nlib_events++];
		memset(e, 0, sizeof(*e));
		e->slot = slot;
		e->type = ev->type;
		e->hash = ev->hashes[k];
		if (ev->type == KVP_EVENT_STORED) {
			const struct kvp_hash *p =
				k ? &ev->hashes[k - 1] : ev->parent;

			e->has_parent = p != NULL;
			if (p)
				e->parent = *p;
		}
	}
}

/* The events of the last call, the library's against the model's.  More
 * REMOVED events from the library than the model expects are evictions
 * ahead of need (into a thread cache): the model accepts each if it is
 * the next least recently freed block's. */
static void check_events(struct world *w)
{
	struct model_pool *mp = w->mp;

	for (uint32_t k = mp->nevents; k < nlib_events; k++) {
		const struct lib_event *l = &lib_events[k];

		if (l->type != KVP_EVENT_REMOVED || l->slot < 0 ||
		    l->slot >= NMGR || !w->mm[l->slot] ||
		    !model_evicted_ahead(mp, w->mm[l->slot], &l->hash))
			break;
	}

	if (nlib_events != mp->nevents)
		mismatch("events: the library reported %u (hashes), the model"
			 " expects %u",
			 nlib_events, mp->nevents);
	for (uint32_t k = 0; k < nlib_events; k++) {
		const struct lib_event *l = &lib_events[k];
		const struct model_event *m = &mp->events[k];

		if (l->slot < 0 || l->slot >= NMGR ||
		    w->mm[l->slot] != m->mgr || l->type != m->type ||
		    memcmp(&l->hash, &m->hash, sizeof(l->hash)) ||
		    l->has_parent != m->has_parent ||
		    (l->has_parent &&
		     memcmp(&l->parent, &m->parent, sizeof(l->parent))))
			mismatch("event %u: library type %d from slot %d, hash"
				 " %02x%02x, parent %s; model type %d, hash"
				 " %02x%02x, parent %s",
				 k, (int)l->type, l->slot, l->hash.b[0],
				 l->hash.b[1], l->has_parent ? "yes" : "no",
				 (int)m->type, m->hash.b[0], m->hash.b[1],
				 m->has_parent ? "yes" : "no");
	}
	nlib_events = 0;
	mp->nevents = 0;
}

/* ------------------------------------------------------------ forks */

/* Ends a fault armed for a composite op's first call: the later calls
 * run without it (failed_by_fault looks at the armed state). */
static void step_done(struct world *w)
{
#ifdef KVP_FAULT_INJECTION
	if (w->fault_armed) {
		fault_disarm();
		w->fault_armed = false;
	}
#endif
	if (!w->lost_track)
		check_state(w);
}

/* An append of n tokens with room for the copy, which is compared. */
static void do_append(struct world *w, int i, uint64_t id, uint32_t n)
{
	struct kvp_copy lcow = {0}, mcow = {0};
	uint32_t lncow = 0xDEAD, mncow = 0xDEAD, tab[MAX_BLOCKS + 1], nt = 0;
	int rc = kvp_seq_append(w->m[i], id, n, &lcow, 1, &lncow), mrc;

	note("kvp_seq_append(m%d, %llu, %u, cow buf, cap 1, ncow ptr) = %d"
	     " (ncow %u)",
	     i, (unsigned long long)id, n, rc, lncow);
	if (failed_by_fault(w, rc, true, "kvp_seq_append"))
		return;
	if (rc == 0 && kvp_seq_blocks(w->m[i], id, tab, MAX_BLOCKS + 1, &nt))
		mismatch("kvp_seq_blocks after an append failed");
	mrc = model_seq_append(w->mm[i], id, n, false, 1, rc == 0 ? tab : NULL,
			       &mcow, &mncow);
	EXPECT_RC("kvp_seq_append", rc, mrc);
	if (mncow != 0xDEAD)
		EXPECT_EQ("kvp_seq_append: *ncow", lncow, mncow);
	if (rc == 0 && mncow == 1) {
		EXPECT_EQ("kvp_seq_append: cow.src", lcow.src, mcow.src);
		EXPECT_EQ("kvp_seq_append: cow.dst", lcow.dst, mcow.dst);
		EXPECT_EQ("kvp_seq_append: cow.tokens", lcow.tokens,
			  mcow.tokens);
	}
}

static void do_free(struct world *w, int i, uint64_t id)
{
	int rc = kvp_seq_free(w->m[i], id);

	note("kvp_seq_free(m%d, %llu) = %d", i, (unsigned long long)id, rc);
	EXPECT_RC("kvp_seq_free", rc, model_seq_free(w->mm[i], id));
}

/* Preemption of whatever the policy picks (often a fork tree's node). */
static void do_evict(struct world *w, int i)
{
	uint64_t lv = 0xDEAD, mv = 0xDEAD;
	int rc = kvp_evict(w->m[i], &lv);

	note("kvp_evict(m%d, ptr) = %d (victim %llu)", i, rc,
	     (unsigned long long)lv);
	EXPECT_RC("kvp_evict", rc, model_evict(w->mm[i], &mv));
	if (rc == 0)
		EXPECT_EQ("kvp_evict: victim", lv, mv);
}

/*
 * A fork tree: from a live sequence, `depth` levels of forks, each level
 * forking the last one's node, with a sibling at each level when asked
 * (many live siblings).  Then one of: truncate the deepest node (to 0, a
 * boundary, inside a shared block) and append again; free the tree's
 * root while its forks live and append to a fork; stream-trim a fork;
 * preempt by policy; write a shared row (-EBUSY) after an append.
 */
static void op_fork_tree(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t root = seq_id(w, i, r), node = root;
	const struct model_seq *ms;
	uint8_t v = u8(r);
	uint32_t depth = 1 + v % 5;

	if (!w->m[i] || !w->forky)
		return;
	for (uint32_t k = 0; k < depth && !w->lost_track; k++) {
		uint64_t d = fork_dst(w, i, r);

		int rc = do_fork(w, i, node, d);

		step_done(w);
		if (rc)
			break;
		if (v & 0x08) { /* a sibling, left alive */
			do_fork(w, i, node, fork_dst(w, i, r));
			step_done(w);
		}
		node = d;
	}
	if (w->lost_track || !model_seq_find(w->mm[i], node))
		return;
	switch ((v >> 4) % 5) {
	case 0:
		ms = model_seq_find(w->mm[i], node);
		do_truncate(w, i, node, fork_cut(w, r, ms));
		step_done(w);
		do_append(w, i, node, u8(r) % (2 * w->bt + 1));
		break;
	case 1:
		if (root != node && model_seq_find(w->mm[i], root)) {
			do_free(w, i, root);
			step_done(w);
		}
		do_append(w, i, node, 1 + u8(r) % w->bt);
		break;
	case 2: {
		uint32_t lev = 0xDEAD, mev = 0xDEAD, sink = u8(r) % 2 * w->bt,
			 win = w->bt;
		int rc = kvp_seq_stream_trim(w->m[i], node, sink, win, &lev);

		note("kvp_seq_stream_trim(m%d, %llu, sink %u, window %u,"
		     " ptr) = %d (evicted %u)",
		     i, (unsigned long long)node, sink, win, rc, lev);
		if (failed_by_fault(w, rc, true, "kvp_seq_stream_trim"))
			break;
		EXPECT_RC("kvp_seq_stream_trim", rc,
			  model_seq_stream_trim(w->mm[i], node, sink, win,
						&mev));
		if (rc == 0)
			EXPECT_EQ("kvp_seq_stream_trim: *evicted_tokens", lev,
				  mev);
		step_done(w);
		do_append(w, i, node, 1 + u8(r) % w->bt);
		break;
	}
	case 3:
		do_evict(w, i);
		break;
	default:
		/* An append (a copy if the last block is shared), then a
		 * write to a row of the shared prefix, -EBUSY unless the
		 * pool owns no data or the block is the fork's own. */
		do_append(w, i, node, 1 + u8(r) % w->bt);
		step_done(w);
		ms = model_seq_find(w->mm[i], node);
		if (w->row && ms && ms->tokens) {
			uint8_t k[MODEL_MAX_ROW], vv[MODEL_MAX_ROW];
			uint32_t pos = u8(r) % ms->tokens;
			int rc;

			fill(r, k, w->row);
			fill(r, vv, w->row);
			rc = kvp_seq_write(w->m[i], node, pos, 0, k, vv);
			note("kvp_seq_write(m%d, %llu, pos %u, layer 0) = %d",
			     i, (unsigned long long)node, pos, rc);
			EXPECT_RC("kvp_seq_write", rc,
				  model_seq_write(w->mm[i], node, pos, 0, k,
						  vv));
		}
	}
}

/*
 * A fork of a prefix-cache hit: a cached create of a chain's prefix
 * (whole blocks, or a partly filled last one), a fork of it, an append
 * to the fork, the fork's commit of the chain, then the source freed or
 * kept.
 */
static void op_cached_fork(struct world *w, struct rd *r)
{
	int i = mgr_index(r);
	uint64_t id = fork_dst(w, i, r), d;
	struct kvp_hash h[MAX_HASHES];
	unsigned c;
	uint32_t nh = chain(r, h, &c), lc = 0xDEAD, mc = 0xDEAD;
	uint32_t tab[MAX_BLOCKS + 1], n = 0, t;
	uint8_t v = u8(r);
	int rc, mrc;

	if (!w->m[i] || !w->forky)
		return;
	nh %= 2 * w->nb / 3 + 2;
	t = nh * w->bt + (v & 1 ? v % (w->bt + 1) : 0);
	rc = kvp_seq_create_cached(w->m[i], id, h, nh, t, &lc);
	note("kvp_seq_create_cached(m%d, %llu, %u hashes of chain %u,"
	     " %u tokens, ptr) = %d (cached %u)",
	     i, (unsigned long long)id, nh, c, t, rc, lc);
	if (failed_by_fault(w, rc, true, "kvp_seq_create_cached"))
		return;
	if (rc == 0 && kvp_seq_blocks(w->m[i], id, tab, MAX_BLOCKS + 1, &n))
		mismatch("kvp_seq_blocks after a cached create failed");
	mrc = model_seq_create_cached(w->mm[i], id, h, nh, false, t,
				      rc == 0 ? tab : NULL, &mc);
	EXPECT_RC("kvp_seq_create_cached", rc, mrc);
	if (rc == 0)
		EXPECT_EQ("kvp_seq_create_cached: *cached_tokens", lc, mc);
	step_done(w);
	if (rc || w->lost_track)
		return;
	d = fork_dst(w, i, r);
	if (do_fork(w, i, id, d) != 0)
		return;
	step_done(w);
	do_append(w, i, d, (v >> 1) % (2 * w->bt + 1));
	step_done(w);
	rc = kvp_seq_commit(w->m[i], d, h, nh);
	note("kvp_seq_commit(m%d, %llu, %u hashes of chain %u) = %d", i,
	     (unsigned long long)d, nh, c, rc);
	EXPECT_RC("kvp_seq_commit", rc,
		  model_seq_commit(w->mm[i], d, h, nh, false));
	if (v & 0x40) {
		step_done(w);
		do_free(w, i, id);
	}
}

typedef void (*op_fn)(struct world *, struct rd *);
static const op_fn ops[] = {
	op_create,	  op_append,	   op_append,	 op_fork,
	op_free,	  op_truncate,	   op_trim,	 op_priority,
	op_query,	  op_admit,	   op_evict,	 op_export,
	op_raw_alloc,	  op_raw_free,	   op_raw_ref,	 op_data,
	op_checks,	  op_configs,	   op_mgr_reopen, op_create,
	op_fork,	  op_fault,	   op_create_cached, op_commit,
	op_create_cached, op_commit,	   op_prefix_reset,
	op_commit_retained, op_commit_retained, op_tick, op_retention,
	op_append_ex,	  op_control,	   op_prefix_match, op_fork_n,
};

/* The op mix of fork-heavy inputs: forks, fork trees and forks of
 * cache hits, with the calls that change a forked sequence (append,
 * truncate, trim, free, preemption, writes) and no raw references (so
 * that kvp_manager_check can run at the end). */
static const op_fn fork_ops[] = {
	op_create,	op_append,	op_append,    op_fork,
	op_fork,	op_fork,	op_fork_tree, op_fork_tree,
	op_fork_tree,	op_free,	op_truncate,  op_truncate,
	op_trim,	op_evict,	op_data,      op_data,
	op_cached_fork, op_cached_fork, op_commit,    op_create_cached,
	op_query,	op_export,	op_priority,  op_fault,
	op_append_ex,	op_control,	op_prefix_match, op_fork_n,
	op_fork_n,
};

/*
 * The end of a fork-heavy input: kvp_manager_check of each slot (every
 * block's references against the tables of every manager of the pool;
 * these inputs take no raw references, so it must pass), then each
 * fork tree freed from its oldest node (mgr_close frees the newest
 * first); the driver then requires the pool whole.
 */
static void final_checks(struct world *w)
{
	bool checked = false;

	for (int i = 0; i < NMGR; i++) {
		int rc;

		if (!w->m[i])
			continue;
		/* One call checks every manager of the pool: it walks them
		 * all (the cache's too, 17% of a run's time if twice). */
		if (!checked) {
			rc = kvp_manager_check(w->m[i]);
			note("kvp_manager_check(m%d) = %d", i, rc);
			EXPECT_RC("kvp_manager_check (the end)", rc,
				  model_manager_check(w->mm[i]));
			checked = true;
		}
		while (w->mm[i]->nseqs)
			do_free(w, i, w->mm[i]->seqs[0].id);
	}
}

/* ------------------------------------------------------------ driver */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rd r = {data, size};
	struct world w;
	struct kvp_pool_config c;
	struct kvp_layout l;
	uint8_t b;
	int rc;

	if (!devnull_w) {
		devnull_w = fopen("/dev/null", "w");
		devnull_r = fopen("/dev/null", "r");
		if (!devnull_w || !devnull_r)
			abort();
	}
	memset(&w, 0, sizeof(w));
	ntrace = 0;
	if (trace_all < 0)
		trace_all = getenv("KVP_FUZZ_TRACE") != NULL;
	if (record_calls < 0 || trace_all)
		record_calls = trace_all;
#ifdef KVP_FAULT_INJECTION
	fault_disarm(); /* an input may end with a fault armed */
#endif
	memset(&c, 0, sizeof(c));
	c.num_blocks = nbs[u8(&r) % 16];
	c.block_tokens = bts[u8(&r) % 8];
	b = u8(&r);
	if (b % 4 == 1)
		c.flags |= KVP_POOL_NOCACHE;
	else if (b % 4 == 2)
		c.cache_blocks = c.num_blocks < 3 ? c.num_blocks : 3; /* 2 */
	else if (b % 4 == 3)
		c.cache_blocks = c.num_blocks;
	if (b & 4) {
		make_layout(&r, &l);
		c.layout = &l;
		if (b & 8)
			c.flags |= KVP_POOL_ZERO;
	}
	/* Fork-heavy inputs: 0xC0 or 0xD0 in the high bits (no seed input
	 * had them), 0x10 makes both slots cache prefixes. */
	w.forky = (b & 0xE0) == 0xC0;
	w.force_prefix = w.forky && (b & 0x10);
	w.ids = w.forky ? fork_ids : seq_ids;
	w.nids = w.forky ? NFORK_IDS : NIDS;
	c.device_id = -1;
	w.nb = c.num_blocks;
	w.bt = c.block_tokens;
	event_bt = c.block_tokens;
	nlib_events = 0;
	w.pool_slot = pool_get(&c, &rc);
	note("kvp_pool_create(%u blocks, %u tokens, cache %u, flags %#x,"
	     " layout %s) = %d",
	     c.num_blocks, c.block_tokens, c.cache_blocks, c.flags,
	     c.layout ? "yes" : "no", rc);
	EXPECT_RC("kvp_pool_create", rc, model_pool_config_rc(&c, false));
	w.pool = pools[w.pool_slot].pool;
	kvp_pool_stats(w.pool, &w.pool_base);
	if (w.pool_base.free != w.pool_base.total)
		mismatch("a cached pool has only %llu of %llu blocks free",
			 (unsigned long long)w.pool_base.free,
			 (unsigned long long)w.pool_base.total);
	w.mp = model_pool_new(&c);
	w.row = w.mp->has_data ? w.mp->row_bytes : 0;
	w.layers = w.mp->has_data ? w.mp->num_layers : 0;
	for (int i = 0; i < NMGR; i++)
		mgr_open(&w, i, &r);
	check_state(&w);

	for (w.op = 0; r.n && w.op < MAX_OPS && !w.lost_track; w.op++) {
		bool armed = w.fault_armed;

		uint8_t opc = u8(&r);

		if (w.forky)
			fork_ops[opc % (sizeof(fork_ops) /
					sizeof(fork_ops[0]))](&w, &r);
		else
			ops[opc % (sizeof(ops) / sizeof(ops[0]))](&w, &r);
#ifdef KVP_FAULT_INJECTION
		if (armed) {
			fault_disarm();
			w.fault_armed = false;
		}
#else
		(void)armed;
#endif
		if (!w.lost_track)
			check_state(&w);
	}

#ifdef KVP_FAULT_INJECTION
	fault_disarm();
#endif
	if (w.forky && !w.lost_track)
		final_checks(&w);
	for (int i = 0; i < NMGR; i++)
		if (w.m[i])
			mgr_close(&w, i);
	if (trace_all)
		for (int k = 0; k < ntrace; k++)
			fprintf(stderr, "  %3d %s\n", k, trace[k]);
	if (w.nraw && kvp_pool_free(w.pool, w.raw, w.nraw) != 0)
		mismatch("freeing the raw references at the end failed");
	{
		struct kvp_pool_stats st;

		kvp_pool_stats(w.pool, &st);
		if (st.free != st.total)
			mismatch("the pool is not whole at the end: %llu of"
				 " %llu free",
				 (unsigned long long)st.free,
				 (unsigned long long)st.total);
	}
	model_pool_delete(w.mp);
	return 0;
}
