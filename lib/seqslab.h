/* SPDX-License-Identifier: MIT */
/*
 * seqslab.h - sequence structs per thread and per manager: each thread's
 * stashes and lookup cache, taking, releasing and finding structs, and
 * the registry of managers (floor 7, doc/architecture.md "Layers":
 * seqslab.c, over seqmem.c and seqmap.c).
 *
 * Owns struct seqslab (a manager's place in the registry).  The structs'
 * layout and memory are seqmem.h's.
 *
 * Synchronisation: seq_take() and seq_release() may run at once in any
 * threads; a struct is locked with seq_lock(), found with seq_acquire().
 * The registry calls (seqslab_register, seqslab_unregister,
 * seqslab_dying, seqslab_each_manager) take the registry lock
 * themselves.
 */
#ifndef KVP_SEQSLAB_H
#define KVP_SEQSLAB_H

#include <stdbool.h>
#include <stdint.h>

#include "seqmem.h"

struct kvp_manager;

/* A manager in the registry. */
struct seqslab {
	/* The managers of the process, for kvp_manager_check (the
	 * registry below).  Synchronization: mgr_registry_lock. */
	struct kvp_manager *registry_next;
	/* Set (under mgr_registry_lock) when destruction starts: threads
	 * then keep their stashed structs of it instead of handing them
	 * back. */
	bool dying;
};

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
 * The caller holds s's lock and s is alive, or s is the caller's own
 * (published dead, not yet brought to life): so it cannot be on its way
 * back to the system. */
void seq_cache_note(struct kvp_manager *m, uint64_t id, struct kvp_seq *s);
/* Starts loading the struct of id into the cache if this thread's lookup
 * cache knows it (no lock, no check: a hint for a later seq_acquire). */
void seq_prefetch(struct kvp_manager *m, uint64_t id);

/* Manager creation: m in the registry. */
void seqslab_register(struct kvp_manager *m);
/* Destruction starts: threads keep their stashed structs of m, and no
 * reclaim of m starts any more. */
void seqslab_dying(struct kvp_manager *m);
/* Destruction ends: m leaves the registry (after seqmem_fini). */
void seqslab_unregister(struct kvp_manager *m);
/* Calls fn(o, arg) for every registered manager o, under the registry
 * lock (kvp_manager_check). */
void seqslab_each_manager(void (*fn)(struct kvp_manager *o, void *arg),
			  void *arg);

#endif /* KVP_SEQSLAB_H */
