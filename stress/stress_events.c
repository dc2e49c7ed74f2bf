/* SPDX-License-Identifier: MIT */
/*
 * stress_events.c - concurrent event producers through libkvpool-events.
 *
 * Usage: stress_events [threads [seconds]]  (defaults 3 and 2)
 *
 * `threads` scheduler threads share one prefix-caching manager on a small
 * pool (so allocations evict cached blocks: REMOVED events from every
 * thread), creating sequences over prompts that share prefixes and
 * committing them with their tokens (STORED); one thread now and then
 * resets the cache (CLEARED).  Workers flush the publisher every 64
 * requests, so that a starved publisher thread never makes them drop.  The manager's callback is the publisher's.
 * A subscriber thread (SUB over 127.0.0.1, no high-water mark) decodes
 * every batch with msgpack-c and checks:
 *   - batch seqs are 0, 1, 2, ... with no gap;
 *   - per hash, events alternate: STORED only when absent, REMOVED only
 *     when present (CLEARED empties the set);
 *   - each STORED carries block_size x blocks token ids, and its hashes
 *     are the sha256_cbor chain of those tokens from its parent;
 *   - at the end nothing was dropped, every event arrived, and the set the
 *     events build equals the manager's cached blocks.
 */
#define STRESS_PROG "stress_events"
#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "kvpool-events.h"
#include "stress_common.h"

#define BT 4u
#define PROMPT_BLOCKS 12u
#define NPROMPTS 64u
#define SET_SLOTS (1u << 16)
#include "events_set.h" /* after SET_SLOTS */

static struct kvp_manager *mgr;
static struct kvp_pub *pub;
static _Atomic bool stop_workers;
static _Atomic uint64_t resets;
static struct kvp_hash root;

/* Prompt p's tokens: prompts share a prefix with p / 4 and p / 16. */
static void prompt_tokens(uint32_t p, uint32_t *tok)
{
	for (uint32_t i = 0; i < PROMPT_BLOCKS * BT; i++) {
		uint32_t block = i / BT;
		uint32_t owner = block < 4 ? p / 16 : block < 8 ? p / 4 : p;

		tok[i] = owner * 1000003u + i;
	}
}

static void *worker(void *arg)
{
	uint64_t rs = (uint64_t)(uintptr_t)arg * 7919 + 1;
	uint32_t tok[PROMPT_BLOCKS * BT];
	struct kvp_hash h[PROMPT_BLOCKS];
	uint64_t id = (uint64_t)(uintptr_t)arg << 40, iters = 0;
	static const char *const keys[] = {"sql-lora"};

	while (!atomic_load_explicit(&stop_workers, memory_order_relaxed)) {
		uint32_t p = (uint32_t)(rnd(&rs) % NPROMPTS), cached;
		struct kvp_commit_info info = {0};
		int rc;

		prompt_tokens(p, tok);
		if (kvp_hash_blocks(KVP_HASH_SHA256_CBOR, &root, NULL, tok,
				    PROMPT_BLOCKS * BT, BT,
				    h) != PROMPT_BLOCKS)
			fail("kvp_hash_blocks\n");
		rc = kvp_seq_create_cached(mgr, ++id, h, PROMPT_BLOCKS,
					   PROMPT_BLOCKS * BT, &cached);
		if (rc == -ENOSPC)
			continue;
		if (rc)
			fail("create_cached: %s\n", kvp_strerror(rc));
		info.tokens = tok;
		info.ntokens = PROMPT_BLOCKS * BT;
		info.lora_id = -1;
		if (p % 2) { /* the LoRA name rides along, unhashed here */
			info.lora_name = "sql-lora";
			info.lora_id = 1;
			info.extra_keys = keys;
			info.nextra_keys = 1;
		}
		rc = kvp_seq_commit_ex(mgr, id, h, PROMPT_BLOCKS, &info);
		if (rc < 0)
			fail("commit_ex: %s\n", kvp_strerror(rc));
		if ((rc = kvp_seq_free(mgr, id)))
			fail("free: %s\n", kvp_strerror(rc));
		if ((uintptr_t)arg == 0 && rnd(&rs) % 500 == 0 &&
		    kvp_prefix_reset(mgr) == 0)
			atomic_fetch_add(&resets, 1);
		/* A loaded machine may starve the publisher's thread: keep
		 * the backlog far below the buffers, so that nothing is
		 * dropped and every event can be checked. */
		if (++iters % 64 == 0 && kvp_pub_flush(pub, 60000) != 0)
			fail("kvp_pub_flush timed out\n");
	}
	kvp_thread_flush();
	return NULL;
}

/* ------------------------------------------------------------ checker */

static uint64_t got_batches, got_events, got_stored, got_removed, got_clear;

static unsigned long long dropped_now(void)
{
	struct kvp_pub_stats st;

	kvp_pub_stats(pub, &st);
	return (unsigned long long)st.dropped;
}

static void check_stored(const msgpack_object *e, uint32_t n)
{
	const msgpack_object *hs = arr(&e[1], 0);
	uint32_t nh = e[1].via.array.size, ntok;
	const msgpack_object *toks = arr(&e[3], 0);
	struct kvp_hash prev, cur;
	uint32_t tok[BT];

	if (e[4].via.u64 != BT || e[6].type != MSGPACK_OBJECT_STR ||
	    e[6].via.str.size != 3 || memcmp(e[6].via.str.ptr, "CPU", 3))
		fail("BlockStored: block_size or medium\n");
	ntok = e[3].via.array.size;
	if (ntok != nh * BT)
		fail("BlockStored: %u tokens for %u blocks\n", ntok, nh);
	if (e[2].type == MSGPACK_OBJECT_NIL)
		prev = root;
	else
		memcpy(prev.b, bin32(&e[2]), 32);
	for (uint32_t i = 0; i < nh; i++) {
		uint8_t *u;

		for (uint32_t k = 0; k < BT; k++)
			tok[k] = (uint32_t)toks[i * BT + k].via.u64;
		kvp_hash_cbor_block(&prev, tok, BT, NULL, 0, &cur);
		if (memcmp(cur.b, bin32(&hs[i]), 32) != 0)
			fail("BlockStored: hash %u is not sha256_cbor of its "
			     "tokens and parent\n", i);
		prev = cur;
		u = set_find(cur.b, true);
		if (*u == 1)
			fail("STORED of a hash already stored (%llu events "
			     "dropped)\n", dropped_now());
		*u = 1;
		set_n++;
	}
	if (n == 9 && e[8].via.array.size != nh)
		fail("BlockStored: extra_keys not one per block\n");
	got_stored += nh;
}

static void check_batch(const char *data, size_t len)
{
	msgpack_unpacked u;
	size_t off = 0;
	const msgpack_object *b, *evs;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, data, len, &off) != MSGPACK_UNPACK_SUCCESS)
		fail("undecodable batch\n");
	b = arr(&u.data, 3);
	if (b[0].type != MSGPACK_OBJECT_FLOAT64)
		fail("ts is not a float64\n");
	evs = arr(&b[1], 0);
	for (uint32_t i = 0; i < b[1].via.array.size; i++) {
		const msgpack_object *e = arr(&evs[i], 1);
		uint32_t n = evs[i].via.array.size;
		const char *tag = e[0].via.str.ptr;
		uint32_t tl = e[0].via.str.size;

		got_events++;
		if (tl == 11 && !memcmp(tag, "BlockStored", 11) && n >= 8) {
			check_stored(e, n);
		} else if (tl == 12 && !memcmp(tag, "BlockRemoved", 12) &&
			   n == 3) {
			const msgpack_object *hs = arr(&e[1], 0);

			for (uint32_t k = 0; k < e[1].via.array.size; k++) {
				uint8_t *p = set_find(bin32(&hs[k]), false);

				if (!p || *p != 1)
					fail("REMOVED of a hash not stored "
					     "(%llu events dropped)\n",
					     dropped_now());
				*p = 2;
				set_n--;
				got_removed++;
			}
		} else if (tl == 16 && !memcmp(tag, "AllBlocksCleared", 16)) {
			memset(set_used, 0, sizeof(set_used));
			set_n = 0;
			got_clear++;
		} else {
			fail("unknown event\n");
		}
	}
	msgpack_unpacked_destroy(&u);
}

static _Atomic uint64_t sub_batches; /* got_batches, for main */
static _Atomic bool stop_sub;

static void *subscriber(void *sub)
{
	static char payload[1 << 22];

	for (;;) {
		char topic[256];
		unsigned char seqb[8];
		uint64_t seq = 0;
		int n;

		n = zmq_recv(sub, topic, sizeof(topic), 0);
		if (n < 0) {
			if (errno == EAGAIN &&
			    !atomic_load(&stop_sub))
				continue;
			return NULL;
		}
		if (zmq_recv(sub, seqb, 8, 0) != 8)
			fail("seq frame\n");
		n = zmq_recv(sub, payload, sizeof(payload), 0);
		if (n < 0 || n > (int)sizeof(payload))
			fail("payload frame\n");
		for (int i = 0; i < 8; i++)
			seq = seq << 8 | seqb[i];
		if (seq != got_batches)
			fail("batch seq %llu, expected %llu\n",
			     (unsigned long long)seq,
			     (unsigned long long)got_batches);
		if (strncmp(topic, "kv@stress@model", 15) != 0)
			fail("topic\n");
		check_batch(payload, (size_t)n);
		got_batches++;
		atomic_store(&sub_batches, got_batches);
	}
}

int main(int argc, char **argv)
{
	unsigned threads = argc > 1 ? (unsigned)atoi(argv[1]) : 3;
	unsigned seconds = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
	struct kvp_pool_config pc = {.num_blocks = 96, .block_tokens = BT,
				     .device_id = -1};
	struct kvp_manager_config mc = {.policy = KVP_EVICT_LRU,
					 .flags = KVP_PREFIX_CACHE};
	struct kvp_pub_config cfg = {0};
	struct kvp_pub_stats st;
	struct kvp_stats ms;
	struct kvp_pool *pool;
	pthread_t tid[64], stid;
	char ep[256];
	void *ctx, *sub;
	int rc, zero = 0;
	struct timespec ts = {0, 0};

	if (threads < 1 || threads > 64)
		fail("threads: 1..64\n");
	kvp_hash_cbor_seed_root("0", &root);
	if ((rc = kvp_pool_create(&pc, &pool)))
		fail("pool: %s\n", kvp_strerror(rc));
	mc.pool = pool;
	if ((rc = kvp_manager_create(&mc, &mgr)))
		fail("manager: %s\n", kvp_strerror(rc));
	kvp_pool_unref(pool);
	cfg.endpoint = "tcp://127.0.0.1:*";
	cfg.pod_id = "stress";
	cfg.model_name = "model";
	cfg.sndhwm = -1;
	cfg.thread_buffer_kib = 16384;
	cfg.max_batch_events = 7;
	if ((rc = kvp_pub_create(&cfg, &pub)))
		fail("kvp_pub_create: %s\n", kvp_strerror(rc));
	if (kvp_pub_endpoint(pub, 0, ep, sizeof(ep)))
		fail("endpoint\n");
	kvp_manager_set_event_cb(mgr, kvp_pub_event_cb, pub);
	kvp_manager_set_event_medium(mgr, "CPU");

	ctx = zmq_ctx_new();
	sub = zmq_socket(ctx, ZMQ_SUB);
	zmq_setsockopt(sub, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
	{
		int tmo = 100;

		zmq_setsockopt(sub, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	}
	if (zmq_connect(sub, ep))
		fail("connect %s\n", ep);
	/* A slow joiner misses what is sent before it is connected. */
	ts.tv_nsec = 300 * 1000 * 1000;
	nanosleep(&ts, NULL);
	pthread_create(&stid, NULL, subscriber, sub);

	for (unsigned t = 0; t < threads; t++)
		pthread_create(&tid[t], NULL, worker, (void *)(uintptr_t)t);
	ts.tv_sec = seconds;
	ts.tv_nsec = 0;
	nanosleep(&ts, NULL);
	atomic_store(&stop_workers, true);
	for (unsigned t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
	if (kvp_pub_flush(pub, 30000))
		fail("flush timed out\n");
	kvp_pub_stats(pub, &st);
	for (int i = 0; i < 3000 && atomic_load(&sub_batches) < st.batches;
	     i++) {
		ts.tv_sec = 0;
		ts.tv_nsec = 10 * 1000 * 1000;
		nanosleep(&ts, NULL);
	}
	atomic_store(&stop_sub, true);
	pthread_join(stid, NULL);
	kvp_manager_stats(mgr, &ms);
	if (st.dropped)
		fail("%llu events dropped\n", (unsigned long long)st.dropped);
	if (got_batches != st.batches || got_events != st.events)
		fail("received %llu batches, %llu events; sent %llu, %llu\n",
		     (unsigned long long)got_batches,
		     (unsigned long long)got_events,
		     (unsigned long long)st.batches,
		     (unsigned long long)st.events);
	if (set_n != ms.prefix_cached_blocks)
		fail("events rebuild %llu cached blocks, the manager has "
		     "%llu\n",
		     (unsigned long long)set_n,
		     (unsigned long long)ms.prefix_cached_blocks);
	if (!got_stored || !got_removed)
		fail("no eviction happened (stored %llu, removed %llu)\n",
		     (unsigned long long)got_stored,
		     (unsigned long long)got_removed);
	printf(STRESS_PROG ": %u threads, %u s: %llu batches, %llu events "
	       "(%llu blocks stored, %llu removed, %llu resets), order and "
	       "final set (%llu blocks) agree\n",
	       threads, seconds, (unsigned long long)got_batches,
	       (unsigned long long)got_events, (unsigned long long)got_stored,
	       (unsigned long long)got_removed, (unsigned long long)got_clear,
	       (unsigned long long)set_n);
	kvp_manager_set_event_cb(mgr, NULL, NULL);
	kvp_manager_destroy(mgr);
	kvp_pub_destroy(pub);
	zmq_close(sub);
	zmq_ctx_term(ctx);
	return 0;
}
