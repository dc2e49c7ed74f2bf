/*
 * ring.h - a bounded multi-producer multi-consumer FIFO of block ids, with
 * bulk operations: the idle (evictable) cached blocks of one retention
 * priority.  Releases push batches at the tail, evictions pop batches from
 * the head.  The shape is DPDK's rte_ring (one atomic step reserves a
 * whole batch); the cells are Dmitry Vyukov's bounded MPMC queue's (each
 * cell carries a sequence number saying whose turn it is).  Floor 2 of
 * lib/, beside stack.h: ring.c calls alloc.c only.
 *
 * Synchronization.  Any number of ring_push, ring_pop and ring_count calls
 * may run at once, from any threads.  ring_create, ring_destroy and
 * ring_snapshot need the caller's exclusion of every other call on the
 * ring.
 *
 * Correctness argument.
 *
 * Positions.  tail and head count positions; position p lives in cell
 * p & mask (mask = capacity - 1, capacity a power of two).  They are
 * 64-bit and never wrap, so a position names one use of one cell, and the
 * cell's seq says which use and which phase:
 *   seq == p             free: the producer of p may write the cell;
 *   seq == p + 1         full: the consumer of p may read it;
 *   seq == p + capacity  free again, for the producer of p + capacity.
 * ring_create sets cell i's seq to i.  Every later value of a cell's seq
 * is stored by one thread (the producer or the consumer of one position),
 * so a load that sees the value a thread waits for read that thread's
 * store.
 *
 * Reservation.  A push of n reserves positions [pos, pos + n) with one
 * fetch_add on tail.  A pop reads head h and tail t and reserves
 * [h, h + k), k <= t - h, with one CAS of head from h to h + k.  Both are
 * atomic read-modify-writes, so each position goes to exactly one
 * producer and, as head never passes tail (below), to exactly one
 * consumer.  The id the one producer of p writes is read by the one
 * consumer of p, once: no entry is lost or duplicated.
 *
 * Cells.  The producer of p waits until seq == p, stores the id, then
 * stores seq = p + 1 (release).  The consumer of p waits until
 * seq == p + 1 with an acquire load, which pairs with that release: it
 * reads the id stored, and sees everything the producer's thread wrote
 * before the push (the block's state).  It then stores seq = p + capacity
 * (release).  The producer of p + capacity waits for that value with an
 * acquire load, which pairs with this release: the consumer's read of the
 * old id happens before the new id is written, so it cannot return the
 * new one.
 *
 * head <= tail.  A consumer loads head (acquire), then tail, then CASes
 * head to at most the tail it read (release).  The next consumer's
 * acquire load of head (or failed CAS) reads that CAS, so the previous
 * consumer's read of tail happens before its own, which therefore reads
 * that tail or a later one (read-read coherence).  Without the pairing, a
 * consumer could read a new head with a stale tail and reserve positions
 * that no producer holds.
 *
 * Order and linearizability.  A batch gets consecutive positions, in
 * order; a thread's later push gets later positions (its fetch_adds are
 * ordered in tail's modification order).  Consumers reserve positions in
 * head's modification order and each returns its batch in position
 * order.  So ids leave in position order: a producer's batch in its
 * order, and one consumer sees one producer's ids in push order.  A push
 * takes effect at its fetch_add, a non-empty pop at its CAS; each then
 * only fills or drains the cells it reserved.  A pop returns 0 only when
 * it read tail == head: every position reserved by then (by coherence,
 * every push that happened before the pop) had been reserved by a
 * consumer.  A pop never returns 0 while a position between head and tail
 * is reserved but not yet published: it takes it and waits.
 *
 * Waiting.  Both waits are on one cell's seq; they spin with a cpu-relax
 * hint, then call sched_yield() between checks after RING_SPINS spins.
 *  - A consumer of p waits for the producer of p, which holds p since its
 *    fetch_add (p < tail): bounded by that producer's progress from its
 *    fetch_add to its store of seq, a few instructions per id.
 *  - A producer of p waits for the consumer of p - capacity.  The caller
 *    guarantees at most capacity entries (ring_push), so that consumer has
 *    reserved p - capacity: otherwise positions p - capacity .. p would
 *    all hold entries, capacity + 1 of them.  Bounded by that consumer's
 *    progress from its CAS to its release of the cell.
 * So a thread preempted inside a push or a pop delays the threads that
 * reach its cells (as in rte_ring): the ring is not lock-free in the
 * strict sense, but no wait depends on more than one other thread's
 * progress through a few instructions.
 *
 * Memory orders (each again at its use): tail's fetch_add is relaxed (it
 * hands out positions; what a producer publishes goes through the cells);
 * a cell's waits are acquire and its seq stores release (the pairings
 * above); ids are relaxed (ordered by their cell's seq); head's load and
 * failed CAS are acquire and its successful CAS is release (head <= tail);
 * a consumer's read of tail is relaxed (bounded below by head's pairing).
 */
#ifndef KVP_RING_H
#define KVP_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "compiler.h"

/* Spins on a cell before each further check yields the CPU. */
#define RING_SPINS 1000

/* The largest capacity ring_create accepts. */
#define RING_MAX_CAPACITY (UINT32_C(1) << 31)

struct ring_cell {
	/* Whose turn, see above.  Synchronization: acquire/release. */
	_Atomic uint64_t seq;
	/* The id at this cell.  Synchronization: relaxed, ordered by seq. */
	_Atomic uint32_t id;
};

struct kvp_ring {
	/* capacity - 1.  Read-only after ring_create. */
	uint64_t mask;
	/* Next position to push.  Synchronization: atomic, producers only. */
	kvp_cacheline_aligned _Atomic uint64_t tail;
	/* Next position to pop.  Synchronization: CAS, consumers only. */
	kvp_cacheline_aligned _Atomic uint64_t head;
	/* capacity cells.  Synchronization: each cell's seq. */
	kvp_cacheline_aligned struct ring_cell cells[];
};

/*
 * Makes a ring of capacity rounded up to a power of two (1 <= capacity <=
 * RING_MAX_CAPACITY), empty.  0, -EINVAL (capacity out of range, out
 * NULL; *out untouched) or -ENOMEM.
 */
int ring_create(uint32_t capacity, struct kvp_ring **out);
/* Frees the ring (NULL is ignored).  Its ids are dropped. */
void ring_destroy(struct kvp_ring *r);
/*
 * Quiescent (no push or pop running): copies the ring's ids, oldest first,
 * into ids[0..min(count, cap)) and returns the count.  For check
 * functions.  No barrier: the caller's exclusion orders it.
 */
uint64_t ring_snapshot(const struct kvp_ring *r, uint32_t *ids, uint64_t cap);
/* The slow half of ring_wait: spin, then yield, until *seq == want. */
void ring_wait_slow(_Atomic uint64_t *seq, uint64_t want);

static inline uint64_t ring_capacity(const struct kvp_ring *r)
{
	return r->mask + 1;
}

static inline struct ring_cell *ring_at(struct kvp_ring *r, uint64_t pos)
{
	return &r->cells[pos & r->mask];
}

/*
 * Waits until a cell's seq is want: acquire, see the argument above.  May
 * spin, then yield the CPU, for as long as the thread that holds the
 * neighbouring use of the cell takes to finish with it.
 */
static inline void ring_wait(_Atomic uint64_t *seq, uint64_t want)
{
	/* Acquire: pairs with the release store of want into this cell. */
	if (likely(atomic_load_explicit(seq, memory_order_acquire) == want))
		return;
	ring_wait_slow(seq, want);
}

/*
 * Appends ids[0..n) at the tail, in order.  Never fails: the caller
 * guarantees that the ring never holds more than its capacity of entries
 * (each id at most one entry), counting an entry from the start of its
 * push until a pop has reserved it; so n <= capacity.  One fetch_add on
 * tail reserves the n cells; then it waits only for a consumer still
 * releasing one of them (spin, then sched_yield(): see Waiting above).
 * Each id is released to its consumer: what the caller wrote before the
 * push is visible to the thread that pops the id.
 */
static inline void ring_push(struct kvp_ring *r, const uint32_t *ids,
			     uint32_t n)
{
	uint64_t pos;

	if (config_debug && unlikely(n > ring_capacity(r)))
		kvp_fatal("ring_push: a batch larger than the ring");
	if (n == 0)
		return;
	/* Relaxed: it only hands out positions.  The cell wait below must
	 * acquire the consumer's release of the cell, and does so on the
	 * cell's seq: an acquire here would pair with no consumer's store
	 * (consumers never write tail). */
	pos = atomic_fetch_add_explicit(&r->tail, n, memory_order_relaxed);
	for (uint32_t i = 0; i < n; i++) {
		struct ring_cell *c = ring_at(r, pos + i);

		ring_wait(&c->seq, pos + i);
		/* Relaxed: published by the release store of seq. */
		atomic_store_explicit(&c->id, ids[i], memory_order_relaxed);
		/* Release: publishes the id (and the caller's writes before
		 * the push); pairs with the consumer's acquire wait. */
		atomic_store_explicit(&c->seq, pos + i + 1,
				      memory_order_release);
	}
}

/*
 * Reserves up to max >= 1 positions at the head with one CAS; returns how
 * many (0 if head == tail), the first in *pos.
 */
static inline uint32_t ring_reserve(struct kvp_ring *r, uint32_t max,
				    uint64_t *pos)
{
	uint64_t h, t;
	uint32_t k;

	/* Acquire: pairs with the release CAS that wrote h, so the tail
	 * read below is at least the one that consumer read. */
	h = atomic_load_explicit(&r->head, memory_order_acquire);
	do {
		/* Relaxed: ids come through the cells; head's acquire
		 * already keeps this read >= h (head <= tail). */
		t = atomic_load_explicit(&r->tail, memory_order_relaxed);
		if (config_debug && unlikely(t < h))
			kvp_fatal("ring_reserve: head passed tail");
		if (t == h)
			return 0;
		k = t - h < max ? (uint32_t)(t - h) : max;
		/* Release: publishes our read of tail to the next consumer's
		 * acquire of head (head <= tail); acquire on failure: the
		 * new h pairs like the load above. */
	} while (!atomic_compare_exchange_weak_explicit(&r->head, &h, h + k,
							memory_order_release,
							memory_order_acquire));
	*pos = h;
	return k;
}

/*
 * Removes up to max ids from the head, oldest first, into ids; returns
 * how many (0 if the ring is empty).  One CAS on head reserves them; then
 * it waits for any reserved cell whose producer has not published it yet
 * (spin, then sched_yield(): see Waiting above).  Acquires each id from
 * its producer: what the pusher wrote before the push is visible.
 */
static inline uint32_t ring_pop(struct kvp_ring *r, uint32_t *ids, uint32_t max)
{
	uint64_t pos;
	uint32_t k = max ? ring_reserve(r, max, &pos) : 0;

	for (uint32_t i = 0; i < k; i++) {
		struct ring_cell *c = ring_at(r, pos + i);

		ring_wait(&c->seq, pos + i + 1);
		/* Relaxed: ordered after the producer's store by the
		 * acquire wait. */
		ids[i] = atomic_load_explicit(&c->id, memory_order_relaxed);
		/* Release: frees the cell for the producer one lap on; pairs
		 * with its acquire wait (our read comes before its write). */
		atomic_store_explicit(&c->seq, pos + i + ring_capacity(r),
				      memory_order_release);
	}
	return k;
}

/*
 * Entries now: tail - head, the positions pushes have reserved and pops
 * have not.  Exact at quiescence; while threads run, approximate: never
 * negative, but a pop that reserves between its two loads is not
 * subtracted, so it may briefly exceed the entries.  No barrier for the
 * caller.
 */
static inline uint64_t ring_count(const struct kvp_ring *r)
{
	/* Acquire: head first, paired as in ring_reserve, so tail >= head. */
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);

	/* Relaxed: a count; nothing is read through it. */
	return atomic_load_explicit(&r->tail, memory_order_relaxed) - h;
}

#endif /* KVP_RING_H */
