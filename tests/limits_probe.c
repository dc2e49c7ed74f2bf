/* SPDX-License-Identifier: MIT */
/*
 * limits_probe.c - pools and managers whose sizes cannot be allocated,
 * under an address-space limit (tests/test_limits.sh runs this under
 * `ulimit -v`): each create returns -ENOMEM, writes nothing to *out, and
 * leaks nothing: after 10 failed creates (what the first ones set up
 * once may stay), 50 more leave the heap in use and the address space
 * exactly as they were; a manager that fits then succeeds, and after the
 * pool's last reference goes no large allocation is left.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvpool.h"

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "limits_probe: " __VA_ARGS__);         \
			fprintf(stderr, "\n");                                 \
			failures++;                                            \
		}                                                              \
	} while (0)

/* Heap bytes in use plus the address space mapped (statm's size). */
static long long footprint(void)
{
	struct mallinfo2 mi = mallinfo2();
	long long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f || fscanf(f, "%lld", &pages) != 1)
		abort();
	fclose(f);
	return (long long)(mi.uordblks + mi.hblkhd) + pages * 4096;
}

static void pool_enomem(const char *what, const struct kvp_pool_config *c)
{
	struct kvp_pool *p = (struct kvp_pool *)&failures;
	long long before;
	int rc;

	/* The first calls may set up what later calls share (once). */
	for (int i = 0; i < 10; i++)
		(void)kvp_pool_create(c, &p);
	p = (struct kvp_pool *)&failures;
	(void)footprint(); /* its own first fopen() */
	before = footprint();
	for (int i = 0; i < 50; i++) {
		rc = kvp_pool_create(c, &p);
		CHECK(rc == -ENOMEM, "%s: kvp_pool_create = %d (want -ENOMEM)",
		      what, rc);
		CHECK(p == (struct kvp_pool *)&failures,
		      "%s: a failed kvp_pool_create wrote *out", what);
		if (rc == 0)
			kvp_pool_unref(p);
	}
	CHECK(footprint() == before,
	      "%s: 50 failed creates changed the footprint by %lld bytes", what,
	      footprint() - before);
}

int main(int argc, char **argv)
{
	uint32_t big =
		argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 1u << 22;
	struct kvp_layout l = {64, 8, 128, KVP_F16};
	struct kvp_pool_config c = {.num_blocks = KVP_MAX_BLOCKS - 1,
				    .block_tokens = 16,
				    .device_id = -1};
	struct kvp_manager_config mc = {.flags = KVP_PREFIX_CACHE};
	struct kvp_manager *m = (struct kvp_manager *)&failures;
	struct kvp_pool *pool;
	struct mallinfo2 start = mallinfo2();
	long long before;
	int rc;

	pool_enomem("2^31 - 1 ID-only blocks", &c);
	c.num_blocks = 1u << 16;
	c.layout = &l; /* 64 layers x 8 heads x 128 x f16 x 16 tokens x 2 */
	pool_enomem("65,536 blocks of 4 MB", &c);

	/* A pool that fits, and a prefix-caching manager over it that does
	 * not (its table and the pool's per-block cache state). */
	c.layout = NULL;
	c.num_blocks = big;
	rc = kvp_pool_create(&c, &pool);
	CHECK(rc == 0, "a pool of %u blocks: %d", big, rc);
	if (rc == 0) {
		mc.pool = pool;
		for (int i = 0; i < 10; i++)
			(void)kvp_manager_create(&mc, &m);
		m = (struct kvp_manager *)&failures;
		before = footprint();
		for (int i = 0; i < 50; i++) {
			rc = kvp_manager_create(&mc, &m);
			CHECK(rc == -ENOMEM,
			      "kvp_manager_create (prefix cache, %u blocks) = "
			      "%d (want -ENOMEM)",
			      big, rc);
			if (rc == 0)
				kvp_manager_destroy(m);
			CHECK(m == (struct kvp_manager *)&failures || rc == 0,
			      "a failed kvp_manager_create wrote *out");
		}
		CHECK(footprint() == before,
		      "50 failed manager creates changed the footprint by "
		      "%lld bytes",
		      footprint() - before);
		/* Without the prefix cache it fits. */
		mc.flags = 0;
		rc = kvp_manager_create(&mc, &m);
		CHECK(rc == 0, "a manager without prefix cache: %d", rc);
		if (rc == 0)
			kvp_manager_destroy(m);
		CHECK(kvp_pool_check(pool) == 0, "kvp_pool_check failed");
		kvp_pool_unref(pool);
		CHECK(mallinfo2().hblkhd <= start.hblkhd,
		      "%zu bytes of large allocations left after the pool went",
		      mallinfo2().hblkhd - start.hblkhd);
	}
	if (failures)
		return 1;
	printf("limits_probe: every create too large for the limit returned "
	       "-ENOMEM and left the footprint as it was\n");
	return 0;
}
