/* SPDX-License-Identifier: MIT */
/*
 * seqmap.h - the map seq_id -> sequence: the library's own lock-free
 * open-addressing table (linear probing), RCU-protected.
 * Floor 6 of lib/ (doc/architecture.md, "Layers").
 *
 * Values are opaque non-NULL pointers (seqmem.h's sequence structs).
 * Lookups and iteration run inside an RCU read-side section
 * (kvp_rcu_read_lock); insert and remove run outside one (they take
 * their own, and may wait for a rebuild, which waits for a grace period;
 * a remove inside one never rebuilds, and may leave the table large).
 * Insert and remove may race freely with each other and with lookups:
 * exactly one insert of an id wins while it is present, and one remove of
 * an entry succeeds.  The map never reads a value's memory, so a removed
 * value may be reused at once (seq_acquire validates what it finds
 * under the sequence's lock).
 */
#ifndef KVP_SEQMAP_H
#define KVP_SEQMAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <urcu/urcu-memb.h>

struct seqmap_table;

struct seqmap {
	/* The current table: replaced by a rebuild (RCU: readers may still
	 * read the old one until a grace period has passed). */
	_Atomic(struct seqmap_table *) table;
	/* Id 0 (the table's empty key) lives here instead. */
	_Atomic(void *) zero;
	/* Rebuilds so far (relaxed: tests and statistics). */
	_Atomic uint64_t rebuilds;
	/* The rebuilds' tuning (conf.h), copied by seqmap_init(): read-only
	 * afterwards. */
	uint32_t grow_ratio, keep_ratio;
	uint64_t period_ns;
};

/* 0 or -ENOMEM. */
int seqmap_init(struct seqmap *map);
/* No thread inside any of the map's calls; entries left are dropped. */
void seqmap_fini(struct seqmap *map);

/* Read side: the value stored under id, or NULL. */
void *seqmap_lookup(struct seqmap *map, uint64_t id);
/* Not in a read-side section: stores v (non-NULL) under id unless id is
 * present.  0, -EEXIST, or -ENOMEM (the table was full and could not be
 * rebuilt). */
int seqmap_insert(struct seqmap *map, uint64_t id, void *v);
/* Not in a read-side section: removes id if it maps to v; false if it
 * did not. */
bool seqmap_remove(struct seqmap *map, uint64_t id, void *v);

/* Read side: every value present throughout the iteration is visited
 * once (values inserted or removed meanwhile, maybe), in no order; NULL
 * at the end. */
struct seqmap_iter {
	struct seqmap_table *t;
	uint64_t next; /* slot index; 0 means the zero slot first */
};
void *seqmap_first(struct seqmap *map, struct seqmap_iter *iter);
void *seqmap_next(struct seqmap *map, struct seqmap_iter *iter);
/* The id under which the value last returned by seqmap_first or
 * seqmap_next is stored. */
uint64_t seqmap_iter_key(const struct seqmap_iter *iter);

#endif /* KVP_SEQMAP_H */
