/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the registry of live managers (floor 3,
 * doc/architecture.md "Layers"): creation and destruction add and remove
 * them, kvp_manager_check walks them, and seqmem.c checks a stash's
 * manager against them before handing structs back.
 *
 * Owns struct registry_link (registry.h) and the registry itself.  Not a
 * hot path: managers' creation and destruction, checks, and a thread's
 * hand-back of a stash.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "compiler.h"
#include "manager.h"
#include "registry.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvp_manager *registry; /* registry_lock */
/* Managers removed from the registry so far.  Synchronization: written
 * under registry_lock, read relaxed (a stash's snapshot of it). */
static _Atomic uint64_t leaves;

void registry_add(struct kvp_manager *m)
{
	kvp_check_pthread(pthread_mutex_lock(&registry_lock));
	m->reg.next = registry;
	registry = m;
	kvp_check_pthread(pthread_mutex_unlock(&registry_lock));
}

void registry_del(struct kvp_manager *m)
{
	struct kvp_manager **pp;

	kvp_check_pthread(pthread_mutex_lock(&registry_lock));
	for (pp = &registry; *pp; pp = &(*pp)->reg.next) {
		if (*pp == m) {
			*pp = m->reg.next;
			/* Relaxed: written under the lock, which orders it
			 * for registry_lock_live. */
			atomic_store_explicit(
				&leaves,
				atomic_load_explicit(&leaves,
						     memory_order_relaxed) +
					1,
				memory_order_relaxed);
			break;
		}
	}
	kvp_check_pthread(pthread_mutex_unlock(&registry_lock));
}

void registry_dying(struct kvp_manager *m)
{
	kvp_check_pthread(pthread_mutex_lock(&registry_lock));
	m->reg.dying = true;
	kvp_check_pthread(pthread_mutex_unlock(&registry_lock));
}

void registry_each(void (*fn)(struct kvp_manager *o, void *arg), void *arg)
{
	kvp_check_pthread(pthread_mutex_lock(&registry_lock));
	for (struct kvp_manager *o = registry; o; o = o->reg.next)
		fn(o, arg);
	kvp_check_pthread(pthread_mutex_unlock(&registry_lock));
}

uint64_t registry_leaves(void)
{
	/* Relaxed: compared under registry_lock, where it is written; a
	 * stale (lower) value only costs a walk. */
	return atomic_load_explicit(&leaves, memory_order_relaxed);
}

/* Whether m, with this uid, is registered.  registry_lock held. */
static bool registered(struct kvp_manager *m, uint64_t uid)
{
	for (struct kvp_manager *o = registry; o; o = o->reg.next)
		if (o == m)
			return o->uid == uid;
	return false;
}

bool registry_lock_live(struct kvp_manager *m, uint64_t uid, uint64_t since)
{
	kvp_check_pthread(pthread_mutex_lock(&registry_lock));
	/* No manager left the registry since the snapshot (and m was
	 * registered then): registered still, with no walk.  m is read only
	 * once it is known registered: a destroyed manager's memory may be
	 * gone. */
	if (atomic_load_explicit(&leaves, memory_order_relaxed) != since &&
	    !registered(m, uid))
		return false;
	return !m->reg.dying;
}

void registry_unlock(void)
{
	kvp_check_pthread(pthread_mutex_unlock(&registry_lock));
}
