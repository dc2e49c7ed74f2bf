/* SPDX-License-Identifier: MIT */
/*
 * sim_sweep.c - pool capacities in `kvpool sim`: the "unlimited" size a
 * workload needs (--blocks 0), the check that a pool fits in memory, and
 * --sweep-capacity: kvpool and the mutex peer at each capacity (a table,
 * CSV, and a plot of both peers' hit rate and throughput), the policy
 * with and without --retain-system, or every policy (--sweep-policies).
 * On a terminal each replay's progress says where the sweep is.
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
#include "hist.h"
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

/* Names the sweep's place for the next replay's progress (a terminal):
 * "capacity C of N (BLOCKS), WHAT". */
static void sweep_place(struct sim_opts *po, char *label, size_t len,
			unsigned c, unsigned ncap, uint32_t blocks,
			uint64_t unlimited, const char *what)
{
	char name[24];

	cap_name(name, sizeof(name), blocks, unlimited);
	snprintf(label, len, "capacity %u of %u (%s%s), %s", c + 1, ncap, name,
		 blocks >= unlimited ? "" : " blocks", what);
	po->progress_label = label;
}

/* One capacity of the comparing sweep: the medians' replay times, hit
 * rates and requests per second, kvpool's then the mutex peer's. */
struct cmp_row {
	double s[2], hit[2], rps[2];
};

/* --sweep-capacity at one capacity: --reps replays of each peer
 * (interleaved, order alternated) into kv[] and mx[], the table's row
 * for their medians on stdout, and *row. */
static void compare_at(struct sim_opts *po, const struct workload *w,
		       uint32_t blocks, uint64_t unlimited, unsigned c,
		       unsigned ncap, struct sim_result *kv,
		       struct sim_result *mx, struct cmp_row *row)
{
	const struct sim_result *k, *m;
	char name[24], label[96], what[32];

	for (unsigned i = 0; i < po->reps; i++) {
		snprintf(what, sizeof(what), "rep %u of %u", i + 1, po->reps);
		sweep_place(po, label, sizeof(label), c, ncap, blocks,
			    unlimited, what);
		if (i % 2)
			sim_replay(po, w, PEER_MUTEX, blocks, po->policy,
				   &mx[i]);
		sim_replay(po, w, PEER_KVPOOL, blocks, po->policy, &kv[i]);
		if (i % 2 == 0)
			sim_replay(po, w, PEER_MUTEX, blocks, po->policy,
				   &mx[i]);
	}
	k = sim_median_of(kv, po->reps);
	m = sim_median_of(mx, po->reps);
	*row = (struct cmp_row){
		{k->seconds, m->seconds},
		{k->st.prefix_hit_rate, m->st.prefix_hit_rate},
		{(double)k->completed / k->seconds,
		 (double)m->completed / m->seconds}};
	cap_name(name, sizeof(name), blocks, unlimited);
	printf("%-10s %10.3f %10.3f %7.2fx %10.4f %10.4f %+10.4f\n", name,
	       row->s[0], row->s[1], row->s[1] / row->s[0], row->hit[0],
	       row->hit[1], row->hit[0] - row->hit[1]);
	fflush(stdout);
}

static const char cmp_csv_head[] =
	"blocks,unlimited,threads,policy,reps,kvpool_s,mutex_s,ratio,"
	"kvpool_hit_rate,mutex_hit_rate,hit_rate_diff,kvpool_requests_per_s,"
	"mutex_requests_per_s\n";

/* One row of the comparing sweep's CSV. */
static void compare_csv_row(const struct sim_opts *o, FILE *csv,
			    uint64_t unlimited, double blocks,
			    const struct cmp_row *r)
{
	fprintf(csv, "%.0f,%d,%u,%s,%u,%.4f,%.4f,%.4f,%.6f,%.6f,%.6f,%.1f,%.1f\n",
		blocks, blocks >= (double)unlimited, o->threads,
		sim_policy_name[o->policy], o->reps, r->s[0], r->s[1],
		r->s[1] / r->s[0], r->hit[0], r->hit[1], r->hit[0] - r->hit[1],
		r->rps[0], r->rps[1]);
}

/* The comparing sweep's plot: hit rate and throughput against capacity,
 * kvpool's and the mutex peer's.  Returns plot_panels'. */
static int compare_plot(const struct sim_opts *o, const double *x,
			const struct cmp_row *row, unsigned ncap)
{
	double *y = bench_xcalloc(4 * (size_t)ncap, sizeof(*y));
	struct plot_series s[4];
	struct plot_panel p[2];
	int rc;

	for (unsigned c = 0; c < ncap; c++)
		for (unsigned k = 0; k < 2; k++) {
			y[k * ncap + c] = row[c].hit[k];
			y[(2 + k) * ncap + c] = row[c].rps[k];
		}
	for (unsigned k = 0; k < 4; k++)
		s[k] = (struct plot_series){sim_peer_name[k % 2], x,
					    y + k * ncap, ncap};
	p[0] = (struct plot_panel){"prefix hit rate (tokens)", 0, s, 2};
	p[1] = (struct plot_panel){"requests per second", 0, s + 2, 2};
	rc = plot_panels("kvpool sim", o->plot,
			 "kvpool and the mutex peer against pool capacity",
			 "pool blocks", PLOT_LOGX | PLOT_XTICS, p, 2);
	free(y);
	return rc;
}

/*
 * --sweep-capacity: at each capacity, both peers, --reps replays each
 * (interleaved, order alternated), their median times, the throughput
 * ratio and both hit rates: a table on stdout; CSV to --csv FILE, a row
 * as each capacity is done (after the table for "-"); hit rate and
 * throughput against capacity, both peers, to --plot.  Returns the exit
 * status.
 */
static int sweep_compare(const struct sim_opts *o, const struct workload *w,
			 uint64_t unlimited, const uint32_t *caps,
			 unsigned ncap)
{
	struct sim_opts po = *o;
	struct sim_result *kv, *mx;
	struct cmp_row *row;
	double *x;
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
	row = bench_xcalloc(ncap, sizeof(*row));
	fprintf(stderr,
		"kvpool sim: %u capacities x 2 peers x %u reps on %s, %u "
		"threads, policy %s (unlimited: %llu blocks)\n",
		ncap, o->reps, w->name, o->threads, sim_policy_name[o->policy],
		(unsigned long long)unlimited);
	printf("%-10s %10s %10s %8s %10s %10s %10s\n", "capacity", "kvpool_s",
	       "mutex_s", "ratio", "kv_hits", "mx_hits", "hits_diff");
	if (csv && csv != stdout)
		fputs(cmp_csv_head, csv);
	po.progress_t0 = hist_now_ns();
	for (unsigned c = 0; c < ncap; c++) {
		uint32_t blocks = caps[c] ? caps[c] : (uint32_t)unlimited;

		x[c] = blocks;
		compare_at(&po, w, blocks, unlimited, c, ncap, kv, mx,
			   &row[c]);
		if (csv && csv != stdout) {
			compare_csv_row(o, csv, unlimited, x[c], &row[c]);
			fflush(csv);
		}
	}
	if (csv == stdout) { /* after the table, apart from it */
		printf("\n%s", cmp_csv_head);
		for (unsigned c = 0; c < ncap; c++)
			compare_csv_row(o, csv, unlimited, x[c], &row[c]);
	}
	if (csv && csv != stdout && (ferror(csv) | fclose(csv)) != 0) {
		fprintf(stderr, "kvpool sim: --csv %s: %s\n", o->csv,
			strerror(errno));
		rc = 1;
	}
	/* A plot asked for and not written (no gnuplot, a failed one, a
	 * file that cannot be written) is a failure; the table stands. */
	if (o->plot && compare_plot(o, x, row, ncap) != 0)
		rc = 1;
	free(kv);
	free(mx);
	free(x);
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
			uint64_t unlimited, const uint32_t *caps,
			unsigned ncap)
{
	struct sim_opts plain = *o, with_ret = *o;
	double *x = bench_xcalloc(ncap, sizeof(*x)),
	       *y = bench_xcalloc(2 * (size_t)ncap, sizeof(*y));
	struct plot_series series[2];
	char with[64], label[96];
	int rc = 0;

	plain.retain_prio = KVP_RETAIN_DEFAULT;
	plain.progress_t0 = with_ret.progress_t0 = hist_now_ns();
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

		sweep_place(&plain, label, sizeof(label), c, ncap, caps[c],
			    unlimited, "without retention");
		sim_replay(&plain, w, PEER_KVPOOL, caps[c], o->policy, &a);
		sweep_place(&with_ret, label, sizeof(label), c, ncap, caps[c],
			    unlimited, "with retention");
		sim_replay(&with_ret, w, PEER_KVPOOL, caps[c], o->policy, &b);
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
	/* As in sweep_compare: a plot not written is a failure. */
	if (o->plot &&
	    plot_png("kvpool sim", o->plot,
		     "prefix hit rate with and without retention",
		     "pool blocks", "hit rate (tokens)", PLOT_LOGX | PLOT_XTICS,
		     series, 2) != 0)
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

/*
 * --sweep-policies: every policy at every capacity, a CSV row on stdout
 * as each replay is done, and the policies' hit rates against capacity
 * to --plot.  (The policy only picks preemption victims: on a workload
 * that preempts nothing the curves coincide.)  Returns the exit status.
 */
static int sweep_policies(const struct sim_opts *o, const struct workload *w,
			  uint64_t unlimited, const uint32_t *caps,
			  unsigned ncap)
{
	unsigned npol = SIM_NUM_POLICIES;
	struct plot_series series[SIM_NUM_POLICIES];
	struct sim_opts po = *o;
	double *x, *y;
	char label[96];
	int rc = 0;

	x = bench_xcalloc((size_t)npol * ncap, sizeof(*x));
	y = bench_xcalloc((size_t)npol * ncap, sizeof(*y));
	fprintf(stderr,
		"kvpool sim: sweeping %u capacities x %u policies on %s "
		"(unlimited: %llu blocks)\n",
		ncap, npol, w->name, (unsigned long long)unlimited);
	printf("policy,blocks,capacity_fraction,hit_rate,preemptions,"
	       "evicted_sequences,cached_blocks_evicted,abandoned,"
	       "requests_per_s,replay_s\n");
	po.progress_t0 = hist_now_ns();
	for (unsigned p = 0; p < npol; p++) {
		for (unsigned c = 0; c < ncap; c++) {
			struct sim_result r;

			sweep_place(&po, label, sizeof(label), c, ncap,
				    caps[c], unlimited, sim_policy_name[p]);
			sim_replay(&po, w, PEER_KVPOOL, caps[c],
				   (enum kvp_policy)p, &r);
			x[p * ncap + c] = caps[c];
			y[p * ncap + c] = r.st.prefix_hit_rate;
			printf("%s,%u,%.4f,%.6f,%llu,%llu,%llu,%llu,%.1f,%."
			       "4f\n",
			       sim_policy_name[p], caps[c],
			       (double)caps[c] / (double)unlimited,
			       r.st.prefix_hit_rate,
			       (unsigned long long)r.preemptions,
			       (unsigned long long)r.victims,
			       (unsigned long long)r.st.prefix_evictions,
			       (unsigned long long)r.abandoned,
			       (double)r.completed / r.seconds, r.seconds);
			fflush(stdout);
		}
		series[p] = (struct plot_series){
			sim_policy_name[p], x + p * ncap, y + p * ncap, ncap};
	}
	/* As in sweep_compare: a plot not written is a failure. */
	if (o->plot &&
	    plot_png("kvpool sim", o->plot,
		     "prefix hit rate against pool capacity, by policy",
		     "pool blocks", "hit rate (tokens)", PLOT_LOGX | PLOT_XTICS,
		     series, npol) != 0)
		rc = 1;
	free(x);
	free(y);
	return rc;
}

/* sim.h: --sweep-capacity: kvpool against the mutex peer at every
 * capacity (sweep_compare), the policy with and without --retain-system
 * (sweep_retain), or every policy (--sweep-policies).  Returns the exit
 * status. */
int sim_sweep(const struct sim_opts *o, const struct workload *w,
	      uint64_t unlimited)
{
	uint32_t caps[SIM_MAX_CAPACITIES];
	unsigned ncap;
	int rc;

	rc = sweep_caps(o, w, unlimited, caps, &ncap);
	if (rc)
		return rc;
	if (!o->retain && !o->sweep_policies)
		return sweep_compare(o, w, unlimited, caps, ncap);
	for (unsigned c = 0; c < ncap; c++)
		if (caps[c] == 0)
			caps[c] = (uint32_t)unlimited;
	if (o->retain)
		return sweep_retain(o, w, unlimited, caps, ncap);
	return sweep_policies(o, w, unlimited, caps, ncap);
}
