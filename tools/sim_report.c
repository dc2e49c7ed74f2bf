/* SPDX-License-Identifier: MIT */
/*
 * sim_report.c - what `kvpool sim` prints of a replay: the text report
 * (the workload and configuration, then each replay's throughput, hit
 * rate, pool use, requests, and per-operation latencies), the --json
 * object, the publisher's counts with --publish, and the names printed
 * for operations (sim_common.c names the peers and policies).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <kvpool.h>
#ifdef KVP_HAVE_EVENTS
#include <kvpool-events.h>
#endif

#include "sim.h"

static const char *const op_name[NUM_OPS] = {
	"create_cached", "commit", "append", "fork", "free", "evict",
};

/* ------------------------------------------------------------- reports */

static double mega(uint64_t x)
{
	return (double)x * 1e-6;
}

/* The text report's header: workload and configuration. */
void sim_print_workload(const struct sim_opts *o, const struct workload *w,
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
	       w->models > 1 ? "s" : "", sim_policy_name[o->policy]);
	printf("  at most %u running requests, watermark %.3g, admission %s\n",
	       o->max_running, o->watermark,
	       o->unordered ? "concurrent (--unordered)"
			    : "in trace order per model");
}

/* The text report of one replay. */
void sim_print_result(const struct sim_result *x)
{
	printf("replay (%s): %.3f s, %.0f requests/s, %.2f M block "
	       "operations/s\n",
	       sim_peer_name[x->peer], x->seconds,
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
}

/* Whether both replays did the same operations; lists differences. */
bool sim_same_work(const struct sim_result *a, const struct sim_result *b,
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
	       sim_policy_name[x->policy],
	       (unsigned long long)x->st.prefix_queries,
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
	       (unsigned long long)st.batches, (unsigned long long)st.last_seq,
	       (unsigned long long)st.dropped,
	       (unsigned long long)k->st.prefix_cached_blocks);
#else
	(void)o;
	(void)k;
#endif
}

/* The whole --json report, one line; mx is NULL without --compare. */
void sim_json_report(const struct sim_opts *o, const struct workload *w,
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
	       w->block_tokens, sim_policy_name[o->policy], o->max_running,
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
		       sim_same_work(k, mx, false) ? "true" : "false");
	}
	printf("}\n");
}

/* The median-time result of reps replays. */
const struct sim_result *sim_median_of(struct sim_result *v, unsigned n)
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

/* --publish without --json: one line of the publisher's counts. */
void sim_print_events(const struct sim_opts *o, const struct sim_result *k)
{
#ifdef KVP_HAVE_EVENTS
	struct kvp_pub_stats st;

	kvp_pub_stats(o->pub, &st);
	printf("events: %llu published in %llu batches (last seq %llu), %llu "
	       "dropped; %llu blocks cached at the end (%s hashes)\n",
	       (unsigned long long)(st.events - st.dropped),
	       (unsigned long long)st.batches, (unsigned long long)st.last_seq,
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
#else
	(void)o;
	(void)k;
#endif
}
