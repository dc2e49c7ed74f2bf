/* SPDX-License-Identifier: MIT */
/*
 * bench_seq_work.c - bench_seq's workers: the checked operations and each
 * workload's loop, inlined into one thread function per peer so that the
 * loop calls the peer's functions directly (bench_seq.c says what each
 * workload does).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "bench_seq.h"

/* ------------------------------------------------ checked operations */

/*
 * Each wrapper is inlined into a worker specialised for one peer (kv is a
 * compile-time constant there), so the loop calls the peer's function
 * directly, with no dispatch of its own.
 */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE void op_create(struct thr *t, bool kv, uint64_t id,
			     uint32_t ntok)
{
	struct run *r = t->run;
	int rc = kv ? kvp_seq_create(r->mgr, id, ntok)
		    : mm_create(&r->mm->mgr, id, ntok);

	if (__builtin_expect(rc != 0, 0))
		bench_die("%s: seq_create(%#llx, %u) failed: %s",
			  peer_name[r->peer], (unsigned long long)id, ntok,
			  kvp_strerror(rc));
	t->creates++;
}

ALWAYS_INLINE void op_append1(struct thr *t, bool kv, uint64_t id,
			      uint32_t expect_cow, uint32_t cow_tokens)
{
	struct run *r = t->run;
	struct kvp_copy cow[1];
	uint32_t ncow = UINT32_MAX;
	int rc = kv ? kvp_seq_append(r->mgr, id, 1, cow, 1, &ncow)
		    : mm_append(&r->mm->mgr, id, 1, cow, 1, &ncow);

	if (__builtin_expect(rc != 0, 0))
		bench_die("%s: seq_append(%#llx, 1) failed: %s",
			  peer_name[r->peer], (unsigned long long)id,
			  kvp_strerror(rc));
	if (__builtin_expect(ncow != expect_cow, 0))
		bench_die("%s: seq_append(%#llx, 1) reported %u copies, "
			  "expected %u",
			  peer_name[r->peer], (unsigned long long)id, ncow,
			  expect_cow);
	if (expect_cow &&
	    __builtin_expect(cow[0].tokens != cow_tokens ||
				     cow[0].src == cow[0].dst,
			     0))
		bench_die("%s: seq_append(%#llx, 1) reported the copy {%u -> "
			  "%u, %u tokens}, expected %u tokens between distinct "
			  "blocks",
			  peer_name[r->peer], (unsigned long long)id,
			  cow[0].src, cow[0].dst, cow[0].tokens, cow_tokens);
	t->appends++;
	t->cows += ncow;
}

/* One decode step: one token appended to each of ids[0..n). */
ALWAYS_INLINE void op_append_batch(struct thr *t, bool kv, const uint64_t *ids,
				   uint32_t n, struct kvp_copy *cow)
{
	struct run *r = t->run;
	uint32_t ncow = UINT32_MAX;
	int rc = kv ? kvp_seq_append_batch(r->mgr, ids, NULL, n, cow, n, &ncow)
		    : mm_append_batch(&r->mm->mgr, ids, NULL, n, cow, n, &ncow);

	if (__builtin_expect(rc != (int)n, 0))
		bench_die("%s: seq_append_batch(%u sequences) returned %d (%s)",
			  peer_name[r->peer], n, rc,
			  rc < 0 ? kvp_strerror(rc) : "stopped early");
	if (__builtin_expect(ncow != 0, 0))
		bench_die("%s: seq_append_batch(%u sequences) reported %u "
			  "copies, expected none",
			  peer_name[r->peer], n, ncow);
	t->appends += n;
}

ALWAYS_INLINE void op_fork(struct thr *t, bool kv, uint64_t src,
			   uint64_t dst)
{
	struct run *r = t->run;
	int rc = kv ? kvp_seq_fork(r->mgr, src, dst)
		    : mm_fork(&r->mm->mgr, src, dst);

	if (__builtin_expect(rc != 0, 0))
		bench_die("%s: seq_fork(%#llx, %#llx) failed: %s",
			  peer_name[r->peer], (unsigned long long)src,
			  (unsigned long long)dst, kvp_strerror(rc));
	t->forks++;
}

/* n children of src, dsts[0..n), in one call (one lock hold for the
 * mutex peer). */
ALWAYS_INLINE void op_fork_n(struct thr *t, bool kv, uint64_t src,
			     const uint64_t *dsts, uint32_t n)
{
	struct run *r = t->run;
	int rc = kv ? kvp_seq_fork_n(r->mgr, src, dsts, n, 0)
		    : mm_fork_n(&r->mm->mgr, src, dsts, n);

	if (__builtin_expect(rc != 0, 0))
		bench_die("%s: seq_fork_n(%#llx, %u children) failed: %s",
			  peer_name[r->peer], (unsigned long long)src, n,
			  kvp_strerror(rc));
	t->forks += n;
}

/* Commits the full blocks of sequence id (ntok tokens) under hashes
 * unique to (thread, generation): after its free they are cached. */
ALWAYS_INLINE void op_commit(struct thr *t, bool kv, uint64_t id,
			     uint32_t ntok, uint64_t gen,
			     struct kvp_hash *hashes)
{
	struct run *r = t->run;
	uint32_t n = ntok / BLOCK_TOKENS;
	int rc;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t w[4] = {((uint64_t)t->tid << 48) ^ gen, gen,
				 (uint64_t)i, 0x6675ull};

		for (int k = 0; k < 4; k++) {
			w[k] += (uint64_t)i * 0x9e3779b97f4a7c15ull + gen;
			w[k] ^= w[k] >> 31;
			w[k] *= 0xbf58476d1ce4e5b9ull;
			w[k] ^= w[k] >> 29;
		}
		memcpy(hashes[i].b, w, sizeof(w));
	}
	rc = kv ? kvp_seq_commit(r->mgr, id, hashes, n)
		: mm_commit(&r->mm->mgr, id, hashes, n);
	if (__builtin_expect(rc < 0, 0))
		bench_die("%s: seq_commit(%#llx, %u blocks) failed: %s",
			  peer_name[r->peer], (unsigned long long)id, n,
			  kvp_strerror(rc));
}

ALWAYS_INLINE void op_free(struct thr *t, bool kv, uint64_t id)
{
	struct run *r = t->run;
	int rc = kv ? kvp_seq_free(r->mgr, id) : mm_free(&r->mm->mgr, id);

	if (__builtin_expect(rc != 0, 0))
		bench_die("%s: seq_free(%#llx) failed: %s", peer_name[r->peer],
			  (unsigned long long)id, kvp_strerror(rc));
	t->frees++;
}


/* ---------------------------------------------------------------- workers */

ALWAYS_INLINE void *decode_body(struct thr *t, const bool kv)
{
	struct run *r = t->run;
	const uint32_t S = r->per_thread, P = r->prompt;
	uint32_t *ntok = bench_xcalloc(S, sizeof(*ntok));
	struct kvp_hash *hashes =
		bench_xcalloc(MAX_TOKENS / BLOCK_TOKENS, sizeof(*hashes));
	const bool full = r->full;
	uint64_t ops = 0, gen = 0;
	uint32_t i = 0;

	/* Staggered start: sequence j has been decoding for a while. */
	for (uint32_t j = 0; j < S; j++) {
		ntok[j] = P + (uint32_t)((uint64_t)j * (MAX_TOKENS - P) / S);
		op_create(t, kv, seq_id(t->tid, j), ntok[j]);
	}

#define DECODE_ONE()                                                        \
	do {                                                                \
		uint64_t id_ = seq_id(t->tid, i);                           \
                                                                            \
		op_append1(t, kv, id_, 0, 0);                               \
		if (++ntok[i] >= MAX_TOKENS) {                              \
			if (full)                                           \
				op_commit(t, kv, id_, ntok[i], gen++,       \
					  hashes);                          \
			op_free(t, kv, id_);                                \
			op_create(t, kv, id_, P);                           \
			ntok[i] = P;                                        \
		}                                                           \
		if (++i == S)                                               \
			i = 0;                                              \
	} while (0)

	for (uint32_t w = 0; w < WARMUP_DECODE; w++)
		DECODE_ONE();
	bench_sync_start(&r->sync);
	while (!bench_sync_stopped(&r->sync)) {
		DECODE_ONE();
		ops++;
	}
#undef DECODE_ONE
	bench_sync_done(&r->sync);
	t->ops = ops;
	for (uint32_t j = 0; j < S; j++)
		op_free(t, kv, seq_id(t->tid, j));
	free(ntok);
	free(hashes);
	return NULL;
}

/* Each thread steps its own batch of B sequences, recycled as in decode. */
ALWAYS_INLINE void *batch_body(struct thr *t, const bool kv)
{
	struct run *r = t->run;
	const uint32_t B = r->per_thread, P = r->prompt;
	uint32_t *ntok = bench_xcalloc(B, sizeof(*ntok));
	uint64_t *ids = bench_xcalloc(B, sizeof(*ids));
	struct kvp_copy *cow = bench_xcalloc(B, sizeof(*cow));
	uint64_t ops = 0;

	for (uint32_t j = 0; j < B; j++) {
		ids[j] = seq_id(t->tid, j);
		ntok[j] = P + (uint32_t)((uint64_t)j * (MAX_TOKENS - P) / B);
		op_create(t, kv, ids[j], ntok[j]);
	}

#define STEP()                                                              \
	do {                                                                \
		op_append_batch(t, kv, ids, B, cow);                        \
		for (uint32_t j_ = 0; j_ < B; j_++)                         \
			if (++ntok[j_] >= MAX_TOKENS) {                     \
				op_free(t, kv, ids[j_]);                    \
				op_create(t, kv, ids[j_], P);               \
				ntok[j_] = P;                               \
			}                                                   \
	} while (0)

	for (uint32_t w = 0; w < (WARMUP_DECODE + B - 1) / B; w++)
		STEP();
	bench_sync_start(&r->sync);
	while (!bench_sync_stopped(&r->sync)) {
		STEP();
		ops += B;
	}
#undef STEP
	bench_sync_done(&r->sync);
	t->ops = ops;
	for (uint32_t j = 0; j < B; j++)
		op_free(t, kv, ids[j]);
	free(ntok);
	free(ids);
	free(cow);
	return NULL;
}

ALWAYS_INLINE void *fork_body(struct thr *t, const bool kv)
{
	struct run *r = t->run;
	const uint32_t S = r->per_thread, P = r->prompt;
	const uint32_t expect_cow = P % BLOCK_TOKENS ? 1 : 0;
	const uint32_t cow_tokens = P % BLOCK_TOKENS;
	uint64_t next = seq_id(t->tid, 0) | FORK_BIT;
	uint64_t ops = 0;
	uint32_t i = 0;

	for (uint32_t j = 0; j < S; j++)
		op_create(t, kv, seq_id(t->tid, j), P);

#define FORK_ONE()                                                          \
	do {                                                                \
		uint64_t dst_ = next++;                                     \
                                                                            \
		op_fork(t, kv, seq_id(t->tid, i), dst_);                    \
		op_append1(t, kv, dst_, expect_cow, cow_tokens);            \
		op_free(t, kv, dst_);                                       \
		if (++i == S)                                               \
			i = 0;                                              \
	} while (0)

	for (uint32_t w = 0; w < WARMUP_FORK; w++)
		FORK_ONE();
	bench_sync_start(&r->sync);
	while (!bench_sync_stopped(&r->sync)) {
		FORK_ONE();
		ops++;
	}
#undef FORK_ONE
	bench_sync_done(&r->sync);
	t->ops = ops;
	for (uint32_t j = 0; j < S; j++)
		op_free(t, kv, seq_id(t->tid, j));
	return NULL;
}

/* Parallel sampling: n children of one source in one call, each
 * appending one token (a copy of the shared partial block), then each
 * freed.  One op = one such cycle. */
ALWAYS_INLINE void *fork_n_body(struct thr *t, const bool kv)
{
	struct run *r = t->run;
	const uint32_t S = r->per_thread, P = r->prompt, n = wl_fork_n[r->wl];
	const uint32_t expect_cow = P % BLOCK_TOKENS ? 1 : 0;
	const uint32_t cow_tokens = P % BLOCK_TOKENS;
	uint64_t next = seq_id(t->tid, 0) | FORK_BIT, dsts[FORK_N_MAX];
	uint64_t ops = 0;
	uint32_t i = 0;

	for (uint32_t j = 0; j < S; j++)
		op_create(t, kv, seq_id(t->tid, j), P);

#define FORK_N_ONE()                                                        \
	do {                                                                \
		for (uint32_t k_ = 0; k_ < n; k_++)                         \
			dsts[k_] = next++;                                  \
		op_fork_n(t, kv, seq_id(t->tid, i), dsts, n);               \
		for (uint32_t k_ = 0; k_ < n; k_++)                         \
			op_append1(t, kv, dsts[k_], expect_cow, cow_tokens); \
		for (uint32_t k_ = 0; k_ < n; k_++)                         \
			op_free(t, kv, dsts[k_]);                           \
		if (++i == S)                                               \
			i = 0;                                              \
	} while (0)

	for (uint32_t w = 0; w < WARMUP_FORK / n; w++)
		FORK_N_ONE();
	bench_sync_start(&r->sync);
	while (!bench_sync_stopped(&r->sync)) {
		FORK_N_ONE();
		ops++;
	}
#undef FORK_N_ONE
	bench_sync_done(&r->sync);
	t->ops = ops;
	for (uint32_t j = 0; j < S; j++)
		op_free(t, kv, seq_id(t->tid, j));
	return NULL;
}

static void *fork_n_kvp(void *arg)
{
	return fork_n_body(arg, true);
}

static void *fork_n_mtx(void *arg)
{
	return fork_n_body(arg, false);
}

static void *decode_kvp(void *arg)
{
	return decode_body(arg, true);
}

static void *decode_mtx(void *arg)
{
	return decode_body(arg, false);
}

static void *batch_kvp(void *arg)
{
	return batch_body(arg, true);
}

static void *batch_mtx(void *arg)
{
	return batch_body(arg, false);
}

static void *fork_kvp(void *arg)
{
	return fork_body(arg, true);
}

static void *fork_mtx(void *arg)
{
	return fork_body(arg, false);
}

worker_fn worker_for(enum peer p, enum workload w)
{
	if (w == WL_DECODE || w == WL_FULL)
		return p == P_KVPOOL ? decode_kvp : decode_mtx;
	if (w == WL_BATCH)
		return p == P_KVPOOL ? batch_kvp : batch_mtx;
	if (wl_fork_n[w])
		return p == P_KVPOOL ? fork_n_kvp : fork_n_mtx;
	return p == P_KVPOOL ? fork_kvp : fork_mtx;
}
