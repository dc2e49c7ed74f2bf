/* SPDX-License-Identifier: MIT */
/*
 * seqfields.h - a sequence struct's lock and token count: the accessors
 * that the sequence files (seq.c, seqprefix.c, data.c, export.c,
 * preempt.c, manager.c) and the lookup in seqmem.c use on a struct
 * kvp_seq (seqmem.h), kept out of the memory room so that a call path
 * enters that room only through its door.
 *
 * Synchronisation: seq_lock/seq_unlock are a test-and-test-and-set spin
 * lock (acquire on taking, release on giving back) over every mutation
 * and consistent read of the sequence; num_tokens is written under it
 * and read relaxed by eviction scans and statistics.
 */
#ifndef KVP_SEQFIELDS_H
#define KVP_SEQFIELDS_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "compiler.h"
#include "seqmem.h"

static inline uint32_t seq_tokens(const struct kvp_seq *s)
{
	return atomic_load_explicit(&s->num_tokens, memory_order_relaxed);
}

static inline void seq_set_tokens(struct kvp_seq *s, uint32_t tokens)
{
	atomic_store_explicit(&s->num_tokens, tokens, memory_order_relaxed);
}

static inline void seq_lock(struct kvp_seq *s)
{
	unsigned spins = 0;

	/* Acquire: pairs with seq_unlock()'s release. */
	while (atomic_exchange_explicit(&s->lock, 1, memory_order_acquire)) {
		while (atomic_load_explicit(&s->lock, memory_order_relaxed)) {
			/* The holder may be descheduled (more threads than
			 * cores): stop burning its CPU after a while. */
			if (++spins > 64) {
				sched_yield();
				spins = 0;
			} else {
				kvp_cpu_relax();
			}
		}
	}
}

static inline void seq_unlock(struct kvp_seq *s)
{
	atomic_store_explicit(&s->lock, 0, memory_order_release);
}

#endif /* KVP_SEQFIELDS_H */
