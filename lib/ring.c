/*
 * ring.c - the bounded MPMC ring's slow paths: creation, destruction, the
 * wait that yields, the quiescent snapshot.  The correctness argument and
 * the hot paths (push, pop) are in ring.h.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "compiler.h"
#include "ring.h"

/* Bytes of a ring of cap cells, or 0 on overflow. */
static size_t ring_bytes(uint64_t cap)
{
	size_t cells, bytes;

	if (__builtin_mul_overflow(cap, sizeof(struct ring_cell), &cells) ||
	    __builtin_add_overflow(cells, sizeof(struct kvp_ring), &bytes))
		return 0;
	return bytes;
}

static uint64_t ring_round_up(uint32_t capacity)
{
	if (capacity == 1)
		return 1;
	return UINT64_C(1) << (32 - __builtin_clz(capacity - 1));
}

int ring_create(uint32_t capacity, struct kvp_ring **out)
{
	struct kvp_ring *r;
	uint64_t cap;
	size_t bytes;

	if (!out || capacity == 0 || capacity > RING_MAX_CAPACITY)
		return -EINVAL;
	cap = ring_round_up(capacity);
	bytes = ring_bytes(cap);
	if (!bytes)
		return -ENOMEM;
	r = kvp_malloc_aligned(KVP_CACHELINE, bytes);
	if (!r)
		return -ENOMEM;
	r->mask = cap - 1;
	atomic_init(&r->tail, 0);
	atomic_init(&r->head, 0);
	for (uint64_t i = 0; i < cap; i++) {
		atomic_init(&r->cells[i].seq, i);
		atomic_init(&r->cells[i].id, UINT32_MAX);
	}
	*out = r;
	return 0;
}

void ring_destroy(struct kvp_ring *r)
{
	if (r)
		kvp_free_aligned(r, KVP_CACHELINE,
				 ring_bytes(ring_capacity(r)));
}

/*
 * Spins RING_SPINS times with a cpu-relax hint, then yields the CPU
 * between checks: the thread it waits for (see ring.h, Waiting) may have
 * been preempted, and on a machine with fewer CPUs than threads it may
 * need ours to run.
 */
void ring_wait_slow(_Atomic uint64_t *seq, uint64_t want)
{
	for (unsigned spins = 0;; spins++) {
		/* Acquire: as in ring_wait. */
		if (atomic_load_explicit(seq, memory_order_acquire) == want)
			return;
		if (spins < RING_SPINS)
			kvp_cpu_relax();
		else
			sched_yield();
	}
}

uint64_t ring_snapshot(const struct kvp_ring *r, uint32_t *ids, uint64_t cap)
{
	/* Relaxed: quiescent, the caller's exclusion orders every push and
	 * pop before this call. */
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	const struct ring_cell *c;
	uint64_t seq;

	for (uint64_t p = h; p != t && p - h < cap; p++) {
		c = &r->cells[p & r->mask];
		/* Relaxed: quiescent, as above. */
		seq = atomic_load_explicit(&c->seq, memory_order_relaxed);
		if (config_debug && seq != p + 1)
			kvp_fatal("ring_snapshot: a push or pop under way");
		ids[p - h] = atomic_load_explicit(&c->id, memory_order_relaxed);
	}
	return t - h;
}
