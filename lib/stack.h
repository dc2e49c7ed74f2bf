/* SPDX-License-Identifier: MIT */
/*
 * stack.h - the pool's global free stack: an index-based Treiber stack.
 * Floor 2 of lib/ (doc/architecture.md, "Layers").
 *
 * Correctness argument.
 *
 * The stack holds block ids.  Its head is one 64-bit word {tag:32, top:32};
 * links live in the pool's next[] array (next[id] is the id below id, or
 * KVP_NIL).  Every successful update of the head is a single-word CAS that
 * also increments the tag.
 *
 * Push of a chain first..last (ids the caller owns exclusively, linked
 * through next[]): write next[last] = observed top, then CAS the head from
 * the observed word to {tag + 1, first}.  The CAS is a release: it publishes
 * next[last], the rest of the chain's links and everything the caller wrote
 * before (the blocks' state words and data).
 *
 * Pop of k ids: load the head (acquire), walk k - 1 links from top to find
 * the chain's last id, then CAS the head to {tag + 1, next[last]}.  If the
 * CAS succeeds, no other CAS on the head happened between our load and our
 * CAS (each one changes the tag), so the walk we made read the links of a
 * stack nobody popped from meanwhile: the chain top..last is exactly the top
 * k entries, and it is now ours.  If another thread popped and re-pushed
 * nodes meanwhile, our walk may have read a link being rewritten: that is
 * why next[] is _Atomic (relaxed loads, no torn value, always an id or
 * KVP_NIL), and the tag makes our CAS fail, so the value is never used.
 * The classic ABA case (pop A, pop B, push A: head top is A again) is
 * defeated by the tag, short of 2^32 successful updates between one
 * thread's load and CAS.
 *
 * A pop that finds fewer than `min` entries re-reads the head; if it is
 * unchanged, the short chain was the whole stack at that moment, and the
 * pop fails: the stack really held fewer than `min` blocks then.
 *
 * Acquire on the head load pairs with the release CAS of every push: the
 * head's CASes are read-modify-writes, so each push's release sequence
 * contains all later updates, and the popper sees the links and data
 * written by every thread that pushed what it pops.
 *
 * `count` is an upper bound of the entries: push adds before its CAS, pop
 * subtracts after its CAS.  It is exact at quiescence and never below the
 * true count, so it never underflows.
 */
#ifndef KVP_STACK_H
#define KVP_STACK_H

#include <stdatomic.h>
#include <stdint.h>

#include "compiler.h"

#define KVP_NIL UINT32_MAX

struct kvp_stack {
	/* {tag << 32 | top}.  Synchronization: CAS, see above. */
	_Atomic uint64_t head;
	/* Upper bound of the entries.  Synchronization: atomic, relaxed. */
	_Atomic uint64_t count;
};

static inline uint32_t stack_top(uint64_t head)
{
	return (uint32_t)head;
}

static inline uint64_t stack_word(uint64_t old, uint32_t top)
{
	return ((old >> 32) + 1) << 32 | top;
}

/* Single-threaded: put ids 0..n-1 on the stack, 0 on top. */
static inline void stack_init(struct kvp_stack *st, _Atomic uint32_t *next,
			      uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		atomic_init(&next[i], i + 1 < n ? i + 1 : KVP_NIL);
	atomic_init(&st->head, n ? 0 : KVP_NIL);
	atomic_init(&st->count, n);
}

/* Links ids[0..k) into a chain through next[]; the caller owns them. */
static inline void stack_link(_Atomic uint32_t *next, const uint32_t *ids,
			      uint32_t k)
{
	/* Relaxed: the push's release CAS publishes the links. */
	for (uint32_t i = 0; i + 1 < k; i++)
		atomic_store_explicit(&next[ids[i]], ids[i + 1],
				      memory_order_relaxed);
}

/* Pushes the chain first..last of k ids (already linked). */
static inline void stack_push_chain(struct kvp_stack *st,
				    _Atomic uint32_t *next, uint32_t first,
				    uint32_t last, uint32_t k)
{
	uint64_t old;

	/* Before the CAS, so that count stays an upper bound. */
	atomic_fetch_add_explicit(&st->count, k, memory_order_relaxed);
	old = atomic_load_explicit(&st->head, memory_order_relaxed);
	do {
		/* Relaxed: published by the release CAS below. */
		atomic_store_explicit(&next[last], stack_top(old),
				      memory_order_relaxed);
		/* Release: publishes the chain's links, states and data. */
	} while (!atomic_compare_exchange_weak_explicit(
		&st->head, &old, stack_word(old, first), memory_order_release,
		memory_order_relaxed));
}

/* Links and pushes ids[0..k), k >= 1. */
static inline void stack_push_ids(struct kvp_stack *st, _Atomic uint32_t *next,
				  const uint32_t *ids, uint32_t k)
{
	stack_link(next, ids, k);
	stack_push_chain(st, next, ids[0], ids[k - 1], k);
}

/*
 * Pops between min and max ids (1 <= min <= max) as one chain; returns how
 * many, their first id in *first, or 0 if the stack held fewer than min.
 * The chain's links stay valid until the caller pushes its ids again.
 */
static inline uint32_t stack_pop_chain(struct kvp_stack *st,
				       _Atomic uint32_t *next, uint32_t min,
				       uint32_t max, uint32_t *first)
{
	uint64_t old, again;
	uint32_t k, last, below;

	/* Acquire: pairs with the release CAS of every push (see above). */
	old = atomic_load_explicit(&st->head, memory_order_acquire);
	for (;;) {
		last = stack_top(old);
		if (last == KVP_NIL) {
			k = 0;
			below = KVP_NIL;
		} else {
			k = 1;
			/* Relaxed: a stale link only happens when the
			 * head moved, and then the CAS fails. */
			below = atomic_load_explicit(&next[last],
						     memory_order_relaxed);
			while (k < max && below != KVP_NIL) {
				last = below;
				below = atomic_load_explicit(
					&next[last], memory_order_relaxed);
				k++;
			}
		}
		if (k < min) {
			again = atomic_load_explicit(&st->head,
						     memory_order_acquire);
			if (again == old)
				return 0;
			old = again;
			continue;
		}
		/* Acquire on success: we own the chain and read its data. */
		if (atomic_compare_exchange_weak_explicit(
			    &st->head, &old, stack_word(old, below),
			    memory_order_acquire, memory_order_acquire))
			break;
	}
	/* After the CAS, so that count stays an upper bound. */
	atomic_fetch_sub_explicit(&st->count, k, memory_order_relaxed);
	*first = stack_top(old);
	return k;
}

/* Copies a popped chain of k ids starting at first into out[0..k). */
static inline void stack_chain_copy(_Atomic uint32_t *next, uint32_t first,
				    uint32_t k, uint32_t *out)
{
	uint32_t id = first;

	for (uint32_t i = 0; i < k; i++) {
		out[i] = id;
		/* Relaxed: the chain is ours since the pop's CAS. */
		id = atomic_load_explicit(&next[id], memory_order_relaxed);
	}
}

#endif /* KVP_STACK_H */
