/* SPDX-License-Identifier: MIT */
/*
 * stress_replay.c - the events publisher's replay socket under hostile
 * clients, beside an honest one.
 *
 * Usage: stress_replay [seconds] [--hostile N] [--flood REQ/S]
 *                      [--rate EVENTS/S] [--prefill EVENTS]
 *                      [--ring-bytes BYTES] [--burst MB]
 *                      [--sub-bytes BYTES] [--pub-bytes BYTES]
 *        (defaults: 2 100 1000 500 2000 16 MiB 200 (16 under a sanitizer)
 *         4 MiB 16 MiB)
 *
 * The node (this process) runs a prefix-caching manager whose events go
 * to a publisher with a replay socket on 127.0.0.1, up to 64 events a
 * batch.
 * It first publishes --prefill events; an honest client then asks for a
 * replay from seq 0, which must arrive complete, in order, with its end
 * marker.  A second process then attacks both sockets until the node
 * kills it: a subscriber that never reads (RCVHWM 1, a 4 KiB receive
 * buffer); N replay clients that ask for a replay from 0 every half
 * second and never read; a flood of --flood requests per second from 16
 * clients that never read either; frames of 4 MiB, a request of 1,000
 * frames, and raw garbage over TCP.  Meanwhile the node's producer
 * commits --rate one-block prompts per second for `seconds` (16 token
 * blocks: STORED events, and REMOVED ones as the small pool evicts), then
 * a burst of --burst MB of large events (prompts of 256 blocks with their
 * 4,096 token ids, about 38 KB of batches each), and the honest client
 * follows the PUB socket (losing one batch in 100 on purpose) and fills
 * every gap by replay.  Checks:
 *   - no event dropped by the producer;
 *   - the honest client's set of blocks equals the manager's cached set;
 *   - a client that reads nothing for 3.5 s gets a cut replay: a prefix,
 *     then the end marker, counted in the stats;
 *   - the subscriber that never reads overflowed its bound, counted;
 *   - with the N idle clients holding what they may, the honest client
 *     asks for a replay of the whole ring and gets it, complete, in one
 *     replay;
 *   - kvp_pub_destroy, called while the attack goes on, returns within
 *     1 s;
 *   - the node's RSS (with the honest and slow clients in it) grew by at
 *     most the documented byte bounds (ring_bytes, pub_bytes, the replay
 *     clients' 32 MiB, the producer's buffer) plus 64 MB from before the
 *     first client connected (not checked under a sanitizer, whose shadow
 *     memory is not the node's).
 * Every loop is bounded in count and time.
 */
#define STRESS_PROG "stress_replay"
#include <arpa/inet.h>
#include <errno.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <zmq.h>

#include "kvpool-events.h"
#include "stress_common.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define BT 16u
#define SET_SLOTS (1u << 17)
#include "events_set.h" /* after SET_SLOTS */

#define BIG_BLOCKS 256u /* blocks of a burst prompt */
#define BIG_PROMPTS 32u /* burst prompts, cycled: 8,192 blocks, twice the
			   pool, so LRU has evicted a prompt when it comes
			   back */
#define REPLAY_TOTAL (32ull << 20) /* all replay clients (kvpool-events.h) */

static struct opts {
	unsigned seconds, hostile, flood, rate, prefill, burst;
	uint64_t ring_bytes, sub_bytes, pub_bytes;
} o = {2, 100, 1000, 500, 2000, SANITIZED ? 16 : 200, 16u << 20, 4u << 20,
       16u << 20};

static struct kvp_manager *mgr;
static struct kvp_pub *pub;
/* The endpoints, as the node hands them to the attacker. */
static struct eps {
	char rep[256], pub[256];
} ep;
#define ep_pub ep.pub
#define ep_rep ep.rep

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	nanosleep(&ts, NULL);
}

static uint64_t rss_bytes(void)
{
	unsigned long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* ------------------------------------------------------------ producer */

static uint64_t next_prompt = 1;

/* One new one-block prompt committed and freed: a STORED event (and a
 * REMOVED one when the pool evicts). */
static void commit_one(void)
{
	uint32_t tok[BT];
	struct kvp_hash h;
	struct kvp_commit_info info = {.lora_id = -1};
	uint64_t id = next_prompt++;
	uint32_t cached;
	int rc;

	for (uint32_t i = 0; i < BT; i++)
		tok[i] = (uint32_t)(id * 131 + i);
	if (kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL, NULL, tok, BT, BT,
			    &h) != 1)
		fail("kvp_hash_blocks\n");
	rc = kvp_seq_create_cached(mgr, id, &h, 1, BT, &cached);
	if (rc)
		fail("create_cached: %s\n", kvp_strerror(rc));
	info.tokens = tok;
	info.ntokens = BT;
	if ((rc = kvp_seq_commit_ex(mgr, id, &h, 1, &info)) < 0)
		fail("commit_ex: %s\n", kvp_strerror(rc));
	if ((rc = kvp_seq_free(mgr, id)))
		fail("free: %s\n", kvp_strerror(rc));
}

static struct kvp_hash big_h[BIG_PROMPTS][BIG_BLOCKS];

static void big_tokens(uint32_t k, uint32_t *tok)
{
	/* Over 65,535: five bytes each in msgpack. */
	for (uint32_t i = 0; i < BIG_BLOCKS * BT; i++)
		tok[i] = 0x10000000u + k * BIG_BLOCKS * BT + i;
}

static void big_init(void)
{
	static uint32_t tok[BIG_BLOCKS * BT];

	for (uint32_t k = 0; k < BIG_PROMPTS; k++) {
		big_tokens(k, tok);
		if (kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL, NULL, tok,
				    BIG_BLOCKS * BT, BT,
				    big_h[k]) != (int)BIG_BLOCKS)
			fail("kvp_hash_blocks (big)\n");
	}
}

/* Burst prompt k (mod BIG_PROMPTS) committed and freed: one STORED event
 * of 256 blocks with their token ids, and REMOVED ones as it evicts. */
static void commit_big(uint32_t k)
{
	static uint32_t tok[BIG_BLOCKS * BT];
	struct kvp_commit_info info = {.lora_id = -1};
	uint64_t id = next_prompt++;
	uint32_t cached;
	int rc;

	k %= BIG_PROMPTS;
	big_tokens(k, tok);
	rc = kvp_seq_create_cached(mgr, id, big_h[k], BIG_BLOCKS,
				   BIG_BLOCKS * BT, &cached);
	if (rc)
		fail("create_cached (big): %s\n", kvp_strerror(rc));
	info.tokens = tok;
	info.ntokens = BIG_BLOCKS * BT;
	if ((rc = kvp_seq_commit_ex(mgr, id, big_h[k], BIG_BLOCKS, &info)) < 0)
		fail("commit_ex (big): %s\n", kvp_strerror(rc));
	if ((rc = kvp_seq_free(mgr, id)))
		fail("free: %s\n", kvp_strerror(rc));
}

/* ------------------------------------------------------------ honest */

static void apply_hashes(const msgpack_object *hs, bool stored)
{
	for (uint32_t k = 0; k < hs->via.array.size; k++) {
		const msgpack_object *x = &hs->via.array.ptr[k];
		uint8_t *u;

		u = set_find(bin32(x), stored);
		if (stored ? (*u == 1) : (!u || *u != 1))
			fail("%s out of order\n", stored ? "STORED" : "REMOVED");
		*u = stored ? 1 : 2;
		set_n += stored ? 1 : -1;
	}
}

static void apply_batch(const char *data, size_t len)
{
	msgpack_unpacked u;
	size_t off = 0;
	const msgpack_object *b, *evs;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, data, len, &off) != MSGPACK_UNPACK_SUCCESS)
		fail("undecodable batch\n");
	b = arr(&u.data, 3);
	evs = arr(&b[1], 0);
	for (uint32_t i = 0; i < b[1].via.array.size; i++) {
		const msgpack_object *e = arr(&evs[i], 1);
		uint32_t tl = e[0].via.str.size;

		if (tl == 11 && !memcmp(e[0].via.str.ptr, "BlockStored", 11))
			apply_hashes(&e[1], true);
		else if (tl == 12 &&
			 !memcmp(e[0].via.str.ptr, "BlockRemoved", 12))
			apply_hashes(&e[1], false);
		else
			fail("unexpected event\n");
	}
	msgpack_unpacked_destroy(&u);
}

static uint64_t be64(const unsigned char *b)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | b[i];
	return v;
}

static char payload[1 << 20];
static uint64_t applied;	  /* batches [0, applied) applied */
static _Atomic uint64_t honest_at; /* applied, for the burst's pacing */
static uint64_t replays, replay_batches;

/*
 * Asks for a replay from `applied`; applies what comes, which must
 * follow on without a gap and end with the end marker.  Returns the
 * batches received.
 */
static uint64_t replay_from(void *req)
{
	unsigned char seqb[8];
	uint64_t got = 0;
	double end = now_s() + 30;

	for (int i = 0; i < 8; i++)
		seqb[i] = (unsigned char)(applied >> (56 - 8 * i));
	/* A DEALER (REQ would take one message of the answer): vLLM's
	 * frames [empty, seq] each way. */
	if (zmq_send(req, "", 0, ZMQ_SNDMORE) != 0 ||
	    zmq_send(req, seqb, 8, 0) != 8)
		fail("replay request: %s\n", zmq_strerror(errno));
	while (now_s() < end) {
		int n;

		if (zmq_recv(req, seqb, 8, 0) != 0 ||
		    zmq_recv(req, seqb, 8, 0) != 8)
			fail("replay: no seq frame after %llu: %s\n", (unsigned long long)got, zmq_strerror(errno));
		n = zmq_recv(req, payload, sizeof(payload), 0);
		if (n < 0 || n > (int)sizeof(payload))
			fail("replay: payload frame\n");
		if (be64(seqb) == UINT64_MAX) {
			replays++;
			replay_batches += got;
			return got;
		}
		if (be64(seqb) != applied)
			fail("replay: seq %llu, expected %llu\n",
			     (unsigned long long)be64(seqb),
			     (unsigned long long)applied);
		apply_batch(payload, (size_t)n);
		atomic_store(&honest_at, ++applied);
		got++;
	}
	fail("replay: no end marker in 30 s\n");
}

/* Batch seq (in payload[0..n) if have): applied if it is the next; a
 * gap is filled by replay first (a cut replay is asked again, at most
 * 100 times and for 20 s). */
static void follow(void *req, uint64_t seq, int n, bool have)
{
	double end = now_s() + 20;

	for (int tries = 0; seq > applied && tries < 100 && now_s() < end;
	     tries++)
		if (replay_from(req) == 0)
			sleep_s(0.05); /* refused or cut at once: later */
	if (seq > applied)
		fail("gap before %llu not filled by replay (at %llu)\n",
		     (unsigned long long)seq, (unsigned long long)applied);
	if (have && seq == applied) {
		apply_batch(payload, (size_t)n);
		atomic_store(&honest_at, ++applied);
	}
}

static _Atomic uint64_t target = UINT64_MAX; /* batches to reach */
static uint64_t pub_got_bytes; /* payload bytes the honest client got */

static void *honest(void *arg)
{
	void **socks = arg;
	void *sub = socks[0], *req = socks[1];
	double end = 0;

	while (applied < atomic_load(&target)) {
		unsigned char seqb[8];
		char topic[256];
		int n;

		if (atomic_load(&target) != UINT64_MAX && end == 0)
			end = now_s() + 20;
		if (end && now_s() > end)
			fail("honest client: stuck at %llu of %llu batches\n",
			     (unsigned long long)applied,
			     (unsigned long long)atomic_load(&target));
		if (zmq_recv(sub, topic, sizeof(topic), 0) < 0) {
			struct kvp_pub_stats st;

			/* Quiet for 100 ms: what it missed (its queue
			 * overflowed, say) comes by replay. */
			kvp_pub_stats(pub, &st);
			if (applied < st.batches)
				follow(req, st.batches, 0, false);
			continue;
		}
		if (zmq_recv(sub, seqb, 8, 0) != 8)
			fail("seq frame\n");
		n = zmq_recv(sub, payload, sizeof(payload), 0);
		if (n < 0 || n > (int)sizeof(payload))
			fail("payload frame\n");
		pub_got_bytes += (uint64_t)n;
		/* One PUB batch in 100 is lost: replay must fill it in. */
		if (be64(seqb) % 100 == 50 && be64(seqb) == applied)
			continue;
		follow(req, be64(seqb), n, true);
	}
	return NULL;
}

/*
 * Asks for a replay of batches [from, to) (the whole ring, once the
 * producer has stopped) and counts what comes, which must be each of
 * them in order, then the end marker.  Returns the batches received
 * (report checks that they are all), their seconds in *secs.
 */
static uint64_t replay_whole(void *req, uint64_t from, uint64_t to,
			     double *secs)
{
	unsigned char seqb[8];
	uint64_t next = from;
	double t0 = now_s();

	for (int i = 0; i < 8; i++)
		seqb[i] = (unsigned char)(from >> (56 - 8 * i));
	if (zmq_send(req, "", 0, ZMQ_SNDMORE) != 0 ||
	    zmq_send(req, seqb, 8, 0) != 8)
		fail("replay request: %s\n", zmq_strerror(errno));
	while (now_s() < t0 + 30) {
		if (zmq_recv(req, seqb, 8, 0) != 0 ||
		    zmq_recv(req, seqb, 8, 0) != 8 ||
		    zmq_recv(req, payload, sizeof(payload), 0) < 0)
			fail("whole-ring replay: no answer after %llu of %llu "
			     "batches\n", (unsigned long long)(next - from),
			     (unsigned long long)(to - from));
		if (be64(seqb) == UINT64_MAX)
			break;
		if (be64(seqb) != next)
			fail("whole-ring replay: seq %llu, expected %llu\n",
			     (unsigned long long)be64(seqb),
			     (unsigned long long)next);
		next++;
	}
	*secs = now_s() - t0;
	return next - from;
}

/* ------------------------------------------------------------ slow */

static uint64_t slow_got; /* batches the slow client got before the end */

/* A client that asks for everything, reads nothing for 3.5 s (past the
 * node's patience), then reads: a contiguous prefix, then the end
 * marker. */
static void *slow_client(void *ctx)
{
	static char buf[1 << 16];
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	int one = 1, small = 1024, tmo = 10000, zero = 0;
	unsigned char seqb[8] = {0};

	zmq_setsockopt(s, ZMQ_RCVHWM, &one, sizeof(one));
	zmq_setsockopt(s, ZMQ_RCVBUF, &small, sizeof(small));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_connect(s, ep_rep) || zmq_send(s, "", 0, ZMQ_SNDMORE) ||
	    zmq_send(s, seqb, 8, 0) != 8)
		fail("slow client: request\n");
	sleep_s(3.5);
	for (uint64_t i = 0; i < 10000000; i++) {
		if (zmq_recv(s, seqb, 8, 0) != 0 ||
		    zmq_recv(s, seqb, 8, 0) != 8 ||
		    zmq_recv(s, buf, sizeof(buf), 0) < 0)
			fail("slow client: no end marker after %llu batches\n",
			     (unsigned long long)slow_got);
		if (be64(seqb) == UINT64_MAX)
			break;
		if (be64(seqb) != slow_got)
			fail("slow client: seq %llu after %llu\n",
			     (unsigned long long)be64(seqb),
			     (unsigned long long)slow_got);
		slow_got++;
	}
	zmq_close(s);
	return NULL;
}

/* ------------------------------------------------------------ hostile */

/* A socket of the attacker's that reads nothing (RCVHWM 1, a small
 * receive buffer), connected to endpoint. */
static void *zsock(void *ctx, int type, const char *endpoint)
{
	void *s = zmq_socket(ctx, type);
	int zero = 0, one = 1, small = 1024;

	if (!s)
		fail("zmq_socket: %s\n", zmq_strerror(errno));
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVHWM, &one, sizeof(one));
	zmq_setsockopt(s, ZMQ_RCVBUF, &small, sizeof(small));
	if (type == ZMQ_SUB)
		zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
	if (zmq_connect(s, endpoint))
		fail("connect %s\n", endpoint);
	return s;
}

static void request(void *s, uint64_t from)
{
	unsigned char seqb[8];

	for (int i = 0; i < 8; i++)
		seqb[i] = (unsigned char)(from >> (56 - 8 * i));
	zmq_send(s, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(s, seqb, 8, ZMQ_DONTWAIT);
}

/* Raw bytes that are not ZMTP, over TCP. */
static void garbage(uint64_t *rs)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	const char *port = strrchr(ep_rep, ':');
	char junk[4096];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || !port)
		return;
	a.sin_port = htons((uint16_t)atoi(port + 1));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)rnd(rs);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		(void)!write(fd, junk, sizeof(junk));
	close(fd);
}

/* The attack, in its own process, for at most two minutes (the node
 * kills it sooner). */
static void hostile(void)
{
	void *ctx = zmq_ctx_new(), *flooders[16], *big, *many, *sub;
	static void *idle[1000];
	double end = now_s() + 120, next_big = 0, next_idle = 0;
	static char huge[4 << 20];
	uint64_t sent = 0, rs = 42;
	double t0 = now_s();

	sub = zsock(ctx, ZMQ_SUB, ep_pub); /* and never reads */
	for (unsigned i = 0; i < o.hostile; i++)
		idle[i] = zsock(ctx, ZMQ_DEALER, ep_rep);
	for (int i = 0; i < 16; i++)
		flooders[i] = zsock(ctx, ZMQ_DEALER, ep_rep);
	big = zsock(ctx, ZMQ_DEALER, ep_rep);
	many = zsock(ctx, ZMQ_DEALER, ep_rep);
	while (now_s() < end) {
		uint64_t due = (uint64_t)((now_s() - t0) * o.flood);

		/* Again and again: a request after a replay's end starts a
		 * new one, and these never read. */
		if (now_s() >= next_idle) {
			for (unsigned i = 0; i < o.hostile; i++)
				request(idle[i], 0);
			next_idle = now_s() + 0.5;
		}
		for (; sent < due; sent++)
			request(flooders[sent % 16], rnd(&rs) % 4 ? 0 : sent);
		if (now_s() >= next_big) {
			zmq_send(big, huge, sizeof(huge), ZMQ_DONTWAIT);
			for (int i = 0; i < 999; i++)
				zmq_send(many, "x", 1,
					 ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(many, "x", 1, ZMQ_DONTWAIT);
			garbage(&rs);
			next_big = now_s() + 0.2;
		}
		sleep_s(0.002);
	}
	(void)sub;
	_exit(0);
}

/* ------------------------------------------------------------ node */

static void parse(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (a[0] != '-') {
			o.seconds = (unsigned)atoi(a);
			continue;
		}
		if (!v)
			fail("%s: missing value\n", a);
		i++;
		if (!strcmp(a, "--hostile"))
			o.hostile = (unsigned)atoi(v);
		else if (!strcmp(a, "--flood"))
			o.flood = (unsigned)atoi(v);
		else if (!strcmp(a, "--rate"))
			o.rate = (unsigned)atoi(v);
		else if (!strcmp(a, "--prefill"))
			o.prefill = (unsigned)atoi(v);
		else if (!strcmp(a, "--ring-bytes"))
			o.ring_bytes = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--burst"))
			o.burst = (unsigned)atoi(v);
		else if (!strcmp(a, "--sub-bytes"))
			o.sub_bytes = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--pub-bytes"))
			o.pub_bytes = strtoull(v, NULL, 0);
		else
			fail("unknown option %s\n", a);
	}
	if (o.seconds < 1 || o.seconds > 600 || o.hostile > 1000 ||
	    o.rate > 100000 || o.flood > 100000 || o.prefill > 1000000 ||
	    o.burst > 100000 || !o.ring_bytes || !o.sub_bytes || !o.pub_bytes)
		fail("options out of range\n");
}

static void node_start(void)
{
	struct kvp_pool_config pc = {.num_blocks = 4096, .block_tokens = BT,
				     .device_id = -1};
	struct kvp_manager_config mc = {.policy = KVP_EVICT_LRU,
					 .flags = KVP_PREFIX_CACHE};
	struct kvp_pub_config cfg = {0};
	struct kvp_pool *pool;
	int rc;

	if ((rc = kvp_pool_create(&pc, &pool)))
		fail("pool: %s\n", kvp_strerror(rc));
	mc.pool = pool;
	if ((rc = kvp_manager_create(&mc, &mgr)))
		fail("manager: %s\n", kvp_strerror(rc));
	kvp_pool_unref(pool);
	cfg.endpoint = "tcp://127.0.0.1:*";
	cfg.replay_endpoint = "tcp://127.0.0.1:*";
	/* Several events a batch: the burst's are large. */
	cfg.max_batch_events = 64;
	cfg.ring_batches = 1u << 20;
	cfg.ring_bytes = o.ring_bytes;
	cfg.sub_bytes = o.sub_bytes;
	cfg.pub_bytes = o.pub_bytes;
	if ((rc = kvp_pub_create(&cfg, &pub)))
		fail("kvp_pub_create: %s\n", kvp_strerror(rc));
	if (kvp_pub_endpoint(pub, 0, ep_pub, sizeof(ep_pub)) ||
	    kvp_pub_endpoint(pub, 1, ep_rep, sizeof(ep_rep)))
		fail("endpoint\n");
	kvp_manager_set_event_cb(mgr, kvp_pub_event_cb, pub);
}

/* Commits at o.rate per second for o.seconds; the peak RSS in *peak. */
static void produce(uint64_t *peak)
{
	double t0 = now_s(), end = t0 + o.seconds;
	uint64_t done = 0;

	while (now_s() < end) {
		uint64_t due = (uint64_t)((now_s() - t0) * o.rate), r;

		for (; done < due; done++)
			commit_one();
		r = rss_bytes();
		*peak = r > *peak ? r : *peak;
		sleep_s(0.005);
	}
}

/* Waits (at most 30 s) until the honest client is less than half the
 * replay ring behind, so that replay can fill any gap it has. */
static void burst_pace(void)
{
	struct kvp_pub_stats st;
	double end = now_s() + 30;

	kvp_pub_stats(pub, &st);
	while (st.batches - atomic_load(&honest_at) > st.ring_batches / 2) {
		if (now_s() > end)
			fail("the honest client is stuck at %llu of %llu\n",
			     (unsigned long long)atomic_load(&honest_at),
			     (unsigned long long)st.batches);
		sleep_s(0.001);
	}
}

/*
 * The burst: o.burst MB of large events, at most 100 MB/s and as fast as
 * the honest client follows, flushed every few prompts so that the
 * producer's buffer never overflows; the peak RSS in *peak.  Returns the
 * prompts committed.
 */
static uint64_t burst(uint64_t *peak)
{
	const double per = 38e3; /* bytes of batches per prompt, about */
	uint64_t n = (uint64_t)(o.burst * 1e6 / per);
	double t0 = now_s();

	for (uint64_t i = 0; i < n; i++) {
		uint64_t r;

		commit_big((uint32_t)i);
		if (i % 8 == 7) {
			if (kvp_pub_flush(pub, 30000))
				fail("flush timed out\n");
			burst_pace();
		}
		while ((double)(i + 1) * per > (now_s() - t0) * 100e6)
			sleep_s(0.001);
		r = rss_bytes();
		*peak = r > *peak ? r : *peak;
	}
	return n;
}

/* The manager's cached set equals the honest client's. */
static void check_set(void)
{
	struct kvp_stats ms;

	kvp_manager_stats(mgr, &ms);
	if (set_n != ms.prefix_cached_blocks)
		fail("the events rebuild %llu cached blocks, the manager has "
		     "%llu\n", (unsigned long long)set_n,
		     (unsigned long long)ms.prefix_cached_blocks);
	for (uint32_t s = 0; s < SET_SLOTS; s++) {
		uint32_t prio;
		uint64_t exp;

		if (set_used[s] == 1 &&
		    kvp_prefix_retention(mgr, &set_key[s], &prio, &exp) != 0)
			fail("a block the events say is cached is not\n");
	}
}

/* The honest client's sockets; the first replay (of the prefill). */
static void honest_start(void *ctx, void *socks[2])
{
	int zero = 0, tmo = 100, rtmo = 10000, hwm = 256;
	struct kvp_pub_stats st;
	uint64_t got;

	socks[0] = zmq_socket(ctx, ZMQ_SUB);
	socks[1] = zmq_socket(ctx, ZMQ_DEALER);
	/* Bounded here too (it is in the node's RSS): a batch it misses
	 * is a gap that replay fills. */
	zmq_setsockopt(socks[0], ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(socks[0], ZMQ_SUBSCRIBE, "", 0);
	zmq_setsockopt(socks[0], ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	zmq_setsockopt(socks[1], ZMQ_RCVTIMEO, &rtmo, sizeof(rtmo));
	zmq_setsockopt(socks[1], ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_connect(socks[0], ep_pub) || zmq_connect(socks[1], ep_rep))
		fail("connect\n");
	sleep_s(0.3); /* a slow joiner misses what is sent before */
	for (unsigned i = 0; i < o.prefill; i++) {
		commit_one();
		/* As fast as it goes: keep the backlog below the buffer. */
		if (i % 256 == 255 && kvp_pub_flush(pub, 30000))
			fail("flush timed out\n");
	}
	if (kvp_pub_flush(pub, 30000))
		fail("flush timed out\n");
	kvp_pub_stats(pub, &st);
	got = replay_from(socks[1]);
	if (got != st.batches || applied != st.batches)
		fail("the first replay brought %llu of %llu batches\n",
		     (unsigned long long)got, (unsigned long long)st.batches);
	printf(STRESS_PROG ": replay of %llu batches: complete, in "
	       "order, end marker\n", (unsigned long long)got);
}

/* What the burst and the whole-ring replay showed. */
static struct burst_result {
	uint64_t prompts, whole, whole_got;
	uint64_t idle_queued; /* replay bytes queued before the replay */
	double whole_s;
} br;

/* The run's lines, then the checks of the destroy time and the RSS. */
static void report(const struct kvp_pub_stats *sp, uint64_t grew,
		   uint64_t budget, double t)
{
	struct kvp_pub_stats st = *sp;

	printf(STRESS_PROG ": burst of %u MB (%llu prompts of %u blocks, "
	       "%.1f MB to the honest subscriber): the subscriber that never "
	       "reads overflowed %llu times; %llu batches went to no "
	       "subscriber; whole-ring replay beside %u idle clients "
	       "(holding %.1f MB): %llu of %llu batches in %.2f s\n",
	       o.burst, (unsigned long long)br.prompts, BIG_BLOCKS,
	       (double)pub_got_bytes / 1e6,
	       (unsigned long long)st.sub_overflows,
	       (unsigned long long)st.pub_dropped, o.hostile,
	       (double)br.idle_queued / 1e6,
	       (unsigned long long)br.whole_got,
	       (unsigned long long)br.whole, br.whole_s);

	printf(STRESS_PROG ": %u s, %u hostile, %u req/s flood, %u events/s: "
	       "%llu batches, 0 dropped; honest set of %llu blocks exact "
	       "(%llu replays, %llu batches); slow client cut after %llu "
	       "batches, with its end marker; %llu replays answered, %llu "
	       "cut, %llu requests ignored; ring %llu batches, %llu bytes; "
	       "RSS +%.1f MB (bound %.0f MB%s); destroy %.3f s\n",
	       o.seconds, o.hostile, o.flood, o.rate,
	       (unsigned long long)st.batches, (unsigned long long)set_n,
	       (unsigned long long)replays, (unsigned long long)replay_batches,
	       (unsigned long long)slow_got,
	       (unsigned long long)st.replay_requests,
	       (unsigned long long)st.replays_cut,
	       (unsigned long long)st.replay_ignored,
	       (unsigned long long)st.ring_batches,
	       (unsigned long long)st.ring_bytes,
	       (double)grew / 1e6,
	       (double)budget / 1e6, SANITIZED ? ", not checked" : "", t);
	fflush(stdout); /* fail() exits at once */
	if (t > 1.0)
		fail("kvp_pub_destroy took %.3f s\n", t);
	if (!SANITIZED && grew > budget)
		fail("RSS grew by %llu bytes\n", (unsigned long long)grew);
	if (o.burst && st.sub_overflows == 0)
		fail("the subscriber that never reads never overflowed\n");
	if (br.whole_got != br.whole)
		fail("the whole-ring replay was not complete\n");
}

int main(int argc, char **argv)
{
	int fds[2];
	pid_t child;
	void *ctx, *socks[2];
	pthread_t tid, slow;
	struct kvp_pub_stats st;
	uint64_t rss0, peak = 0, budget;
	double t;

	parse(argc, argv);
	big_init();
	if (pipe(fds))
		fail("pipe\n");
	/* Before any thread: the attacker is a process of its own. */
	child = fork();
	if (child < 0)
		fail("fork\n");
	if (child == 0) {
		/* Gone with the node, however it ends. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			_exit(0);
		close(fds[1]);
		if (read(fds[0], &ep, sizeof(ep)) != (ssize_t)sizeof(ep))
			_exit(0);
		hostile();
	}
	close(fds[0]);
	node_start();
	rss0 = rss_bytes(); /* before any client connects */
	ctx = zmq_ctx_new();
	honest_start(ctx, socks);
	/* One write under PIPE_BUF: read whole. */
	if (write(fds[1], &ep, sizeof(ep)) != (ssize_t)sizeof(ep))
		fail("write\n");
	pthread_create(&tid, NULL, honest, socks);
	pthread_create(&slow, NULL, slow_client, ctx);
	produce(&peak);
	pthread_join(slow, NULL);
	br.prompts = burst(&peak);
	if (kvp_pub_flush(pub, 30000))
		fail("flush timed out\n");
	kvp_pub_stats(pub, &st);
	atomic_store(&target, st.batches);
	pthread_join(tid, NULL);
	check_set();
	if (st.dropped)
		fail("%llu events dropped\n", (unsigned long long)st.dropped);
	kvp_pub_stats(pub, &st);
	if (slow_got >= st.batches || st.replays_cut == 0)
		fail("the slow client's replay was not cut (%llu batches, "
		     "%llu cut)\n", (unsigned long long)slow_got,
		     (unsigned long long)st.replays_cut);
	br.whole = st.ring_batches;
	br.idle_queued = st.replay_queued_bytes;
	br.whole_got = replay_whole(socks[1], st.batches - st.ring_batches,
				    st.batches, &br.whole_s);
	/* The documented bounds, plus 64 MB. */
	budget = o.ring_bytes + o.pub_bytes + REPLAY_TOTAL +
		 (uint64_t)st.threads * (1u << 20) + (64ull << 20);
	kvp_manager_set_event_cb(mgr, NULL, NULL);
	t = now_s();
	kvp_pub_destroy(pub); /* the attack still goes on */
	t = now_s() - t;
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	report(&st, peak > rss0 ? peak - rss0 : 0, budget, t);
	zmq_close(socks[0]);
	zmq_close(socks[1]);
	zmq_ctx_term(ctx);
	kvp_manager_destroy(mgr);
	return 0;
}
