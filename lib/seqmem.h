/* SPDX-License-Identifier: MIT */
/*
 * seqmem.h - the memory of sequence structs, one room with a narrow door
 * (floor 7, doc/architecture.md "Layers": seqmem.c and, behind it,
 * seqslab.c; over btable.c, mgrstat.c, tcache.c, seqmap.c, registry.c,
 * rcu.c and alloc.c).
 *
 * The door.  The sequence layer asks for a struct (seqmem_take), gives
 * one back (seqmem_give), finds one by id (seq_acquire, seq_prefetch,
 * seqmem_note), and asks for reclaims (kvp_thread_flush); the manager
 * makes and ends a manager's part (seqmem_init, seqmem_close,
 * seqmem_fini).  Slabs,
 * stashes, the retire and free lists, the lookup cache and the reclaims
 * stay behind it, in seqmem.c and seqslab.c (the slabs, the free list and
 * the reclaims, which only seqmem.c calls).
 *
 * Owns struct kvp_seq (whose fields the sequence files above read and
 * write under its lock) and struct seqmem (a manager's slabs and lists).
 *
 * Synchronisation: seqmem_take, seqmem_give, seqmem_note, seq_acquire,
 * seq_prefetch and kvp_thread_flush may run at once in any threads (not
 * inside a read-side section); a struct is locked with seq_lock()
 * (seqfields.h).
 * seqmem_close takes the registry lock itself; seqmem_fini needs every
 * other thread done with the manager.
 */
#ifndef KVP_SEQMEM_H
#define KVP_SEQMEM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <urcu/urcu-memb.h>

#include "btable.h"
#include "compiler.h"
#include "seqslab.h"

struct kvp_manager;

/*
 * A sequence.  Its struct is type-stable: it belongs to one manager, is
 * recycled (at once, through its freeing thread's stash, or after an RCU
 * grace period through the manager's free list), and freed with its slab
 * only when the whole slab rests on the free list and a grace period
 * has passed (seqslab.c, "Returning slabs"), or when the manager is
 * destroyed.  So a stale pointer to it (a map reader's inside its
 * read-side section, a lookup-cache entry of the current epoch) is always
 * safe to lock and check: `dead` or another id means a miss.  The map
 * never reads it (seqmap.c).
 */
struct kvp_seq {
	/* Whole pairs of cache lines (CPUs prefetch lines in pairs):
	 * neighbours in a slab often belong to other threads.  The first
	 * line holds everything an append within a block reads or writes,
	 * the second the rest of the table and the rest. */
	/* Serialises every mutation and consistent read of the sequence. */
	_Alignas(2 * KVP_CACHELINE) _Atomic uint32_t lock;
	/* True while the struct holds no live sequence: set under lock by
	 * the free that removes it (only the thread that flips it goes on),
	 * cleared by a release store, unlocked, once a create or fork has
	 * published it (seq_bring_alive).  A locker loads it with acquire and
	 * treats a dead sequence as unknown; eviction scans read it
	 * relaxed. */
	_Atomic bool dead;
	/* The last block may be shared (a fork or a rollback happened since
	 * it was allocated): append must check its count for copy-on-write.
	 * False means it is ours alone, and saves a read of a state word
	 * other threads write.  lock. */
	bool tail_shared;
	/* Prefix caching: a stream-trimmed sequence no longer follows its
	 * hash chain and cannot commit.  lock. */
	bool trimmed;
	/* Written only while the struct is dead and its taker's; read under
	 * lock once `dead` is seen false (a struct found in the map may be
	 * reused meanwhile). */
	uint64_t id;
	/* Written under lock; eviction scans and stats read them relaxed. */
	_Atomic uint32_t num_tokens;
	_Atomic int32_t priority;
	_Atomic uint64_t last_access, access_count;
	struct kvp_manager *mgr; /* immutable */
	/* The block table (btable.h): its length, tail and chunk pointers
	 * end the first line; its capacity and inline chunk pointers (the
	 * chunks of short sequences) follow.  lock. */
	struct btable table;
	/* Prefix caching: blocks [0, committed) are registered or were
	 * hits.  lock. */
	uint32_t committed;
	/* Blocks [0, hits) were prefix-cache hits (or, for a fork, its
	 * source's): at the free, their references may be parked (pool.c).
	 * lock. */
	uint32_t hits;
	struct seq_slab *slab; /* immutable: the slab it belongs to */
	/* The next struct on the manager's retire list, in the batch handed
	 * to call_rcu, on its free list, or on a thread's stash: a struct is
	 * on one of them at a time.  Synchronization: see seqmem.c's
	 * retire(), seqmem_take() and seqmem_give(). */
	_Atomic(struct kvp_seq *) link;
	struct rcu_head rcu;
};

/* Sequence structs come in cache-aligned slabs of KVP_SEQ_SLAB
 * (seqslab.c), each returned once every struct of it rests on the free
 * list, or freed with the manager. */
_Static_assert(sizeof(struct kvp_seq) % (2 * KVP_CACHELINE) == 0,
	       "a sequence occupies whole pairs of cache lines");
_Static_assert(offsetof(struct kvp_seq, table) + BTABLE_HOT_BYTES <=
		       KVP_CACHELINE,
	       "an append's fields share the struct's first line");

/* A manager's sequence structs: its slabs, free list and reclaims
 * (seqslab.h), and its retire list. */
struct seqmem {
	struct seqslabs sl;
	/* Removed structs waiting for a batch grace period: push-only (CAS),
	 * pushed by retire(), detached whole (exchange), at most once per
	 * KVP_RETIRE_PERIOD_NS unless KVP_RETIRE_MAX are waiting.
	 * flushed_n and flushed_ns: nretired and the monotonic clock at the
	 * last detach (relaxed: they only pace the detaches). */
	kvp_cacheline_aligned _Atomic(struct kvp_seq *) retired;
	_Atomic uint32_t nretired, flushed_n;
	_Atomic uint64_t flushed_ns;
};

/*
 * The door: a struct for a new sequence, and back.
 */
/* An unpublished, dead struct of m (this thread's stash, its fresh slab,
 * m's free list, or a new slab), or NULL if out of memory. */
struct kvp_seq *seqmem_take(struct kvp_manager *m);
/* Recycles a dead struct, unpublished or removed from the map (its
 * references dropped): reused at once by this thread, by others after a
 * grace period. */
void seqmem_give(struct kvp_seq *s);

/*
 * Finding a sequence.
 */
/* Finds sequence id and returns it locked, or NULL if it is unknown or
 * being freed.  The caller needs no RCU section: the struct is
 * type-stable and the lock keeps it alive. */
struct kvp_seq *seq_acquire(struct kvp_manager *m, uint64_t id);
/* Remembers s, just published under id, in this thread's lookup cache.
 * The caller holds s's lock and s is alive, or s is the caller's own
 * (published dead, not yet brought to life): so it cannot be on its way
 * back to the system. */
void seqmem_note(struct kvp_manager *m, uint64_t id, struct kvp_seq *s);
/* Starts loading the struct of id into the cache if this thread's lookup
 * cache knows it (no lock, no check: a hint for a later seq_acquire). */
void seq_prefetch(struct kvp_manager *m, uint64_t id);

/*
 * A manager's part (manager.c).
 */
/* m zeroed, before any other call. */
void seqmem_init(struct kvp_manager *m);
/* Destruction starts: threads keep their stashed structs of m, and no
 * reclaim of m starts any more. */
void seqmem_close(struct kvp_manager *m);
/* Destruction, every sequence of m removed: recycles every struct, waits
 * (RCU barriers) until no recycling or reclaim of m is queued, frees
 * every slab. */
void seqmem_fini(struct kvp_manager *m);
/* Slabs m holds and has returned (kvp_manager_dump). */
void seqmem_counts(struct kvp_manager *m, uint64_t *held,
		   uint64_t *returned);

#endif /* KVP_SEQMEM_H */
