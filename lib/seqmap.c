/*
 * seqmap.c - seq_id -> sequence over liburcu's rculfhash (memb flavour).
 *
 * Correctness: rculfhash is linearizable for lookup, add_unique and del
 * among readers in read-side sections (liburcu's documentation); a node
 * removed by cds_lfht_del stays readable until a grace period has passed,
 * which call_rcu waits for before reclaiming it.  TSan cannot see
 * liburcu's asm atomics, so the node hand-off is annotated: the inserter
 * releases the node before publishing it and a finder acquires it (rcu.h).
 */
#include <errno.h>

#include "alloc.h"
#include "manager.h"
#include "rcu.h"
#include "seqmap.h"

static unsigned long seq_hash(uint64_t id)
{
	/* splitmix64's finaliser: sequential ids spread over the buckets. */
	id ^= id >> 30;
	id *= 0xbf58476d1ce4e5b9ull;
	id ^= id >> 27;
	id *= 0x94d049bb133111ebull;
	id ^= id >> 31;
	return (unsigned long)id;
}

static int seq_match(struct cds_lfht_node *node, const void *key)
{
	const struct kvp_seq *s = caa_container_of(node, struct kvp_seq, node);

	/* The traversal reached a published node: its key is initialised
	 * (pairs with kvp_rcu_publish() in seqmap_insert). */
	kvp_rcu_found(s);
	return s->id == *(const uint64_t *)key;
}

static struct kvp_seq *iter_seq(struct seqmap_iter *iter)
{
	struct cds_lfht_node *node = cds_lfht_iter_get_node(&iter->it);
	struct kvp_seq *s;

	if (!node)
		return NULL;
	s = caa_container_of(node, struct kvp_seq, node);
	kvp_rcu_found(s);
	return s;
}

int seqmap_init(struct seqmap *map)
{
	if (kvp_fault_point(sizeof(struct cds_lfht *)))
		return -ENOMEM; /* test builds: as if liburcu had no memory */
	map->ht = cds_lfht_new_flavor(64, 64, 0,
				      CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				      &urcu_memb_flavor, NULL);
	return map->ht ? 0 : -ENOMEM;
}

void seqmap_fini(struct seqmap *map)
{
	if (map->ht && cds_lfht_destroy(map->ht, NULL) != 0)
		kvp_fatal("cds_lfht_destroy on a non-empty map");
	map->ht = NULL;
}

struct kvp_seq *seqmap_lookup(struct seqmap *map, uint64_t id)
{
	struct seqmap_iter iter;

	cds_lfht_lookup(map->ht, seq_hash(id), seq_match, &id, &iter.it);
	return iter_seq(&iter);
}

bool seqmap_insert(struct seqmap *map, struct kvp_seq *s)
{
	kvp_rcu_publish(s);
	return cds_lfht_add_unique(map->ht, seq_hash(s->id), seq_match, &s->id,
				   &s->node) == &s->node;
}

bool seqmap_remove(struct seqmap *map, struct kvp_seq *s)
{
	return cds_lfht_del(map->ht, &s->node) == 0;
}

struct kvp_seq *seqmap_first(struct seqmap *map, struct seqmap_iter *iter)
{
	cds_lfht_first(map->ht, &iter->it);
	return iter_seq(iter);
}

struct kvp_seq *seqmap_next(struct seqmap *map, struct seqmap_iter *iter)
{
	cds_lfht_next(map->ht, &iter->it);
	return iter_seq(iter);
}
