/*
 * seqslab.h - sequence structs: their layout, slabs and recycling, and
 * each thread's lookup cache and stashes (layer 7, doc/architecture.md
 * "Layers": seqslab.c, over seqmap.c, rcu.c, alloc.c and btable.c).
 *
 * Owns struct kvp_seq (whose fields the sequence files above read and
 * write under its lock), struct seq_slab and struct seqslab (a manager's
 * slabs, free and retire lists, and its place in the registry of
 * managers).
 *
 * Synchronisation: seq_take() and seq_release() may run at once in any
 * threads; a struct is locked with seq_lock(), found with seq_acquire().
 * The registry calls (seqslab_register, seqslab_unregister,
 * seqslab_dying, seqslab_each_manager) take the registry lock
 * themselves.  seqslab_fini() needs every other thread done with the
 * manager.
 */
#ifndef KVP_SEQSLAB_H
#define KVP_SEQSLAB_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <urcu/urcu-memb.h>

#include "btable.h"
#include "compiler.h"

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
	 * cleared under lock once a create has published it.  A locker that
	 * sees it treats the sequence as unknown; eviction scans read it
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
	/* Written only while the struct is dead, under lock; read under
	 * lock (a struct found in the map may be reused meanwhile). */
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
	 * on one of them at a time.  Synchronization: see retire_push(),
	 * seq_take() and seq_release(). */
	_Atomic(struct kvp_seq *) link;
	struct rcu_head rcu;
};

/* Sequence structs come in cache-aligned slabs, returned once every struct
 * of one rests on the free list (seqslab.c) or freed with the manager. */
_Static_assert(sizeof(struct kvp_seq) % (2 * KVP_CACHELINE) == 0,
	       "a sequence occupies whole pairs of cache lines");
_Static_assert(offsetof(struct kvp_seq, table) + BTABLE_HOT_BYTES <=
		       KVP_CACHELINE,
	       "an append's fields share the struct's first line");
#define KVP_SEQ_SLAB 32
struct seq_slab {
	struct kvp_seq seqs[KVP_SEQ_SLAB];
	/* The manager's slab list: set by the pusher before the push;
	 * afterwards written (a slab unlinked) only by the reclaimer, and
	 * read by it and by the destruction, after the last reclaim. */
	struct seq_slab *next;
	/* Reclaimer only (seqslab.c's reclaim_finish): the structs of the
	 * slab counted on the detached free list, and the slabs counted. */
	struct seq_slab *counted_next;
	uint32_t nidle;
};

/* A manager's sequence structs. */
struct seqslab {
	/* The managers of the process, for kvp_manager_check (the
	 * registry below).  Synchronization: mgr_registry_lock. */
	struct kvp_manager *registry_next;
	/* Set (under mgr_registry_lock) when destruction starts: threads
	 * then keep their stashed structs of it instead of handing them
	 * back. */
	bool dying;
	/* Every slab of sequence structs: push-only (CAS), freed at
	 * destruction. */
	_Atomic(struct seq_slab *) slabs;
	/* Recycled structs: a Treiber stack, pushed by RCU callbacks, popped
	 * inside read-side sections (which rules out ABA: a popped struct
	 * comes back only after a grace period). */
	kvp_cacheline_aligned _Atomic(struct kvp_seq *) free_seqs;
	/* Removed structs waiting for a batch grace period: push-only (CAS),
	 * detached whole (exchange) by retire_push(), at most once per
	 * KVP_RETIRE_PERIOD_NS unless KVP_RETIRE_MAX are waiting.
	 * flushed_n and flushed_ns: nretired and the monotonic clock at the
	 * last detach (relaxed: they only pace the detaches). */
	kvp_cacheline_aligned _Atomic(struct kvp_seq *) retired;
	_Atomic uint32_t nretired, flushed_n;
	_Atomic uint64_t flushed_ns;
	/* Memory coming back (seqslab.c, "Returning slabs").  epoch: bumped
	 * by each reclaim before its grace period; a lookup-cache entry is
	 * only used under the epoch it was made in.  Read-mostly, so on a
	 * line of its own.  Synchronization: atomic (see the argument). */
	kvp_cacheline_aligned _Atomic uint64_t epoch;
	/* Slabs held, and returned so far (relaxed: they pace reclaims and
	 * feed kvp_manager_dump). */
	_Atomic uint32_t nslabs;
	_Atomic uint64_t slabs_returned;
	/* A thread flushed (kvp_thread_flush): reclaim without waiting for
	 * KVP_RECLAIM_PERIOD_NS.  again: a due reclaim found one under
	 * way, which then starts another.  closing: destruction started, no
	 * reclaim starts.  reclaiming, kicking: a reclaim or a kick is
	 * queued on call_rcu (the destruction waits for both to end). */
	_Atomic bool asked, again, closing;
	_Atomic uint32_t reclaiming, kicking;
	_Atomic uint64_t reclaimed_ns;
	/* The detached free list a reclaim counts: written before its
	 * call_rcu, read by its callback (the hand-off orders them). */
	struct kvp_seq *reclaim_chain;
	struct rcu_head reclaim_rcu, kick_rcu;
};

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

/*
 * Finds sequence id and returns it locked, or NULL if it is unknown or
 * being freed.  The caller needs no RCU section: the struct is type-stable
 * and the lock keeps it alive.
 */
struct kvp_seq *seq_acquire(struct kvp_manager *m, uint64_t id);

/* An unpublished, dead struct of m (recycled, or new), or NULL if out of
 * memory. */
struct kvp_seq *seq_take(struct kvp_manager *m);
/* Recycles a dead struct, unpublished or removed from the map. */
void seq_release(struct kvp_seq *s);
/* Remembers s, just published under id, in this thread's lookup cache.
 * The caller holds s's lock and s is alive (so it cannot be on its way
 * back to the system). */
void seq_cache_note(struct kvp_manager *m, uint64_t id, struct kvp_seq *s);

/* Manager creation: an empty seqslab, then m in the registry. */
void seqslab_init(struct seqslab *sl);
void seqslab_register(struct kvp_manager *m);
/* Destruction starts: threads keep their stashed structs of m, and no
 * reclaim of m starts any more. */
void seqslab_dying(struct kvp_manager *m);
/* Hands every retired struct of m to one call_rcu. */
void seqslab_flush(struct kvp_manager *m);
/* Slabs m holds and has returned (kvp_manager_dump). */
void seqslab_counts(struct kvp_manager *m, uint64_t *held,
		    uint64_t *returned);
/* Destruction ends: m leaves the registry, its slabs are freed (every
 * struct recycled: after seqslab_flush and seqslab_quiesce). */
/* Waits (RCU barriers) until no recycling or reclaim of m is queued. */
void seqslab_quiesce(struct kvp_manager *m);
void seqslab_unregister(struct kvp_manager *m);
void seqslab_fini(struct kvp_manager *m);
/* Calls fn(o, arg) for every registered manager o, under the registry
 * lock (kvp_manager_check). */
void seqslab_each_manager(void (*fn)(struct kvp_manager *o, void *arg),
			  void *arg);

#endif /* KVP_SEQSLAB_H */
