/* SPDX-License-Identifier: MIT */
/*
 * soak.c - `make soak`: the conversation trace replayed in a loop under
 * churn of threads and managers, watching the process's resident memory.
 *
 *   soak <seconds> <trace.jsonl> [--blocks N] [--csv FILE]
 *
 * One pool for the whole run.  Each round creates two prefix-caching
 * managers (request i goes to manager i % 2), starts 1 to 4 threads (a
 * different count each round), which split the trace's requests: each
 * request is kvp_seq_create_cached of its prompt, its output appended in
 * 16-token steps, its full blocks committed, and freed.  At the end of
 * the round the threads exit, both managers are destroyed, and the pool
 * must be whole again (free == total, kvp_pool_check clean); the RSS
 * (/proc/self/statm) is recorded.
 *
 * The first 20% of the run (at least one round) is warm-up: the allocator
 * and liburcu reach their working sizes.  Requires the RSS at the end to
 * be at most 1% above the RSS after warm-up.  Prints one line per round
 * (or writes CSV: round, seconds, rss_kb) and a summary.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "workload.h"

#define BT 16u
#define STEP 16u

struct worker {
	pthread_t th;
	unsigned tid, nthreads;
	const struct workload *w;
	struct kvp_manager **m;
	uint64_t base;
	unsigned long served, skipped;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long rss_kb(void)
{
	long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f || fscanf(f, "%ld %ld", &size, &res) != 2) {
		fprintf(stderr, "soak: cannot read /proc/self/statm\n");
		exit(1);
	}
	fclose(f);
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "soak: %s: %s\n", what, kvp_strerror(rc));
	exit(1);
}

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	const struct workload *w = wk->w;

	for (uint32_t i = wk->tid; i < w->nreq; i += wk->nthreads) {
		const struct wl_req *r = &w->req[i];
		struct kvp_manager *m = wk->m[i % 2];
		uint64_t id = wk->base + i;
		uint32_t cached = 0, left = r->output_len;
		struct kvp_copy cow;
		uint32_t ncow;
		int rc;

		rc = kvp_seq_create_cached(m, id, wl_hashes(w, r), r->nhashes,
					   r->input_len, &cached);
		if (rc == -ENOSPC) {
			wk->skipped++;
			continue;
		}
		if (rc)
			die("kvp_seq_create_cached", rc);
		rc = kvp_seq_commit(m, id, wl_hashes(w, r), r->nhashes);
		if (rc < 0)
			die("kvp_seq_commit", rc);
		while (left) {
			uint32_t k = left < STEP ? left : STEP;

			rc = kvp_seq_append(m, id, k, &cow, 1, &ncow);
			if (rc == -ENOSPC)
				break;
			if (rc)
				die("kvp_seq_append", rc);
			left -= k;
		}
		if ((rc = kvp_seq_free(m, id)))
			die("kvp_seq_free", rc);
		wk->served++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct kvp_pool_config pc = {
		.num_blocks = 20000, .block_tokens = BT, .device_id = -1};
	struct kvp_manager_config mc = {.flags = KVP_PREFIX_CACHE};
	struct workload w;
	struct kvp_pool *pool;
	struct worker wk[4];
	const char *csv_path = NULL;
	FILE *csv = NULL;
	double seconds, t0, warm_until;
	long rss_warm = -1, rss_start, rss_end = 0, rss_max = 0;
	unsigned long served = 0, skipped = 0;
	char err[512];
	int rc;
	unsigned round;

	if (argc < 3) {
		fprintf(stderr, "usage: soak <seconds> <trace.jsonl> "
				"[--blocks N] [--csv FILE]\n");
		return 2;
	}
	seconds = strtod(argv[1], NULL);
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--blocks"))
			pc.num_blocks =
				(uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--csv"))
			csv_path = argv[i + 1];
		else {
			fprintf(stderr, "soak: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (!(seconds > 0) || pc.num_blocks < 64) {
		fprintf(stderr,
			"soak: need seconds > 0 and at least 64 blocks\n");
		return 2;
	}
	memset(&w, 0, sizeof(w));
	if (wl_load_trace(&w, argv[2], err, sizeof(err))) {
		fprintf(stderr, "soak: %s\n", err);
		return 1;
	}
	if ((rc = wl_prepare(&w, BT, 2, 2)))
		die("hashing the trace", rc);
	if (csv_path && !(csv = fopen(csv_path, "w"))) {
		fprintf(stderr, "soak: %s: %s\n", csv_path, strerror(errno));
		return 1;
	}
	if (csv)
		fprintf(csv, "round,seconds,rss_kb\n");
	if ((rc = kvp_pool_create(&pc, &pool)))
		die("kvp_pool_create", rc);
	rss_start = rss_kb();
	t0 = now();
	warm_until = t0 + seconds * 0.2;
	for (round = 0; round == 0 || now() - t0 < seconds; round++) {
		struct kvp_manager *m[2];
		struct kvp_pool_stats ps;
		unsigned nthreads = 1 + round % 4;
		long rss;

		mc.pool = pool;
		for (int i = 0; i < 2; i++)
			if ((rc = kvp_manager_create(&mc, &m[i])))
				die("kvp_manager_create", rc);
		for (unsigned t = 0; t < nthreads; t++) {
			wk[t] = (struct worker){.tid = t,
						.nthreads = nthreads,
						.w = &w,
						.m = m,
						.base = (uint64_t)round << 32};
			if (pthread_create(&wk[t].th, NULL, worker_main,
					   &wk[t]))
				die("pthread_create", -EAGAIN);
		}
		for (unsigned t = 0; t < nthreads; t++) {
			pthread_join(wk[t].th, NULL);
			served += wk[t].served;
			skipped += wk[t].skipped;
		}
		for (int i = 0; i < 2; i++) {
			if (kvp_manager_check(m[i]))
				die("kvp_manager_check", -EFAULT);
			kvp_manager_destroy(m[i]);
		}
		kvp_pool_stats(pool, &ps);
		if (ps.free != ps.total || kvp_pool_check(pool)) {
			fprintf(stderr, "soak: round %u: free %llu of %llu\n",
				round, (unsigned long long)ps.free,
				(unsigned long long)ps.total);
			return 1;
		}
		rss = rss_kb();
		if (rss_warm < 0 && now() >= warm_until)
			rss_warm = rss;
		if (rss_warm >= 0 && rss > rss_max)
			rss_max = rss;
		rss_end = rss;
		if (csv)
			fprintf(csv, "%u,%.1f,%ld\n", round, now() - t0, rss);
		else
			printf("round %u: %u threads, %.1f s, RSS %ld KB\n",
			       round, nthreads, now() - t0, rss);
		fflush(stdout);
	}
	if (rss_warm < 0)
		rss_warm = rss_end;
	printf("soak: %u rounds in %.0f s (%lu requests served, %lu skipped "
	       "for space); RSS %ld KB at start, %ld KB after warm-up, %ld "
	       "KB at the end (%+.2f%%), %ld KB at most\n",
	       round, now() - t0, served, skipped, rss_start, rss_warm, rss_end,
	       100.0 * (double)(rss_end - rss_warm) / (double)rss_warm,
	       rss_max);
	if (csv)
		fclose(csv);
	kvp_pool_unref(pool);
	wl_free(&w);
	if ((double)rss_end > 1.01 * (double)rss_warm) {
		fprintf(stderr, "soak: FAIL: RSS grew more than 1%% after "
				"warm-up\n");
		return 1;
	}
	return 0;
}
