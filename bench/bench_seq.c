/* SPDX-License-Identifier: MIT */
/*
 * bench_seq.c - sequence manager benchmark: kvpool against a mutex manager.
 *
 * WHAT IS MEASURED
 *
 * Two sequence managers keep seq_id (uint64) -> sequence {token count, block
 * table, last access, access count} over a pool of blocks (16 tokens each)
 * and are driven by the same loops in 1..T threads:
 *
 *   kvpool          kvp_manager_create() over an ID-only kvp_pool_create()
 *                   pool (automatic per-thread caches): an RCU lock-free
 *                   hash map, one small lock per sequence, the lock-free
 *                   block pool.
 *   mutex-hashmap   the same manager design with ONE global pthread mutex
 *                   around (a) a plain open-addressing hash map (linear
 *                   probing, backward-shift deletion, no tombstones) of
 *                   seq id -> sequence and (b) an array stack of free block
 *                   ids with a per-block refcount array: create / append
 *                   (with copy-on-write of a shared, partially filled last
 *                   block, reported like kvp_seq_append) / fork (refcount++
 *                   on every block) / free (refcount-- on every block, last
 *                   first; a block reaching 0 goes back on the free list).
 *                   This is the design kvpool replaces (a mutex-wrapped
 *                   vLLM-style block manager).  It is written to be fair:
 *                   the hash map is sized up front (it never grows during a
 *                   measurement), the lock shares its cache line with the
 *                   map's and the free list's counters, block tables grow
 *                   by doubling, and the host memory of a sequence is
 *                   malloc()ed before and free()d after the critical
 *                   section; everything else runs under the one mutex.
 *                   Its operations are out-of-line calls, like kvpool's.
 *
 * Workloads (each thread works on its own disjoint set of sequences; ids
 * never collide between threads):
 *
 *   decode   each thread owns S sequences (S = --seqs / threads, default
 *            1024 running sequences in all).  A step appends 1 token to
 *            each of them in turn, one call per sequence
 *            (kvp_seq_append(m, id, 1, cow, 1, &ncow), which must report
 *            no copy); a sequence that reaches 2048 tokens is freed and
 *            created again with the prompt of P tokens (--prompt, default
 *            100), so the pool's use stays bounded.  To reach the steady
 *            state at once, sequence j of S starts at
 *            P + j * (2048 - P) / S tokens (as if it had been decoding for
 *            a while), so frees and re-creations are spread evenly over
 *            time instead of happening all at once.  One op = one append
 *            (the occasional free + create is part of its cost).
 *   batch    the decode step as a scheduler calls it: each thread owns its
 *            own batch of B running sequences (--batch, default 256;
 *            staggered and recycled as in decode) and appends 1 token to
 *            every one of them in ONE kvp_seq_append_batch call per step
 *            (it must append all B and report no copy).  The mutex peer
 *            appends the same batch under one acquisition of its lock
 *            (mm_append_batch), its best case.  One op = one append.
 *   fork4, fork16, fork64
 *            each thread owns S source sequences of N full blocks and 4
 *            tokens more (N = 4, 16, 64) and in turn forks one of them to
 *            a fresh id, appends 1 token to the fork (the shared, partly
 *            filled last block is copied: the call must report exactly
 *            that one copy of 4 tokens) and frees the fork.  One op = one
 *            fork + append + free cycle.  (--workloads fork selects the
 *            three.)
 *   fork_n4, fork_n16
 *            parallel sampling: each thread owns S sources of 1,000
 *            tokens and in turn makes N children of one of them in ONE
 *            kvp_seq_fork_n call (the mutex peer: mm_fork_n, N children
 *            under one hold of its lock), appends 1 token to each child
 *            (each copies the shared partial block) and frees them.  One
 *            op = one cycle of N children.  (--workloads fork_n selects
 *            the two.)
 *   full     decode in a full pool (the regime every benchmark must
 *            cover): both managers cache prefixes (KVP_PREFIX_CACHE), the
 *            pool has 3/4 of the sequences' peak need, and a sequence that
 *            reaches 2048 tokens commits its full blocks under fresh
 *            hashes before it is freed, so cached blocks fill the pool and
 *            allocations evict them (the run fails if none did).  One op
 *            = one append (the commit, free and create are part of it).
 *
 * Every call is checked (the program aborts with a message if one returns
 * non-zero or reports an unexpected copy).  After every measurement the
 * threads free all their sequences and the run is verified: for kvpool
 * kvp_manager_check() == 0, no sequence left and pool free == total (and
 * the manager's counters match the calls made), for the mutex manager an
 * empty map, a full free list and every refcount 0.
 *
 * One measurement: a fresh pool and manager are made, threads create their
 * sequences and warm up, then wait on a barrier; time runs
 * (CLOCK_MONOTONIC) from the barrier's release until the last thread has
 * seen the stop flag, which the main thread sets after --seconds S.  Ops of
 * all threads are summed.  Each cell (workload, peer, threads) is measured
 * --reps R times, the two peers interleaved within each repetition, and the
 * MEDIAN is reported.
 *
 * HOW TO READ THE TABLE
 *
 *   Mops/s        ops per second, all threads together (millions): appends
 *                 for decode, batch and full, fork+append+free cycles for
 *                 forkN.
 *   ns/op/thr     threads * 1e3 / Mops: the wall time one thread spends per
 *                 op (for decode and batch: per sequence per step).  With
 *                 more threads than cores (8 on a 2-core box) it includes
 *                 time spent descheduled.
 *   others        the largest share of the machine's CPU that OTHER
 *                 processes took during one of the cell's measurements
 *                 (from /proc/stat minus this process's CPU time).  Above
 *                 10% the cell is marked '!': rerun on an idle machine
 *                 before trusting it (a mutex whose two threads share one
 *                 core never contends).
 *   x mutex       (kvpool rows) kvpool Mops / mutex-hashmap Mops.
 *
 * The "targets" section then prints PASS/FAIL for issue 24's targets:
 *   (1) batch, 2 threads: kvpool throughput >= 5x the mutex manager's;
 *   (2) decode, 2 threads: kvpool >= 4x the mutex manager;
 *   (3) decode, 1 thread: kvpool <= 15 ns per append (per sequence);
 *   (4)-(9) fork4, fork16, fork64: kvpool >= 0.6x, 1x and 1x the mutex
 *       manager at 1 thread and >= 3x at 2 threads;
 *   (10)-(13) fork_n4, fork_n16: kvpool >= 1.5x at 1 thread, >= 3x at 2;
 *   (14)-(21) every workload at 8 threads (oversubscribed on small
 *       machines): kvpool >= 0.8 x its own 2-thread throughput;
 * and, as [INFO] lines, kvpool's own 2-thread over 1-thread throughput for
 * each workload (the median over reps of paired runs).  The exit status is
 * 0 whether or not a target passes: this is a benchmark.
 *
 * Options: --threads 1,2,8  --seconds 0.3  --reps 5  --seqs 1024
 * --prompt 100  --batch 256  --workloads decode,batch,fork4,fork16,fork64,
 * full,fork_n4,fork_n16  --csv FILE.  The defaults (48 cells x 5 reps x
 * 0.3 s plus set-up) take about 95 s.
 */#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "bench_seq.h"

const char bench_prog[] = "bench_seq";

/* --------------------------------------------------------------- helpers */

static inline uint32_t ceil_div(uint64_t a, uint32_t b)
{
	return (uint32_t)((a + b - 1) / b);
}

/* ----------------------------------------------------------- measurement */

/* Sequences each thread owns: its batch in batch, else its share of
 * --seqs. */
static uint32_t per_thread(const struct opts *o, enum workload w,
			   unsigned nthreads)
{
	uint32_t s = o->seqs / nthreads;

	if (w == WL_BATCH)
		return o->batch;
	return s ? s : 1;
}

/* Tokens of a new sequence: a fork source's N full blocks and
 * FORK_PARTIAL tokens, else --prompt. */
static uint32_t prompt_tokens(const struct opts *o, enum workload w)
{
	if (wl_fork_blocks[w])
		return wl_fork_blocks[w] * BLOCK_TOKENS + FORK_PARTIAL;
	if (wl_fork_n[w])
		return FORK_N_PROMPT;
	return o->prompt;
}

/* Blocks in the pool of workload w: each running sequence can reach
 * MAX_TOKENS tokens (a fork source holds at most 65 blocks, half that);
 * twice that is headroom (forks, thread caches).  262144 for the
 * defaults. */
static uint32_t pool_blocks(const struct opts *o, enum workload w,
			    unsigned nthreads)
{
	uint64_t seqs = (uint64_t)per_thread(o, w, nthreads) * nthreads;
	uint64_t n = 2 * seqs * ceil_div(MAX_TOKENS, BLOCK_TOKENS);

	if (n > KVP_MAX_BLOCKS)
		bench_die("%llu sequences need more than KVP_MAX_BLOCKS blocks",
			  (unsigned long long)seqs);
	return (uint32_t)n;
}

/* The full pool of WL_FULL: 3/4 of the sequences' peak need (3/8 of
 * pool_blocks).  Staggered, the sequences hold about (prompt +
 * MAX_TOKENS) / 2 tokens each, so blocks cached by the commits before
 * the frees fill the rest and allocations evict them. */
static uint32_t full_pool_blocks(const struct opts *o, unsigned nthreads)
{
	return (uint32_t)((uint64_t)pool_blocks(o, WL_FULL, nthreads) * 3 / 8);
}

static struct kvp_pool *make_pool(uint32_t nblocks)
{
	struct kvp_pool_config cfg;
	struct kvp_pool *pool = NULL;
	int rc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.num_blocks = nblocks;
	cfg.block_tokens = BLOCK_TOKENS;
	cfg.cache_blocks = 0; /* automatic */
	cfg.device_id = -1;
	cfg.layout = NULL; /* ID-only */
	cfg.flags = 0;
	rc = kvp_pool_create(&cfg, &pool);
	if (rc != 0)
		bench_die("kvp_pool_create(num_blocks=%u) failed: %s", nblocks,
			  kvp_strerror(rc));
	return pool;
}

static struct kvp_manager *make_manager(struct kvp_pool *pool, bool prefix)
{
	struct kvp_manager_config cfg;
	struct kvp_manager *m = NULL;
	int rc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.pool = pool;
	cfg.policy = KVP_EVICT_LRU;
	cfg.flags = prefix ? KVP_PREFIX_CACHE : 0;
	rc = kvp_manager_create(&cfg, &m);
	if (rc != 0)
		bench_die("kvp_manager_create failed: %s", kvp_strerror(rc));
	return m;
}

/* Sums of the per-thread counters of one measurement. */
struct totals {
	uint64_t ops, appends, forks, cows, creates, frees;
};

static void check_kvpool(struct run *r, const struct totals *tot)
{
	struct kvp_pool_stats ps;
	struct kvp_stats ms;
	int rc = kvp_manager_check(r->mgr);

	if (rc != 0)
		bench_die("kvpool %s %u threads: kvp_manager_check failed "
			  "after the run: %s",
			  wl_name[r->wl], r->nthreads, kvp_strerror(rc));
	memset(&ms, 0, sizeof(ms));
	kvp_manager_stats(r->mgr, &ms);
	if (ms.sequences != 0)
		bench_die("kvpool %s: %llu sequences left after every one was "
			  "freed",
			  wl_name[r->wl], (unsigned long long)ms.sequences);
	memset(&ps, 0, sizeof(ps));
	kvp_pool_stats(r->pool, &ps);
	if (ps.free != ps.total || ps.used != 0)
		bench_die(
			"kvpool %s: after the run %llu of %llu blocks are free "
			"(used %llu): blocks leaked",
			wl_name[r->wl], (unsigned long long)ps.free,
			(unsigned long long)ps.total,
			(unsigned long long)ps.used);
	if (r->full && ps.cache_evictions == 0)
		bench_die("kvpool full %u threads: no allocation evicted a "
			  "cached block (the pool never filled)",
			  r->nthreads);
	if (ms.appends != tot->appends || ms.forks != tot->forks ||
	    ms.cow_copies != tot->cows || ms.seq_creates != tot->creates ||
	    ms.seq_frees != tot->frees || ms.evictions != 0)
		fprintf(stderr,
			"bench_seq: warning: kvpool %s: manager stats (appends "
			"%llu, forks %llu, cow copies %llu, creates %llu, "
			"frees %llu) differ from the calls made (%llu, %llu, "
			"%llu, %llu, %llu)\n",
			wl_name[r->wl], (unsigned long long)ms.appends,
			(unsigned long long)ms.forks,
			(unsigned long long)ms.cow_copies,
			(unsigned long long)ms.seq_creates,
			(unsigned long long)ms.seq_frees,
			(unsigned long long)tot->appends,
			(unsigned long long)tot->forks,
			(unsigned long long)tot->cows,
			(unsigned long long)tot->creates,
			(unsigned long long)tot->frees);
}

static void check_mutex(struct run *r)
{
	struct mm_mgr *m = &r->mm->mgr;
	struct kvp_stats st;

	mm_stats(m, &st);
	if (st.sequences != 0)
		bench_die(
			"mutex-hashmap %s: %llu sequences left after every one "
			"was freed",
			wl_name[r->wl], (unsigned long long)st.sequences);
	if (mm_check(&r->mm->pool, &m, 1) != 0)
		bench_die("mutex-hashmap %s: check failed after the run",
			  wl_name[r->wl]);
	if (st.blocks_used != 0)
		bench_die("mutex-hashmap %s: %llu blocks used after the run",
			  wl_name[r->wl], (unsigned long long)st.blocks_used);
	if (r->full && r->mm->pool.cache_evictions == 0)
		bench_die("mutex-hashmap full %u threads: no allocation "
			  "evicted a cached block (the pool never filled)",
			  r->nthreads);
}

/* Runs one measurement and returns Mops/s; stores in *others the share of
 * CPU other processes took meanwhile (-1 unknown). */
static double measure(enum peer p, enum workload w, unsigned nthreads,
		      const struct opts *o, double *others)
{
	struct run *r;
	pthread_t *tids = bench_xcalloc(nthreads, sizeof(*tids));
	worker_fn fn = worker_for(p, w);
	uint32_t nblocks = w == WL_FULL ? full_pool_blocks(o, nthreads)
					: pool_blocks(o, w, nthreads);
	struct totals tot;
	double mops;
	int rc;

	r = bench_aligned_zalloc(sizeof(*r));
	r->peer = p;
	r->wl = w;
	r->full = w == WL_FULL;
	r->nthreads = nthreads;
	r->per_thread = per_thread(o, w, nthreads);
	r->prompt = prompt_tokens(o, w);
	r->thr = bench_aligned_zalloc(nthreads * sizeof(struct thr));

	if (p == P_KVPOOL) {
		r->pool = make_pool(nblocks);
		r->mgr = make_manager(r->pool, r->full);
	} else {
		r->mm = aligned_alloc(BENCH_CACHE_LINE, sizeof(*r->mm));
		if (!r->mm)
			bench_die("out of memory");
		rc = mm_pool_init(&r->mm->pool, nblocks, BLOCK_TOKENS);
		if (rc == 0)
			rc = mm_mgr_init(&r->mm->mgr, &r->mm->pool,
					 KVP_EVICT_LRU, 0,
					 r->full ? KVP_PREFIX_CACHE : 0,
					 (uint64_t)r->per_thread * nthreads +
						 nthreads,
					 r->full ? nblocks : 0);
		if (rc != 0)
			bench_die("mutex-hashmap: init failed: %s",
				  strerror(-rc));
	}

	bench_sync_init(&r->sync, nthreads);
	for (unsigned i = 0; i < nthreads; i++) {
		r->thr[i].run = r;
		r->thr[i].tid = i;
		bench_thread_create(&tids[i], fn, &r->thr[i]);
	}
	*others = bench_sync_window(&r->sync, o->common.seconds);
	memset(&tot, 0, sizeof(tot));
	for (unsigned i = 0; i < nthreads; i++) {
		const struct thr *t = &r->thr[i];

		bench_thread_join(tids[i]);
		tot.ops += t->ops;
		tot.appends += t->appends;
		tot.forks += t->forks;
		tot.cows += t->cows;
		tot.creates += t->creates;
		tot.frees += t->frees;
	}
	mops = bench_sync_mops(&r->sync, tot.ops);

	/* Verify: every sequence is gone, every block is back. */
	if (tot.creates + tot.forks != tot.frees)
		bench_die("%s %s: %llu creates + %llu forks but %llu frees",
			  peer_name[p], wl_name[w],
			  (unsigned long long)tot.creates,
			  (unsigned long long)tot.forks,
			  (unsigned long long)tot.frees);
	if (p == P_KVPOOL) {
		check_kvpool(r, &tot);
		kvp_manager_destroy(r->mgr);
		kvp_pool_unref(r->pool);
	} else {
		check_mutex(r);
		mm_mgr_destroy(&r->mm->mgr);
		mm_pool_destroy(&r->mm->pool);
		free(r->mm);
	}
	if (tot.ops == 0)
		bench_die("%s %s %u threads: no operation completed in %.3f s",
			  wl_name[w], peer_name[p], nthreads,
			  o->common.seconds);

	bench_sync_destroy(&r->sync);
	free(r->thr);
	free(r);
	free(tids);
	return mops;
}

/* --------------------------------------------------------------- options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_seq [--threads 1,2,8] [--seconds S] [--reps R]\n"
		"                 [--seqs N] [--prompt P] [--batch B]\n"
		"                 [--workloads LIST] [--csv FILE]\n"
		"  --threads LIST  comma-separated thread counts (default "
		"1,2,8)\n"
		"  --seconds S     duration of one measurement (default %.1f)\n"
		"  --reps R        measurements per cell; the median is "
		"reported (default %d)\n"
		"  --seqs N        running sequences in all, split evenly "
		"between the threads\n"
		"                  (decode, full; the fork sources; default "
		"%u)\n"
		"  --prompt P      prompt tokens of a new sequence (decode, "
		"batch, full),\n"
		"                  1..%u (default %u)\n"
		"  --batch B       sequences in each thread's decode step "
		"(batch), 1..%u\n"
		"                  (default %u)\n"
		"  --workloads L   comma-separated subset of decode,batch,"
		"fork4,fork16,\n"
		"                  fork64,full,fork_n4,fork_n16; fork = the "
		"three fork rows,\n"
		"                  fork_n = the two fork_n rows (default all)\n"
		"  --csv FILE      also write every cell as CSV:\n"
		"                  workload,peer,threads,rep_median_mops,"
		"ns_per_op_per_thread\n",
		BENCH_DEFAULT_SECONDS, BENCH_DEFAULT_REPS, DEFAULT_SEQS,
		MAX_TOKENS - 1, DEFAULT_PROMPT, MAX_BATCH, DEFAULT_BATCH);
}

/* A comma-separated list of workload names ("fork": the three fork
 * rows, "fork_n": the two fork_n rows); exits 2 on a bad one. */
static unsigned parse_workloads(const char *val)
{
	unsigned set = 0;
	const char *p = val;

	for (;;) {
		size_t len = strcspn(p, ",");
		int w;

		for (w = 0; w < NUM_WL; w++)
			if (len == strlen(wl_name[w]) &&
			    !strncmp(p, wl_name[w], len))
				break;
		if (len == 4 && !strncmp(p, "fork", 4)) {
			set |= WL_FORKS;
		} else if (len == 6 && !strncmp(p, "fork_n", 6)) {
			set |= WL_FORK_NS;
		} else if (w == NUM_WL) {
			fprintf(stderr, "%s: --workloads: unknown workload "
					"'%.*s' in '%s'\n",
				bench_prog, (int)len, p, val);
			exit(2);
		} else {
			set |= 1u << w;
		}
		if (!p[len])
			return set;
		p += len + 1;
	}
}

static bool parse_opt(void *ctx, const char *name, const char *val)
{
	struct opts *o = ctx;

	if (!strcmp(name, "--seqs"))
		o->seqs = (uint32_t)bench_parse_ulong(name, val, 1, MAX_SEQS);
	else if (!strcmp(name, "--prompt"))
		o->prompt = (uint32_t)bench_parse_ulong(name, val, 1,
							MAX_TOKENS - 1);
	else if (!strcmp(name, "--batch"))
		o->batch = (uint32_t)bench_parse_ulong(name, val, 1, MAX_BATCH);
	else if (!strcmp(name, "--workloads"))
		o->workloads = parse_workloads(val);
	else
		return false;
	return true;
}

static void parse_args(struct opts *o, int argc, char **argv)
{
	o->seqs = DEFAULT_SEQS;
	o->prompt = DEFAULT_PROMPT;
	o->batch = DEFAULT_BATCH;
	o->workloads = (1u << NUM_WL) - 1;
	bench_parse_args(&o->common, argc, argv, usage, parse_opt, o);
}

/* ---------------------------------------------------------------- report */

static void print_header(void)
{
	printf("%-8s %4s  %-14s %9s %11s %8s %9s\n", "workload", "thr",
	       "peer", "Mops/s", "ns/op/thr", "others", "x mutex");
	printf("%-8s %4s  %-14s %9s %11s %8s %9s\n", "--------", "---",
	       "----", "------", "---------", "------", "-------");
}

static void print_group(enum workload w, unsigned ti, unsigned threads)
{
	for (int p = 0; p < NUM_PEERS; p++) {
		double m = *bench_res(w, ti, p);

		printf("%-8s %4u  %-14s %9.3f %11.1f", wl_name[w], threads,
		       peer_name[p], m, bench_ns_per_op(m, threads));
		bench_print_others(*bench_res_others(w, ti, p));
		if (p == P_KVPOOL)
			printf(" %8.2fx", m / *bench_res(w, ti, P_MUTEX));
		printf("\n");
	}
	printf("\n");
	fflush(stdout);
}

/* The median of cell (w, threads n, peer p), or a negative value if the
 * cell was not measured. */
static double cell(const struct opts *o, enum workload w, unsigned n,
		   enum peer p)
{
	int ti = bench_find_threads(&o->common, n);

	if (ti < 0 || !(o->workloads & (1u << w)))
		return -1;
	return *bench_res(w, (unsigned)ti, p);
}

/* Target `label`: a >= need x b, two cells' medians (negative: not
 * measured, the target is skipped). */
static void target_cells(const char *label, double a, double b,
			 double need)
{
	char line[512];

	if (a < 0 || b < 0) {
		snprintf(line, sizeof(line), "%s (not measured)", label);
		bench_skip(line);
		return;
	}
	snprintf(line, sizeof(line), "%s: %.3f vs %.3f Mops/s (%.2fx)", label,
		 a, b, a / b);
	bench_verdict(a >= need * b, line);
}

/* kvpool >= need x mutex-hashmap for workload w at n threads. */
static void target_ratio(const struct opts *o, const char *tag,
			 enum workload w, unsigned n, double need)
{
	char label[256];

	snprintf(label, sizeof(label),
		 "%s %s, %u thread%s: kvpool >= %.1fx mutex-hashmap", tag,
		 wl_name[w], n, n > 1 ? "s" : "", need);
	target_cells(label, cell(o, w, n, P_KVPOOL), cell(o, w, n, P_MUTEX),
		     need);
}

/* kvpool at 8 threads (oversubscribed) >= 0.8 x its own 2 threads. */
static void target_oversub(const struct opts *o, const char *tag,
			   enum workload w)
{
	char label[256];

	snprintf(label, sizeof(label),
		 "%s %s, 8 threads: kvpool >= 0.8 x its 2-thread throughput",
		 tag, wl_name[w]);
	target_cells(label, cell(o, w, 8, P_KVPOOL), cell(o, w, 2, P_KVPOOL),
		     0.8);
}

/* Issue 24's targets, and issue 40's for forks and fork_n. */
static void print_targets(const struct opts *o)
{
	static const enum workload forks[] = {WL_FORK4, WL_FORK16, WL_FORK64};
	static const double forks_1t[] = {0.6, 1.0, 1.0};
	double k1 = cell(o, WL_DECODE, 1, P_KVPOOL);
	unsigned tag = 1;
	char line[512], t[16];

	printf("targets\n");
	snprintf(t, sizeof(t), "(%u)", tag++);
	target_ratio(o, t, WL_BATCH, 2, 5.0);
	snprintf(t, sizeof(t), "(%u)", tag++);
	target_ratio(o, t, WL_DECODE, 2, 4.0);
	snprintf(line, sizeof(line),
		 "(%u) decode, 1 thread: kvpool <= 15 ns per append", tag++);
	if (k1 < 0) {
		strncat(line, " (not measured)",
			sizeof(line) - strlen(line) - 1);
		bench_skip(line);
	} else {
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
			 ": %.1f ns (per sequence per step)",
			 bench_ns_per_op(k1, 1));
		bench_verdict(bench_ns_per_op(k1, 1) <= 15, line);
	}
	for (unsigned i = 0; i < sizeof(forks) / sizeof(forks[0]); i++) {
		snprintf(t, sizeof(t), "(%u)", tag++);
		target_ratio(o, t, forks[i], 1, forks_1t[i]);
		snprintf(t, sizeof(t), "(%u)", tag++);
		target_ratio(o, t, forks[i], 2, 3.0);
	}
	for (int w = WL_FORKN4; w <= WL_FORKN16; w++) {
		snprintf(t, sizeof(t), "(%u)", tag++);
		target_ratio(o, t, (enum workload)w, 1, 1.5);
		snprintf(t, sizeof(t), "(%u)", tag++);
		target_ratio(o, t, (enum workload)w, 2, 3.0);
	}
	for (int w = 0; w < NUM_WL; w++) {
		snprintf(t, sizeof(t), "(%u)", tag++);
		target_oversub(o, t, (enum workload)w);
	}
	bench_print_own_scaling(&o->common, wl_name, P_KVPOOL);
	bench_targets_summary();
}

static void write_csv(const struct opts *o, FILE *f)
{
	fprintf(f, "workload,peer,threads,rep_median_mops,"
		   "ns_per_op_per_thread\n");
	for (int w = 0; w < NUM_WL; w++)
		for (unsigned ti = 0; ti < o->common.nthreads_list &&
				      (o->workloads & (1u << w));
		     ti++)
			for (int p = 0; p < NUM_PEERS; p++) {
				unsigned n = o->common.threads[ti];
				double m = *bench_res(w, ti, p);

				fprintf(f, "%s,%s,%u,%.4f,%.4f\n", wl_name[w],
					peer_name[p], n, m,
					bench_ns_per_op(m, n));
			}
}

/*
 * Measures both peers for one workload and thread count, o->reps times,
 * the peers interleaved within each rep (and their order alternated) so
 * that slow drifts of the machine hit both alike, and stores the medians.
 */
static void measure_group(enum workload w, unsigned ti, unsigned n,
			  const struct opts *o)
{
	unsigned reps = o->common.reps;

	for (unsigned rep = 0; rep < reps; rep++)
		for (int q = 0; q < NUM_PEERS; q++) {
			int p = rep % 2 ? NUM_PEERS - 1 - q : q;

			*bench_sample(p, rep) =
				measure((enum peer)p, w, n, o,
					bench_sample_others(p, rep));
		}
	for (int p = 0; p < NUM_PEERS; p++)
		bench_res_store(w, ti, p);
}

/* What the run measures, and how to read it. */
static void print_setup(const struct opts *op, long ncpu, uint32_t max_blocks,
			uint32_t cache_blocks)
{
	const struct bench_opts *c = &op->common;

	printf("bench_seq: kvpool %d.%d.%d, %ld online CPUs, %u tokens per "
	       "block\n",
	       KVP_VERSION_MAJOR, KVP_VERSION_MINOR, KVP_VERSION_PATCH, ncpu,
	       BLOCK_TOKENS);
	printf("  decode: %u running sequences split between the threads, "
	       "kvp_seq_append per\n"
	       "    sequence; prompt %u tokens, recycled at %u tokens\n",
	       op->seqs, op->prompt, MAX_TOKENS);
	printf("  batch: each thread's decode step appends to its %u "
	       "sequences in one\n"
	       "    kvp_seq_append_batch (the mutex peer: one lock per "
	       "batch)\n",
	       op->batch);
	printf("  forkN: fork + append 1 token + free of a source of N full "
	       "blocks and %u\n"
	       "    tokens (the append copies that block); %u sources split "
	       "between the threads\n",
	       FORK_PARTIAL, op->seqs);
	printf("  fork_nN: N children of a %u-token source in one "
	       "kvp_seq_fork_n (the mutex\n"
	       "    peer: one lock hold), each appends 1 token (a copy) and "
	       "is freed\n",
	       FORK_N_PROMPT);
	printf("  ID-only pool of up to %u blocks, kvpool cache %u "
	       "blocks/thread (automatic)\n",
	       max_blocks, cache_blocks);
	printf("  %.2f s per measurement, median of %u reps, peers "
	       "interleaved\n",
	       c->seconds, c->reps);
	bench_report_busy("before the run");
	printf("  estimated run time: %.0f s\n",
	       __builtin_popcount(op->workloads) * c->nthreads_list * NUM_PEERS *
		       c->reps * (c->seconds + 0.05));
	printf("  Mops/s: ops per second, all threads (decode, batch, full: "
	       "appends;\n"
	       "    forkN: fork+append+free cycles; fork_nN: cycles of N "
	       "children)\n");
	printf("  full: decode in a full pool of %u blocks or fewer "
	       "(prefix caching; allocations evict)\n",
	       full_pool_blocks(op, 1));
	printf("  ns/op/thr = threads * 1e3 / Mops (decode, batch: per "
	       "sequence per step)\n");
	printf("  x mutex: kvpool throughput / mutex-hashmap throughput "
	       "(higher is better)\n");
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
	struct opts o;
	const struct bench_opts *c = &o.common;
	FILE *csv;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct kvp_pool_stats st;
	struct kvp_pool *probe;
	uint32_t max_blocks = 0;

	parse_args(&o, argc, argv);
	csv = bench_csv_open(c->csv);
	for (int w = 0; w < NUM_WL; w++)
		for (unsigned i = 0; i < c->nthreads_list; i++) {
			uint32_t b = pool_blocks(&o, (enum workload)w,
						 c->threads[i]);

			if (o.workloads & (1u << w) && b > max_blocks)
				max_blocks = b;
		}

	bench_res_init(NUM_WL, c->nthreads_list, NUM_PEERS, c->reps);

	/* What the automatic cache size resolves to on this machine. */
	probe = make_pool(max_blocks);
	memset(&st, 0, sizeof(st));
	kvp_pool_stats(probe, &st);
	kvp_pool_unref(probe);

	print_setup(&o, ncpu, max_blocks, st.cache_blocks);
	bench_print_others_legend();
	print_header();
	fflush(stdout);

	for (int w = 0; w < NUM_WL; w++) {
		if (!(o.workloads & (1u << w)))
			continue;
		for (unsigned ti = 0; ti < c->nthreads_list; ti++) {
			unsigned n = c->threads[ti];

			measure_group((enum workload)w, ti, n, &o);
			print_group((enum workload)w, ti, n);
		}
	}

	print_targets(&o);
	bench_report_busy("after the run");

	if (csv)
		write_csv(&o, csv);
	bench_csv_close(csv, c->csv);
	bench_res_free();
	return 0;
}
