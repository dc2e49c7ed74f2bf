/* SPDX-License-Identifier: MIT */
/*
 * tsan.h - ThreadSanitizer annotations, compiled to nothing without TSan.
 * Floor 1 of lib/ (doc/architecture.md, "Layers").
 *
 * kvpool's own synchronisation is C11 atomics, which TSan understands.  Two
 * hand-offs are invisible to it and are annotated here:
 *  - liburcu's atomics are inline asm (publish a node, look it up, reclaim it
 *    after a grace period): rcu.h has the annotations' protocol;
 *  - the thread-cache drain protocol orders the owner against the drainer
 *    with membarrier(2), which TSan does not model.  In every execution the
 *    drainer also acquires the owner's release of its `busy` word, so no
 *    annotation is needed there; the protocol's argument is in tcache.c.
 */
#ifndef KVP_TSAN_H
#define KVP_TSAN_H

#include "config.h"

#if defined(KVP_TSAN) || defined(__SANITIZE_THREAD__)
#define KVP_TSAN_ENABLED 1
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define kvp_tsan_acquire(addr) __tsan_acquire((void *)(addr))
#define kvp_tsan_release(addr) __tsan_release((void *)(addr))
#else
#define KVP_TSAN_ENABLED 0
#define kvp_tsan_acquire(addr) ((void)(addr))
#define kvp_tsan_release(addr) ((void)(addr))
#endif

#endif /* KVP_TSAN_H */
