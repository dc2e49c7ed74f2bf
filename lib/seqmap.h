/*
 * seqmap.h - the map seq_id -> sequence: a liburcu rculfhash.
 *
 * Lookups, insertions and removals run inside RCU read-side sections
 * (kvp_rcu_read_lock); a removed sequence is reclaimed with call_rcu by
 * its remover.  Insert and remove may race freely; exactly one insert of
 * an id wins, exactly one remove of a node succeeds.
 */
#ifndef KVP_SEQMAP_H
#define KVP_SEQMAP_H

#include <stdbool.h>
#include <stdint.h>
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

struct kvp_seq;

struct seqmap {
	struct cds_lfht *ht;
};

int seqmap_init(struct seqmap *map);
/* The map must be empty, and no thread inside a read-side section. */
void seqmap_fini(struct seqmap *map);

/* Read side: the sequence with this id, or NULL. */
struct kvp_seq *seqmap_lookup(struct seqmap *map, uint64_t id);
/* Read side: inserts s unless its id is taken; returns true if inserted. */
bool seqmap_insert(struct seqmap *map, struct kvp_seq *s);
/* Read side: removes s; false if it was already removed. */
bool seqmap_remove(struct seqmap *map, struct kvp_seq *s);

/* Read side: iteration in an arbitrary order; NULL at the end. */
struct seqmap_iter {
	struct cds_lfht_iter it;
};
struct kvp_seq *seqmap_first(struct seqmap *map, struct seqmap_iter *iter);
struct kvp_seq *seqmap_next(struct seqmap *map, struct seqmap_iter *iter);

#endif /* KVP_SEQMAP_H */
