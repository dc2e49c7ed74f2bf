/* SPDX-License-Identifier: MIT */
/*
 * prefix_event.h - a manager's prefix-cache events (prefix_event.c, floor
 * 5, doc/architecture.md "Layers": under prefix.c, which reports its map
 * changes through it): the sink, the medium, the event lock that orders
 * the events with the changes they report, and emission.  The event
 * fields of struct prefix_cache (prefix.h: event_lock, event_cb,
 * event_arg, event_seq, event_medium) are prefix_event.c's; prefix.c
 * only creates and destroys the lock and reads event_seq for the
 * statistics.
 */
#ifndef KVP_PREFIX_EVENT_H
#define KVP_PREFIX_EVENT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "compiler.h"
#include "kvpool.h"
#include "prefix.h"

/* Where pc reports its events (cb NULL: nowhere); before concurrent use. */
void prefix_set_event_sink(struct prefix_cache *pc, kvp_event_cb cb,
			   void *arg);

/*
 * A manager's event lock orders its events with the map changes they
 * report (STORED with its insertions, REMOVED with its deletions, CLEARED
 * with a reset), so that per hash the callback sees them in the order the
 * map changed.  Taken only when a callback is set: without one there is
 * nothing to order.  Lock order: event lock, then the list lock.
 * prefix_events_begin takes it and prefix_events_end drops it, around a
 * commit, an eviction's report or a reset (no-ops without a callback).
 */
static inline void prefix_events_begin(struct prefix_cache *pc)
{
	if (pc->event_cb)
		kvp_check_pthread(pthread_mutex_lock(&pc->event_lock));
}

static inline void prefix_events_end(struct prefix_cache *pc)
{
	if (pc->event_cb)
		kvp_check_pthread(pthread_mutex_unlock(&pc->event_lock));
}

/* An event of type for hashes[0..n) after parent (NULL: from the root),
 * its other fields zero and no LoRA (lora_id -1): the caller sets what
 * else its event carries before prefix_emit_event. */
static inline void prefix_event_init(struct kvp_event *ev,
				     enum kvp_event_type type,
				     const struct kvp_hash *hashes, uint32_t n,
				     const struct kvp_hash *parent)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	ev->hashes = hashes;
	ev->nhashes = n;
	ev->parent = parent;
	ev->lora_id = -1;
}

/* Emits an event the caller filled (type, hashes, parent and the STORED
 * fields) to pc's callback, if any (under pc's event lock); this sets
 * its seq, medium and token counts. */
void prefix_emit_event(struct prefix_cache *pc, struct kvp_event *ev);

/* The same for an event of type for hashes[0..n) after parent (NULL: from
 * the root); inline: an eviction reports with it, most often to no
 * callback. */
static inline void prefix_emit(struct prefix_cache *pc,
			       enum kvp_event_type type,
			       const struct kvp_hash *hashes, uint32_t n,
			       const struct kvp_hash *parent)
{
	struct kvp_event ev;

	if (!pc->event_cb)
		return;
	prefix_event_init(&ev, type, hashes, n, parent);
	prefix_emit_event(pc, &ev);
}

/* The medium pc's events name (NULL: none); before concurrent use.
 * Returns 0 or -EINVAL (15 bytes at most). */
int prefix_set_event_medium(struct prefix_cache *pc, const char *medium);

#endif /* KVP_PREFIX_EVENT_H */
