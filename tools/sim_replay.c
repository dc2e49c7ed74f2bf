/* SPDX-License-Identifier: MIT */
/*
 * sim_replay.c - one replay of `kvpool sim`: the pool and the managers of
 * a peer (kvpool's, with the --retain-system event count, or the mutex
 * peer's), the run itself (sim_sched.c's threads), the managers'
 * statistics totalled with kvp_stats_add, the checks of the quiescent
 * state after it, and the teardown.
 *
 * Owns struct run (sim_run.h): set up here before the threads start, read
 * here after they are joined.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvpool.h>
#ifdef KVP_HAVE_EVENTS
#include <kvpool-events.h>
#endif

#include "sim_run.h"

/* ----------------------------------------------------- set-up, teardown */

/* --retain-system: the set of retained hashes (their first 8 bytes, never
 * 0 here: 0 marks an empty slot). */
static uint64_t retained_key(const struct kvp_hash *h)
{
	uint64_t k;

	memcpy(&k, h->b, sizeof(k));
	return k ? k : 1;
}

static bool retained_has(const struct run *r, uint64_t k)
{
	for (uint64_t i = k & r->retained_mask;;
	     i = (i + 1) & r->retained_mask) {
		if (r->retained[i] == k)
			return true;
		if (r->retained[i] == 0)
			return false;
	}
}

/* Fills r->retained with the hashes of every request's first
 * retain_tokens tokens (full blocks). */
static void retained_build(struct run *r)
{
	const struct workload *w = r->w;
	uint32_t per = r->o->retain_tokens / w->block_tokens;
	uint64_t n = 0, slots = 64;

	for (uint32_t q = 0; q < w->nreq; q++)
		n += w->req[q].nhashes < per ? w->req[q].nhashes : per;
	while (slots < 2 * n)
		slots <<= 1;
	r->retained = bench_xcalloc(slots, sizeof(*r->retained));
	r->retained_mask = slots - 1;
	for (uint32_t q = 0; q < w->nreq; q++) {
		const struct kvp_hash *h = wl_hashes(w, &w->req[q]);

		for (uint32_t i = 0; i < w->req[q].nhashes && i < per; i++) {
			uint64_t k = retained_key(&h[i]), j;

			for (j = k & r->retained_mask;
			     r->retained[j] && r->retained[j] != k;
			     j = (j + 1) & r->retained_mask)
				;
			r->retained[j] = k;
		}
	}
}

/* The managers' event callback under --retain-system: counts REMOVED
 * retained hashes (any thread; the set is read-only meanwhile). */
static void retained_on_event(const struct kvp_event *ev, void *arg)
{
	struct run *r = arg;
	uint64_t n = 0;

#ifdef KVP_HAVE_EVENTS
	if (r->o->pub)
		kvp_pub_event_cb(ev, r->o->pub);
#endif
	if (ev->type != KVP_EVENT_REMOVED)
		return;
	for (uint32_t i = 0; i < ev->nhashes; i++)
		n += retained_has(r, retained_key(&ev->hashes[i]));
	if (n)
		atomic_fetch_add_explicit(&r->retained_evicted, n,
					  memory_order_relaxed);
}

static int make_kvpool(struct run *r)
{
	struct kvp_pool_config pc;
	struct kvp_manager_config mc;
	int rc;

	memset(&pc, 0, sizeof(pc));
	pc.num_blocks = r->blocks;
	pc.block_tokens = r->w->block_tokens;
	pc.device_id = -1;
	rc = kvp_pool_create(&pc, &r->pool);
	if (rc != 0) {
		fprintf(stderr, "kvpool sim: kvp_pool_create(%u blocks): %s\n",
			r->blocks, kvp_strerror(rc));
		return rc;
	}
	r->kmgr = bench_xcalloc(r->w->models, sizeof(*r->kmgr));
	memset(&mc, 0, sizeof(mc));
	mc.pool = r->pool;
	mc.policy = r->policy;
	mc.watermark = r->o->watermark;
	mc.flags = KVP_PREFIX_CACHE;
	if (r->o->retain)
		retained_build(r);
	for (unsigned m = 0; m < r->w->models; m++) {
		char name[KVP_NAME_MAX];

		/* The metrics' manager label. */
		snprintf(name, sizeof(name), "model%u", m);
		mc.name = name;
		rc = kvp_manager_create(&mc, &r->kmgr[m]);
		if (rc != 0) {
			fprintf(stderr, "kvpool sim: kvp_manager_create: %s\n",
				kvp_strerror(rc));
			return rc;
		}
		if (r->o->retain)
			(void)kvp_manager_set_event_cb(r->kmgr[m],
						       retained_on_event, r);
#ifdef KVP_HAVE_EVENTS
		/* With --retain-system too, retained_on_event passes the
		 * events on. */
		if (r->o->pub && !r->o->retain)
			kvp_manager_set_event_cb(r->kmgr[m], kvp_pub_event_cb,
						 r->o->pub);
#endif
	}
	return 0;
}

/* Creates the mutex peer's pool and managers, their maps sized for the
 * workload.  Returns 0 or a negative errno (message on stderr). */
static int make_mutex(struct run *r)
{
	uint64_t seqs =
		(uint64_t)r->o->max_running * r->w->max_n + r->o->threads;
	uint64_t cached = r->w->distinct_blocks < r->blocks
				  ? r->w->distinct_blocks
				  : r->blocks;
	int rc;

	r->mpool = bench_aligned_zalloc(sizeof(*r->mpool));
	rc = mm_pool_init(r->mpool, r->blocks, r->w->block_tokens);
	if (rc != 0) {
		fprintf(stderr, "kvpool sim: mutex pool (%u blocks): %s\n",
			r->blocks, kvp_strerror(rc));
		return rc;
	}
	r->mmgr = bench_aligned_zalloc(r->w->models * sizeof(*r->mmgr));
	for (unsigned m = 0; m < r->w->models; m++) {
		rc = mm_mgr_init(&r->mmgr[m], r->mpool, r->policy,
				 r->o->watermark, KVP_PREFIX_CACHE, seqs,
				 cached / r->w->models + 1);
		if (rc != 0) {
			fprintf(stderr, "kvpool sim: mutex manager: %s\n",
				kvp_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* Checks the quiescent state after a replay: no sequence left, every
 * block free (or evictable), invariants sound.  Dies otherwise. */
static void verify(struct run *r)
{
	unsigned M = r->w->models;

	if (r->peer == PEER_KVPOOL) {
		struct kvp_pool_stats ps;
		int rc = kvp_manager_check(r->kmgr[0]);

		if (rc != 0)
			bench_die("sim: kvp_manager_check after the replay: %s",
				  kvp_strerror(rc));
		for (unsigned m = 0; m < M; m++) {
			struct kvp_stats st;

			kvp_manager_stats(r->kmgr[m], &st);
			if (st.sequences != 0)
				bench_die("sim: model %u: %llu sequences left "
					  "after the replay",
					  m, (unsigned long long)st.sequences);
		}
		kvp_pool_stats(r->pool, &ps);
		if (ps.used != 0)
			bench_die("sim: %llu blocks still used after the "
				  "replay",
				  (unsigned long long)ps.used);
	} else {
		struct mm_mgr **v = bench_xcalloc(M, sizeof(*v));

		for (unsigned m = 0; m < M; m++)
			v[m] = &r->mmgr[m];
		if (mm_check(r->mpool, v, M) != 0)
			bench_die("sim: mutex manager check failed after the "
				  "replay");
		if (mm_pool_used(r->mpool) != 0)
			bench_die("sim: mutex pool: blocks still used after "
				  "the replay");
		free(v);
	}
}

/* Frees everything sim_replay() and make_*() allocated (quiescent). */
static void destroy(struct run *r)
{
	sim_sched_free(r);
	for (unsigned m = 0; m < r->w->models; m++) {
		if (r->kmgr && r->kmgr[m])
			kvp_manager_destroy(r->kmgr[m]);
		if (r->mmgr)
			mm_mgr_destroy(&r->mmgr[m]);
	}
	free(r->kmgr);
	kvp_pool_unref(r->pool);
	if (r->mpool)
		mm_pool_destroy(r->mpool);
	free(r->mpool);
	free(r->mmgr);
}

/* Fills res's totals of the managers' statistics and the pool's peak
 * use, after the replay. */
static void collect_stats(struct run *r, struct sim_result *res)
{
	for (unsigned m = 0; m < r->w->models; m++) {
		struct kvp_stats st;

		if (r->peer == PEER_KVPOOL)
			kvp_manager_stats(r->kmgr[m], &st);
		else
			mm_stats(&r->mmgr[m], &st);
		kvp_stats_add(&res->st, &st);
	}
	if (r->peer == PEER_KVPOOL) {
		struct kvp_pool_stats ps;

		kvp_pool_stats(r->pool, &ps);
		if ((double)ps.peak_used / r->blocks > res->util_peak)
			res->util_peak = (double)ps.peak_used / r->blocks;
	} else if ((double)r->mpool->peak_used / r->blocks > res->util_peak) {
		res->util_peak = (double)r->mpool->peak_used / r->blocks;
	}
}

/* sim.h */
void sim_replay(const struct sim_opts *o, const struct workload *w,
		enum peer peer, uint32_t blocks, enum kvp_policy policy,
		struct sim_result *res)
{
	struct run *r = bench_aligned_zalloc(sizeof(*r));
	int rc = pthread_mutex_init(&r->metrics_lock, NULL);

	if (rc != 0)
		bench_die("pthread_mutex_init: %s", strerror(rc));
	r->o = o;
	r->w = w;
	r->peer = peer;
	r->policy = policy;
	r->blocks = blocks;
	if ((peer == PEER_KVPOOL ? make_kvpool(r) : make_mutex(r)) != 0)
		exit(1);
	memset(res, 0, sizeof(*res));
	sim_sched_start(r);
	sim_sched_join(r, res);
	res->peer = peer;
	res->policy = policy;
	res->blocks = blocks;
	if (peer == PEER_KVPOOL && o->retain) {
		res->retain_tokens = o->retain_tokens;
		res->retain_prio = o->retain_prio;
		res->retain_steps = o->retain_steps;
		res->retained_evicted = atomic_load(&r->retained_evicted);
	}
	collect_stats(r, res);
	if (peer == PEER_KVPOOL && o->metrics)
		sim_metrics_final(r);
	verify(r);
	destroy(r);
	pthread_mutex_destroy(&r->metrics_lock);
	free(r->retained);
	free(r);
}
