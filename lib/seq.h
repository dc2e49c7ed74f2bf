/* SPDX-License-Identifier: MIT */
/*
 * seq.h - what seq.c (layer 8, doc/architecture.md "Layers") offers the
 * files above it: the prefix glue (seqprefix.c), preemption (preempt.c)
 * and the manager's destruction (manager.c).
 */
#ifndef KVP_SEQ_H
#define KVP_SEQ_H

#include <stdint.h>

#include "kvpool.h"
#include "seqfields.h"
#include "seqmem.h"

/*
 * kvp_seq_create and kvp_seq_create_cached: a sequence of num_tokens whose
 * first blocks are the cached ones for hashes[0..limit) (limit 0: none),
 * the rest freshly allocated.  *hits receives the number of hit blocks.
 * Returns 0 or a negative errno, as kvp_seq_create.
 */
int seq_create(struct kvp_manager *m, uint64_t id, uint32_t num_tokens,
	       const struct kvp_hash *hashes, uint32_t limit, uint32_t *hits);

/* Removes a locked, live sequence (a free, or a preemption's victim) and
 * unlocks it; its blocks' references are dropped. */
void seq_remove_locked(struct kvp_manager *m, struct kvp_seq *s);

#endif /* KVP_SEQ_H */
