/* SPDX-License-Identifier: MIT */
/*
 * rcu.h - liburcu (memb flavour) glue: automatic thread registration and
 * the ThreadSanitizer hand-offs liburcu's asm atomics hide.
 * Floor 2 of lib/ (doc/architecture.md, "Layers").
 *
 * Read-side sections may nest and may block briefly (the memb flavour
 * allows it).  A node published into an RCU structure is announced with
 * kvp_rcu_publish() before insertion and kvp_rcu_found() after a lookup
 * finds it; a call_rcu callback starts with kvp_rcu_reclaim() before it
 * frees anything.
 */
#ifndef KVP_RCU_H
#define KVP_RCU_H

#include <stdbool.h>
#include <urcu/urcu-memb.h>

#include "compiler.h"
#include "tsan.h"

/* Waits for every callback queued with call_rcu so far. */
void kvp_rcu_barrier(void);

/* Every reader releases this at read-unlock; reclaimers acquire it. */
extern char kvp_rcu_tsan_sync;
/* Every callback releases this when done; kvp_rcu_barrier acquires it. */
extern char kvp_rcu_tsan_barrier;

/* Whether this thread is registered with liburcu (rcu.c). */
extern KVP_TLS bool kvp_rcu_registered;
void kvp_rcu_register_thread(void);

/* Registers the calling thread with RCU if needed; then read-locks.
 * Inline: a sequence operation enters a few sections. */
static inline void kvp_rcu_read_lock(void)
{
	if (unlikely(!kvp_rcu_registered))
		kvp_rcu_register_thread();
	urcu_memb_read_lock();
}

static inline void kvp_rcu_read_unlock(void)
{
	/* Everything this reader did happens before any reclamation that
	 * waits for it (pairs with kvp_rcu_reclaim()). */
	kvp_tsan_release(&kvp_rcu_tsan_sync);
	urcu_memb_read_unlock();
}

static inline void kvp_rcu_publish(const void *node)
{
	kvp_tsan_release(node);
}

static inline void kvp_rcu_found(const void *node)
{
	kvp_tsan_acquire(node);
}

static inline void kvp_rcu_reclaim(void)
{
	kvp_tsan_acquire(&kvp_rcu_tsan_sync);
}

static inline void kvp_rcu_callback_done(void)
{
	kvp_tsan_release(&kvp_rcu_tsan_barrier);
}

/*
 * call_rcu with the hand-off annotated: what the caller did before
 * happens before the callback, which must start with kvp_rcu_reclaim_head()
 * (liburcu's queue is invisible to TSan).
 */
static inline void kvp_rcu_call(struct rcu_head *head,
				void (*fn)(struct rcu_head *))
{
	kvp_tsan_release(head);
	urcu_memb_call_rcu(head, fn);
}

static inline void kvp_rcu_reclaim_head(struct rcu_head *head)
{
	kvp_tsan_acquire(head);
	kvp_rcu_reclaim();
}

#endif /* KVP_RCU_H */
