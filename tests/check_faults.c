/* SPDX-License-Identifier: MIT */
/*
 * check_faults.c - walks an allocation failure over every host allocation
 * of scripted scenarios.
 *
 * The program compiles the library's sources with -DKVP_FAULT_INJECTION
 * (lib/alloc.h, tests/fault.h), so it runs under any build, ASan and
 * valgrind included (check_errors.c interposes malloc instead, which
 * sanitizers preclude).  For N = 1, 2, ... each scenario runs from scratch
 * in a fresh thread (so that per-thread state is allocated again, the
 * test's own observations being made from helper threads) with
 * the Nth allocation of that thread failing, until a run reaches its end
 * without reaching the Nth allocation.  Every library call of a scenario
 * goes through TRY(): if the injected failure happened during the call,
 * the call must return -ENOMEM and leave everything observable as it
 * was (pool statistics, every block's reference count, each sequence's
 * info and block table, manager statistics), or succeed (an allocation
 * the library can do without); after -ENOMEM the same call is made again
 * without a failure and must succeed.  At the end of each run the state
 * must equal the failure-free run's, and after teardown and the thread's
 * exit the library must hold no more bytes than before (tests/fault.c
 * counts them by the sizes passed to kvp_free; under ASan, LeakSanitizer
 * checks too).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#include "fault.h"

#define BT 4u
#define NSEQ 6
#define NMGR 2
#define MAXB 512
#define MAX_N 400 /* allocations a scenario may make */

static const uint64_t seq_ids[NSEQ] = {1, 2, 3, 4, 5, 6};

struct snap {
	struct kvp_pool_stats ps;
	struct kvp_stats ms[NMGR];
	struct {
		int rc;
		struct kvp_seq_info in;
		uint32_t n, blocks[MAXB];
	} seq[NMGR][NSEQ];
	int refs[MAXB];
};

struct walk {
	struct kvp_pool *pool;
	struct kvp_manager *m[NMGR];
	unsigned long nth; /* 0: no failure */
	unsigned enomem;   /* calls that failed with -ENOMEM */
	unsigned tolerated; /* calls that succeeded despite the failure */
	bool fired_before; /* the failure happened before this call */
	bool partial;	   /* the call may keep part of its work */
	struct snap before, end;
	char err[512];
};

static void take(const struct walk *w, struct snap *s)
{
	memset(s, 0, sizeof(*s));
	if (!w->pool)
		return;
	kvp_pool_stats(w->pool, &s->ps);
	s->ps.in_thread_caches = 0; /* where free blocks sit: not state */
	s->ps.peak_used = 0;
	s->ps.threads = 0;
	for (uint32_t b = 0; b < s->ps.total && b < MAXB; b++)
		s->refs[b] = kvp_block_refcount(w->pool, b);
	for (int i = 0; i < NMGR; i++) {
		if (!w->m[i])
			continue;
		kvp_manager_stats(w->m[i], &s->ms[i]);
		for (int j = 0; j < NSEQ; j++) {
			s->seq[i][j].rc =
				kvp_seq_info(w->m[i], seq_ids[j], &s->seq[i][j].in);
			if (!s->seq[i][j].rc)
				(void)kvp_seq_blocks(w->m[i], seq_ids[j],
						     s->seq[i][j].blocks, MAXB,
						     &s->seq[i][j].n);
		}
	}
}

/* Whether a and b agree; the first difference in w->err.  Block ids
 * compare only if `ids` (the same run). */
static bool same(struct walk *w, const struct snap *a, const struct snap *b,
		 bool ids)
{
#define DIFF(cond, ...)                                                      \
	do {                                                                 \
		if (cond) {                                                  \
			snprintf(w->err, sizeof(w->err), __VA_ARGS__);       \
			return false;                                        \
		}                                                            \
	} while (0)
	DIFF(a->ps.total != b->ps.total || a->ps.free != b->ps.free ||
		     a->ps.allocs != b->ps.allocs || a->ps.frees != b->ps.frees ||
		     a->ps.evictable != b->ps.evictable ||
		     a->ps.cache_evictions != b->ps.cache_evictions,
	     "pool stats: free %llu -> %llu, allocs %llu -> %llu, frees %llu"
	     " -> %llu, evictable %llu -> %llu",
	     (unsigned long long)a->ps.free, (unsigned long long)b->ps.free,
	     (unsigned long long)a->ps.allocs, (unsigned long long)b->ps.allocs,
	     (unsigned long long)a->ps.frees, (unsigned long long)b->ps.frees,
	     (unsigned long long)a->ps.evictable,
	     (unsigned long long)b->ps.evictable);
	if (ids)
		for (uint32_t k = 0; k < a->ps.total && k < MAXB; k++)
			DIFF(a->refs[k] != b->refs[k],
			     "block %u: %d -> %d references", k, a->refs[k],
			     b->refs[k]);
	for (int i = 0; i < NMGR; i++) {
		const struct kvp_stats *x = &a->ms[i], *y = &b->ms[i];

		DIFF(x->sequences != y->sequences || x->tokens != y->tokens ||
			     x->seq_creates != y->seq_creates ||
			     x->appends != y->appends || x->forks != y->forks ||
			     x->cow_copies != y->cow_copies ||
			     x->blocks_allocated != y->blocks_allocated ||
			     x->blocks_released != y->blocks_released ||
			     x->prefix_queries != y->prefix_queries ||
			     x->prefix_hits != y->prefix_hits ||
			     x->prefix_cached_blocks != y->prefix_cached_blocks ||
			     x->prefix_commits != y->prefix_commits,
		     "manager %d statistics changed (sequences %llu -> %llu,"
		     " allocated %llu -> %llu, cached %llu -> %llu)",
		     i, (unsigned long long)x->sequences,
		     (unsigned long long)y->sequences,
		     (unsigned long long)x->blocks_allocated,
		     (unsigned long long)y->blocks_allocated,
		     (unsigned long long)x->prefix_cached_blocks,
		     (unsigned long long)y->prefix_cached_blocks);
		for (int j = 0; j < NSEQ; j++) {
			const struct kvp_seq_info *p = &a->seq[i][j].in,
						  *q = &b->seq[i][j].in;

			DIFF(a->seq[i][j].rc != b->seq[i][j].rc,
			     "manager %d sequence %llu: kvp_seq_info %d -> %d",
			     i, (unsigned long long)seq_ids[j],
			     a->seq[i][j].rc, b->seq[i][j].rc);
			if (a->seq[i][j].rc)
				continue;
			DIFF(p->num_tokens != q->num_tokens ||
				     p->num_blocks != q->num_blocks ||
				     p->access_count != q->access_count ||
				     p->priority != q->priority ||
				     (ids && p->last_access != q->last_access),
			     "manager %d sequence %llu: %u tokens in %u blocks"
			     " (accesses %llu) -> %u in %u (%llu)",
			     i, (unsigned long long)seq_ids[j], p->num_tokens,
			     p->num_blocks,
			     (unsigned long long)p->access_count, q->num_tokens,
			     q->num_blocks,
			     (unsigned long long)q->access_count);
			if (ids)
				DIFF(memcmp(a->seq[i][j].blocks,
					    b->seq[i][j].blocks,
					    a->seq[i][j].n * sizeof(uint32_t)),
				     "manager %d sequence %llu: block table"
				     " changed",
				     i, (unsigned long long)seq_ids[j]);
		}
	}
	return true;
#undef DIFF
}

struct take_job {
	const struct walk *w;
	struct snap *s;
};

static void *take_thread(void *arg)
{
	struct take_job *j = arg;

	take(j->w, j->s);
	return NULL;
}

/*
 * take() from a helper thread: the scenario's thread then allocates its
 * own per-thread state (the sequence lookup cache) in its own calls,
 * where the walk can fail it.
 */
static void take_aside(const struct walk *w, struct snap *s)
{
	struct take_job j = {w, s};
	pthread_t t;

	if (pthread_create(&t, NULL, take_thread, &j) != 0 ||
	    pthread_join(t, NULL) != 0)
		abort();
}

static void walk_before(struct walk *w)
{
	fault_suspend();
	w->fired_before = fault_fired();
	take_aside(w, &w->before);
	fault_resume();
}

/*
 * After a call that returned rc: true if it failed because of the
 * injected failure (checked: -ENOMEM, nothing changed) and must be made
 * again, now without a failure.
 */
static bool walk_after(struct walk *w, int rc, const char *call, int line)
{
	struct snap now;

	if (!w->nth || w->fired_before || !fault_fired() || w->err[0])
		return false;
	fault_suspend();
	if (rc >= 0) {
		/* Tolerated (a cache the library can do without); the run's
		 * end state is compared with the failure-free run's. */
		w->tolerated++;
		fault_disarm();
		return false;
	}
	if (rc != -ENOMEM) {
		snprintf(w->err, sizeof(w->err),
			 "line %d: %s = %d (%s) after allocation #%lu (%s)"
			 " failed, want -ENOMEM",
			 line, call, rc, kvp_strerror(rc), w->nth,
			 fault_site());
		fault_disarm();
		return false;
	}
	take_aside(w, &now);
	if (!w->partial && !same(w, &w->before, &now, true)) {
		char why[sizeof(w->err)];

		memcpy(why, w->err, sizeof(why));
		snprintf(w->err, sizeof(w->err),
			 "line %d: %s failed with -ENOMEM (allocation #%lu in"
			 " %s) but changed state: %.300s",
			 line, call, w->nth, fault_site(), why);
		fault_disarm();
		return false;
	}
	w->enomem++;
	fault_disarm(); /* the retry runs without a failure */
	return true;
}

/* The library's call, made again after an injected -ENOMEM. */
#define TRY(w, call)                                                         \
	({                                                                   \
		int rc_;                                                     \
		do {                                                         \
			walk_before(w);                                      \
			rc_ = (call);                                        \
		} while (walk_after((w), rc_, #call, __LINE__));             \
		rc_;                                                         \
	})

/*
 * kvp_seq_commit: "-ENOMEM (then the blocks registered before the failure
 * stay registered, and the call can be repeated)": the state may change,
 * and the repeated call returns the blocks it registered itself.
 */
#define TRY_PARTIAL(w, call)                                                 \
	({                                                                   \
		int rp_;                                                     \
		(w)->partial = true;                                         \
		rp_ = TRY(w, call);                                          \
		(w)->partial = false;                                        \
		rp_;                                                         \
	})

/* A scenario's expectation; failures are reported after the run. */
#define WANT(w, cond)                                                        \
	do {                                                                 \
		if (!(cond) && !(w)->err[0])                                 \
			snprintf((w)->err, sizeof((w)->err),                 \
				 "line %d: %s does not hold", __LINE__,     \
				 #cond);                                     \
	} while (0)
#define WANT_RC(w, call, want)                                               \
	do {                                                                 \
		int r_ = TRY(w, call);                                       \
		if (r_ != (want) && !(w)->err[0])                            \
			snprintf((w)->err, sizeof((w)->err),                 \
				 "line %d: %s = %d (%s), want %d", __LINE__, \
				 #call, r_, kvp_strerror(r_), (want));       \
	} while (0)

/* ------------------------------------------------------------ scenarios */

static const struct kvp_layout layout = {2, 2, 4, KVP_F16};

static void open_pool(struct walk *w, uint32_t blocks, uint32_t cache,
		      uint32_t flags, const struct kvp_layout *lay)
{
	struct kvp_pool_config c;

	memset(&c, 0, sizeof(c));
	c.num_blocks = blocks;
	c.block_tokens = BT;
	c.cache_blocks = cache;
	c.flags = flags;
	c.device_id = -1;
	c.layout = lay;
	WANT_RC(w, kvp_pool_create(&c, &w->pool), 0);
}

static void open_mgr(struct walk *w, int i, uint32_t flags)
{
	struct kvp_manager_config c;

	memset(&c, 0, sizeof(c));
	c.pool = w->pool;
	c.flags = flags;
	WANT_RC(w, kvp_manager_create(&c, &w->m[i]), 0);
}

static struct kvp_hash hash_of(unsigned chain, unsigned i)
{
	struct kvp_hash h;

	memset(&h, 0, sizeof(h));
	h.b[0] = (uint8_t)(chain + 1);
	h.b[1] = (uint8_t)i;
	h.b[2] = (uint8_t)(i >> 8);
	return h;
}

/* Pools: ID-only, data-owning, with and without thread caches. */
static void sc_pools(struct walk *w)
{
	struct kvp_pool *p[3] = {NULL, NULL, NULL};
	struct kvp_pool_config c;
	uint32_t ids[40];

	memset(&c, 0, sizeof(c));
	c.num_blocks = 64;
	c.block_tokens = BT;
	c.device_id = -1;
	WANT_RC(w, kvp_pool_create(&c, &p[0]), 0);
	c.layout = &layout;
	c.flags = KVP_POOL_ZERO;
	c.cache_blocks = 8;
	WANT_RC(w, kvp_pool_create(&c, &p[1]), 0);
	c.flags = KVP_POOL_NOCACHE;
	WANT_RC(w, kvp_pool_create(&c, &p[2]), 0);
	/* The first allocation attaches a thread cache (its failure is
	 * tolerated: the global stack serves). */
	w->pool = p[1];
	WANT_RC(w, kvp_pool_alloc(p[1], 40, ids), 0);
	WANT_RC(w, kvp_pool_check(p[1]), 0);
	WANT_RC(w, kvp_pool_free(p[1], ids, 40), 0);
	fault_suspend();
	for (int i = 0; i < 3; i++)
		kvp_pool_unref(p[i]);
	w->pool = NULL;
	fault_resume();
}

/* Managers, sequences: create (inline and grown tables), append (table
 * growth, more than 64 new blocks, copy-on-write), fork, fork_n, exports,
 * checks. */
static void sc_sequences(struct walk *w)
{
	struct kvp_copy cow[1];
	uint32_t ncow = 0, ev = 0;
	int32_t table[2 * 200], indptr[3], indices[400], lpl[2];
	int64_t slots[16];
	const uint64_t two[2] = {1, 2}, three[3] = {4, 5, 3};

	open_pool(w, 400, 0, 0, &layout);
	open_mgr(w, 0, 0);
	open_mgr(w, 1, 0);
	WANT_RC(w, kvp_seq_create(w->m[0], 1, 3 * BT + 1), 0);
	WANT_RC(w, kvp_seq_create(w->m[0], 2, 40 * BT), 0);
	WANT_RC(w, kvp_seq_append(w->m[0], 1, 100 * BT, cow, 1, &ncow), 0);
	WANT_RC(w, kvp_seq_fork(w->m[0], 1, 3), 0);
	WANT_RC(w, kvp_seq_append(w->m[0], 3, 1, cow, 1, &ncow), 0);
	WANT(w, ncow == 1);
	WANT_RC(w, kvp_seq_append(w->m[0], 1, 1, cow, 1, &ncow), 0);
	WANT_RC(w, kvp_seq_truncate(w->m[0], 2, 10 * BT + 2), 0);
	WANT_RC(w, kvp_seq_stream_trim(w->m[0], 2, BT, 2 * BT, &ev), 0);
	WANT_RC(w, kvp_seq_create(w->m[1], 1, 5), 0);
	WANT_RC(w, kvp_export_block_table(w->m[0], two, 2, table, 200, -1), 0);
	WANT_RC(w, kvp_export_csr(w->m[0], two, 2, indptr, indices, 400, lpl),
		0);
	WANT_RC(w, kvp_export_slot_mapping(w->m[0], 1, 3, 16, slots), 0);
	WANT_RC(w, kvp_manager_check(w->m[0]), 0);
	WANT_RC(w, kvp_seq_free(w->m[0], 3), 0);
	/* Children with grown tables (seq 1 holds over 57 blocks). */
	WANT_RC(w, kvp_seq_fork_n(w->m[0], 1, three, 3, 0), 0);
	WANT_RC(w, kvp_evict(w->m[0], NULL), 0);
}

static uint64_t cached_blocks(struct walk *w, int i)
{
	struct kvp_stats st;

	fault_suspend();
	kvp_manager_stats(w->m[i], &st);
	fault_resume();
	return st.prefix_cached_blocks;
}

/* The prefix cache: cached creates (hits, revivals, evictions), commits,
 * reset. */
static void sc_prefix(struct walk *w)
{
	struct kvp_hash h[40];
	uint32_t cached = 0;

	for (unsigned i = 0; i < 40; i++)
		h[i] = hash_of(0, i);
	open_pool(w, 64, 0, 0, NULL);
	open_mgr(w, 0, KVP_PREFIX_CACHE);
	WANT_RC(w, kvp_seq_create_cached(w->m[0], 1, h, 40, 30 * BT, &cached),
		0);
	WANT(w, cached == 0);
	WANT(w, TRY_PARTIAL(w, kvp_seq_commit(w->m[0], 1, h, 40)) >= 0);
	WANT(w, cached_blocks(w, 0) == 30);
	WANT_RC(w, kvp_seq_create_cached(w->m[0], 2, h, 40, 20 * BT + 1,
					 &cached),
		0);
	WANT(w, cached == 20 * BT);
	WANT_RC(w, kvp_seq_free(w->m[0], 1), 0);
	/* 34 free of which 9 evictable: this create evicts 1. */
	WANT_RC(w, kvp_seq_create(w->m[0], 3, 34 * BT), 0);
	WANT_RC(w, kvp_seq_free(w->m[0], 3), 0);
	WANT_RC(w, kvp_seq_free(w->m[0], 2), 0);
	WANT_RC(w, kvp_seq_create_cached(w->m[0], 4, h, 40, 40 * BT, &cached),
		0);
	WANT(w, TRY_PARTIAL(w, kvp_seq_commit(w->m[0], 4, h, 40)) >= 0);
	WANT(w, cached_blocks(w, 0) == 40);
	WANT_RC(w, kvp_seq_free(w->m[0], 4), 0);
	WANT_RC(w, kvp_manager_check(w->m[0]), 0);
	WANT_RC(w, kvp_prefix_reset(w->m[0]), 0);
}

static void teardown(struct walk *w)
{
	for (int i = 0; i < NMGR; i++) {
		kvp_manager_destroy(w->m[i]);
		w->m[i] = NULL;
	}
	kvp_pool_unref(w->pool);
	w->pool = NULL;
}

struct run {
	void (*scenario)(struct walk *);
	struct walk w;
	bool reached; /* the Nth allocation happened */
	bool have_ref;
	struct snap ref; /* the failure-free run's end state */
};

static void *run_thread(void *arg)
{
	struct run *r = arg;
	struct walk *w = &r->w;

	fault_arm(w->nth);
	r->scenario(w);
	fault_suspend();
	r->reached = w->nth && fault_fired();
	take(w, &w->end);
	if (r->have_ref && !w->err[0] && !same(w, &r->ref, &w->end, false)) {
		char why[sizeof(w->err)];

		memcpy(why, w->err, sizeof(why));
		snprintf(w->err, sizeof(w->err),
			 "the end state differs from the failure-free run's:"
			 " %.400s",
			 why);
	}
	teardown(w);
	fault_disarm();
	return NULL;
}

/* Walks N over every allocation of a scenario; returns the count. */
static unsigned long walk(const char *name, void (*scenario)(struct walk *))
{
	struct run *r = calloc(1, sizeof(*r));
	unsigned long n, enomem = 0, tolerated = 0;

	ck_assert_ptr_nonnull(r);
	for (n = 0; n < MAX_N; n++) {
		long long live = fault_live_bytes();
		pthread_t t;

		memset(&r->w, 0, sizeof(r->w));
		r->scenario = scenario;
		r->w.nth = n;
		ck_assert_int_eq(pthread_create(&t, NULL, run_thread, r), 0);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		ck_assert_msg(!r->w.err[0], "%s, allocation #%lu failing: %s",
			      name, n, r->w.err);
		ck_assert_msg(fault_live_bytes() == live,
			      "%s, allocation #%lu failing: %lld bytes leaked",
			      name, n, fault_live_bytes() - live);
		if (n == 0) {
			r->ref = r->w.end;
			r->have_ref = true;
			continue;
		}
		if (!r->reached)
			break;
		enomem += r->w.enomem;
		tolerated += r->w.tolerated;
	}
	ck_assert_msg(n < MAX_N, "%s: more than %d allocations", name, MAX_N);
	printf("check_faults: %s: %lu allocations walked, %lu calls failed"
	       " with -ENOMEM and were retried, %lu tolerated\n",
	       name, n - 1, enomem, tolerated);
	free(r);
	return n - 1;
}

static void print_sites(void)
{
	const struct fault_site_count *s;
	unsigned n = fault_sites(&s);

	for (unsigned i = 0; i < n; i++)
		printf("check_faults:   site %-22s %6zu..%-7zu bytes, failed"
		       " %lu times\n",
		       s[i].site, s[i].min_size, s[i].max_size, s[i].failures);
}

START_TEST(test_walk_pools)
{
	ck_assert_uint_gt(walk("pools", sc_pools), 0);
	print_sites();
}
END_TEST

START_TEST(test_walk_sequences)
{
	ck_assert_uint_gt(walk("sequences", sc_sequences), 0);
	print_sites();
}
END_TEST

START_TEST(test_walk_prefix)
{
	ck_assert_uint_gt(walk("prefix cache", sc_prefix), 0);
	print_sites();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("faults");
	TCase *tc = tcase_create("walk");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_walk_pools);
	tcase_add_test(tc, test_walk_sequences);
	tcase_add_test(tc, test_walk_prefix);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
