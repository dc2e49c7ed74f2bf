/* SPDX-License-Identifier: MIT */
/*
 * sim_run.h - one replay's shared state, between sim_replay.c, which sets
 * it up, checks and frees it, and sim_sched.c, whose scheduler threads
 * run it.  Private to those two files.
 */
#ifndef KVP_TOOLS_SIM_RUN_H
#define KVP_TOOLS_SIM_RUN_H

#include <pthread.h>
#include <stdatomic.h>

#include "bench_common.h"
#include "peer_mutex.h"
#include "sim.h"

struct queue;
struct thr;

/* Written by sim_replay.c before the threads start and after they are
 * joined; meanwhile the threads write only what says so. */
struct run {
	const struct sim_opts *o;
	const struct workload *w;
	enum peer peer;
	enum kvp_policy policy;
	uint32_t blocks;
	/* kvpool */
	struct kvp_pool *pool;
	struct kvp_manager **kmgr;
	/* mutex peer */
	struct mm_pool *mpool;
	struct mm_mgr *mmgr;
	/* --retain-system: the hashes of the retained ranges (a set of
	 * their first words, read-only during the replay), and the REMOVED
	 * events that named one. */
	uint64_t *retained, retained_mask;
	_Atomic uint64_t retained_evicted;
	struct queue *q;   /* per model (sim_sched.c) */
	uint32_t *attempt; /* per request; owner thread only (queue
			      hand-offs order it) */
	struct thr *thr;   /* per thread (sim_sched.c) */
	pthread_t *tids;
	pthread_barrier_t start;
	_Alignas(BENCH_CACHE_LINE) _Atomic uint32_t finished;
	_Alignas(BENCH_CACHE_LINE) _Atomic uint64_t t0, t1;
	/* --metrics-every (sim_metrics.c): all threads' steps; under
	 * metrics_lock, the scrapes written, the first failure (a negative
	 * errno) and its number. */
	_Alignas(BENCH_CACHE_LINE) _Atomic uint64_t metrics_steps;
	pthread_mutex_t metrics_lock;
	uint64_t metrics_written, metrics_err_at;
	int metrics_err;
};

/* Makes the queues and starts o->threads scheduler threads over r (its
 * pool and managers made); they wait for each other, then replay the
 * workload until every request is done.  Shows progress on stderr with
 * o->progress, until the last request is done. */
void sim_sched_start(struct run *r);

/* Joins the threads and adds what they counted into *res (zeroed by the
 * caller): operations, latencies, requests, pool use, the replay's wall
 * time. */
void sim_sched_join(struct run *r, struct sim_result *res);

/* sim_metrics.c: a scheduler step of a kvpool replay with
 * --metrics-every (every o->metrics_every steps, FILE.k); and, after the
 * replay, the final scrape into FILE: exits 1 with one line if it, or a
 * periodic one, could not be written. */
void sim_metrics_step(struct run *r);
void sim_metrics_final(struct run *r);

/* Frees the queues and the threads' state (after sim_sched_join). */
void sim_sched_free(struct run *r);

#endif /* KVP_TOOLS_SIM_RUN_H */
