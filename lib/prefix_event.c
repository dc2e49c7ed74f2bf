/* SPDX-License-Identifier: MIT */
/*
 * prefix_event.c - a manager's prefix-cache events: where they go (the
 * sink and the medium they name) and their emission (seq numbers, token
 * counts).  prefix.c reports its deletions and seqprefix.c and seq.c
 * their insertions through it.
 * Floor 5 of lib/ (doc/architecture.md, "Layers"), under prefix.c; it
 * calls nothing of lib/ but the error paths of compiler.h.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "compiler.h"
#include "prefix.h"
#include "prefix_event.h"

void prefix_set_event_sink(struct prefix_cache *pc, kvp_event_cb cb,
			   void *arg)
{
	pc->event_cb = cb;
	pc->event_arg = cb ? arg : NULL;
}

int prefix_set_event_medium(struct prefix_cache *pc, const char *medium)
{
	size_t n = medium ? strlen(medium) : 0;

	if (n >= sizeof(pc->event_medium))
		return -EINVAL;
	memset(pc->event_medium, 0, sizeof(pc->event_medium));
	memcpy(pc->event_medium, medium ? medium : "", n);
	return 0;
}

void prefix_emit_event(struct prefix_cache *pc, struct kvp_event *ev)
{
	if (!pc->event_cb)
		return;
	if (ev->type == KVP_EVENT_STORED) {
		ev->block_tokens = pc->block_tokens;
		ev->num_tokens = ev->nhashes * pc->block_tokens;
	}
	/* The event lock is held: seq numbers the calls in order. */
	ev->seq = atomic_load_explicit(&pc->event_seq, memory_order_relaxed);
	/* Relaxed: only the statistics read it outside the lock. */
	atomic_store_explicit(&pc->event_seq, ev->seq + 1,
			      memory_order_relaxed);
	ev->medium = pc->event_medium[0] ? pc->event_medium : NULL;
	pc->event_cb(ev, pc->event_arg);
}

