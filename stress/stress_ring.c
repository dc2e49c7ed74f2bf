/*
 * stress_ring.c - the bounded MPMC ring (lib/ring.h) alone: producers
 * against consumers, with no id lost, duplicated or overtaken.
 *
 * Usage: stress_ring THREADS SECONDS [--ids N] [--batch B]
 *
 * A fixed universe of N ids (default 64) moves around a circle of two
 * rings, each of capacity N rounded up: half the threads (the pushers)
 * pop ids from the `back` ring and push them to the `idle` ring, the
 * others (the poppers) pop from `idle` and push to `back`, all in random
 * batches of up to B (default 16).  An id popped belongs to its popper,
 * which holds it a while and later pushes it on; so each id is, at every
 * moment, in one ring or one thread's hand, and neither ring ever holds
 * more than its capacity (ring_push's precondition).  With the default N
 * equal to the capacity, a ring is sometimes full, and a push then waits
 * for a consumer still releasing a cell.
 *
 * Before it pushes an id, a thread stamps it (stamp[id], plain memory)
 * with its index and its own count of ids pushed; the popper reads the
 * stamp after the pop, so the ring's release/acquire hand-off is what
 * TSan checks there.  Checked during the run: the popper finds the id
 * marked as in a ring (not held: no duplicate), and each popper sees each
 * writer's stamps in increasing order (FIFO per producer).  Checked at
 * the end, quiescent: every id is in exactly one ring snapshot or hand,
 * ring_count matches the snapshots, and what is left in a ring from a
 * writer is newer than everything any thread popped from that writer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ring.h"

#define STRESS_PROG "stress_ring"
#include "stress_common.h"

/* Who pushed an id last, and that writer's count of pushes then. */
struct stamp {
	uint32_t writer;
	uint64_t seq;
};

struct worker {
	pthread_t tid;
	unsigned idx;
	bool pusher;	/* back -> idle; otherwise idle -> back */
	uint32_t *hand; /* ids held, hand[0..nhand) */
	uint32_t nhand;
	uint64_t seq;	/* stamps given so far */
	uint64_t *next; /* next[w]: lowest stamp of writer w still allowed */
	uint64_t rng;
	uint64_t pops, popped, empty, pushes;
};

static struct kvp_ring *idle, *back;
static struct stamp *stamp;
/* 0: in a ring; t + 1: held by thread t.  Relaxed: a check only. */
static _Atomic uint32_t *where;
static struct worker *workers;
static unsigned nthreads;
static uint32_t nids = 64, batch = 16;
static _Atomic bool stop;

/* Checks and takes one popped id: no duplicate, writer order. */
static void take_one(struct worker *w, uint32_t id)
{
	struct stamp st;
	uint32_t prev;

	if (id >= nids)
		fail("thread %u popped id %u, beyond the %u ids\n", w->idx, id,
		     nids);
	prev = atomic_exchange_explicit(&where[id], w->idx + 1,
					memory_order_relaxed);
	if (prev != 0)
		fail("thread %u popped id %u, held by thread %u\n", w->idx, id,
		     prev - 1);
	st = stamp[id];
	if (st.writer > nthreads)
		fail("id %u: a stamp of writer %u\n", id, st.writer);
	if (st.seq < w->next[st.writer])
		fail("thread %u popped writer %u's push %" PRIu64
		     " after its push %" PRIu64 "\n",
		     w->idx, st.writer, st.seq, w->next[st.writer] - 1);
	w->next[st.writer] = st.seq + 1;
}

/* Pops a random batch from r into the hand; returns how many. */
static uint32_t take(struct worker *w, struct kvp_ring *r)
{
	uint32_t room = nids - w->nhand, max, k;

	max = 1 + (uint32_t)(rnd(&w->rng) % batch);
	max = max < room ? max : room;
	if (max == 0)
		return 0;
	k = ring_pop(r, w->hand + w->nhand, max);
	w->pops++;
	if (k == 0) {
		w->empty++;
		return 0;
	}
	for (uint32_t i = 0; i < k; i++)
		take_one(w, w->hand[w->nhand + i]);
	w->nhand += k;
	w->popped += k;
	return k;
}

/* Stamps and pushes a random batch of the hand's last ids to r. */
static void give(struct worker *w, struct kvp_ring *r)
{
	uint32_t n = 1 + (uint32_t)(rnd(&w->rng) % batch), *ids;

	n = n < w->nhand ? n : w->nhand;
	ids = w->hand + w->nhand - n;
	for (uint32_t i = 0; i < n; i++) {
		stamp[ids[i]] = (struct stamp){w->idx, w->seq++};
		atomic_store_explicit(&where[ids[i]], 0, memory_order_relaxed);
	}
	ring_push(r, ids, n);
	w->nhand -= n;
	w->pushes++;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	struct kvp_ring *from = w->pusher ? back : idle;
	struct kvp_ring *to = w->pusher ? idle : back;
	uint64_t c;

	/* Relaxed: the flag carries no data; join orders the end. */
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		/* On fewer CPUs than threads, let the other side run. */
		if (take(w, from) == 0 && w->empty % 16 == 0)
			sched_yield();
		/* Hold ids a while: give back one time in three, or when
		 * the hand is full. */
		if (w->nhand && (rnd(&w->rng) % 3 == 0 || w->nhand == nids))
			give(w, to);
		c = ring_count(from);
		if (c > (uint64_t)1 << 40)
			fail("ring_count %" PRIu64 ": head passed tail\n", c);
	}
	return NULL;
}

/* Counts a quiescent ring's ids in seen[] and checks writers' order. */
static void check_ring_left(struct kvp_ring *r, const char *name, uint8_t *seen,
			    const uint64_t *popped_next)
{
	uint32_t *ids = calloc(nids + 1, sizeof(*ids));
	uint64_t n, *next = calloc(nthreads + 1, sizeof(*next));

	if (!ids || !next)
		fail("out of memory\n");
	n = ring_snapshot(r, ids, nids);
	if (n > nids || n != ring_count(r))
		fail("%s: snapshot of %" PRIu64 ", count %" PRIu64 "\n", name,
		     n, ring_count(r));
	for (uint64_t i = 0; i < n; i++) {
		struct stamp st = stamp[ids[i]];

		seen[ids[i]]++;
		if (atomic_load_explicit(&where[ids[i]],
					 memory_order_relaxed) != 0)
			fail("%s: id %u is also held\n", name, ids[i]);
		if (st.seq < next[st.writer] || st.seq < popped_next[st.writer])
			fail("%s: writer %u's push %" PRIu64 " left behind a "
			     "later one\n",
			     name, st.writer, st.seq);
		next[st.writer] = st.seq + 1;
	}
	free(next);
	free(ids);
}

static void check_end(void)
{
	uint8_t *seen = calloc(nids, 1);
	uint64_t *popped_next = calloc(nthreads + 1, sizeof(*popped_next));

	if (!seen || !popped_next)
		fail("out of memory\n");
	for (unsigned t = 0; t < nthreads; t++) {
		for (unsigned w = 0; w <= nthreads; w++)
			if (workers[t].next[w] > popped_next[w])
				popped_next[w] = workers[t].next[w];
		for (uint32_t i = 0; i < workers[t].nhand; i++)
			seen[workers[t].hand[i]]++;
	}
	check_ring_left(idle, "idle", seen, popped_next);
	check_ring_left(back, "back", seen, popped_next);
	for (uint32_t id = 0; id < nids; id++)
		if (seen[id] != 1)
			fail("id %u found %u times\n", id, seen[id]);
	free(popped_next);
	free(seen);
}

static unsigned long parse(const char *s, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0) {
		fprintf(stderr, STRESS_PROG ": bad %s '%s'\n", what, s);
		exit(2);
	}
	return v;
}

static void parse_args(int argc, char **argv, unsigned *seconds)
{
	int pos = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ids") && i + 1 < argc) {
			nids = (uint32_t)parse(argv[++i], "--ids");
		} else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
			batch = (uint32_t)parse(argv[++i], "--batch");
		} else if (argv[i][0] != '-' && pos == 0) {
			nthreads = (unsigned)parse(argv[i], "THREADS");
			pos++;
		} else if (argv[i][0] != '-' && pos == 1) {
			*seconds = (unsigned)parse(argv[i], "SECONDS");
			pos++;
		} else {
			pos = -1;
			break;
		}
	}
	if (pos != 2 || nthreads < 2 || nthreads > 64 || nids > 1000000 ||
	    batch > nids) {
		fprintf(stderr, "usage: " STRESS_PROG " THREADS SECONDS "
				"[--ids N] [--batch B]\n"
				"  (2 to 64 threads, at most 1000000 ids, "
				"B <= N)\n");
		exit(2);
	}
}

/* The ids start in `back`, stamped by writer nthreads (the main thread). */
static void setup(void)
{
	uint32_t id;

	if (ring_create(nids, &idle) || ring_create(nids, &back))
		fail("ring_create: out of memory\n");
	stamp = calloc(nids, sizeof(*stamp));
	where = calloc(nids, sizeof(*where));
	workers = calloc(nthreads, sizeof(*workers));
	if (!stamp || !where || !workers)
		fail("out of memory\n");
	for (id = 0; id < nids; id++) {
		stamp[id] = (struct stamp){nthreads, id};
		ring_push(back, &id, 1);
	}
	for (unsigned t = 0; t < nthreads; t++) {
		workers[t].idx = t;
		workers[t].pusher = t % 2 == 0;
		workers[t].rng = 0x5eed0000u + t;
		workers[t].hand = calloc(nids, sizeof(uint32_t));
		workers[t].next = calloc(nthreads + 1, sizeof(uint64_t));
		if (!workers[t].hand || !workers[t].next)
			fail("out of memory\n");
	}
}

int main(int argc, char **argv)
{
	uint64_t pops = 0, popped = 0, empty = 0, pushes = 0;
	unsigned seconds = 0;

	parse_args(argc, argv, &seconds);
	setup();
	for (unsigned t = 0; t < nthreads; t++)
		if (pthread_create(&workers[t].tid, NULL, run, &workers[t]))
			fail("pthread_create\n");
	sleep(seconds);
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	for (unsigned t = 0; t < nthreads; t++)
		if (pthread_join(workers[t].tid, NULL))
			fail("pthread_join\n");
	check_end();
	for (unsigned t = 0; t < nthreads; t++) {
		pops += workers[t].pops;
		popped += workers[t].popped;
		empty += workers[t].empty;
		pushes += workers[t].pushes;
	}
	if (popped == 0)
		fail("no id was popped\n");
	printf(STRESS_PROG ": %u threads, %u s, %u ids, batches <= %u: ",
	       nthreads, seconds, nids, batch);
	printf("%" PRIu64 " pushes, %" PRIu64 " pops (%" PRIu64 " empty) of "
	       "%" PRIu64 " ids; none lost, duplicated or reordered\n",
	       pushes, pops, empty, popped);
	for (unsigned t = 0; t < nthreads; t++) {
		free(workers[t].hand);
		free(workers[t].next);
	}
	free(workers);
	free(where);
	free(stamp);
	ring_destroy(idle);
	ring_destroy(back);
	return 0;
}
