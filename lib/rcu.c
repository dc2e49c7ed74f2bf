/* SPDX-License-Identifier: MIT */
/*
 * rcu.c - automatic RCU registration of the library's caller threads.
 * Floor 2 of lib/ (doc/architecture.md, "Layers").
 *
 * liburcu requires every thread with read-side sections to register, and
 * to unregister before it exits.  kvpool's callers need not know: the
 * first read-side section of a thread registers it and arms a pthread key
 * whose destructor unregisters it at thread exit.
 */
#include <pthread.h>
#include <stdbool.h>

#include "compiler.h"
#include "rcu.h"

char kvp_rcu_tsan_sync;
char kvp_rcu_tsan_barrier;

static pthread_key_t unregister_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
KVP_TLS bool kvp_rcu_registered; /* owner thread only */

static void unregister_thread(void *arg)
{
	(void)arg;
	if (kvp_rcu_registered) {
		urcu_memb_unregister_thread();
		kvp_rcu_registered = false;
	}
}

static void make_key(void)
{
	kvp_check_pthread(pthread_key_create(&unregister_key,
					     unregister_thread));
}

void kvp_rcu_register_thread(void)
{
	kvp_check_pthread(pthread_once(&key_once, make_key));
	urcu_memb_register_thread();
	kvp_rcu_registered = true;
	/* The value only has to be non-NULL for the destructor to run. */
	kvp_check_pthread(
		pthread_setspecific(unregister_key, &kvp_rcu_registered));
}

void kvp_rcu_barrier(void)
{
	if (unlikely(!kvp_rcu_registered))
		kvp_rcu_register_thread();
	urcu_memb_barrier();
	/* Every callback's work happens before what follows the barrier. */
	kvp_tsan_acquire(&kvp_rcu_tsan_barrier);
}
