/* SPDX-License-Identifier: MIT */
/*
 * bench_seq.h - what bench_seq's two files share: the parameters, the
 * workloads, the options and the per-run and per-thread context.
 * bench_seq.c measures and reports; bench_seq_work.c holds the workers
 * (the checked operations and each workload's loop, one specialisation
 * per peer).  bench_seq.c's opening comment says what is measured.
 */
#ifndef KVP_BENCH_SEQ_H
#define KVP_BENCH_SEQ_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvpool.h>

#include "bench_common.h"
#include "peer_mutex.h"
/* ------------------------------------------------------------ parameters */

#define BLOCK_TOKENS 16u
#define MAX_TOKENS 2048u /* a decoding sequence is recycled at this length */
#define WARMUP_DECODE 4096u /* appends per thread before the barrier */
#define WARMUP_FORK 512u    /* fork cycles per thread before the barrier */
#define MAX_SEQS (1u << 20)

#define DEFAULT_SEQS 1024u
#define DEFAULT_PROMPT 100u
#define DEFAULT_BATCH 256u
#define MAX_BATCH 65536u

/* A fork source holds N full blocks and FORK_PARTIAL tokens more, so the
 * fork's append copies its partly filled last block. */
#define FORK_PARTIAL 4u

/* Sequence ids: thread t owns (t + 1) << 40 | j for its sequences j and
 * (t + 1) << 40 | FORK_BIT | k for its forks k = 0, 1, ... */
#define ID_SHIFT 40
#define FORK_BIT (1ull << 39)

enum workload {
	WL_DECODE,
	WL_BATCH,
	WL_FORK4,
	WL_FORK16,
	WL_FORK64,
	WL_FULL,
	WL_FORKN4,
	WL_FORKN16,
	NUM_WL
};
static const char *const wl_name[NUM_WL] = {
	"decode", "batch", "fork4", "fork16", "fork64", "full", "fork_n4",
	"fork_n16"};
/* Full blocks of a fork workload's source sequences (0: not a fork). */
static const uint32_t wl_fork_blocks[NUM_WL] = {
	[WL_FORK4] = 4, [WL_FORK16] = 16, [WL_FORK64] = 64};
#define WL_FORKS (1u << WL_FORK4 | 1u << WL_FORK16 | 1u << WL_FORK64)
/* Children of one kvp_seq_fork_n call (0: not a fork_n workload), of a
 * source of FORK_N_PROMPT tokens. */
static const uint32_t wl_fork_n[NUM_WL] = {[WL_FORKN4] = 4,
					   [WL_FORKN16] = 16};
#define WL_FORK_NS (1u << WL_FORKN4 | 1u << WL_FORKN16)
#define FORK_N_PROMPT 1000u
#define FORK_N_MAX 16u

enum peer { P_KVPOOL, P_MUTEX, NUM_PEERS };
static const char *const peer_name[NUM_PEERS] = {"kvpool", "mutex-hashmap"};

struct opts {
	struct bench_opts common; /* --threads, --seconds, --reps, --csv */
	uint32_t seqs;
	uint32_t prompt;
	uint32_t batch;	    /* --batch: sequences in one thread's step */
	unsigned workloads; /* --workloads: bit w = workload w runs */
};

/* ------------------------------------------- peer: mutex + plain hash map */

/* bench/peer_mutex.{c,h}: one global mutex around a plain hash map of
 * sequences and the free list (no prefix cache here). */
struct mutex_mgr {
	struct mm_pool pool;
	struct mm_mgr mgr;
};

/* ------------------------------------------------------ run-wide context */

struct run;

/* Per-thread slot, one cache line or more, written by its thread only. */
struct thr {
	_Alignas(BENCH_CACHE_LINE) struct run *run;
	unsigned tid;
	uint64_t ops;	       /* ops in the timed window */
	uint64_t appends;      /* successful appends, warm-up included */
	uint64_t forks;	       /* successful forks, warm-up included */
	uint64_t cows;	       /* copies reported */
	uint64_t creates;      /* successful creates */
	uint64_t frees;	       /* successful frees */
};

struct run {
	enum peer peer;
	enum workload wl;
	bool full; /* WL_FULL: a prefix-caching manager, commits, evictions */
	unsigned nthreads;
	uint32_t per_thread; /* S: sequences each thread owns */
	uint32_t prompt;     /* tokens of a new sequence (a fork's source) */
	struct kvp_pool *pool;
	struct kvp_manager *mgr;
	struct mutex_mgr *mm;
	struct thr *thr;
	struct bench_sync sync;
};

static inline uint64_t seq_id(unsigned tid, uint32_t j)
{
	return ((uint64_t)(tid + 1) << ID_SHIFT) | j;
}

/* A worker: the thread function of peer p for workload w. */
typedef void *(*worker_fn)(void *);
worker_fn worker_for(enum peer p, enum workload w);

#endif /* KVP_BENCH_SEQ_H */
