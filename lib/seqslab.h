/* SPDX-License-Identifier: MIT */
/*
 * seqslab.h - the back of the sequence-memory room: slabs of sequence
 * structs, a manager's free list of them, and the reclaims that give
 * wholly free slabs back (seqslab.c, floor 7, doc/architecture.md
 * "Layers").  Its only caller is seqmem.c, the room's door: the sequence
 * layer never sees it.
 *
 * Owns struct seq_slab (opaque: a slab is handed out as its array of
 * KVP_SEQ_SLAB structs), struct seqslabs (a manager's slabs, free list
 * and reclaim state, embedded in seqmem.h's struct seqmem), struct
 * seqslab_reader (a thread's mark while it uses a lookup-cache entry)
 * and the list of every thread's reader.
 *
 * Synchronisation: seqslab_new, seqslab_pop, seqslab_recycled,
 * seqslab_kick, seqslab_reader_add and _del may run at once in any
 * threads, outside read-side sections (seqslab_recycled from RCU
 * callbacks); seqslab_close once, then seqslab_fini with every other
 * thread done with the manager.
 */
#ifndef KVP_SEQSLAB_H
#define KVP_SEQSLAB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <urcu/urcu-memb.h>

#include "compiler.h"
#include "tcache.h"

struct kvp_manager;
struct kvp_seq;
struct seq_slab;

/* Sequence structs come in cache-aligned slabs of KVP_SEQ_SLAB. */
#define KVP_SEQ_SLAB 32

/* A manager's slabs, free list and reclaims (seqslab.c, "Returning
 * slabs"). */
struct seqslabs {
	/* Every slab of sequence structs: pushed (CAS), unlinked by the
	 * reclaimer, freed by it or at destruction. */
	_Atomic(struct seq_slab *) list;
	/* Recycled structs: a Treiber stack, pushed by RCU callbacks, popped
	 * inside read-side sections (which rules out ABA: a popped struct
	 * comes back only after a grace period). */
	kvp_cacheline_aligned _Atomic(struct kvp_seq *) free_seqs;
	/* epoch: a process-unique number (kvp_next_uid), redrawn by each
	 * reclaim before its grace period; a lookup-cache entry is only
	 * used under the epoch it was made in (so never for another
	 * manager).  Read-mostly, so on a line of its own.  Synchronization:
	 * atomic (see the argument in seqslab.c). */
	kvp_cacheline_aligned _Atomic uint64_t epoch;
	/* Slabs held, and returned so far (relaxed: they pace reclaims and
	 * feed kvp_manager_dump). */
	_Atomic uint32_t nslabs;
	_Atomic uint64_t returned;
	/* A thread flushed (kvp_thread_flush): reclaim without waiting for
	 * the period.  again: a due reclaim found one under way, which then
	 * starts another.  closing: destruction started, no reclaim starts.
	 * reclaiming, kicking: a reclaim or a kick is queued on call_rcu
	 * (the destruction waits for both to end). */
	_Atomic bool asked, again, closing;
	_Atomic uint32_t reclaiming, kicking;
	_Atomic uint64_t reclaimed_ns;
	/* The detached free list a reclaim counts, and whether a thread
	 * asked for the reclaim: written before its call_rcu, read by its
	 * callback (the hand-off orders them).  untrimmed: slabs freed since
	 * the last kvp_alloc_trim (reclaimers only, one at a time). */
	struct kvp_seq *reclaim_chain;
	bool reclaim_asked;
	uint32_t untrimmed;
	struct rcu_head reclaim_rcu, kick_rcu;
};

/*
 * A thread's mark while it uses a lookup-cache entry (seqmem.c's
 * seq_cache_hit): reclaims wait for every mark to clear before they free
 * anything (seqslab.c, "Returning slabs").  Embedded in the thread's
 * state.
 */
struct seqslab_reader {
	/* 1 between enter and exit.  Written by its thread, read by
	 * reclaimers. */
	_Atomic uint32_t busy;
	/* Every thread's reader: seqslab.c's readers_lock. */
	struct seqslab_reader *next, **pprev;
};

static inline void seqslab_reader_enter(struct seqslab_reader *r)
{
	/* Relaxed: ordered before the caller's load of the epoch by the
	 * fence below, or by the reclaimer's membarrier (tcache_enter's
	 * pattern). */
	atomic_store_explicit(&r->busy, 1, memory_order_relaxed);
	if (unlikely(!tcache_membarrier_ok))
		atomic_thread_fence(memory_order_seq_cst);
	else
		kvp_compiler_barrier();
}

static inline void seqslab_reader_exit(struct seqslab_reader *r)
{
	/* Release: the caller's use of a struct before a reclaimer's
	 * free (pairs with seqslab.c's readers_wait). */
	atomic_store_explicit(&r->busy, 0, memory_order_release);
}

/* A manager's reclaim epoch.  Acquire: pairs with the store of
 * seqslab.c's reclaim_start, so that a reader of the new epoch sees the
 * detach before it. */
static inline uint64_t seqslab_epoch(struct seqslabs *sl)
{
	return atomic_load_explicit(&sl->epoch, memory_order_acquire);
}

/* The monotonic clock, coarse (read from the vDSO: no system call), in
 * nanoseconds; 0 if it cannot be read.  It paces batches and reclaims. */
static inline uint64_t seqslab_coarse_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Registers a thread's reader (at its first use), and removes it (at
 * its exit). */
void seqslab_reader_add(struct seqslab_reader *r);
void seqslab_reader_del(struct seqslab_reader *r);

/* The KVP_SEQ_SLAB structs of a new slab of m (dead, unpublished, on
 * m's slab list), or NULL if out of memory. */
struct kvp_seq *seqslab_new(struct kvp_manager *m);
/* A struct from m's free list, or NULL. */
struct kvp_seq *seqslab_pop(struct kvp_manager *m);
/* From an RCU callback, a grace period after their removal: the chain
 * first..last (linked through `link`) goes on m's free list, and a
 * reclaim starts if one is due; asked: a thread asked for it
 * (kvp_thread_flush), so it need not wait for the period. */
void seqslab_recycled(struct kvp_manager *m, struct kvp_seq *first,
		      struct kvp_seq *last, bool asked);
/* kvp_thread_flush found nothing of m to recycle: a reclaim is asked
 * for, after the recycling queued before this call. */
void seqslab_kick(struct kvp_manager *m);

/* m zeroed, before any other call. */
void seqslab_init(struct kvp_manager *m);
/* Destruction starts: no reclaim of m starts any more. */
void seqslab_close(struct kvp_manager *m);
/* Destruction, every struct of m recycled or queued for it: waits (RCU
 * barriers) until no recycling or reclaim of m is queued, then frees
 * every slab. */
void seqslab_fini(struct kvp_manager *m);
/* Slabs m holds and has returned (kvp_manager_dump). */
void seqslab_counts(struct kvp_manager *m, uint64_t *held,
		    uint64_t *returned);

#endif /* KVP_SEQSLAB_H */
