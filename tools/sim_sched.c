/* SPDX-License-Identifier: MIT */
/*
 * sim_sched.c - `kvpool sim`'s scheduler threads: each model's queue of
 * requests, the admission of requests (in trace order per model, or
 * concurrent with --unordered), the decode steps and preemption, and the
 * calls into the two peers (kvpool's managers, bench/peer_mutex.h's).
 * sim.c describes the model; sim_replay.c sets a run up around them.
 *
 * Owns struct queue (a model's requests, under its lock), struct running
 * and struct thr (a thread's own state).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvpool.h>
#ifdef KVP_HAVE_EVENTS
#include <kvpool-events.h>
#endif

#include "sim_run.h"

#define SIM_UTIL_EVERY 8u /* a thread samples pool use every N steps */

/* A model's queue: arrivals in trace order, then preempted requests
 * (served first).  Everything under lock. */
struct queue {
	pthread_mutex_t lock;
	uint32_t *order; /* request indices of this model, arrival order */
	uint32_t n, head;
	uint32_t *retry; /* ring of preempted requests */
	uint32_t rcap, rhead, rcount;
};

/* A running request: owned by one thread. */
struct running {
	uint32_t req;
	uint32_t attempt;
	uint32_t generated; /* tokens decoded per sample */
	uint32_t tokens;    /* each sample's length */
};

/* Per-thread state, written by its thread only (read by the main thread
 * after the join). */
struct thr {
	_Alignas(BENCH_CACHE_LINE) struct run *run;
	unsigned tid;
	uint32_t cap; /* running requests at most */
	uint32_t nrun;
	struct running *running;
	uint32_t *pending; /* admitted, samples not forked yet */
	uint64_t steps, tick;
	uint64_t ops[NUM_OPS];
	uint64_t victims, cows, block_ops, decoded, queries, hits;
	uint64_t completed, rejected, abandoned, preemptions;
	double util_sum, util_peak;
	uint64_t util_n;
	struct hist lat[NUM_OPS];
	uint32_t *tokens; /* --publish: a prompt's pseudo-tokens */
};

/* The id of sample s of request req in its attempt-th admission: unique
 * while the request lives (attempts wrap at 2^16, long after the earlier
 * sequences are gone). */
static inline uint64_t seq_id(uint32_t req, uint32_t attempt, uint32_t s)
{
	return ((uint64_t)(attempt & 0xffff) << 48) | ((uint64_t)req << 16) | s;
}

/* Blocks holding `tokens` tokens. */
static inline uint32_t nblocks(uint32_t tokens, uint32_t bt)
{
	return (tokens + bt - 1) / bt;
}

/* --------------------------------------------------- peer dispatch */

static inline int p_create_cached(struct run *r, unsigned m, uint64_t id,
				  const struct kvp_hash *h, uint32_t nh,
				  uint32_t tokens, uint32_t *cached)
{
	return r->peer == PEER_KVPOOL
		       ? kvp_seq_create_cached(r->kmgr[m], id, h, nh, tokens,
					       cached)
		       : mm_create_cached(&r->mmgr[m], id, h, nh, tokens,
					  cached);
}

static int p_commit_retained(struct run *r, unsigned m, uint64_t id,
			     const struct kvp_hash *h, uint32_t nh)
{
	struct kvp_retention rg = {.first_token = 0,
				   .num_tokens = r->o->retain_tokens,
				   .priority = r->o->retain_prio,
				   .duration = r->o->retain_steps};

	return kvp_seq_commit_retained(r->kmgr[m], id, h, nh, &rg, 1, NULL);
}

static inline int p_commit(struct run *r, unsigned m, uint64_t id,
			   const struct kvp_hash *h, uint32_t nh)
{
	if (r->peer == PEER_KVPOOL && r->o->retain)
		return p_commit_retained(r, m, id, h, nh);
	return r->peer == PEER_KVPOOL ? kvp_seq_commit(r->kmgr[m], id, h, nh)
				      : mm_commit(&r->mmgr[m], id, h, nh);
}

static inline int p_append(struct run *r, unsigned m, uint64_t id,
			   struct kvp_copy *cow, uint32_t *ncow)
{
	return r->peer == PEER_KVPOOL
		       ? kvp_seq_append(r->kmgr[m], id, 1, cow, 1, ncow)
		       : mm_append(&r->mmgr[m], id, 1, cow, 1, ncow);
}

/* n samples of src in one call (the mutex peer: under one lock hold). */
static inline int p_fork_n(struct run *r, unsigned m, uint64_t src,
			   const uint64_t *dsts, uint32_t n)
{
	return r->peer == PEER_KVPOOL
		       ? kvp_seq_fork_n(r->kmgr[m], src, dsts, n, 0)
		       : mm_fork_n(&r->mmgr[m], src, dsts, n);
}

static inline int p_free(struct run *r, unsigned m, uint64_t id)
{
	return r->peer == PEER_KVPOOL ? kvp_seq_free(r->kmgr[m], id)
				      : mm_free(&r->mmgr[m], id);
}

static inline int p_evict(struct run *r, unsigned m, uint64_t *victim)
{
	return r->peer == PEER_KVPOOL ? kvp_evict(r->kmgr[m], victim)
				      : mm_evict(&r->mmgr[m], victim);
}

static inline int p_admit(struct run *r, unsigned m, uint32_t tokens)
{
	return r->peer == PEER_KVPOOL ? kvp_admit(r->kmgr[m], tokens)
				      : mm_admit(&r->mmgr[m], tokens);
}

static inline int p_set_priority(struct run *r, unsigned m, uint64_t id,
				 int32_t prio)
{
	return r->peer == PEER_KVPOOL
		       ? kvp_seq_set_priority(r->kmgr[m], id, prio)
		       : mm_set_priority(&r->mmgr[m], id, prio);
}

/* Blocks in use in the pool now (evictable cached blocks count as free). */
static uint64_t p_used(struct run *r)
{
	struct kvp_pool_stats st;

	if (r->peer == PEER_MUTEX)
		return mm_pool_used(r->mpool);
	kvp_pool_stats(r->pool, &st);
	return st.used;
}

/* Times expr (an int) into t->lat[op]. */
#define TIMED(t, op, expr)                                                     \
	({                                                                     \
		uint64_t t0_ = hist_now_ns();                                  \
		int rc_ = (expr);                                              \
		hist_add(&(t)->lat[op], hist_now_ns() - t0_);                  \
		rc_;                                                           \
	})

__attribute__((noreturn, cold)) static void
op_failed(struct run *r, const char *what, uint64_t id, int rc)
{
	bench_die("sim (%s): %s of sequence %#llx failed unexpectedly: %s",
		  sim_peer_name[r->peer], what, (unsigned long long)id,
		  kvp_strerror(rc));
}

/* --------------------------------------------------------- scheduling */

static void finish_request(struct thr *t)
{
	/* Relaxed: a counter; the join orders everything after. */
	atomic_fetch_add_explicit(&t->run->finished, 1, memory_order_relaxed);
}

/* Puts a request back on its model's retry FIFO (or abandons it after
 * --max-attempts admissions); preempted: it had started. */
static void requeue(struct thr *t, uint32_t req, bool preempted)
{
	struct run *r = t->run;
	struct queue *q = &r->q[r->w->req[req].model];

	t->preemptions += preempted;
	if (r->attempt[req] >= r->o->max_attempts) {
		t->abandoned++;
		finish_request(t);
		return;
	}
	pthread_mutex_lock(&q->lock);
	q->retry[(q->rhead + q->rcount++) % q->rcap] = req;
	pthread_mutex_unlock(&q->lock);
}

/* Frees samples [0, n) of a request (some may be gone: evicted). */
static void free_samples(struct thr *t, uint32_t req, uint32_t attempt,
			 uint32_t n, uint32_t tokens)
{
	struct run *r = t->run;
	unsigned m = r->w->req[req].model;

	for (uint32_t s = 0; s < n; s++) {
		uint64_t id = seq_id(req, attempt, s);
		int rc = TIMED(t, OP_FREE, p_free(r, m, id));

		if (rc == 0) {
			t->ops[OP_FREE]++;
			t->block_ops += nblocks(tokens, r->w->block_tokens);
		} else if (rc != -ENOENT) {
			op_failed(r, "free", id, rc);
		}
	}
}

/*
 * Creates request req's first sequence from the prefix cache and commits
 * its prompt.  Returns 0; -ENOSPC (nothing was created); -ENOENT (created,
 * then evicted by another thread before the commit).
 */
static int prefill(struct thr *t, uint32_t req)
{
	struct run *r = t->run;
	const struct wl_req *wr = &r->w->req[req];
	const struct kvp_hash *h = wl_hashes(r->w, wr);
	uint32_t attempt = ++r->attempt[req], cached = 0;
	uint64_t id = seq_id(req, attempt, 0);
	int rc;

	rc = TIMED(t, OP_CREATE,
		   p_create_cached(r, wr->model, id, h, wr->nhashes,
				   wr->input_len, &cached));
	if (rc == -ENOSPC) {
		r->attempt[req]--; /* nothing was created */
		return rc;
	}
	if (rc != 0)
		op_failed(r, "create_cached", id, rc);
	t->ops[OP_CREATE]++;
	t->queries += wr->input_len;
	t->hits += cached;
	t->block_ops += nblocks(wr->input_len, r->w->block_tokens);
	if (t->tokens) {
		/* --publish: the events carry the prompt's tokens. */
		struct kvp_commit_info info = {0};

		info.ntokens = wr->nhashes * r->w->block_tokens;
		info.tokens = t->tokens;
		info.lora_id = -1;
		/* Only the blocks past the hits are stored (and read). */
		rc = TIMED(
			t, OP_COMMIT,
			(wl_tokens(r->w, wr, t->tokens, cached, info.ntokens),
			 kvp_seq_commit_ex(r->kmgr[wr->model], id, h,
					   wr->nhashes, &info)));
	} else {
		rc = TIMED(t, OP_COMMIT,
			   p_commit(r, wr->model, id, h, wr->nhashes));
	}
	if (rc == -ENOENT)
		return rc;
	if (rc < 0)
		op_failed(r, "commit", id, rc);
	t->ops[OP_COMMIT]++;
	if (r->policy == KVP_EVICT_PRIORITY && wr->priority != 0) {
		rc = p_set_priority(r, wr->model, id, wr->priority);
		if (rc == -ENOENT)
			return rc;
		if (rc != 0)
			op_failed(r, "set_priority", id, rc);
	}
	return 0;
}

/* Frees a finished request's samples and counts it completed. */
static void complete(struct thr *t, const struct running *e)
{
	free_samples(t, e->req, e->attempt, t->run->w->req[e->req].n,
		     e->tokens);
	t->completed++;
	finish_request(t);
}

/* Samples forked by one call: a request of more forks in calls of as
 * many (the mutex peer's mm_fork_n takes at most MM_FORK_N_MAX). */
#define FORK_CALL MM_FORK_N_MAX

/* Forks the parallel samples of a prefilled request, FORK_CALL at a
 * time (all of them in one kvp_seq_fork_n up to that), and starts it. */
static void start(struct thr *t, uint32_t req)
{
	struct run *r = t->run;
	const struct wl_req *wr = &r->w->req[req];
	uint32_t attempt = r->attempt[req];
	struct running e = {req, attempt, 0, wr->input_len};
	uint64_t src = seq_id(req, attempt, 0), dsts[FORK_CALL];

	for (uint32_t s = 1; s < wr->n;) {
		uint32_t k = wr->n - s < FORK_CALL ? wr->n - s : FORK_CALL;
		int rc;

		for (uint32_t i = 0; i < k; i++)
			dsts[i] = seq_id(req, attempt, s + i);
		rc = TIMED(t, OP_FORK, p_fork_n(r, wr->model, src, dsts, k));
		if (rc == -ENOENT) { /* the source was evicted */
			free_samples(t, req, attempt, s, wr->input_len);
			requeue(t, req, true);
			return;
		}
		if (rc != 0)
			op_failed(r, "fork", src, rc);
		t->ops[OP_FORK] += k;
		t->block_ops +=
			(uint64_t)k * nblocks(wr->input_len, r->w->block_tokens);
		s += k;
	}
	if (wr->output_len == 0)
		complete(t, &e);
	else
		t->running[t->nrun++] = e;
}

/* kvp_admit for request req's prompt; KVP_ADMIT_NEVER also for a request
 * that could not finish alone in the whole pool. */
static int admission(struct run *r, unsigned m, uint32_t req)
{
	const struct wl_req *wr = &r->w->req[req];

	if (sim_footprint(wr, r->w->block_tokens) > r->blocks)
		return KVP_ADMIT_NEVER;
	return p_admit(r, m, wr->input_len);
}

/* The request at the head of q (retry FIFO first), or false. */
static bool queue_head(const struct queue *q, uint32_t *req, bool *retry)
{
	*retry = q->rcount > 0;
	if (*retry)
		*req = q->retry[q->rhead];
	else if (q->head < q->n)
		*req = q->order[q->head];
	else
		return false;
	return true;
}

/* Removes the head queue_head returned (from the retry FIFO if retry).
 * q->lock held. */
static void queue_pop(struct queue *q, bool retry)
{
	if (retry) {
		q->rhead = (q->rhead + 1) % q->rcap;
		q->rcount--;
	} else {
		q->head++;
	}
}

/*
 * Admission in trace order: while holding the model's queue lock, admit
 * head requests (create + commit) until the head must wait; fork their
 * samples after unlocking.  A thread that finds the lock taken goes back
 * to decoding.
 */
static void admit_ordered(struct thr *t, unsigned m)
{
	struct run *r = t->run;
	struct queue *q = &r->q[m];
	uint32_t npend = 0;

	if (pthread_mutex_trylock(&q->lock) != 0)
		return;
	while (t->nrun + npend < t->cap) {
		uint32_t req;
		bool retry;
		int a;

		if (!queue_head(q, &req, &retry))
			break;
		a = admission(r, m, req);
		if (a == KVP_ADMIT_NEVER) {
			queue_pop(q, retry);
			t->rejected++;
			finish_request(t);
			continue;
		}
		if (a != KVP_ADMIT_OK || prefill(t, req) != 0)
			break; /* the head waits (and is admitted again) */
		queue_pop(q, retry);
		t->pending[npend++] = req;
	}
	pthread_mutex_unlock(&q->lock);
	for (uint32_t i = 0; i < npend; i++)
		start(t, t->pending[i]);
}

/* Admission with concurrent prefills: the lock covers taking the head. */
static void admit_unordered(struct thr *t, unsigned m)
{
	struct run *r = t->run;
	struct queue *q = &r->q[m];

	while (t->nrun < t->cap) {
		uint32_t req;
		bool retry;
		int a, rc;

		pthread_mutex_lock(&q->lock);
		if (!queue_head(q, &req, &retry)) {
			pthread_mutex_unlock(&q->lock);
			return;
		}
		a = admission(r, m, req);
		if (a == KVP_ADMIT_LATER) {
			pthread_mutex_unlock(&q->lock);
			return;
		}
		queue_pop(q, retry);
		pthread_mutex_unlock(&q->lock);
		if (a == KVP_ADMIT_NEVER) {
			t->rejected++;
			finish_request(t);
			continue;
		}
		rc = prefill(t, req);
		if (rc != 0) {
			requeue(t, req, rc == -ENOENT);
			return;
		}
		start(t, req);
	}
}

/* Admits requests of every model (starting at a model that depends on the
 * thread) while the thread has room. */
static void admit(struct thr *t)
{
	struct run *r = t->run;
	unsigned M = r->w->models;

	for (unsigned k = 0; k < M && t->nrun < t->cap; k++) {
		unsigned m = (t->tid + k) % M;

		if (r->o->unordered)
			admit_unordered(t, m);
		else
			admit_ordered(t, m);
	}
}

/*
 * Appends one token to sample s of e; under memory pressure preempts
 * victims by policy until it fits.  Returns 0, or -ENOENT if the sequence
 * was evicted (by this thread or another).
 */
static int decode_one(struct thr *t, const struct running *e, uint32_t s)
{
	struct run *r = t->run;
	unsigned m = r->w->req[e->req].model;
	uint64_t id = seq_id(e->req, e->attempt, s);

	for (;;) {
		struct kvp_copy cow;
		uint32_t ncow = 0;
		uint64_t victim;
		int rc;

		if (++t->tick % SIM_APPEND_SAMPLE == 0)
			rc = TIMED(t, OP_APPEND,
				   p_append(r, m, id, &cow, &ncow));
		else
			rc = p_append(r, m, id, &cow, &ncow);
		if (rc == 0) {
			t->ops[OP_APPEND]++;
			t->decoded++;
			t->cows += ncow;
			t->block_ops +=
				(e->tokens % r->w->block_tokens == 0) + ncow;
			return 0;
		}
		if (rc == -ENOENT)
			return rc;
		if (rc != -ENOSPC)
			op_failed(r, "append", id, rc);
		rc = TIMED(t, OP_EVICT, p_evict(r, m, &victim));
		if (rc == 0) {
			t->ops[OP_EVICT]++;
			t->victims++;
		} else if (rc != -ENOENT) {
			op_failed(r, "evict", id, rc);
		}
		/* -ENOENT: nothing left to evict, so our sequence is gone
		 * too, and the append says so. */
	}
}

/* One decode step over the thread's running requests. */
static void step(struct thr *t)
{
	struct run *r = t->run;

	for (uint32_t i = 0; i < t->nrun;) {
		struct running *e = &t->running[i];
		const struct wl_req *wr = &r->w->req[e->req];
		int rc = 0;

		for (uint32_t s = 0; s < wr->n && rc == 0; s++)
			rc = decode_one(t, e, s);
		if (rc == 0) {
			e->generated++;
			e->tokens++;
			if (e->generated < wr->output_len) {
				i++;
				continue;
			}
			complete(t, e);
		} else { /* preempted: recomputed later */
			free_samples(t, e->req, e->attempt, wr->n, e->tokens);
			requeue(t, e->req, true);
		}
		t->running[i] = t->running[--t->nrun];
	}
}

/* Adds one sample of the pool's utilisation to the thread's sums. */
static void sample_util(struct thr *t)
{
	struct run *r = t->run;
	double u = (double)p_used(r) / (double)r->blocks;

	t->util_sum += u;
	t->util_n++;
	if (u > t->util_peak)
		t->util_peak = u;
}

/* *a = min(*a, v) (relaxed: a clock reading, read after the join). */
static void atomic_min_u64(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);

	while (v < cur &&
	       !atomic_compare_exchange_weak_explicit(
		       a, &cur, v, memory_order_relaxed, memory_order_relaxed))
		;
}

/* *a = max(*a, v) (relaxed: as atomic_min_u64). */
static void atomic_max_u64(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);

	while (v > cur &&
	       !atomic_compare_exchange_weak_explicit(
		       a, &cur, v, memory_order_relaxed, memory_order_relaxed))
		;
}

/* A scheduler thread: admit and step until every request is done; the
 * replay's clock runs from the first thread's start to the last one's
 * end. */
static void *scheduler(void *arg)
{
	struct thr *t = arg;
	struct run *r = t->run;
	uint32_t nreq = r->w->nreq;

#ifdef KVP_HAVE_EVENTS
	/* The thread's event buffer, before the clock starts. */
	if (t->tokens && kvp_pub_thread_init(r->o->pub) != 0)
		bench_die("sim: kvp_pub_thread_init: out of memory");
#endif
	pthread_barrier_wait(&r->start);
	atomic_min_u64(&r->t0, hist_now_ns());
	while (atomic_load_explicit(&r->finished, memory_order_relaxed) <
	       nreq) {
		admit(t);
		if (t->nrun == 0) {
			sched_yield();
			continue;
		}
		step(t);
		if (t->tid == 0 && r->peer == PEER_KVPOOL && r->o->retain)
			for (unsigned m = 0; m < r->w->models; m++)
				(void)kvp_manager_tick(r->kmgr[m], 1, NULL);
		if (++t->steps % SIM_UTIL_EVERY == 0)
			sample_util(t);
		if (r->peer == PEER_KVPOOL && r->o->metrics_every)
			sim_metrics_step(r);
	}
	atomic_max_u64(&r->t1, hist_now_ns());
	return NULL;
}

/* ----------------------------------------------------- set-up, teardown */

/* Fills each model's queue with its requests in arrival order. */
static void make_queues(struct run *r)
{
	const struct workload *w = r->w;

	r->q = bench_xcalloc(w->models, sizeof(*r->q));
	for (unsigned m = 0; m < w->models; m++) {
		struct queue *q = &r->q[m];
		uint32_t n = w->nreq / w->models + 1;
		int rc = pthread_mutex_init(&q->lock, NULL);

		if (rc != 0)
			bench_die("pthread_mutex_init: %s", strerror(rc));
		q->order = bench_xcalloc(n, sizeof(uint32_t));
		q->retry = bench_xcalloc(n, sizeof(uint32_t));
		q->rcap = n;
	}
	for (uint32_t i = 0; i < w->nreq; i++) {
		struct queue *q = &r->q[w->req[i].model];

		q->order[q->n++] = i;
	}
}

/* Shows progress on stderr (a terminal) until the replay is done: in a
 * sweep, its place and the time since the sweep began first. */
static void progress(struct run *r)
{
	const char *label = r->o->progress_label;
	uint32_t n = r->w->nreq, done;
	uint64_t t0 = label ? r->o->progress_t0 : hist_now_ns();

	while ((done = atomic_load_explicit(&r->finished,
					    memory_order_relaxed)) < n) {
		struct timespec ts = {0, 200 * 1000 * 1000};
		int width = label ? 20 : 30,
		    fill = (int)((uint64_t)done * width / n);

		if (label)
			fprintf(stderr,
				"\r  %s: %s [%.*s%*s] %3u%%, %.1f s into the "
				"sweep ",
				label, sim_peer_name[r->peer], fill,
				"##############################", width - fill,
				"", (unsigned)((uint64_t)done * 100 / n),
				(double)(hist_now_ns() - t0) * 1e-9);
		else
			fprintf(stderr,
				"\r  %s replay [%.*s%*s] %3u%% %u/%u requests "
				"%.1f s ",
				sim_peer_name[r->peer], fill,
				"##############################", width - fill,
				"", (unsigned)((uint64_t)done * 100 / n), done,
				n, (double)(hist_now_ns() - t0) * 1e-9);
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "\r%*s\r", 110, "");
}

/* Each thread's state: room for its share of --max-running requests. */
static void make_threads(struct run *r)
{
	const struct sim_opts *o = r->o;
	uint32_t cap = (o->max_running + o->threads - 1) / o->threads;

	r->thr = bench_aligned_zalloc(o->threads * sizeof(*r->thr));
	for (unsigned i = 0; i < o->threads; i++) {
		struct thr *t = &r->thr[i];

		t->run = r;
		t->tid = i;
		t->cap = cap ? cap : 1;
		t->running = bench_xcalloc(t->cap, sizeof(*t->running));
		t->pending = bench_xcalloc(t->cap, sizeof(*t->pending));
		if (o->pub && r->peer == PEER_KVPOOL)
			t->tokens = bench_xcalloc(wl_max_prompt(r->w) + 1,
						  sizeof(*t->tokens));
	}
}

/* sim_run.h */
void sim_sched_start(struct run *r)
{
	int rc;

	atomic_init(&r->finished, 0);
	atomic_init(&r->t0, UINT64_MAX);
	atomic_init(&r->t1, 0);
	make_queues(r);
	r->attempt = bench_xcalloc(r->w->nreq, sizeof(uint32_t));
	make_threads(r);
	rc = pthread_barrier_init(&r->start, NULL, r->o->threads);
	if (rc != 0)
		bench_die("pthread_barrier_init: %s", strerror(rc));
	r->tids = bench_xcalloc(r->o->threads, sizeof(*r->tids));
	for (unsigned i = 0; i < r->o->threads; i++)
		bench_thread_create(&r->tids[i], scheduler, &r->thr[i]);
	if (r->o->progress)
		progress(r);
}

/* Adds thread t's counts into *res. */
static void add_thread(struct sim_result *res, const struct thr *t)
{
	for (int k = 0; k < NUM_OPS; k++) {
		res->ops[k] += t->ops[k];
		hist_merge(&res->lat[k], &t->lat[k]);
	}
	res->victims += t->victims;
	res->cows += t->cows;
	res->block_ops += t->block_ops;
	res->decoded += t->decoded;
	res->queries += t->queries;
	res->hits += t->hits;
	res->completed += t->completed;
	res->rejected += t->rejected;
	res->abandoned += t->abandoned;
	res->preemptions += t->preemptions;
	if (t->util_peak > res->util_peak)
		res->util_peak = t->util_peak;
}

/* sim_run.h */
void sim_sched_join(struct run *r, struct sim_result *res)
{
	double util_sum = 0;
	uint64_t util_n = 0;

	for (unsigned i = 0; i < r->o->threads; i++) {
		struct thr *t = &r->thr[i];

		bench_thread_join(r->tids[i]);
		add_thread(res, t);
		util_sum += t->util_sum;
		util_n += t->util_n;
	}
	pthread_barrier_destroy(&r->start);
	res->util_mean = util_n ? util_sum / (double)util_n : 0;
	res->seconds =
		(double)(atomic_load(&r->t1) - atomic_load(&r->t0)) * 1e-9;
}

/* sim_run.h */
void sim_sched_free(struct run *r)
{
	if (r->q)
		for (unsigned m = 0; m < r->w->models; m++) {
			pthread_mutex_destroy(&r->q[m].lock);
			free(r->q[m].order);
			free(r->q[m].retry);
		}
	free(r->q);
	free(r->attempt);
	if (r->thr)
		for (unsigned i = 0; i < r->o->threads; i++) {
			free(r->thr[i].running);
			free(r->thr[i].pending);
			free(r->thr[i].tokens);
		}
	free(r->thr);
	free(r->tids);
}
