/* SPDX-License-Identifier: MIT */
/*
 * check_rss.c - memory comes back: after a burst of sequences is freed,
 * kvp_thread_flush() and the grace periods that follow it, the process's
 * resident memory returns to within 10% of its level before the burst.
 *
 * usage: check_rss [--seqs N] [--bursts B] [--manual]
 *
 * Each burst creates N sequences of 100 tokens (7 blocks of 16) in an
 * ID-only pool that holds them all, then frees them; the program reads
 * /proc/self/statm before the first burst, after each create phase and
 * after each free, and prints one CSV row per burst (RSS in MiB, phase
 * times in seconds).  The freed memory comes back through RCU callbacks
 * (a grace period for the freed structs, one for the reclaim of their
 * slabs: seqmem.c), so the check polls for up to CHECK_RSS_WAIT_MS.
 *
 * It fails if the RSS after a burst exceeds the level before the first
 * one by more than 10% plus CHECK_RSS_SLACK_KB, or if a later burst's
 * creates cost more than CHECK_RSS_SLOWER times the first burst's CPU
 * time: a guard against a pathology (structs that stop being reused),
 * not a benchmark.  It counts the thread's CPU time, not the wall clock,
 * because `make check` runs tests side by side on shared cores, where a
 * preempted burst took twice as long by the clock.  The wall-clock ratio
 * is printed (create_ratio), and checked by hand with --manual on a
 * quiet machine.
 *
 * `make check` runs 200,000 sequences per burst (about a second in all);
 * --manual runs 1,000,000.  Under sanitizers (their allocators keep freed
 * memory in quarantine, and shadow memory dwarfs ours) it skips (77).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

#include "sanitized.h"

#define TOKENS 100u
#define BLOCK_TOKENS 16u
#define BLOCKS_PER_SEQ ((TOKENS + BLOCK_TOKENS - 1) / BLOCK_TOKENS)
/*
 * What a burst may leave behind for good, beyond the 10%: the thread's
 * own caches (its 32 KiB lookup cache and stashes, up to 64 block-table
 * chunks), the sequence map at its smallest sizes, and the partly used
 * pages of the heap that malloc_trim cannot give back.  About 200 KiB
 * measured; 1 MiB allowed.
 */
#define CHECK_RSS_SLACK_KB 1024l
#define CHECK_RSS_WAIT_MS 3000
#define CHECK_RSS_SLOWER 3.0

static long rss_kb(void)
{
	long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static double clock_s(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

static void die(const char *what, uint64_t id, int err)
{
	fprintf(stderr, "check_rss: %s(%llu): %s\n", what,
		(unsigned long long)id, kvp_strerror(err));
	exit(1);
}

/* Waits (up to CHECK_RSS_WAIT_MS) for the RSS to fall to limit, then
 * until it stops falling (two readings 20 ms apart agree); returns the
 * last reading and the milliseconds waited for the limit. */
static long rss_settle(long limit, int *waited_ms)
{
	long rss = rss_kb(), prev = -1;

	for (*waited_ms = 0; rss > limit && *waited_ms < CHECK_RSS_WAIT_MS;
	     *waited_ms += 5) {
		usleep(5000);
		rss = rss_kb();
	}
	for (int i = 0; i < 10 && rss <= limit && rss != prev; i++) {
		prev = rss;
		usleep(20000);
		rss = rss_kb();
	}
	return rss;
}

struct burst {
	double create_s, create_cpu_s, free_s;
	long created_kb, after_kb;
	int waited_ms;
};

static void run_burst(struct kvp_manager *m, uint64_t first, uint32_t n,
		      long limit, struct burst *b)
{
	double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), t0 = now_s(), t1;
	int err;

	for (uint32_t i = 0; i < n; i++)
		if ((err = kvp_seq_create(m, first + i, TOKENS)))
			die("kvp_seq_create", first + i, err);
	t1 = now_s();
	b->create_s = t1 - t0;
	b->create_cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	b->created_kb = rss_kb();
	for (uint32_t i = 0; i < n; i++)
		if ((err = kvp_seq_free(m, first + i)))
			die("kvp_seq_free", first + i, err);
	b->free_s = now_s() - t1;
	kvp_thread_flush();
	b->after_kb = rss_settle(limit, &b->waited_ms);
}

/* An ID-only pool for n sequences of TOKENS and a manager over it; the
 * calling thread's caches are made (one sequence created and freed). */
static struct kvp_manager *setup(uint32_t n, struct kvp_pool **pool)
{
	struct kvp_pool_config pc;
	struct kvp_manager_config mc;
	struct kvp_manager *m;
	int err;

	memset(&pc, 0, sizeof(pc));
	pc.num_blocks = n * BLOCKS_PER_SEQ + 1024;
	pc.block_tokens = BLOCK_TOKENS;
	pc.device_id = -1;
	if ((err = kvp_pool_create(&pc, pool)))
		die("kvp_pool_create", 0, err);
	memset(&mc, 0, sizeof(mc));
	mc.pool = *pool;
	if ((err = kvp_manager_create(&mc, &m)))
		die("kvp_manager_create", 0, err);
	/* The thread's first use makes its caches: before the baseline. */
	if ((err = kvp_seq_create(m, 0, TOKENS)) || (err = kvp_seq_free(m, 0)))
		die("warm-up", 0, err);
	kvp_thread_flush();
	usleep(50000);
	return m;
}

int main(int argc, char **argv)
{
	uint32_t n = 200000, bursts = 3;
	struct kvp_pool *pool;
	struct kvp_manager *m;
	struct burst b[16];
	long base, limit;
	int failed = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seqs") && i + 1 < argc)
			n = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--bursts") && i + 1 < argc)
			bursts = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--manual"))
			n = 1000000;
		else {
			fprintf(stderr, "usage: check_rss [--seqs N] "
					"[--bursts B] [--manual]\n");
			return 2;
		}
	}
	if (KVP_SANITIZED) {
		printf("check_rss: skipped: sanitizers keep freed memory\n");
		return 77;
	}
	if (bursts < 1 || bursts > 16 || n < 1 ||
	    n > (1u << 31) / BLOCKS_PER_SEQ - 1024)
		return 2;
	m = setup(n, &pool);
	base = rss_kb();
	if (base <= 0) {
		printf("check_rss: skipped: no /proc/self/statm\n");
		return 77;
	}
	limit = base + base / 10 + CHECK_RSS_SLACK_KB;
	printf("check_rss: %u sequences of %u tokens per burst; RSS before "
	       "%.1f MiB, limit %.1f MiB\n",
	       n, TOKENS, base / 1024.0, limit / 1024.0);
	printf("burst,create_s,create_cpu_s,free_s,rss_created_mib,"
	       "rss_after_mib,waited_ms,create_ratio\n");
	for (uint32_t k = 0; k < bursts; k++) {
		run_burst(m, 1 + (uint64_t)k * n, n, limit, &b[k]);
		printf("%u,%.3f,%.3f,%.3f,%.1f,%.1f,%d,%.2f\n", k + 1,
		       b[k].create_s, b[k].create_cpu_s, b[k].free_s, b[k].created_kb / 1024.0,
		       b[k].after_kb / 1024.0, b[k].waited_ms,
		       b[0].create_s / b[k].create_s);
		if (b[k].after_kb > limit) {
			fprintf(stderr,
				"check_rss: burst %u left %.1f MiB resident "
				"(before: %.1f MiB, limit %.1f MiB)\n",
				k + 1, b[k].after_kb / 1024.0, base / 1024.0,
				limit / 1024.0);
			failed = 1;
		}
		if (k && b[k].create_cpu_s > CHECK_RSS_SLOWER *
						     b[0].create_cpu_s) {
			fprintf(stderr,
				"check_rss: burst %u's creates took %.2fx the "
				"first's CPU time (limit %.1fx)\n",
				k + 1, b[k].create_cpu_s / b[0].create_cpu_s,
				CHECK_RSS_SLOWER);
			failed = 1;
		}
	}
	kvp_manager_destroy(m);
	kvp_pool_unref(pool);
	return failed;
}
