/*
 * sim.c - `kvpool sim`: replays a serving workload through scheduler
 * threads sharing one pool.  See kvpool(1) for the options and output.
 *
 * THE MODEL
 *
 * One pool (--blocks, --block-tokens) and one manager per model
 * (--models M, prefix caching on, eviction --policy); request i goes to
 * model i % M.  Each model has a queue of its requests in arrival order
 * (the trace's timestamps fix the order only: replay runs as fast as it
 * can, never sleeping) and a FIFO of preempted requests, served first.
 * --threads T scheduler threads each run at most ceil(--max-running / T)
 * requests and loop:
 *
 *   admit   take the next request of a model's queue if kvp_admit says OK
 *           (LATER: stop, the head waits; NEVER: rejected), create its
 *           first sequence with kvp_seq_create_cached over the prompt's
 *           block hashes (workload.h), then kvp_seq_commit the prompt's
 *           full blocks (the prefill is done), then kvp_seq_fork n - 1
 *           parallel samples;
 *   step    kvp_seq_append one token to every running sequence; on
 *           -ENOSPC preempt victims by policy (kvp_evict) and retry; a
 *           request one of whose sequences was evicted (-ENOENT) frees the
 *           others and is requeued: it is recomputed from scratch later;
 *   finish  a request whose samples have output_length tokens each is
 *           freed (kvp_seq_free).
 *
 * Admission order.  By default a model's admissions (create_cached and
 * commit) happen in trace order, one at a time: the admitting thread holds
 * the model's queue lock across them (other threads meanwhile decode
 * their own requests).  Request i then sees exactly the blocks committed by
 * requests before it, whatever the thread count, so with --blocks 0 (no
 * eviction) the hit rate is a function of the trace alone.  --unordered
 * lets threads admit concurrently (hits may then vary from run to run).
 *
 * --compare mutex replays the same workload with the same threads and
 * scheduler on bench/peer_mutex.h's managers (one global mutex around
 * plain hash maps, the free list and the prefix cache): only the block
 * manager differs.
 *
 * Retention (--retain-system N:P[:STEPS]).  The first N tokens of every
 * request are committed at retention priority P (kvp_seq_commit_retained),
 * for STEPS ticks of the managers' retention clocks if given; scheduler
 * thread 0 ticks every manager's clock once per step.  The replay counts
 * the REMOVED events of hashes that lie in some request's first N tokens
 * (retained_evicted: with no STEPS, evictions of blocks while their
 * priority holds).  The mutex peer has no retention: it ignores the
 * option.  --workload sysprompt is the workload that shows it: a shared
 * system prompt of 2,048 tokens in one request out of ten, and one-off
 * prompts between (workload.h).
 *
 * Measured: the replay's wall time (thread start to last thread done;
 * workload parsing and hashing excluded), per-operation latency
 * (clock_gettime around each call; appends sampled 1 in 8), pool use
 * sampled by every thread every 8 of its steps, and the managers'
 * statistics.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <kvpool.h>
#ifdef KVP_HAVE_EVENTS
#include <kvpool-events.h>
#endif

#include "bench_common.h"
#include "hist.h"
#include "peer_mutex.h"
#include "plot.h"
#include "tools.h"
#include "workload.h"

#define SIM_DEFAULT_THREADS 2u
#define SIM_DEFAULT_BLOCK_TOKENS 16u
#define SIM_DEFAULT_MAX_RUNNING 64u
#define SIM_DEFAULT_SYNTH_BLOCKS 4096u
#define SIM_DEFAULT_MAX_ATTEMPTS 1000u
#define SIM_MAX_THREADS 256u
#define SIM_MAX_MODELS 64u
#define SIM_APPEND_SAMPLE 8u /* time 1 append in this many */
#define SIM_UTIL_EVERY 8u    /* a thread samples pool use every N steps */
#define SIM_MAX_CAPACITIES 32u
#define SIM_SYSPROMPT_TOKENS 2048u /* --workload sysprompt */

enum peer { PEER_KVPOOL, PEER_MUTEX };
static const char *const peer_name[] = {"kvpool", "mutex"};

enum op {
	OP_CREATE,
	OP_COMMIT,
	OP_APPEND,
	OP_FORK,
	OP_FREE,
	OP_EVICT,
	NUM_OPS
};
static const char *const op_name[NUM_OPS] = {
	"create_cached", "commit", "append", "fork", "free", "evict",
};

static const char *const policy_name[] = {"lru", "lfu", "longest", "priority"};

struct sim_opts {
	unsigned threads;
	unsigned models;
	uint32_t blocks; /* 0 = unlimited */
	bool blocks_given;
	uint32_t block_tokens;
	enum kvp_policy policy;
	uint32_t max_running; /* requests, all threads */
	float watermark;
	bool unordered;
	const char *trace;
	bool sysprompt; /* --workload sysprompt */
	bool retain;	/* --retain-system N:P[:STEPS] */
	uint32_t retain_tokens, retain_prio;
	uint64_t retain_steps;
	uint64_t seed;
	uint32_t requests;
	bool json;
	bool sweep;
	const char *capacities;
	const char *plot;
	const char *csv; /* --csv FILE ("-": stdout), the comparing sweep */
	bool compare;
	unsigned reps;
	const char *dump;
	uint32_t max_attempts;
	bool progress;
	/* Events (--publish): libkvpool-events' publisher, NULL without. */
	const char *publish, *replay_ep, *hash_seed, *topic;
	bool cbor; /* --hash sha256_cbor */
	double linger;
	int32_t pub_hwm;
	uint32_t replay_ring;
	struct kvp_pub *pub;
};

/* What one replay measured. */
struct sim_result {
	enum peer peer;
	enum kvp_policy policy;
	uint32_t blocks;
	double seconds;
	uint64_t completed, rejected, abandoned, preemptions;
	uint64_t ops[NUM_OPS]; /* successful calls */
	uint64_t victims;      /* sequences evicted by policy */
	uint64_t cows;
	uint64_t block_ops;
	uint64_t decoded;	/* tokens appended */
	uint64_t queries, hits; /* prompt tokens asked / served (harness) */
	/* --retain-system (kvpool only; tokens 0 without): see the top. */
	uint32_t retain_tokens, retain_prio;
	uint64_t retain_steps, retained_evicted;
	struct kvp_stats st;	/* summed over the managers */
	double util_peak, util_mean;
	struct hist lat[NUM_OPS];
};

/* ------------------------------------------------------------ the replay */

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

struct run;

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
	struct queue *q;   /* per model */
	uint32_t *attempt; /* per request; owner thread only (queue
			      hand-offs order it) */
	struct thr *thr;
	pthread_barrier_t start;
	_Alignas(BENCH_CACHE_LINE) _Atomic uint32_t finished;
	_Alignas(BENCH_CACHE_LINE) _Atomic uint64_t t0, t1;
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

static inline int p_fork(struct run *r, unsigned m, uint64_t src, uint64_t dst)
{
	return r->peer == PEER_KVPOOL ? kvp_seq_fork(r->kmgr[m], src, dst)
				      : mm_fork(&r->mmgr[m], src, dst);
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
		  peer_name[r->peer], what, (unsigned long long)id,
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
		rc = TIMED(t, OP_COMMIT, (wl_tokens(r->w, wr, t->tokens, cached,
						    info.ntokens),
					  kvp_seq_commit_ex(r->kmgr[wr->model],
							    id, h, wr->nhashes,
							    &info)));
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

/* Forks the parallel samples of a prefilled request and starts it. */
static void start(struct thr *t, uint32_t req)
{
	struct run *r = t->run;
	const struct wl_req *wr = &r->w->req[req];
	uint32_t attempt = r->attempt[req];
	struct running e = {req, attempt, 0, wr->input_len};
	uint64_t src = seq_id(req, attempt, 0);

	for (uint32_t s = 1; s < wr->n; s++) {
		uint64_t dst = seq_id(req, attempt, s);
		int rc = TIMED(t, OP_FORK, p_fork(r, wr->model, src, dst));

		if (rc == -ENOENT) { /* the source was evicted */
			free_samples(t, req, attempt, s, wr->input_len);
			requeue(t, req, true);
			return;
		}
		if (rc != 0)
			op_failed(r, "fork", src, rc);
		t->ops[OP_FORK]++;
		t->block_ops += nblocks(wr->input_len, r->w->block_tokens);
	}
	if (wr->output_len == 0)
		complete(t, &e);
	else
		t->running[t->nrun++] = e;
}

/* Blocks request r can hold at once: its prompt, each sample's private
 * decode blocks and one copy-on-write block per sample. */
static uint64_t footprint(const struct wl_req *r, uint32_t bt)
{
	uint64_t in = nblocks(r->input_len, bt);
	uint64_t all = ((uint64_t)r->input_len + r->output_len + bt - 1) / bt;

	return in + (uint64_t)r->n * (all - in + 1);
}

/* kvp_admit for request req's prompt; KVP_ADMIT_NEVER also for a request
 * that could not finish alone in the whole pool. */
static int admission(struct run *r, unsigned m, uint32_t req)
{
	const struct wl_req *wr = &r->w->req[req];

	if (footprint(wr, r->w->block_tokens) > r->blocks)
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
	}
	atomic_max_u64(&r->t1, hist_now_ns());
	return NULL;
}

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
	for (uint64_t i = k & r->retained_mask;; i = (i + 1) & r->retained_mask) {
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

/* Frees everything replay() and make_*() allocated (quiescent). */
static void destroy(struct run *r)
{
	for (unsigned m = 0; m < r->w->models; m++) {
		if (r->kmgr && r->kmgr[m])
			kvp_manager_destroy(r->kmgr[m]);
		if (r->mmgr)
			mm_mgr_destroy(&r->mmgr[m]);
		if (r->q) {
			pthread_mutex_destroy(&r->q[m].lock);
			free(r->q[m].order);
			free(r->q[m].retry);
		}
	}
	free(r->kmgr);
	kvp_pool_unref(r->pool);
	if (r->mpool)
		mm_pool_destroy(r->mpool);
	free(r->mpool);
	free(r->mmgr);
	free(r->q);
	free(r->attempt);
	if (r->thr)
		for (unsigned i = 0; i < r->o->threads; i++) {
			free(r->thr[i].running);
			free(r->thr[i].pending);
			free(r->thr[i].tokens);
		}
	free(r->thr);
}

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

/* Shows progress on stderr (a terminal) until the replay is done. */
static void progress(struct run *r)
{
	uint32_t n = r->w->nreq, done;
	uint64_t t0 = hist_now_ns();

	while ((done = atomic_load_explicit(&r->finished,
					    memory_order_relaxed)) < n) {
		struct timespec ts = {0, 200 * 1000 * 1000};
		int width = 30, fill = (int)((uint64_t)done * width / n);

		fprintf(stderr,
			"\r  %s replay [%.*s%*s] %3u%% %u/%u requests "
			"%.1f s ",
			peer_name[r->peer], fill,
			"##############################", width - fill, "",
			(unsigned)((uint64_t)done * 100 / n), done, n,
			(double)(hist_now_ns() - t0) * 1e-9);
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "\r%*s\r", 79, "");
}

/* Runs one replay of w and fills *res. */
static void replay(const struct sim_opts *o, const struct workload *w,
		   enum peer peer, uint32_t blocks, enum kvp_policy policy,
		   struct sim_result *res)
{
	struct run *r = bench_aligned_zalloc(sizeof(*r));
	pthread_t *tids = bench_xcalloc(o->threads, sizeof(*tids));
	uint32_t cap = (o->max_running + o->threads - 1) / o->threads;
	double util_sum = 0;
	uint64_t util_n = 0;
	int rc;

	r->o = o;
	r->w = w;
	r->peer = peer;
	r->policy = policy;
	r->blocks = blocks;
	atomic_init(&r->finished, 0);
	atomic_init(&r->t0, UINT64_MAX);
	atomic_init(&r->t1, 0);
	if ((peer == PEER_KVPOOL ? make_kvpool(r) : make_mutex(r)) != 0)
		exit(1);
	make_queues(r);
	r->attempt = bench_xcalloc(w->nreq, sizeof(uint32_t));
	r->thr = bench_aligned_zalloc(o->threads * sizeof(*r->thr));
	rc = pthread_barrier_init(&r->start, NULL, o->threads);
	if (rc != 0)
		bench_die("pthread_barrier_init: %s", strerror(rc));
	for (unsigned i = 0; i < o->threads; i++) {
		struct thr *t = &r->thr[i];

		t->run = r;
		t->tid = i;
		t->cap = cap ? cap : 1;
		t->running = bench_xcalloc(t->cap, sizeof(*t->running));
		t->pending = bench_xcalloc(t->cap, sizeof(*t->pending));
		if (o->pub && peer == PEER_KVPOOL)
			t->tokens = bench_xcalloc(wl_max_prompt(w) + 1,
						  sizeof(*t->tokens));
		bench_thread_create(&tids[i], scheduler, t);
	}
	if (o->progress)
		progress(r);

	memset(res, 0, sizeof(*res));
	for (unsigned i = 0; i < o->threads; i++) {
		struct thr *t = &r->thr[i];

		bench_thread_join(tids[i]);
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
		util_sum += t->util_sum;
		util_n += t->util_n;
	}
	pthread_barrier_destroy(&r->start);
	res->util_mean = util_n ? util_sum / (double)util_n : 0;
	res->peer = peer;
	res->policy = policy;
	res->blocks = blocks;
	res->seconds =
		(double)(atomic_load(&r->t1) - atomic_load(&r->t0)) * 1e-9;
	if (peer == PEER_KVPOOL && o->retain) {
		res->retain_tokens = o->retain_tokens;
		res->retain_prio = o->retain_prio;
		res->retain_steps = o->retain_steps;
		res->retained_evicted = atomic_load(&r->retained_evicted);
	}
	for (unsigned m = 0; m < w->models; m++) {
		struct kvp_stats st;

		if (peer == PEER_KVPOOL)
			kvp_manager_stats(r->kmgr[m], &st);
		else
			mm_stats(&r->mmgr[m], &st);
		res->st.seq_creates += st.seq_creates;
		res->st.seq_frees += st.seq_frees;
		res->st.appends += st.appends;
		res->st.forks += st.forks;
		res->st.evictions += st.evictions;
		res->st.cow_copies += st.cow_copies;
		res->st.blocks_allocated += st.blocks_allocated;
		res->st.blocks_released += st.blocks_released;
		res->st.prefix_queries += st.prefix_queries;
		res->st.prefix_hits += st.prefix_hits;
		res->st.prefix_commits += st.prefix_commits;
		res->st.prefix_evictions += st.prefix_evictions;
		res->st.prefix_cached_blocks += st.prefix_cached_blocks;
		res->st.blocks_total = st.blocks_total;
	}
	res->st.prefix_hit_rate =
		res->st.prefix_queries ? (double)res->st.prefix_hits /
						 (double)res->st.prefix_queries
				       : 0;
	if (peer == PEER_KVPOOL) {
		struct kvp_pool_stats ps;

		kvp_pool_stats(r->pool, &ps);
		if ((double)ps.peak_used / blocks > res->util_peak)
			res->util_peak = (double)ps.peak_used / blocks;
	} else if ((double)r->mpool->peak_used / blocks > res->util_peak) {
		res->util_peak = (double)r->mpool->peak_used / blocks;
	}
	verify(r);
	destroy(r);
	free(r->retained);
	free(r);
	free(tids);
}

/* ------------------------------------------------------------- capacity */

/* qsort: descending uint64_t. */
static int cmp_u64_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y) - (x > y);
}

/*
 * The "unlimited" capacity (--blocks 0): every distinct prompt block stays
 * cached, the running requests can hold the largest footprints in the
 * workload at once, the thread caches and the watermark hold back their
 * share, and nothing is ever evicted.
 */
static uint64_t unlimited_blocks(const struct sim_opts *o,
				 const struct workload *w)
{
	uint64_t *fp = bench_xcalloc(w->nreq, sizeof(*fp));
	uint64_t live = 0,
		 n = o->max_running < w->nreq ? o->max_running : w->nreq;
	double total;

	for (uint32_t i = 0; i < w->nreq; i++)
		fp[i] = footprint(&w->req[i], w->block_tokens);
	qsort(fp, w->nreq, sizeof(*fp), cmp_u64_desc);
	for (uint64_t i = 0; i < n; i++)
		live += fp[i];
	free(fp);
	/* Thread caches: at most KVP's automatic 128 blocks, twice for the
	 * half-cache batches; 1024 more as a margin. */
	total = (double)(w->distinct_blocks + live +
			 (uint64_t)o->threads * 2 * 128 + 1024);
	return (uint64_t)(total / (1.0 -
				   (o->watermark > 0 ? o->watermark : 0.01)) +
			  1);
}

/* ------------------------------------------------------------- reports */

static double mega(uint64_t x)
{
	return (double)x * 1e-6;
}

/* The text report's header: workload and configuration. */
static void print_workload(const struct sim_opts *o, const struct workload *w,
			   uint32_t blocks, bool unlimited)
{
	printf("kvpool sim: %s\n", w->name);
	printf("  %u requests (%u with n > 1 parallel samples), %.2f M "
	       "prompt tokens, %.2f M output tokens\n",
	       w->nreq, w->multi_sample, mega(w->input_tokens),
	       mega(w->output_tokens));
	printf("  pool: %u blocks x %u tokens%s; %u scheduler thread%s, "
	       "%u model%s, policy %s,\n",
	       blocks, w->block_tokens,
	       unlimited ? " (unlimited: sized so that nothing is evicted)"
			 : "",
	       o->threads, o->threads > 1 ? "s" : "", w->models,
	       w->models > 1 ? "s" : "", policy_name[o->policy]);
	printf("  at most %u running requests, watermark %.3g, admission %s\n",
	       o->max_running, o->watermark,
	       o->unordered ? "concurrent (--unordered)"
			    : "in trace order per model");
}

/* The text report of one replay. */
static void print_result(const struct workload *w, const struct sim_result *x)
{
	printf("replay (%s): %.3f s, %.0f requests/s, %.2f M block "
	       "operations/s\n",
	       peer_name[x->peer], x->seconds,
	       (double)x->completed / x->seconds,
	       mega(x->block_ops) / x->seconds);
	printf("  prefix hit rate  %.4f of prompt tokens (%llu of %llu, "
	       "from the managers' statistics)\n",
	       x->st.prefix_hit_rate, (unsigned long long)x->st.prefix_hits,
	       (unsigned long long)x->st.prefix_queries);
	if (x->st.prefix_hits != x->hits || x->st.prefix_queries != x->queries)
		printf("  warning: the scheduler counted %llu hits of %llu "
		       "tokens: the statistics disagree\n",
		       (unsigned long long)x->hits,
		       (unsigned long long)x->queries);
	printf("  pool utilisation peak %.1f%%, mean %.1f%%\n",
	       100 * x->util_peak, 100 * x->util_mean);
	printf("  requests completed %llu, rejected %llu, abandoned %llu; "
	       "preemptions %llu (requeued and recomputed)\n",
	       (unsigned long long)x->completed,
	       (unsigned long long)x->rejected,
	       (unsigned long long)x->abandoned,
	       (unsigned long long)x->preemptions);
	printf("  sequences evicted by policy %llu, forks %llu, "
	       "copy-on-write copies %llu, cached blocks evicted %llu\n",
	       (unsigned long long)x->victims,
	       (unsigned long long)x->ops[OP_FORK], (unsigned long long)x->cows,
	       (unsigned long long)x->st.prefix_evictions);
	if (x->retain_tokens)
		printf("  retention: first %u tokens of each request at "
		       "priority %u for %s; blocks of those ranges evicted "
		       "%llu\n",
		       x->retain_tokens, x->retain_prio,
		       x->retain_steps ? "a while" : "ever",
		       (unsigned long long)x->retained_evicted);
	printf("  %-14s %10s %9s %9s %9s %9s   (ns; appends timed 1 in "
	       "%u)\n",
	       "operation", "calls", "mean", "p50", "p99", "max",
	       SIM_APPEND_SAMPLE);
	for (int k = 0; k < NUM_OPS; k++)
		printf("  %-14s %10llu %9llu %9llu %9llu %9llu\n", op_name[k],
		       (unsigned long long)x->ops[k],
		       (unsigned long long)hist_mean(&x->lat[k]),
		       (unsigned long long)hist_quantile(&x->lat[k], 0.50),
		       (unsigned long long)hist_quantile(&x->lat[k], 0.99),
		       (unsigned long long)x->lat[k].max);
	(void)w;
}

/* Whether both replays did the same operations; lists differences. */
static bool same_work(const struct sim_result *a, const struct sim_result *b,
		      bool print)
{
	bool same = true;

	for (int k = 0; k < NUM_OPS; k++)
		if (a->ops[k] != b->ops[k]) {
			same = false;
			if (print)
				printf("  %s calls differ: %llu vs %llu\n",
				       op_name[k],
				       (unsigned long long)a->ops[k],
				       (unsigned long long)b->ops[k]);
		}
	if (a->hits != b->hits || a->queries != b->queries) {
		same = false;
		if (print)
			printf("  prefix hits differ: %llu vs %llu tokens\n",
			       (unsigned long long)a->hits,
			       (unsigned long long)b->hits);
	}
	return same;
}

/* One replay as a JSON object (no newline). */
static void json_result(const struct sim_result *x)
{
	printf("{\"seconds\": %.6f, \"requests_per_s\": %.3f, "
	       "\"block_ops\": %llu, \"block_ops_per_s\": %.3f, "
	       "\"blocks\": %u, \"policy\": \"%s\", "
	       "\"prefix_queries\": %llu, \"prefix_hits\": %llu, "
	       "\"hit_rate\": %.6f, \"util_peak\": %.6f, \"util_mean\": %.6f, "
	       "\"completed\": %llu, \"rejected\": %llu, \"abandoned\": %llu, "
	       "\"preemptions\": %llu, \"evicted_sequences\": %llu, "
	       "\"forks\": %llu, \"cow_copies\": %llu, "
	       "\"cached_blocks_evicted\": %llu, \"tokens_decoded\": %llu, "
	       "\"latency_ns\": {",
	       x->seconds, (double)x->completed / x->seconds,
	       (unsigned long long)x->block_ops,
	       (double)x->block_ops / x->seconds, x->blocks,
	       policy_name[x->policy], (unsigned long long)x->st.prefix_queries,
	       (unsigned long long)x->st.prefix_hits, x->st.prefix_hit_rate,
	       x->util_peak, x->util_mean, (unsigned long long)x->completed,
	       (unsigned long long)x->rejected,
	       (unsigned long long)x->abandoned,
	       (unsigned long long)x->preemptions,
	       (unsigned long long)x->victims,
	       (unsigned long long)x->ops[OP_FORK], (unsigned long long)x->cows,
	       (unsigned long long)x->st.prefix_evictions,
	       (unsigned long long)x->decoded);
	for (int k = 0; k < NUM_OPS; k++)
		printf("%s\"%s\": {\"calls\": %llu, \"mean\": %llu, "
		       "\"p50\": %llu, \"p99\": %llu, \"max\": %llu}",
		       k ? ", " : "", op_name[k], (unsigned long long)x->ops[k],
		       (unsigned long long)hist_mean(&x->lat[k]),
		       (unsigned long long)hist_quantile(&x->lat[k], 0.50),
		       (unsigned long long)hist_quantile(&x->lat[k], 0.99),
		       (unsigned long long)x->lat[k].max);
	printf("}");
	if (x->retain_tokens)
		printf(", \"retention\": {\"tokens\": %u, \"priority\": %u, "
		       "\"steps\": %llu, \"retained_evicted\": %llu}",
		       x->retain_tokens, x->retain_prio,
		       (unsigned long long)x->retain_steps,
		       (unsigned long long)x->retained_evicted);
	printf("}");
}

/* Prints s as a JSON string. */
static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* --publish: the publisher's counts, and the cached blocks a subscriber
 * must have rebuilt. */
static void json_events(const struct sim_opts *o, const struct sim_result *k)
{
#ifdef KVP_HAVE_EVENTS
	struct kvp_pub_stats st;

	if (!o->pub)
		return;
	kvp_pub_stats(o->pub, &st);
	printf(", \"events\": {\"hash\": \"%s\", \"events\": %llu, "
	       "\"batches\": %llu, \"last_seq\": %llu, \"dropped\": %llu, "
	       "\"cached_blocks_end\": %llu}",
	       o->cbor ? "sha256_cbor" : "xxh3", (unsigned long long)st.events,
	       (unsigned long long)st.batches,
	       (unsigned long long)st.last_seq,
	       (unsigned long long)st.dropped,
	       (unsigned long long)k->st.prefix_cached_blocks);
#else
	(void)o;
	(void)k;
#endif
}

/* The whole --json report, one line; mx is NULL without --compare. */
static void json_report(const struct sim_opts *o, const struct workload *w,
			bool unlimited, const struct sim_result *k,
			const struct sim_result *mx)
{
	printf("{\"workload\": {\"name\": ");
	json_string(w->name);
	printf(", \"requests\": %u, \"multi_sample_requests\": %u, "
	       "\"prompt_tokens\": %llu, \"output_tokens\": %llu, "
	       "\"hash_block_tokens\": %u, \"distinct_blocks\": %llu}, ",
	       w->nreq, w->multi_sample, (unsigned long long)w->input_tokens,
	       (unsigned long long)w->output_tokens, w->unit_tokens,
	       (unsigned long long)w->distinct_blocks);
	printf("\"config\": {\"threads\": %u, \"models\": %u, \"blocks\": %u, "
	       "\"unlimited\": %s, \"block_tokens\": %u, \"policy\": \"%s\", "
	       "\"max_running\": %u, \"watermark\": %.6g, \"ordered\": %s}, ",
	       o->threads, w->models, k->blocks, unlimited ? "true" : "false",
	       w->block_tokens, policy_name[o->policy], o->max_running,
	       o->watermark, o->unordered ? "false" : "true");
	printf("\"kvpool\": ");
	json_result(k);
	json_events(o, k);
	if (mx) {
		printf(", \"mutex\": ");
		json_result(mx);
		printf(", \"throughput_ratio_kvpool_over_mutex\": %.4f, "
		       "\"identical_work\": %s",
		       mx->seconds / k->seconds,
		       same_work(k, mx, false) ? "true" : "false");
	}
	printf("}\n");
}

/* The median-time result of reps replays. */
static const struct sim_result *median_of(struct sim_result *v, unsigned n)
{
	/* Insertion sort by time: n is small. */
	for (unsigned i = 1; i < n; i++)
		for (unsigned j = i; j > 0 && v[j].seconds < v[j - 1].seconds;
		     j--) {
			struct sim_result tmp = v[j];

			v[j] = v[j - 1];
			v[j - 1] = tmp;
		}
	return &v[n / 2];
}

/* --------------------------------------------------------------- sweep */

/* Returns -1 for an empty list, an empty item ("5,,6", "5,") or more
 * than SIM_MAX_CAPACITIES items; exits 2 on an item that is not a count. */
static int parse_capacities(const char *s, uint32_t *out, unsigned *n)
{
	char *copy = strdup(s), *tok, *comma;
	int rc = 0;

	if (!copy)
		bench_die("out of memory");
	*n = 0;
	/* Not strtok_r, which would skip empty items silently. */
	for (tok = copy;; tok = comma + 1) {
		comma = strchr(tok, ',');
		if (comma)
			*comma = '\0';
		if (*tok == '\0' || *n == SIM_MAX_CAPACITIES) {
			rc = -1;
			break;
		}
		/* 0: unlimited (the sweep puts the workload's size). */
		out[(*n)++] = (uint32_t)bench_parse_ulong(
			"--capacities", tok, 0, KVP_MAX_BLOCKS - 1);
		if (!comma)
			break;
	}
	free(copy);
	return rc;
}

/* Eight capacities from a tight pool (twice the largest request, or a
 * sixteenth of the unlimited size) up to the unlimited size,
 * geometrically spaced. */
static unsigned default_capacities(const struct workload *w, uint64_t unlimited,
				   uint32_t *out)
{
	uint64_t big = 0, lo;
	unsigned n = 0;

	for (uint32_t i = 0; i < w->nreq; i++) {
		uint64_t f = footprint(&w->req[i], w->block_tokens);

		big = f > big ? f : big;
	}
	lo = unlimited / 16 > 2 * big ? unlimited / 16 : 2 * big;
	if (lo >= unlimited)
		lo = unlimited / 2 ? unlimited / 2 : 1;
	for (unsigned i = 0; i < 8; i++) {
		uint64_t c = (uint64_t)llround(
			(double)lo *
			pow((double)unlimited / (double)lo, i / 7.0));

		if (n == 0 || c > out[n - 1])
			out[n++] = (uint32_t)c;
	}
	return n;
}

/* A capacity as printed: "unlimited" for the workload's whole size. */
static void cap_name(char *buf, size_t len, uint32_t cap, uint64_t unlimited)
{
	if (cap >= unlimited)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%u", cap);
}

/*
 * --sweep-capacity --compare mutex: at each capacity, both peers, --reps
 * replays each (interleaved, order alternated), their median times, the
 * throughput ratio and both hit rates: a table on stdout, CSV to --csv
 * FILE, and the ratio against capacity to --plot FILE.png.  Returns the
 * exit status.
 */
static int sweep_compare(const struct sim_opts *o, const struct workload *w,
			 uint64_t unlimited, const uint32_t *caps,
			 unsigned ncap)
{
	struct sim_result *kv = bench_xcalloc(o->reps, sizeof(*kv)),
			  *mx = bench_xcalloc(o->reps, sizeof(*mx));
	double *x = bench_xcalloc(ncap, sizeof(*x)),
	       *y = bench_xcalloc(ncap, sizeof(*y));
	/* Per capacity: the medians' times and hit rates, for the CSV. */
	double(*row)[4] = bench_xcalloc(ncap, sizeof(*row));
	FILE *csv = NULL;
	int rc = 0;

	if (o->csv) {
		csv = strcmp(o->csv, "-") ? fopen(o->csv, "w") : stdout;
		if (!csv) {
			fprintf(stderr, "kvpool sim: --csv %s: %s\n", o->csv,
				strerror(errno));
			free(kv);
			free(mx);
			free(x);
			free(y);
			free(row);
			return 1;
		}
	}
	fprintf(stderr,
		"kvpool sim: %u capacities x 2 peers x %u reps on %s, %u "
		"threads, policy %s (unlimited: %llu blocks)\n",
		ncap, o->reps, w->name, o->threads, policy_name[o->policy],
		(unsigned long long)unlimited);
	printf("%-10s %10s %10s %8s %10s %10s %10s\n", "capacity",
	       "kvpool_s", "mutex_s", "ratio", "kv_hits", "mx_hits",
	       "hits_diff");
	for (unsigned c = 0; c < ncap; c++) {
		uint32_t blocks = caps[c] ? caps[c] : (uint32_t)unlimited;
		const struct sim_result *k, *m;
		char name[24];
		double ratio, dh;

		for (unsigned i = 0; i < o->reps; i++) {
			if (i % 2)
				replay(o, w, PEER_MUTEX, blocks, o->policy,
				       &mx[i]);
			replay(o, w, PEER_KVPOOL, blocks, o->policy, &kv[i]);
			if (i % 2 == 0)
				replay(o, w, PEER_MUTEX, blocks, o->policy,
				       &mx[i]);
		}
		k = median_of(kv, o->reps);
		m = median_of(mx, o->reps);
		ratio = m->seconds / k->seconds;
		dh = k->st.prefix_hit_rate - m->st.prefix_hit_rate;
		cap_name(name, sizeof(name), blocks, unlimited);
		printf("%-10s %10.3f %10.3f %7.2fx %10.4f %10.4f %+10.4f\n",
		       name, k->seconds, m->seconds, ratio,
		       k->st.prefix_hit_rate, m->st.prefix_hit_rate, dh);
		row[c][0] = k->seconds;
		row[c][1] = m->seconds;
		row[c][2] = k->st.prefix_hit_rate;
		row[c][3] = m->st.prefix_hit_rate;
		x[c] = blocks;
		y[c] = ratio;
		fflush(stdout);
	}
	if (csv) {
		/* After the table, so that "-" keeps the two apart. */
		if (csv == stdout)
			printf("\n");
		fprintf(csv, "blocks,unlimited,threads,policy,reps,kvpool_s,"
			     "mutex_s,ratio,kvpool_hit_rate,mutex_hit_rate,"
			     "hit_rate_diff\n");
		for (unsigned c = 0; c < ncap; c++)
			fprintf(csv, "%.0f,%d,%u,%s,%u,%.4f,%.4f,%.4f,%.6f,"
				     "%.6f,%.6f\n",
				x[c], x[c] >= (double)unlimited, o->threads,
				policy_name[o->policy], o->reps, row[c][0],
				row[c][1], y[c], row[c][2], row[c][3],
				row[c][2] - row[c][3]);
	}
	if (csv && csv != stdout && (ferror(csv) | fclose(csv)) != 0) {
		fprintf(stderr, "kvpool sim: --csv %s: %s\n", o->csv,
			strerror(errno));
		rc = 1;
	}
	if (o->plot) {
		struct plot_series sr = {"kvpool / mutex", x, y, ncap};

		/* gnuplot is optional: without it the table stands and
		 * plot_png says why there is no plot; a plot that gnuplot
		 * failed to write is an error. */
		if (plot_png("kvpool sim", o->plot,
			     "kvpool / mutex throughput against pool capacity",
			     "pool blocks", "throughput ratio", PLOT_LOGX, &sr,
			     1) != 0 &&
		    plot_available())
			rc = 1;
	}
	free(kv);
	free(mx);
	free(x);
	free(y);
	free(row);
	return rc;
}

/*
 * --sweep-capacity --retain-system N:P[:STEPS]: at each capacity, the
 * policy (--policy, LRU by default) without retention (the same ranges
 * at priority 0) and with it: hit rates, and how many blocks of the
 * retained ranges each evicted, as CSV on stdout; the hit rates against
 * capacity to --plot.  Returns the exit status.
 */
static int sweep_retain(const struct sim_opts *o, const struct workload *w,
			const uint32_t *caps, unsigned ncap)
{
	struct sim_opts plain = *o;
	double *x = bench_xcalloc(ncap, sizeof(*x)),
	       *y = bench_xcalloc(2 * (size_t)ncap, sizeof(*y));
	struct plot_series series[2];
	char with[64];
	int rc = 0;

	plain.retain_prio = KVP_RETAIN_DEFAULT;
	fprintf(stderr,
		"kvpool sim: sweeping %u capacities, policy %s without and "
		"with retention of the first %u tokens at priority %u, on "
		"%s\n",
		ncap, policy_name[o->policy], o->retain_tokens, o->retain_prio,
		w->name);
	printf("blocks,hit_rate,hit_rate_retained,retained_range_evicted,"
	       "retained_range_evicted_retained,preemptions,"
	       "preemptions_retained,replay_s,replay_s_retained\n");
	for (unsigned c = 0; c < ncap; c++) {
		struct sim_result a, b;

		replay(&plain, w, PEER_KVPOOL, caps[c], o->policy, &a);
		replay(o, w, PEER_KVPOOL, caps[c], o->policy, &b);
		x[c] = caps[c];
		y[c] = a.st.prefix_hit_rate;
		y[ncap + c] = b.st.prefix_hit_rate;
		printf("%u,%.6f,%.6f,%llu,%llu,%llu,%llu,%.4f,%.4f\n", caps[c],
		       a.st.prefix_hit_rate, b.st.prefix_hit_rate,
		       (unsigned long long)a.retained_evicted,
		       (unsigned long long)b.retained_evicted,
		       (unsigned long long)a.preemptions,
		       (unsigned long long)b.preemptions, a.seconds,
		       b.seconds);
		fflush(stdout);
	}
	snprintf(with, sizeof(with), "%s, retention %u", policy_name[o->policy],
		 o->retain_prio);
	series[0] = (struct plot_series){policy_name[o->policy], x, y, ncap};
	series[1] = (struct plot_series){with, x, y + ncap, ncap};
	/* As in sweep(): no gnuplot is not an error, a failed plot is. */
	if (o->plot &&
	    plot_png("kvpool sim", o->plot,
		     "prefix hit rate with and without retention",
		     "pool blocks", "hit rate (tokens)", PLOT_LOGX, series,
		     2) != 0 &&
	    plot_available())
		rc = 1;
	free(x);
	free(y);
	return rc;
}

/* --sweep-capacity: every policy at every capacity, CSV on stdout and
 * the optional plot.  Returns the exit status. */
/*
 * A pool's host memory, checked before it is touched: with overcommit a
 * pool far larger than the machine is created, then the kernel kills the
 * process page by page.  About SIM_BLOCK_BYTES per block (the pool's and
 * the manager's metadata and prefix maps); the limit is the physical
 * memory or ulimit -v, the smaller.  Returns 0, or 1 after one line.
 */
#define SIM_BLOCK_BYTES 128u

static int pool_memory_check(uint64_t blocks)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t need = blocks * SIM_BLOCK_BYTES, have = UINT64_MAX;
	const char *what = "physical memory";
	struct rlimit rl;

	if (pages > 0 && psz > 0)
		have = (uint64_t)pages * (uint64_t)psz;
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (uint64_t)rl.rlim_cur < have) {
		have = rl.rlim_cur;
		what = "address-space limit (ulimit -v)";
	}
	if (need <= have)
		return 0;
	fprintf(stderr,
		"kvpool sim: a pool of %llu blocks needs about %.1f GB, more "
		"than the %.1f GB %s allows\n",
		(unsigned long long)blocks, (double)need / 1e9,
		(double)have / 1e9, what);
	return 1;
}

/* The sweep's capacities (--capacities or the defaults; 0: unlimited),
 * each checked against the memory: 0, or the exit status. */
static int sweep_caps(const struct sim_opts *o, const struct workload *w,
		      uint64_t unlimited, uint32_t *caps, unsigned *ncap)
{
	if (!o->capacities) {
		*ncap = default_capacities(w, unlimited, caps);
	} else if (parse_capacities(o->capacities, caps, ncap) != 0) {
		fprintf(stderr,
			"kvpool sim: --capacities: expected 1 to %u "
			"comma-separated block counts\n",
			SIM_MAX_CAPACITIES);
		return 2;
	}
	for (unsigned c = 0; c < *ncap; c++)
		if (pool_memory_check(caps[c] ? caps[c] : unlimited))
			return 1;
	return 0;
}

static int sweep(const struct sim_opts *o, const struct workload *w,
		 uint64_t unlimited)
{
	uint32_t caps[SIM_MAX_CAPACITIES];
	unsigned ncap, npol = 4;
	double *x, *y;
	struct plot_series series[4];
	struct sim_result *res;
	int rc = 0;

	rc = sweep_caps(o, w, unlimited, caps, &ncap);
	if (rc)
		return rc;
	if (o->compare)
		return sweep_compare(o, w, unlimited, caps, ncap);
	for (unsigned c = 0; c < ncap; c++)
		if (caps[c] == 0)
			caps[c] = (uint32_t)unlimited;
	if (o->retain)
		return sweep_retain(o, w, caps, ncap);
	res = bench_xcalloc((size_t)npol * ncap, sizeof(*res));
	x = bench_xcalloc((size_t)npol * ncap, sizeof(*x));
	y = bench_xcalloc((size_t)npol * ncap, sizeof(*y));
	fprintf(stderr,
		"kvpool sim: sweeping %u capacities x %u policies on %s "
		"(unlimited: %llu blocks)\n",
		ncap, npol, w->name, (unsigned long long)unlimited);
	for (unsigned p = 0; p < npol; p++)
		for (unsigned c = 0; c < ncap; c++) {
			struct sim_result *r = &res[p * ncap + c];

			replay(o, w, PEER_KVPOOL, caps[c], (enum kvp_policy)p,
			       r);
			x[p * ncap + c] = caps[c];
			y[p * ncap + c] = r->st.prefix_hit_rate;
		}
	printf("policy,blocks,capacity_fraction,hit_rate,preemptions,"
	       "evicted_sequences,cached_blocks_evicted,abandoned,"
	       "requests_per_s,replay_s\n");
	for (unsigned p = 0; p < npol; p++) {
		for (unsigned c = 0; c < ncap; c++) {
			const struct sim_result *r = &res[p * ncap + c];

			printf("%s,%u,%.4f,%.6f,%llu,%llu,%llu,%llu,%.1f,%."
			       "4f\n",
			       policy_name[p], caps[c],
			       (double)caps[c] / (double)unlimited,
			       r->st.prefix_hit_rate,
			       (unsigned long long)r->preemptions,
			       (unsigned long long)r->victims,
			       (unsigned long long)r->st.prefix_evictions,
			       (unsigned long long)r->abandoned,
			       (double)r->completed / r->seconds, r->seconds);
		}
		series[p] = (struct plot_series){policy_name[p], x + p * ncap,
						 y + p * ncap, ncap};
	}
	fflush(stdout);
	/* As in sweep_compare: no gnuplot is not an error, a failed plot
	 * is. */
	if (o->plot &&
	    plot_png("kvpool sim", o->plot,
		     "prefix hit rate against pool capacity", "pool blocks",
		     "hit rate (tokens)", PLOT_LOGX, series, npol) != 0 &&
	    plot_available())
		rc = 1;
	free(res);
	free(x);
	free(y);
	return rc;
}

/* ------------------------------------------------------------- options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvpool sim [options]\n"
		"Replays a serving workload through scheduler threads sharing "
		"one pool.\n"
		"\n"
		"workload:\n"
		"  --trace FILE        Mooncake-format JSON-lines trace "
		"(default: the embedded\n"
		"                      synthetic workload)\n"
		"  --requests N        synthetic workload size (default %u)\n"
		"  --seed S            synthetic workload seed (default 1)\n"
		"  --workload W        the synthetic workload: mixed (default) "
		"or sysprompt\n"
		"                      (a 2,048-token system prompt shared by "
		"1 request in 10)\n"
		"  --dump-workload FILE  write the workload as JSON lines and "
		"exit\n"
		"pool and scheduler:\n"
		"  --blocks N          pool blocks; 0 = unlimited (nothing is "
		"evicted); default:\n"
		"                      %u for the synthetic workload, 0 for "
		"a trace\n"
		"  --block-tokens N    tokens per block (default %u)\n"
		"  --threads N         scheduler threads (default %u)\n"
		"  --models M          managers sharing the pool; request i "
		"goes to model i %% M\n"
		"                      (default 1)\n"
		"  --policy P          eviction policy: lru, lfu, longest, "
		"priority (default lru)\n"
		"  --max-running N     running requests, all threads (default "
		"%u)\n"
		"  --watermark F       fraction kept free at admission "
		"(default 0.01)\n"
		"  --unordered         admit concurrently (default: "
		"admissions in trace order)\n"
		"  --max-attempts N    admissions of one request before it is "
		"abandoned\n"
		"                      (default %u)\n"
		"  --retain-system N:P[:STEPS]  commit the first N tokens of "
		"every request at\n"
		"                      retention priority P (0-15), for STEPS "
		"scheduler steps\n"
		"                      if given; with --sweep-capacity: LRU "
		"with and without\n"
		"output:\n"
		"  --json              one JSON object on stdout\n"
		"  --compare mutex     also replay on the mutex manager and "
		"print the ratio\n"
		"  --reps R            replays per peer; the median time is "
		"reported (default 1)\n"
		"  --sweep-capacity    hit rate against capacity for every "
		"policy, as CSV\n"
		"                      (with --retain-system: LRU with and "
		"without it);\n"
		"                      with --compare mutex: both peers at "
		"each capacity\n"
		"                      (--policy, --reps), time, ratio and hit "
		"rates as a table\n"
		"  --capacities LIST   the capacities to sweep (blocks, "
		"comma-separated;\n"
		"                      0 = unlimited)\n"
		"  --csv FILE          with --sweep-capacity --compare: the "
		"table as CSV\n"
		"                      ('-': stdout)\n"
		"  --plot FILE.png     with --sweep-capacity: a line plot "
		"(needs gnuplot)\n"
		"events (libkvpool-events; kvpool(1), README \"Joining a "
		"cluster\"):\n"
		"  --publish ENDPOINT  publish the replay's KV events, vLLM's "
		"wire format\n"
		"                      (ZeroMQ PUB bound there, e.g. "
		"tcp://127.0.0.1:5557)\n"
		"  --replay ENDPOINT   serve replay requests there (ROUTER)\n"
		"  --replay-ring N     batches kept for replay (default 10000)\n"
		"  --pub-hwm N         the PUB socket's high-water mark "
		"(default 100000)\n"
		"  --topic T           topic (default kv@<host>@kvpool-sim)\n"
		"  --hash H            block hashes: xxh3 (default) or "
		"sha256_cbor (vLLM's,\n"
		"                      over pseudo-tokens of the hash ids)\n"
		"  --hash-seed S       sha256_cbor's seed, vLLM's "
		"PYTHONHASHSEED (default 0)\n"
		"  --linger SECONDS    after the replay, keep answering "
		"replay requests\n"
		"  -h, --help          this text; kvpool(1) has the details\n",
		WL_DEFAULT_REQUESTS, SIM_DEFAULT_SYNTH_BLOCKS,
		SIM_DEFAULT_BLOCK_TOKENS, SIM_DEFAULT_THREADS,
		SIM_DEFAULT_MAX_RUNNING, SIM_DEFAULT_MAX_ATTEMPTS);
}

__attribute__((noreturn, format(printf, 1, 2))) static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("kvpool sim: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(kvpool sim --help lists the options)\n", stderr);
	exit(2);
}

/* A number in (0, 1) for option opt; exits 2 otherwise. */
static float parse_fraction(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v >= 1)
		usage_error("%s: expected a number in (0, 1), got '%s'", opt,
			    s);
	return (float)v;
}

/* A decimal number in [lo, hi] (digits only), or false. */
static bool parse_u64_in(const char *s, uint64_t lo, uint64_t hi,
			 uint64_t *out)
{
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end && *out >= lo && *out <= hi;
}

/* --retain-system N:P[:STEPS]; exits 2 if malformed. */
static void parse_retain(struct sim_opts *o, const char *val)
{
	char buf[64], *field[3], *p = buf;
	uint64_t n, prio, steps = 0;
	unsigned nf = 0;

	if (strlen(val) >= sizeof(buf))
		goto bad;
	strcpy(buf, val);
	for (;;) {
		if (nf == 3)
			goto bad; /* a fourth field */
		field[nf++] = p;
		p = strchr(p, ':');
		if (!p)
			break;
		*p++ = '\0';
	}
	if (nf < 2 || !parse_u64_in(field[0], 1, UINT32_MAX, &n) ||
	    !parse_u64_in(field[1], 0, KVP_RETAIN_PIN, &prio) ||
	    (nf == 3 && !parse_u64_in(field[2], 1, UINT64_MAX, &steps)))
		goto bad;
	o->retain = true;
	o->retain_tokens = (uint32_t)n;
	o->retain_prio = (uint32_t)prio;
	o->retain_steps = steps;
	return;
bad:
	usage_error("--retain-system: expected N:P[:STEPS] (N tokens > 0, "
		    "priority 0 to %u, STEPS > 0), got '%s'",
		    KVP_RETAIN_PIN, val);
}

static const char *const flag_opts[] = {"--json", "--sweep-capacity",
					"--unordered"};

/* Fills *o from argv; exits 0 after --help, 2 on a usage error. */
/* An endpoint option's value: a tcp:// port past 65535 is refused
 * (libzmq would bind it modulo 65536, another port than asked for). */
static const char *endpoint_arg(const char *name, const char *val)
{
	const char *port = strrchr(val, ':');

	if (!strncmp(val, "tcp://", 6) && port && port > val + 5 &&
	    strcmp(port + 1, "*") != 0) {
		char *end;
		unsigned long n;

		errno = 0;
		n = strtoul(port + 1, &end, 10);
		if (errno || end == port + 1 || *end || n > 65535)
			usage_error("%s: '%s': the port must be 0 to 65535 or "
				    "*", name, val);
	}
	return val;
}

static void parse_args(struct sim_opts *o, int argc, char **argv)
{
	memset(o, 0, sizeof(*o));
	o->threads = SIM_DEFAULT_THREADS;
	o->models = 1;
	o->block_tokens = SIM_DEFAULT_BLOCK_TOKENS;
	o->policy = KVP_EVICT_LRU;
	o->max_running = SIM_DEFAULT_MAX_RUNNING;
	o->watermark = 0.01f;
	o->seed = 1;
	o->requests = WL_DEFAULT_REQUESTS;
	o->reps = 1;
	o->max_attempts = SIM_DEFAULT_MAX_ATTEMPTS;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL, *eq;
		char name[32];
		size_t len;
		bool flag = false;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (strncmp(a, "--", 2) != 0)
			usage_error("unexpected argument '%s'", a);
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		if (len >= sizeof(name))
			usage_error("unknown option '%s'", a);
		memcpy(name, a, len);
		name[len] = '\0';
		for (size_t k = 0; k < sizeof(flag_opts) / sizeof(*flag_opts);
		     k++)
			flag = flag || !strcmp(name, flag_opts[k]);
		if (flag) {
			if (eq)
				usage_error("%s takes no value", name);
		} else if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		}

		if (!strcmp(name, "--json")) {
			o->json = true;
		} else if (!strcmp(name, "--sweep-capacity")) {
			o->sweep = true;
		} else if (!strcmp(name, "--unordered")) {
			o->unordered = true;
		} else if (!val) {
			/* Known or not, it cannot be used without a value. */
			usage_error("%s: unknown option or missing value",
				    name);
		} else if (!strcmp(name, "--threads")) {
			o->threads = (unsigned)bench_parse_ulong(
				name, val, 1, SIM_MAX_THREADS);
		} else if (!strcmp(name, "--models")) {
			o->models = (unsigned)bench_parse_ulong(name, val, 1,
								SIM_MAX_MODELS);
		} else if (!strcmp(name, "--blocks")) {
			o->blocks = (uint32_t)bench_parse_ulong(
				name, val, 0, KVP_MAX_BLOCKS - 1);
			o->blocks_given = true;
		} else if (!strcmp(name, "--block-tokens")) {
			o->block_tokens = (uint32_t)bench_parse_ulong(
				name, val, 1, 1u << 16);
		} else if (!strcmp(name, "--policy")) {
			unsigned p;

			for (p = 0; p < 4; p++)
				if (!strcmp(val, policy_name[p]))
					break;
			if (p == 4)
				usage_error("--policy: expected lru, lfu, "
					    "longest or priority, got '%s'",
					    val);
			o->policy = (enum kvp_policy)p;
		} else if (!strcmp(name, "--max-running")) {
			o->max_running = (uint32_t)bench_parse_ulong(
				name, val, 1, 1u << 20);
		} else if (!strcmp(name, "--watermark")) {
			o->watermark = parse_fraction(name, val);
		} else if (!strcmp(name, "--workload")) {
			if (!strcmp(val, "sysprompt"))
				o->sysprompt = true;
			else if (strcmp(val, "mixed") != 0)
				usage_error("--workload: expected mixed or "
					    "sysprompt, got '%s'",
					    val);
		} else if (!strcmp(name, "--retain-system")) {
			parse_retain(o, val);
		} else if (!strcmp(name, "--trace")) {
			o->trace = val;
		} else if (!strcmp(name, "--seed")) {
			o->seed = bench_parse_ulong(name, val, 0, ULONG_MAX);
		} else if (!strcmp(name, "--requests")) {
			o->requests = (uint32_t)bench_parse_ulong(name, val, 1,
								  1u << 24);
		} else if (!strcmp(name, "--capacities")) {
			o->capacities = val;
		} else if (!strcmp(name, "--plot")) {
			o->plot = val;
		} else if (!strcmp(name, "--csv")) {
			o->csv = val;
		} else if (!strcmp(name, "--compare")) {
			if (strcmp(val, "mutex") != 0)
				usage_error("--compare: the only peer is "
					    "'mutex', got '%s'",
					    val);
			o->compare = true;
		} else if (!strcmp(name, "--reps")) {
			o->reps = (unsigned)bench_parse_ulong(name, val, 1,
							      BENCH_MAX_REPS);
		} else if (!strcmp(name, "--dump-workload")) {
			o->dump = val;
		} else if (!strcmp(name, "--publish")) {
			o->publish = endpoint_arg(name, val);
		} else if (!strcmp(name, "--replay")) {
			o->replay_ep = endpoint_arg(name, val);
		} else if (!strcmp(name, "--replay-ring")) {
			o->replay_ring = (uint32_t)bench_parse_ulong(
				name, val, 1, 1u << 24);
		} else if (!strcmp(name, "--pub-hwm")) {
			o->pub_hwm = (int32_t)bench_parse_ulong(name, val, 1,
								INT32_MAX);
		} else if (!strcmp(name, "--topic")) {
			if (strlen(val) > 255)
				usage_error("--topic: at most 255 bytes, got "
					    "%zu", strlen(val));
			o->topic = val;
		} else if (!strcmp(name, "--hash")) {
			if (strcmp(val, "sha256_cbor") && strcmp(val, "xxh3"))
				usage_error("--hash: expected xxh3 or "
					    "sha256_cbor, got '%s'",
					    val);
			o->cbor = !strcmp(val, "sha256_cbor");
		} else if (!strcmp(name, "--hash-seed")) {
			o->hash_seed = val;
		} else if (!strcmp(name, "--linger")) {
			char *end;

			errno = 0;
			o->linger = strtod(val, &end);
			if (errno || end == val || *end || !(o->linger >= 0) ||
			    o->linger > 86400)
				usage_error("--linger: expected seconds in "
					    "[0, 86400], got '%s'",
					    val);
		} else if (!strcmp(name, "--max-attempts")) {
			o->max_attempts = (uint32_t)bench_parse_ulong(
				name, val, 1, UINT32_MAX);
		} else {
			usage_error("unknown option '%s'", name);
		}
	}
	if ((o->capacities || o->plot || o->csv) && !o->sweep)
		usage_error("--capacities, --plot and --csv go with "
			    "--sweep-capacity");
	if (o->sweep && o->json)
		usage_error("--sweep-capacity prints CSV: it does not take "
			    "--json");
	if (o->csv && !o->compare)
		usage_error("--csv goes with --sweep-capacity --compare mutex "
			    "(the plain sweep prints CSV on stdout)");
	if ((o->trace && (o->seed != 1 || o->requests != WL_DEFAULT_REQUESTS ||
			  o->sysprompt)))
		usage_error("--seed, --requests and --workload shape the "
			    "synthetic workload, not a trace");
	if ((o->replay_ep || o->linger > 0 || o->replay_ring || o->pub_hwm ||
	     o->topic) &&
	    !o->publish)
		usage_error("--replay, --replay-ring, --pub-hwm, --topic and "
			    "--linger go with --publish");
	if (o->hash_seed && !o->cbor)
		usage_error("--hash-seed goes with --hash sha256_cbor");
	if (o->publish && (o->compare || o->sweep || o->reps != 1 ||
			   o->models != 1 || o->dump))
		usage_error("--publish streams one replay of one model: not "
			    "with --compare, --sweep-capacity, --reps, "
			    "--models or --dump-workload");
#ifndef KVP_HAVE_EVENTS
	if (o->publish)
		usage_error("--publish: this kvpool was built without "
			    "libkvpool-events (libzmq3-dev, libmsgpack-dev)");
#endif
	o->progress = isatty(STDERR_FILENO);
}

/* ------------------------------------------------------------------ main */


#ifdef KVP_HAVE_EVENTS
/* --publish: starts o->pub.  Returns 0, or -1 (message on stderr). */
static int start_publisher(struct sim_opts *o)
{
	struct kvp_pub_config cfg = {0};
	int rc;

	cfg.endpoint = o->publish;
	cfg.replay_endpoint = o->replay_ep;
	cfg.topic = o->topic;
	cfg.model_name = "kvpool-sim";
	cfg.ring_batches = o->replay_ring;
	cfg.sndhwm = o->pub_hwm;
	/* A replay runs flat out, far faster than an engine's steps: room
	 * for a burst, so that the publisher's thread never drops. */
	cfg.thread_buffer_kib = 64 * 1024;
	cfg.max_batch_events = 1024;
	rc = kvp_pub_create(&cfg, &o->pub);
	if (rc != 0) {
		fprintf(stderr, "kvpool sim: --publish %s%s%s: %s\n", o->publish,
			o->replay_ep ? " --replay " : "",
			o->replay_ep ? o->replay_ep : "", strerror(-rc));
		return -1;
	}
	/* The ports bound, "*" or 0 resolved: a subscriber needs them. */
	for (int which = 0; which < (o->replay_ep ? 2 : 1); which++) {
		char ep[256];

		if (kvp_pub_endpoint(o->pub, which, ep, sizeof(ep)) == 0)
			fprintf(stderr, "kvpool sim: %s on %s\n",
				which ? "replay" : "publishing", ep);
	}
	return 0;
}

/* --publish without --json: one line of the publisher's counts. */
static void print_events(const struct sim_opts *o, const struct sim_result *k)
{
	struct kvp_pub_stats st;

	kvp_pub_stats(o->pub, &st);
	printf("events: %llu published in %llu batches (last seq %llu), %llu "
	       "dropped; %llu blocks cached at the end (%s hashes)\n",
	       (unsigned long long)(st.events - st.dropped),
	       (unsigned long long)st.batches,
	       (unsigned long long)st.last_seq,
	       (unsigned long long)st.dropped,
	       (unsigned long long)k->st.prefix_cached_blocks,
	       o->cbor ? "sha256_cbor" : "xxh3");
	if (o->replay_ep)
		printf("replay: %llu requests answered (%llu cut short), %llu "
		       "ignored; ring %llu batches, %llu bytes\n",
		       (unsigned long long)st.replay_requests,
		       (unsigned long long)st.replays_cut,
		       (unsigned long long)st.replay_ignored,
		       (unsigned long long)st.ring_batches,
		       (unsigned long long)st.ring_bytes);
}
#else
static int start_publisher(struct sim_opts *o)
{
	(void)o;
	return -1;
}
#endif

/* `kvpool sim`: see tools.h. */
int sim_main(int argc, char **argv)
{
	struct sim_opts o;
	struct workload w;
	struct sim_result *kv, *mx = NULL;
	const struct sim_result *k, *m = NULL;
	uint64_t unlimited;
	uint32_t blocks;
	bool unl;
	char err[1024];
	int rc;

	parse_args(&o, argc, argv);
	if (o.trace) {
		if (wl_load_trace(&w, o.trace, err, sizeof(err)) != 0) {
			fprintf(stderr, "kvpool sim: %s\n", err);
			return 2;
		}
	} else if ((o.sysprompt
			    ? wl_synthetic_sysprompt(&w, o.seed, o.requests,
						     SIM_SYSPROMPT_TOKENS)
			    : wl_synthetic(&w, o.seed, o.requests)) != 0) {
		fprintf(stderr, "kvpool sim: out of memory\n");
		return 1;
	}
	if (o.dump) {
		FILE *f = fopen(o.dump, "w");

		rc = f ? wl_dump(&w, f) : -errno;
		if (f && (ferror(f) | fclose(f)) != 0 && rc == 0)
			rc = -EIO;
		wl_free(&w);
		if (rc != 0) {
			fprintf(stderr, "kvpool sim: %s: %s\n", o.dump,
				strerror(-rc));
			return 1;
		}
		return 0;
	}
	if (o.cbor) {
		kvp_hash_set_cbor_seed(o.hash_seed ? o.hash_seed : "0");
		wl_set_cbor(&w);
	}
	rc = wl_prepare(&w, o.block_tokens, o.models, o.threads);
	if (rc != 0) {
		fprintf(stderr, "kvpool sim: hashing the workload: %s\n",
			kvp_strerror(rc));
		wl_free(&w);
		return 1;
	}
	unlimited = unlimited_blocks(&o, &w);
	if (unlimited >= KVP_MAX_BLOCKS) {
		fprintf(stderr,
			"kvpool sim: the workload needs %llu blocks, "
			"more than a pool holds\n",
			(unsigned long long)unlimited);
		wl_free(&w);
		return 1;
	}
	if (o.sweep) {
		rc = sweep(&o, &w, unlimited);
		wl_free(&w);
		return rc;
	}
	blocks = o.blocks_given ? o.blocks
		 : o.trace	? 0
				: SIM_DEFAULT_SYNTH_BLOCKS;
	unl = blocks == 0;
	if (unl)
		blocks = (uint32_t)unlimited;
	if (pool_memory_check(blocks)) {
		wl_free(&w);
		return 1;
	}

	if (o.publish && start_publisher(&o) != 0) {
		wl_free(&w);
		return 1;
	}
	kv = bench_xcalloc(o.reps, sizeof(*kv));
	if (o.compare)
		mx = bench_xcalloc(o.reps, sizeof(*mx));
	for (unsigned i = 0; i < o.reps; i++) {
		/* Peers interleaved, their order alternated. */
		if (o.compare && i % 2)
			replay(&o, &w, PEER_MUTEX, blocks, o.policy, &mx[i]);
		replay(&o, &w, PEER_KVPOOL, blocks, o.policy, &kv[i]);
		if (o.compare && i % 2 == 0)
			replay(&o, &w, PEER_MUTEX, blocks, o.policy, &mx[i]);
	}
	k = median_of(kv, o.reps);
	if (o.compare)
		m = median_of(mx, o.reps);
	if (unl && (k->st.prefix_evictions || k->preemptions))
		fprintf(stderr,
			"kvpool sim: warning: the unlimited pool evicted %llu "
			"cached blocks and preempted %llu requests\n",
			(unsigned long long)k->st.prefix_evictions,
			(unsigned long long)k->preemptions);
#ifdef KVP_HAVE_EVENTS
	/* Everything the replay caused is on the wire before we report. */
	if (o.pub && kvp_pub_flush(o.pub, 60000) != 0)
		fprintf(stderr, "kvpool sim: events still unpublished after "
				"60 s\n");
#endif
	if (o.json) {
		json_report(&o, &w, unl, k, m);
	} else {
		print_workload(&o, &w, blocks, unl);
		print_result(&w, k);
		if (m) {
			bool same;

			print_result(&w, m);
			same = same_work(k, m, true);
			printf("kvpool / mutex throughput: %.2fx (%.3f s vs "
			       "%.3f s%s; %s)\n",
			       m->seconds / k->seconds, k->seconds, m->seconds,
			       o.reps > 1 ? ", medians" : "",
			       same ? "identical work"
				    : "the work differed, see above");
		}
	}
	rc = fflush(stdout) == 0 ? 0 : 1;
#ifdef KVP_HAVE_EVENTS
	if (o.pub) {
		struct timespec ts = {(time_t)o.linger,
				      (long)((o.linger - (double)(time_t)o.linger) *
					     1e9)};

		if (!o.json)
			print_events(&o, k);
		fflush(stdout);
		if (o.linger > 0)
			nanosleep(&ts, NULL);
		kvp_pub_destroy(o.pub);
	}
#endif
	free(kv);
	free(mx);
	wl_free(&w);
	return rc;
}
