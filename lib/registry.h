/* SPDX-License-Identifier: MIT */
/*
 * registry.h - the registry of live managers (floor 3,
 * doc/architecture.md "Layers": registry.c, over nothing of lib/ but
 * error.c).  kvp_manager_check walks it to count the references of every
 * manager that shares a pool; seqmem.c asks it, under its lock, whether a
 * manager a thread's stash names is still alive before handing structs
 * back to it.
 *
 * Owns struct registry_link, embedded in struct kvp_manager.
 *
 * Synchronisation: every call may run at once in any threads and takes
 * the registry lock itself, but for registry_lock_live, which leaves it
 * held for the caller to release with registry_unlock.
 */
#ifndef KVP_REGISTRY_H
#define KVP_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

struct kvp_manager;

/* A manager's place in the registry. */
struct registry_link {
	/* The next registered manager.  Synchronization: the registry
	 * lock. */
	struct kvp_manager *next;
	/* Set (under the registry lock) when destruction starts: threads
	 * then keep their stashed structs of it instead of handing them
	 * back. */
	bool dying;
};

/* Manager creation (m fully made) and destruction's end. */
void registry_add(struct kvp_manager *m);
void registry_del(struct kvp_manager *m);
/* Destruction starts: registry_lock_live answers false for m. */
void registry_dying(struct kvp_manager *m);
/* Calls fn(o, arg) for every registered manager o, under the registry
 * lock (kvp_manager_check). */
void registry_each(void (*fn)(struct kvp_manager *o, void *arg), void *arg);

/* Managers that left the registry so far: a snapshot taken while a
 * manager was registered lets registry_lock_live skip the walk. */
uint64_t registry_leaves(void);
/* Takes the registry lock and tells whether m, with this uid, is still
 * registered and not dying; `since` is registry_leaves() as read while
 * m was registered.  The caller releases the lock with registry_unlock,
 * and touches m only if the answer was true. */
bool registry_lock_live(struct kvp_manager *m, uint64_t uid, uint64_t since);
void registry_unlock(void);

#endif /* KVP_REGISTRY_H */
