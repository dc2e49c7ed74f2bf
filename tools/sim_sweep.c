/* SPDX-License-Identifier: MIT */
/*
 * sim_sweep.c - pool capacities in `kvpool sim`: the "unlimited" size a
 * workload needs (--blocks 0), the check that a pool fits in memory, and
 * --sweep-capacity: every policy at each capacity (CSV and a plot), the
 * policy with and without --retain-system, or both peers with --compare
 * mutex (a table, CSV and a plot of their ratio).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <kvpool.h>

#include "bench_common.h"
#include "plot.h"
#include "sim.h"

#define SIM_MAX_CAPACITIES 32u

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
uint64_t sim_unlimited_blocks(const struct sim_opts *o,
			      const struct workload *w)
{
	return sim_unlimited_of(o, w, w->distinct_blocks);
}

uint64_t sim_unlimited_of(const struct sim_opts *o, const struct workload *w,
			  uint64_t distinct)
{
	uint64_t *fp = bench_xcalloc(w->nreq ? w->nreq : 1, sizeof(*fp));
	uint64_t live = 0,
		 n = o->max_running < w->nreq ? o->max_running : w->nreq;
	double total;

	for (uint32_t i = 0; i < w->nreq; i++)
		fp[i] = sim_footprint(&w->req[i], o->block_tokens);
	qsort(fp, w->nreq, sizeof(*fp), cmp_u64_desc);
	for (uint64_t i = 0; i < n; i++)
		live += fp[i];
	free(fp);
	/* Thread caches: at most KVP's automatic 128 blocks, twice for the
	 * half-cache batches; 1024 more as a margin. */
	total = (double)(distinct + live +
			 (uint64_t)o->threads * 2 * 128 + 1024);
	return (uint64_t)(total / (1.0 -
				   (o->watermark > 0 ? o->watermark : 0.01)) +
			  1);
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
		uint64_t f = sim_footprint(&w->req[i], w->block_tokens);

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

/* --sweep-capacity --compare mutex at one capacity: --reps replays of
 * each peer (interleaved, order alternated) into kv[] and mx[], and the
 * table's row for their medians.  Fills row[] with the medians' times and
 * hit rates; returns the throughput ratio. */
static double compare_at(const struct sim_opts *o, const struct workload *w,
			 uint32_t blocks, uint64_t unlimited,
			 struct sim_result *kv, struct sim_result *mx,
			 double row[4])
{
	const struct sim_result *k, *m;
	char name[24];
	double ratio, dh;

	for (unsigned i = 0; i < o->reps; i++) {
		if (i % 2)
			sim_replay(o, w, PEER_MUTEX, blocks, o->policy, &mx[i]);
		sim_replay(o, w, PEER_KVPOOL, blocks, o->policy, &kv[i]);
		if (i % 2 == 0)
			sim_replay(o, w, PEER_MUTEX, blocks, o->policy, &mx[i]);
	}
	k = sim_median_of(kv, o->reps);
	m = sim_median_of(mx, o->reps);
	ratio = m->seconds / k->seconds;
	dh = k->st.prefix_hit_rate - m->st.prefix_hit_rate;
	cap_name(name, sizeof(name), blocks, unlimited);
	printf("%-10s %10.3f %10.3f %7.2fx %10.4f %10.4f %+10.4f\n", name,
	       k->seconds, m->seconds, ratio, k->st.prefix_hit_rate,
	       m->st.prefix_hit_rate, dh);
	row[0] = k->seconds;
	row[1] = m->seconds;
	row[2] = k->st.prefix_hit_rate;
	row[3] = m->st.prefix_hit_rate;
	fflush(stdout);
	return ratio;
}

/* The comparing sweep's CSV: x[] capacities, y[] ratios, row[] as
 * compare_at fills it. */
static void compare_csv(const struct sim_opts *o, FILE *csv, uint64_t unlimited,
			const double *x, const double *y,
			const double (*row)[4], unsigned ncap)
{
	/* After the table, so that "-" keeps the two apart. */
	if (csv == stdout)
		printf("\n");
	fprintf(csv, "blocks,unlimited,threads,policy,reps,kvpool_s,"
		     "mutex_s,ratio,kvpool_hit_rate,mutex_hit_rate,"
		     "hit_rate_diff\n");
	for (unsigned c = 0; c < ncap; c++)
		fprintf(csv,
			"%.0f,%d,%u,%s,%u,%.4f,%.4f,%.4f,%.6f,"
			"%.6f,%.6f\n",
			x[c], x[c] >= (double)unlimited, o->threads,
			sim_policy_name[o->policy], o->reps, row[c][0],
			row[c][1], y[c], row[c][2], row[c][3],
			row[c][2] - row[c][3]);
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
	struct sim_result *kv, *mx;
	double *x, *y;
	/* Per capacity: the medians' times and hit rates, for the CSV. */
	double(*row)[4];
	FILE *csv = NULL;
	int rc = 0;

	if (o->csv) {
		csv = strcmp(o->csv, "-") ? fopen(o->csv, "w") : stdout;
		if (!csv) {
			fprintf(stderr, "kvpool sim: --csv %s: %s\n", o->csv,
				strerror(errno));
			return 1;
		}
	}
	kv = bench_xcalloc(o->reps, sizeof(*kv));
	mx = bench_xcalloc(o->reps, sizeof(*mx));
	x = bench_xcalloc(ncap, sizeof(*x));
	y = bench_xcalloc(ncap, sizeof(*y));
	row = bench_xcalloc(ncap, sizeof(*row));
	fprintf(stderr,
		"kvpool sim: %u capacities x 2 peers x %u reps on %s, %u "
		"threads, policy %s (unlimited: %llu blocks)\n",
		ncap, o->reps, w->name, o->threads, sim_policy_name[o->policy],
		(unsigned long long)unlimited);
	printf("%-10s %10s %10s %8s %10s %10s %10s\n", "capacity", "kvpool_s",
	       "mutex_s", "ratio", "kv_hits", "mx_hits", "hits_diff");
	for (unsigned c = 0; c < ncap; c++) {
		uint32_t blocks = caps[c] ? caps[c] : (uint32_t)unlimited;

		x[c] = blocks;
		y[c] = compare_at(o, w, blocks, unlimited, kv, mx, row[c]);
	}
	if (csv)
		compare_csv(o, csv, unlimited, x, y, (const double(*)[4])row,
			    ncap);
	if (csv && csv != stdout && (ferror(csv) | fclose(csv)) != 0) {
		fprintf(stderr, "kvpool sim: --csv %s: %s\n", o->csv,
			strerror(errno));
		rc = 1;
	}
	if (o->plot) {
		struct plot_series sr = {"kvpool / mutex", x, y, ncap};

		/* A plot asked for and not written (no gnuplot, a failed
		 * one, a file that cannot be written) is a failure; the
		 * table stands. */
		if (plot_png("kvpool sim", o->plot,
			     "kvpool / mutex throughput against pool capacity",
			     "pool blocks", "throughput ratio", PLOT_LOGX, &sr,
			     1) != 0)
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
		ncap, sim_policy_name[o->policy], o->retain_tokens,
		o->retain_prio, w->name);
	printf("blocks,hit_rate,hit_rate_retained,retained_range_evicted,"
	       "retained_range_evicted_retained,preemptions,"
	       "preemptions_retained,replay_s,replay_s_retained\n");
	for (unsigned c = 0; c < ncap; c++) {
		struct sim_result a, b;

		sim_replay(&plain, w, PEER_KVPOOL, caps[c], o->policy, &a);
		sim_replay(o, w, PEER_KVPOOL, caps[c], o->policy, &b);
		x[c] = caps[c];
		y[c] = a.st.prefix_hit_rate;
		y[ncap + c] = b.st.prefix_hit_rate;
		printf("%u,%.6f,%.6f,%llu,%llu,%llu,%llu,%.4f,%.4f\n", caps[c],
		       a.st.prefix_hit_rate, b.st.prefix_hit_rate,
		       (unsigned long long)a.retained_evicted,
		       (unsigned long long)b.retained_evicted,
		       (unsigned long long)a.preemptions,
		       (unsigned long long)b.preemptions, a.seconds, b.seconds);
		fflush(stdout);
	}
	snprintf(with, sizeof(with), "%s, retention %u",
		 sim_policy_name[o->policy], o->retain_prio);
	series[0] =
		(struct plot_series){sim_policy_name[o->policy], x, y, ncap};
	series[1] = (struct plot_series){with, x, y + ncap, ncap};
	/* As in sim_sweep(): a plot not written is a failure. */
	if (o->plot &&
	    plot_png("kvpool sim", o->plot,
		     "prefix hit rate with and without retention",
		     "pool blocks", "hit rate (tokens)", PLOT_LOGX, series,
		     2) != 0)
		rc = 1;
	free(x);
	free(y);
	return rc;
}

/*
 * Host memory, checked before it is touched: with overcommit a pool far
 * larger than the machine is created, then the kernel kills the process
 * page by page.  A pool takes about SIM_BLOCK_BYTES per block (sim.h);
 * the limit is the physical memory or ulimit -v, the smaller.  Each
 * returns 0, or 1 after one line.
 */
int sim_memory_check(uint64_t need, const char *what, const char *with)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t have = UINT64_MAX;
	const char *limit = "physical memory";
	struct rlimit rl;

	if (pages > 0 && psz > 0)
		have = (uint64_t)pages * (uint64_t)psz;
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (uint64_t)rl.rlim_cur < have) {
		have = rl.rlim_cur;
		limit = "address-space limit (ulimit -v)";
	}
	if (need <= have)
		return 0;
	fprintf(stderr,
		"kvpool sim: %s needs about %.1f GB, more than the %.1f GB %s "
		"allows%s\n",
		what, (double)need / 1e9, (double)have / 1e9, limit, with);
	return 1;
}

int sim_pool_memory_check(uint64_t blocks)
{
	char what[64];

	snprintf(what, sizeof(what), "a pool of %llu blocks",
		 (unsigned long long)blocks);
	return sim_memory_check(blocks * SIM_BLOCK_BYTES, what, "");
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
		if (sim_pool_memory_check(caps[c] ? caps[c] : unlimited))
			return 1;
	return 0;
}

/* sim.h: --sweep-capacity: every policy at every capacity, CSV on stdout
 * and the optional plot (or sweep_compare, sweep_retain).  Returns the
 * exit status. */
int sim_sweep(const struct sim_opts *o, const struct workload *w,
	      uint64_t unlimited)
{
	uint32_t caps[SIM_MAX_CAPACITIES];
	unsigned ncap, npol = SIM_NUM_POLICIES;
	double *x, *y;
	struct plot_series series[SIM_NUM_POLICIES];
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

			sim_replay(o, w, PEER_KVPOOL, caps[c],
				   (enum kvp_policy)p, r);
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
			       sim_policy_name[p], caps[c],
			       (double)caps[c] / (double)unlimited,
			       r->st.prefix_hit_rate,
			       (unsigned long long)r->preemptions,
			       (unsigned long long)r->victims,
			       (unsigned long long)r->st.prefix_evictions,
			       (unsigned long long)r->abandoned,
			       (double)r->completed / r->seconds, r->seconds);
		}
		series[p] = (struct plot_series){
			sim_policy_name[p], x + p * ncap, y + p * ncap, ncap};
	}
	fflush(stdout);
	/* As in sweep_compare: a plot not written is a failure. */
	if (o->plot &&
	    plot_png("kvpool sim", o->plot,
		     "prefix hit rate against pool capacity", "pool blocks",
		     "hit rate (tokens)", PLOT_LOGX, series, npol) != 0)
		rc = 1;
	free(res);
	free(x);
	free(y);
	return rc;
}
