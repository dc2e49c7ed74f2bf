/* SPDX-License-Identifier: MIT */
/*
 * prefix_cache.c - prefix caching as a scheduler uses it: two requests of
 * one tenant share a system prompt, a third tenant's salt keeps it apart,
 * and a small pool evicts the least recently freed cached blocks.  The
 * events a cluster router would receive are printed.
 *
 *   cc prefix_cache.c $(pkg-config --cflags --libs kvpool) -o prefix_cache
 *
 * Exits 0 if every number is the one prefix caching must give.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvpool.h>

#define BT 16u	      /* tokens per block */
#define SYSTEM 64u    /* system prompt: 4 full blocks */
#define QUESTION 20u  /* per-request tail */
#define MAXTOK (SYSTEM + QUESTION)

#define CHECK(call)                                                          \
	do {                                                                 \
		int err_ = (call);                                           \
		if (err_ < 0) {                                              \
			fprintf(stderr, "%s: %s\n", #call,                   \
				kvp_strerror(err_));                         \
			exit(1);                                             \
		}                                                            \
	} while (0)

#define EXPECT(cond)                                                         \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "prefix_cache: expected %s\n",       \
				#cond);                                      \
			exit(1);                                             \
		}                                                            \
	} while (0)

static unsigned stored, removed;

/* What a KV-event publisher would forward to a router. */
static void on_event(const struct kvp_event *ev, void *arg)
{
	static const char *const names[] = {"stored", "removed", "cleared"};

	(void)arg;
	printf("  event %-7s %u block(s)", names[ev->type], ev->nhashes);
	if (ev->type == KVP_EVENT_STORED) {
		printf(", %u tokens, parent %s", ev->num_tokens,
		       ev->parent ? "set" : "root");
		stored += ev->nhashes;
	} else if (ev->type == KVP_EVENT_REMOVED) {
		removed += ev->nhashes;
	}
	printf("\n");
}

/* A prompt: the shared system prompt, then a request-specific tail. */
static void prompt(uint32_t *tok, uint32_t request)
{
	for (uint32_t i = 0; i < SYSTEM; i++)
		tok[i] = 1000 + i;
	for (uint32_t i = SYSTEM; i < MAXTOK; i++)
		tok[i] = 50000 + request * 100 + i;
}

/*
 * Admits one request: hashes its full blocks (tenant salt at the root),
 * reuses what is cached, "computes" the rest and commits the full blocks.
 * Returns the cached tokens.
 */
static uint32_t run_request(struct kvp_manager *m, uint64_t id,
			    const char *tenant, uint32_t request)
{
	struct kvp_hash_keys keys = {.salt = tenant,
				     .salt_len = strlen(tenant)};
	struct kvp_hash h[MAXTOK / BT];
	uint32_t tok[MAXTOK], cached;
	int nh;

	prompt(tok, request);
	nh = kvp_hash_blocks(KVP_HASH_SHA256, NULL, &keys, tok, MAXTOK, BT, h);
	CHECK(nh);
	CHECK(kvp_seq_create_cached(m, id, h, (uint32_t)nh, MAXTOK, &cached));
	/* ... the engine computes tokens [cached, MAXTOK) here ... */
	CHECK(kvp_seq_commit(m, id, h, (uint32_t)nh));
	printf("request %" PRIu64 " (%s): %u of %u prompt tokens cached\n", id,
	       tenant, cached, MAXTOK);
	return cached;
}

int main(void)
{
	/* Small on purpose: 14 blocks, so the fifth request must evict. */
	struct kvp_pool_config pc = {.num_blocks = 14, .block_tokens = BT,
				     .device_id = -1,
				     .flags = KVP_POOL_NOCACHE};
	struct kvp_pool *pool;
	struct kvp_manager *m;
	struct kvp_pool_stats ps;
	struct kvp_stats st;

	CHECK(kvp_pool_create(&pc, &pool));
	struct kvp_manager_config mc = {.pool = pool,
					.flags = KVP_PREFIX_CACHE};
	CHECK(kvp_manager_create(&mc, &m));
	kvp_pool_unref(pool);
	CHECK(kvp_manager_set_event_cb(m, on_event, NULL));

	/* Tenant A, first request: nothing cached; 5 full blocks stored. */
	EXPECT(run_request(m, 1, "tenant-a", 1) == 0);
	/* Same tenant, same system prompt: its 4 blocks are shared. */
	EXPECT(run_request(m, 2, "tenant-a", 2) == SYSTEM);
	/* Another tenant's salt: no sharing, even for identical tokens. */
	EXPECT(run_request(m, 3, "tenant-b", 1) == 0);

	CHECK(kvp_seq_free(m, 1));
	CHECK(kvp_seq_free(m, 2));
	CHECK(kvp_seq_free(m, 3));
	kvp_pool_stats(pool, &ps);
	printf("after the frees: %" PRIu64 " of %" PRIu64
	       " blocks free, %" PRIu64 " of them cached (evictable)\n",
	       ps.free, ps.total, ps.evictable);
	/* 5 + 1 + 5 full blocks stay cached; the 3 partial ones are free. */
	EXPECT(ps.free == ps.total && ps.evictable == 11);

	/* Tenant A again, twice: the system prompt is still cached.  Request
	 * 4 takes 2 of the 3 never-cached blocks; request 5 takes the last
	 * one and evicts the least recently freed cached block: request 1's
	 * own question block (freed first; a chain's tail goes first). */
	EXPECT(run_request(m, 4, "tenant-a", 3) == SYSTEM);
	EXPECT(run_request(m, 5, "tenant-a", 4) == SYSTEM);
	kvp_manager_stats(m, &st);
	kvp_pool_stats(pool, &ps);
	printf("hit rate %.1f%% (%" PRIu64 " of %" PRIu64
	       " tokens), %" PRIu64 " cached block(s) evicted\n",
	       100.0 * st.prefix_hit_rate, st.prefix_hits, st.prefix_queries,
	       ps.cache_evictions);
	EXPECT(ps.cache_evictions == 1 && removed == 1);
	EXPECT(st.prefix_hits == 3 * SYSTEM);
	EXPECT(run_request(m, 6, "tenant-a", 1) == SYSTEM); /* b4 is gone */

	/* A weight update: every cached block must go. */
	EXPECT(kvp_prefix_reset(m) == -EBUSY); /* requests 4-6 hold some */
	CHECK(kvp_seq_free(m, 4));
	CHECK(kvp_seq_free(m, 5));
	CHECK(kvp_seq_free(m, 6));
	CHECK(kvp_prefix_reset(m));
	kvp_pool_stats(pool, &ps);
	EXPECT(ps.evictable == 0 && ps.free == ps.total);
	CHECK(kvp_manager_check(m));
	CHECK(kvp_manager_dump(m, stdout));
	kvp_manager_destroy(m);
	printf("prefix_cache: ok (%u blocks stored, %u removed)\n", stored,
	       removed);
	return 0;
}
