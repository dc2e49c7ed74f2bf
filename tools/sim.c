/* SPDX-License-Identifier: MIT */
/*
 * sim.c - `kvpool sim`: replays a serving workload through scheduler
 * threads sharing one pool.  See kvpool(1) for the options and output.
 * This file loads the workload, starts the publisher, runs the replays
 * (one, --reps, --compare) or the sweep and prints the report; sim.h
 * lists the files that do the rest.
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
 *           full blocks (the prefill is done), then kvp_seq_fork_n of
 *           the n - 1 parallel samples in one call;
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
 * (clock_gettime around each call; appends sampled 1 in 8; a fork's is
 * that of one kvp_seq_fork_n of all of a request's samples), pool use
 * sampled by every thread every 8 of its steps, and the managers'
 * statistics.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
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

#include "bench_common.h"
#include "sim.h"
#include "tools.h"
#include "workload.h"

#define SIM_SYSPROMPT_TOKENS 2048u /* --workload sysprompt */

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
	cfg.sndhwm = (int32_t)o->pub_hwm; /* at most INT32_MAX */
	/* A replay runs flat out, far faster than an engine's steps: room
	 * for a burst, so that the publisher's thread never drops. */
	cfg.thread_buffer_kib = 64 * 1024;
	cfg.max_batch_events = 1024;
	rc = kvp_pub_create(&cfg, &o->pub);
	if (rc != 0) {
		fprintf(stderr, "kvpool sim: --publish %s%s%s: %s\n",
			o->publish, o->replay_ep ? " --replay " : "",
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

/* After the report: the publisher's counts, --linger, and its end. */
static void stop_publisher(struct sim_opts *o, const struct sim_result *k)
{
	struct timespec ts = {
		(time_t)o->linger,
		(long)((o->linger - (double)(time_t)o->linger) * 1e9)};

	if (!o->json)
		sim_print_events(o, k);
	fflush(stdout);
	if (o->linger > 0)
		nanosleep(&ts, NULL);
	kvp_pub_destroy(o->pub);
}
#else
static int start_publisher(struct sim_opts *o)
{
	(void)o;
	return -1;
}

static void stop_publisher(struct sim_opts *o, const struct sim_result *k)
{
	(void)o;
	(void)k;
}
#endif

/* Loads the trace or makes the synthetic workload, and writes it out with
 * --dump-workload.  Returns -1 to go on, or the exit status. */
static int load_workload(const struct sim_opts *o, struct workload *w)
{
	char err[1024];
	FILE *f;
	int rc;

	if (o->trace) {
		if (wl_load_trace(w, o->trace, err, sizeof(err)) != 0) {
			fprintf(stderr, "kvpool sim: %s\n", err);
			return 2;
		}
	} else if ((o->sysprompt
			    ? wl_synthetic_sysprompt(w, o->seed, o->requests,
						     SIM_SYSPROMPT_TOKENS)
			    : wl_synthetic(w, o->seed, o->requests)) != 0) {
		fprintf(stderr, "kvpool sim: out of memory\n");
		return 1;
	}
	if (!o->dump)
		return -1;
	f = fopen(o->dump, "w");
	rc = f ? wl_dump(w, f) : -errno;
	if (f && (ferror(f) | fclose(f)) != 0 && rc == 0)
		rc = -EIO;
	wl_free(w);
	if (rc != 0) {
		fprintf(stderr, "kvpool sim: %s: %s\n", o->dump, strerror(-rc));
		return 1;
	}
	return 0;
}

/*
 * Whether the workload's hashes and the smallest pool it can run on fit
 * the host memory, from the requests' lengths alone, before anything is
 * hashed or allocated: a trace line of a few KB can ask for billions of
 * tokens.  The pool: --blocks; else (unlimited) the unlimited pool with
 * the longest prompt's blocks as the distinct ones, or for a sweep the
 * largest request's footprint (its capacities are checked after).  0, or
 * 1 after one line.
 */
static int workload_fits(const struct sim_opts *o, const struct workload *w)
{
	bool unl = o->blocks_given ? o->blocks == 0 : o->trace != NULL;
	uint64_t pool = 0;
	char what[128];

	for (uint32_t i = 0; i < w->nreq; i++) {
		uint64_t f = o->sweep ? sim_footprint(&w->req[i],
						      o->block_tokens)
				      : w->req[i].input_len / o->block_tokens;

		pool = f > pool ? f : pool;
	}
	if (!o->sweep)
		pool = !unl ? (o->blocks_given ? o->blocks
					       : SIM_DEFAULT_SYNTH_BLOCKS)
			    : sim_unlimited_of(o, w, pool);
	snprintf(what, sizeof(what), "a pool of %llu blocks",
		 (unsigned long long)pool);
	return sim_memory_check(wl_prepare_bytes(w, o->block_tokens,
						 o->threads) +
					pool * SIM_BLOCK_BYTES,
				what, " (with the workload's block hashes)");
}

/* Hashes the workload and sizes the unlimited pool.  Returns 0, or 1
 * after a message (the workload freed). */
static int prepare_workload(const struct sim_opts *o, struct workload *w,
			    uint64_t *unlimited)
{
	int rc;

	if (o->cbor) {
		kvp_hash_set_cbor_seed(o->hash_seed ? o->hash_seed : "0");
		wl_set_cbor(w);
	}
	if (workload_fits(o, w) != 0) {
		wl_free(w);
		return 1;
	}
	rc = wl_prepare(w, o->block_tokens, o->models, o->threads);
	if (rc != 0) {
		fprintf(stderr, "kvpool sim: hashing the workload: %s\n",
			kvp_strerror(rc));
		wl_free(w);
		return 1;
	}
	*unlimited = sim_unlimited_blocks(o, w);
	if (*unlimited >= KVP_MAX_BLOCKS) {
		fprintf(stderr,
			"kvpool sim: the workload needs %llu blocks, "
			"more than a pool holds\n",
			(unsigned long long)*unlimited);
		wl_free(w);
		return 1;
	}
	return 0;
}

/* The text report: the workload, each peer's replay, their ratio. */
static void print_report(const struct sim_opts *o, const struct workload *w,
			 uint32_t blocks, bool unl, const struct sim_result *k,
			 const struct sim_result *m)
{
	bool same;

	sim_print_workload(o, w, blocks, unl);
	sim_print_result(k);
	if (!m)
		return;
	sim_print_result(m);
	same = sim_same_work(k, m, true);
	printf("kvpool / mutex throughput: %.2fx (%.3f s vs %.3f s%s; %s)\n",
	       m->seconds / k->seconds, k->seconds, m->seconds,
	       o->reps > 1 ? ", medians" : "",
	       same ? "identical work" : "the work differed, see above");
}

/* --reps replays on the pool of `blocks` blocks (and as many on the
 * mutex peer with --compare, interleaved, their order alternated), then
 * the report of the median ones.  Returns the exit status. */
static int replays(struct sim_opts *o, const struct workload *w,
		   uint32_t blocks, bool unl)
{
	struct sim_result *kv = bench_xcalloc(o->reps, sizeof(*kv)), *mx = NULL;
	const struct sim_result *k, *m = NULL;
	int rc;

	if (o->compare)
		mx = bench_xcalloc(o->reps, sizeof(*mx));
	for (unsigned i = 0; i < o->reps; i++) {
		if (o->compare && i % 2)
			sim_replay(o, w, PEER_MUTEX, blocks, o->policy, &mx[i]);
		sim_replay(o, w, PEER_KVPOOL, blocks, o->policy, &kv[i]);
		if (o->compare && i % 2 == 0)
			sim_replay(o, w, PEER_MUTEX, blocks, o->policy, &mx[i]);
	}
	k = sim_median_of(kv, o->reps);
	if (o->compare)
		m = sim_median_of(mx, o->reps);
	if (unl && (k->st.prefix_evictions || k->preemptions))
		fprintf(stderr,
			"kvpool sim: warning: the unlimited pool evicted %llu "
			"cached blocks and preempted %llu requests\n",
			(unsigned long long)k->st.prefix_evictions,
			(unsigned long long)k->preemptions);
#ifdef KVP_HAVE_EVENTS
	/* Everything the replay caused is on the wire before we report. */
	if (o->pub && kvp_pub_flush(o->pub, 60000) != 0)
		fprintf(stderr, "kvpool sim: events still unpublished after "
				"60 s\n");
#endif
	if (o->json)
		sim_json_report(o, w, unl, k, m);
	else
		print_report(o, w, blocks, unl, k, m);
	rc = fflush(stdout) == 0 ? 0 : 1;
	if (o->pub)
		stop_publisher(o, k);
	free(kv);
	free(mx);
	return rc;
}

/* `kvpool sim`: see tools.h. */
int sim_main(int argc, char **argv)
{
	struct sim_opts o;
	struct workload w;
	uint64_t unlimited;
	uint32_t blocks;
	bool unl;
	int rc;

	sim_parse_args(&o, argc, argv);
	rc = load_workload(&o, &w);
	if (rc >= 0)
		return rc;
	if (prepare_workload(&o, &w, &unlimited) != 0)
		return 1;
	if (o.sweep) {
		rc = sim_sweep(&o, &w, unlimited);
		wl_free(&w);
		return rc;
	}
	blocks = o.blocks_given ? o.blocks
		 : o.trace	? 0
				: SIM_DEFAULT_SYNTH_BLOCKS;
	unl = blocks == 0;
	if (unl)
		blocks = (uint32_t)unlimited;
	if (sim_pool_memory_check(blocks) ||
	    (o.publish && start_publisher(&o) != 0)) {
		wl_free(&w);
		return 1;
	}
	rc = replays(&o, &w, blocks, unl);
	wl_free(&w);
	return rc;
}
