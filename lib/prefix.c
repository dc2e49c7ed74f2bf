/*
 * prefix.c - the prefix cache: each manager's map hash -> block (liburcu
 * rculfhash), and the pool's list of evictable cached blocks.
 *
 * Correctness argument.
 *
 * A cached block carries KVP_ST_CACHED in its state word (pool.h) and
 * owner[b] points to the map node that caches it.  Only full blocks held
 * by a sequence are registered (prefix_register): the node is filled in,
 * owner[b] set, then CACHED set with a release CAS, then the node inserted
 * with add_unique (a duplicate hash undoes the flag: no reader could reach
 * the block through the unpublished node).
 *
 * The state word decides every race on a cached block, as one CAS:
 *
 *   CACHED|r -> CACHED|r+1    a hit (prefix_take), lock-free, inside an
 *                             RCU read-side section that found the node;
 *                             from r = 0 it revives an evictable block.
 *   CACHED|r -> CACHED|r-1    a release (pool.c drop_shared); reaching 0,
 *                             the releaser links the block at the tail of
 *                             the evictable list (prefix_release).
 *   CACHED|0 -> CACHED|EVICTING   an evictor claims the block, under the
 *                             list lock; a hit sees EVICTING (or, later,
 *                             no CACHED) and misses.
 *   CACHED|EVICTING -> 1      the evictor owns the block: uncached, held
 *                             once, handed to the allocation.
 *
 * So a revival and an eviction of one block cannot both win: both are
 * CASes from CACHED|0.  A hit that lost to an eviction of its block and
 * then to a new registration of the same block id under another hash
 * (ABA) would see CACHED again; it checks owner[b] == the node it found
 * after its CAS.  The node cannot have been reused meanwhile (it is freed
 * with call_rcu, and the hit is inside a read-side section), the evictor
 * cleared owner[b] before the block was handed out, and the new owner was
 * stored before the new CACHED flag (release, paired with the hit's
 * acquire CAS).  A mismatch drops the reference just taken, as any
 * holder's release, and reports a miss.
 *
 * CACHED is cleared only under the list lock (eviction, prefix_clear), so
 * under the lock a CACHED block is never on a free list and its next[]
 * link (the free stack's, pool.h) is free for the evictable list, which
 * is doubly linked through next[] and prev[], least recently freed first.
 * Revivals do not unlink (they take no lock): a held block stays linked
 * until an evictor passes it (it unlinks it) or its holder releases it
 * again (moved to the tail).  A release that finds its block no longer
 * CACHED (prefix_clear took it in between) does not link it.
 *
 * Eviction is all or nothing: the evictor claims blocks from the head
 * (skipping held ones), and if it cannot claim n, restores every claim
 * and unlinks nothing, so a failed allocation changes nothing.  After the
 * claims it reports KVP_EVENT_REMOVED and only then deletes the node, so
 * the same hash cannot be stored again (add_unique fails while the node is
 * in the map) before its removal was reported: per hash, events are in
 * order.  The evictor stays in one RCU read-side section from before its
 * claims to after its deletions, so a manager being destroyed, which waits
 * for a grace period after clearing its map, outlives it.
 *
 * evictable counts blocks in state CACHED|0: +1 by the release that took
 * a block to zero, -1 by whoever takes one from zero (a revival, an
 * eviction, prefix_clear).  Each pair is ordered on the state word, so the
 * count is exact at quiescence; while threads run it may lag by the
 * releases in flight.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "manager.h"
#include "prefix.h"
#include "rcu.h"
#include "stack.h"

#define KVP_UNLINKED 0xfffffffeu /* prev[b] of a block not in the list */

/*
 * What a lookup reads is in the first cache line; the rest is written only
 * when the node goes.  Aligned: a node shares no line with other data
 * (a neighbour written by another thread made every hit miss).
 */
struct prefix_node {
	_Alignas(KVP_CACHELINE) struct cds_lfht_node node;
	struct kvp_hash hash;	 /* immutable once published */
	struct kvp_manager *mgr; /* immutable */
	uint32_t block;		 /* immutable */
	struct rcu_head rcu;
	/* The evictor's list of nodes it took off owner[]: its own. */
	struct prefix_node *evict_next;
	/* Three lines, not two: consecutive nodes' hot lines then fall in
	 * every L1 set, not only the even ones (which 256 nodes fill). */
	char pad[KVP_CACHELINE];
};
_Static_assert(offsetof(struct prefix_node, rcu) >= KVP_CACHELINE,
	       "a lookup reads one line of a node");

struct prefix_pool {
	/* owner[b]: the node caching b, NULL if b is not cached.  Written
	 * by the registering thread before CACHED (release), cleared under
	 * the lock when CACHED is.  (The array pointers are read-only.) */
	_Atomic(struct prefix_node *) *owner;
	uint32_t *prev; /* lock */
	/* The evictable list (lock), least recently freed at head, on its
	 * own cache line. */
	kvp_cacheline_aligned pthread_mutex_t lock;
	uint32_t head, tail;
	/* Counts hits write (relaxed), on a line of their own: blocks in
	 * state CACHED|0 (see the argument above), and revivals by hits.
	 * Blocks released into the evictable state are not counted: they
	 * are evictable + revived + evictions + cleared. */
	kvp_cacheline_aligned _Atomic int64_t evictable;
	_Atomic uint64_t revived;
	/* Rare: evictions by allocations, evictable blocks a reset freed. */
	kvp_cacheline_aligned _Atomic uint64_t evictions;
	_Atomic uint64_t cleared;
};

static inline uint32_t refs_of(uint32_t s)
{
	return s & KVP_ST_REFS_MASK;
}

static inline struct prefix_pool *pool_prefix(struct kvp_pool *pool)
{
	/* Acquire: pairs with prefix_pool_attach()'s release. */
	return atomic_load_explicit(&pool->prefix, memory_order_acquire);
}

/* ------------------------------------------------------------------ */
/* The evictable list (pp->lock held)                                  */
/* ------------------------------------------------------------------ */

/* Relaxed next[] accesses: under the lock, on blocks no free list has. */
static uint32_t link_next(struct kvp_pool *pool, uint32_t b)
{
	return atomic_load_explicit(&pool->next[b], memory_order_relaxed);
}

static void set_next(struct kvp_pool *pool, uint32_t b, uint32_t v)
{
	atomic_store_explicit(&pool->next[b], v, memory_order_relaxed);
}

static bool list_linked(struct prefix_pool *pp, uint32_t b)
{
	return pp->prev[b] != KVP_UNLINKED;
}

static void list_unlink(struct kvp_pool *pool, struct prefix_pool *pp,
			uint32_t b)
{
	uint32_t p = pp->prev[b], n;

	if (p == KVP_UNLINKED)
		return;
	n = link_next(pool, b);
	if (p == KVP_NIL)
		pp->head = n;
	else
		set_next(pool, p, n);
	if (n == KVP_NIL)
		pp->tail = p;
	else
		pp->prev[n] = p;
	pp->prev[b] = KVP_UNLINKED;
}

static void list_append(struct kvp_pool *pool, struct prefix_pool *pp,
			uint32_t b)
{
	set_next(pool, b, KVP_NIL);
	pp->prev[b] = pp->tail;
	if (pp->tail == KVP_NIL)
		pp->head = b;
	else
		set_next(pool, pp->tail, b);
	pp->tail = b;
}

static void pp_lock(struct prefix_pool *pp)
{
	kvp_check_pthread(pthread_mutex_lock(&pp->lock));
}

static void pp_unlock(struct prefix_pool *pp)
{
	kvp_check_pthread(pthread_mutex_unlock(&pp->lock));
}

/*
 * A manager's event lock orders its events with the map changes they
 * report (STORED with its insertions, REMOVED with its deletions, CLEARED
 * with a reset), so that per hash the callback sees them in the order the
 * map changed.  Taken only when a callback is set: without one there is
 * nothing to order.  Lock order: event lock, then the list lock.
 */
static void event_lock(struct kvp_manager *m)
{
	if (m->event_cb)
		kvp_check_pthread(pthread_mutex_lock(&m->event_lock));
}

static void event_unlock(struct kvp_manager *m)
{
	if (m->event_cb)
		kvp_check_pthread(pthread_mutex_unlock(&m->event_lock));
}

void prefix_events_begin(struct kvp_manager *m)
{
	event_lock(m);
}

void prefix_events_end(struct kvp_manager *m)
{
	event_unlock(m);
}

/* ------------------------------------------------------------------ */
/* Pool side                                                           */
/* ------------------------------------------------------------------ */

int prefix_pool_attach(struct kvp_pool *pool)
{
	struct prefix_pool *pp;
	uint32_t n = pool->num_blocks;

	if (atomic_load_explicit(&pool->prefix, memory_order_relaxed))
		return 0;
	pp = kvp_malloc_aligned(KVP_CACHELINE, sizeof(*pp));
	if (!pp)
		return -ENOMEM;
	memset(pp, 0, sizeof(*pp));
	pp->owner = kvp_calloc(n, sizeof(*pp->owner));
	pp->prev = kvp_malloc((size_t)n * sizeof(*pp->prev));
	if (!pp->owner || !pp->prev ||
	    pthread_mutex_init(&pp->lock, NULL) != 0) {
		kvp_free(pp->owner, (size_t)n * sizeof(*pp->owner));
		kvp_free(pp->prev, (size_t)n * sizeof(*pp->prev));
		kvp_free_aligned(pp, KVP_CACHELINE, sizeof(*pp));
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		atomic_init(&pp->owner[b], NULL);
		pp->prev[b] = KVP_UNLINKED;
	}
	pp->head = pp->tail = KVP_NIL;
	atomic_init(&pp->evictable, 0);
	atomic_init(&pp->evictions, 0);
	atomic_init(&pp->revived, 0);
	atomic_init(&pp->cleared, 0);
	/* Release: publishes the initialised state to pool_prefix(). */
	atomic_store_explicit(&pool->prefix, pp, memory_order_release);
	return 0;
}

void prefix_pool_free(struct kvp_pool *pool)
{
	struct prefix_pool *pp = pool_prefix(pool);
	uint32_t n = pool->num_blocks;

	if (!pp)
		return;
	pthread_mutex_destroy(&pp->lock);
	kvp_free(pp->owner, (size_t)n * sizeof(*pp->owner));
	kvp_free(pp->prev, (size_t)n * sizeof(*pp->prev));
	kvp_free_aligned(pp, KVP_CACHELINE, sizeof(*pp));
}

void prefix_release(struct kvp_pool *pool, const uint32_t *ids, uint32_t n)
{
	struct prefix_pool *pp = pool_prefix(pool);

	/* Relaxed: a count; the state word orders the transitions. */
	atomic_fetch_add_explicit(&pp->evictable, n, memory_order_relaxed);
	pp_lock(pp);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = ids[i];

		/* Relaxed: CACHED only changes under the lock we hold. */
		if (!(atomic_load_explicit(&pool->state[b],
					   memory_order_relaxed) &
		      KVP_ST_CACHED))
			continue; /* prefix_clear took it meanwhile */
		list_unlink(pool, pp, b);
		list_append(pool, pp, b);
	}
	pp_unlock(pp);
}

void prefix_unhit(struct kvp_pool *pool, const uint32_t *blocks, uint32_t n)
{
	struct prefix_pool *pp = pool_prefix(pool);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = blocks[i];
		_Atomic uint32_t *st = &pool->state[b];
		uint32_t s;

		pp_lock(pp);
		/* Relaxed: CACHED only changes under the lock we hold. */
		s = atomic_load_explicit(st, memory_order_relaxed);
		if (!(s & KVP_ST_CACHED)) {
			/* prefix_clear uncached it while we held it: an
			 * ordinary block now. */
			pp_unlock(pp);
			(void)kvp_pool_free(pool, &b, 1);
			continue;
		}
		/* Release: as any holder's drop (pool.c). */
		while (!atomic_compare_exchange_weak_explicit(
			st, &s, s - 1, memory_order_release,
			memory_order_relaxed))
			;
		if (refs_of(s - 1) == 0) {
			/* Evictable again: the revival is undone, counts
			 * included (a failed call moves no statistic). */
			atomic_fetch_add_explicit(&pp->evictable, 1,
						  memory_order_relaxed);
			atomic_fetch_sub_explicit(&pp->revived, 1,
						  memory_order_relaxed);
			/* Still linked: back in its old place, as if never
			 * hit; else (an evictor passed it) at the tail. */
			if (!list_linked(pp, b))
				list_append(pool, pp, b);
		}
		pp_unlock(pp);
	}
}

/* Up to KVP_EVENT_BATCH hashes of one manager per REMOVED event. */
#define KVP_EVENT_BATCH 16

static void node_free_rcu(struct rcu_head *head)
{
	struct prefix_node *node =
		caa_container_of(head, struct prefix_node, rcu);

	kvp_rcu_reclaim_head(head);
	kvp_free_aligned(node, KVP_CACHELINE, sizeof(*node));
	kvp_rcu_callback_done();
}

int prefix_evict(struct kvp_pool *pool, uint32_t n, uint32_t *ids)
{
	struct prefix_pool *pp = pool_prefix(pool);
	struct prefix_node *gone = NULL, **tailp = &gone, *node;
	uint32_t got = 0, b;

	/* Relaxed: a count; a stale one only fails or tries early. */
	if (!pp || atomic_load_explicit(&pp->evictable, memory_order_relaxed) <
			   (int64_t)n)
		return -ENOSPC;
	/* One read-side section around the claims and the deletions: see
	 * the argument at the top (destroyed managers outlive it). */
	kvp_rcu_read_lock();
	pp_lock(pp);
	for (b = pp->head; b != KVP_NIL && got < n; b = link_next(pool, b)) {
		_Atomic uint32_t *st = &pool->state[b];
		/* Acquire: the releaser's writes to the block happen before
		 * our caller's reuse (pairs with the release decrements). */
		uint32_t s = atomic_load_explicit(st, memory_order_acquire);

		while (refs_of(s) == 0 &&
		       !atomic_compare_exchange_weak_explicit(
			       st, &s, s | KVP_ST_EVICTING,
			       memory_order_acquire, memory_order_acquire))
			;
		if (refs_of(s) == 0)
			ids[got++] = b; /* claimed */
	}
	if (got < n) {
		/* Not enough: give the claims back, unlink nothing.  Only
		 * the claimer changes an EVICTING word. */
		for (uint32_t i = 0; i < got; i++)
			atomic_store_explicit(&pool->state[ids[i]],
					      KVP_ST_CACHED,
					      memory_order_relaxed);
		pp_unlock(pp);
		kvp_rcu_read_unlock();
		return -ENOSPC;
	}
	/* Held blocks passed on the way leave the list (their holders
	 * relink them at release); the claimed ones become ours: uncached,
	 * held once, their nodes taken off owner[] (in list order). */
	for (uint32_t x = pp->head; x != ids[got - 1];) {
		uint32_t nx = link_next(pool, x);

		if (refs_of(atomic_load_explicit(&pool->state[x],
						 memory_order_relaxed)))
			list_unlink(pool, pp, x);
		x = nx;
	}
	for (uint32_t i = 0; i < got; i++) {
		list_unlink(pool, pp, ids[i]);
		atomic_store_explicit(&pool->state[ids[i]], 1,
				      memory_order_relaxed);
		/* Acquire: the node as its registrar filled it in. */
		node = atomic_exchange_explicit(&pp->owner[ids[i]], NULL,
						memory_order_acquire);
		node->evict_next = NULL;
		*tailp = node;
		tailp = &node->evict_next;
	}
	atomic_fetch_sub_explicit(&pp->evictable, got, memory_order_relaxed);
	atomic_fetch_add_explicit(&pp->evictions, got, memory_order_relaxed);
	pp_unlock(pp);
	/* Per run of one manager's nodes: report, then delete, under its
	 * event lock (see the argument at the top). */
	while (gone) {
		struct kvp_manager *m = gone->mgr;
		struct kvp_hash hashes[KVP_EVENT_BATCH];
		uint32_t k = 0;

		for (node = gone; node && node->mgr == m && k < KVP_EVENT_BATCH;
		     node = node->evict_next)
			hashes[k++] = node->hash;
		event_lock(m);
		prefix_emit(m, KVP_EVENT_REMOVED, hashes, k, NULL);
		for (uint32_t j = 0; j < k; j++) {
			node = gone;
			gone = node->evict_next;
			if (cds_lfht_del(m->prefix_map, &node->node))
				kvp_fatal("an evicted block's node was missing");
			kvp_rcu_call(&node->rcu, node_free_rcu);
		}
		event_unlock(m);
		mgr_stat_add(m, prefix_cached, -(int64_t)k);
		mgr_stat_add(m, prefix_evictions, k);
	}
	kvp_rcu_read_unlock();
	return 0;
}

uint64_t prefix_evictable(struct kvp_pool *pool)
{
	struct prefix_pool *pp = pool_prefix(pool);
	int64_t e;

	if (!pp)
		return 0;
	e = atomic_load_explicit(&pp->evictable, memory_order_relaxed);
	return e > 0 ? (uint64_t)e : 0;
}

void prefix_transitions(struct kvp_pool *pool, uint64_t *released,
			uint64_t *revived)
{
	struct prefix_pool *pp = pool_prefix(pool);

	*released = *revived = 0;
	if (!pp)
		return;
	/* Relaxed: statistics, exact at quiescence. */
	*revived = atomic_load_explicit(&pp->revived, memory_order_relaxed);
	*released = (uint64_t)atomic_load_explicit(&pp->evictable,
						   memory_order_relaxed) +
		    *revived +
		    atomic_load_explicit(&pp->evictions,
					 memory_order_relaxed) +
		    atomic_load_explicit(&pp->cleared, memory_order_relaxed);
}

uint64_t prefix_evictions(struct kvp_pool *pool)
{
	struct prefix_pool *pp = pool_prefix(pool);

	return pp ? atomic_load_explicit(&pp->evictions, memory_order_relaxed)
		  : 0;
}

uint64_t prefix_cached_blocks(struct kvp_pool *pool)
{
	uint64_t n = 0;

	for (uint32_t b = 0; b < pool->num_blocks; b++)
		n += (atomic_load_explicit(&pool->state[b],
					   memory_order_relaxed) &
		      KVP_ST_CACHED) != 0;
	return n;
}

#define check_fail(...)                                                      \
	do {                                                                 \
		fprintf(stderr, "kvp_pool_check: " __VA_ARGS__);             \
		return -EFAULT;                                              \
	} while (0)

int prefix_check_pool(struct kvp_pool *pool)
{
	struct prefix_pool *pp = pool_prefix(pool);
	uint64_t linked = 0, idle = 0;
	uint32_t prev = KVP_NIL;

	if (!pp)
		return 0;
	for (uint32_t b = pp->head; b != KVP_NIL; b = link_next(pool, b)) {
		if (b >= pool->num_blocks)
			check_fail("evictable list link %u out of range\n", b);
		if (pp->prev[b] != prev)
			check_fail("evictable list: block %u's back link is "
				   "%u, not %u\n",
				   b, pp->prev[b], prev);
		if (!(atomic_load_explicit(&pool->state[b],
					   memory_order_relaxed) &
		      KVP_ST_CACHED))
			check_fail("uncached block %u on the evictable list\n",
				   b);
		if (++linked > pool->num_blocks)
			check_fail("cycle in the evictable list\n");
		prev = b;
	}
	if (pp->tail != prev)
		check_fail("evictable list tail %u, last block %u\n", pp->tail,
			   prev);
	for (uint32_t b = 0; b < pool->num_blocks; b++) {
		uint32_t s = atomic_load_explicit(&pool->state[b],
						  memory_order_relaxed);
		bool cached = s & KVP_ST_CACHED;

		if (s & KVP_ST_EVICTING)
			check_fail("block %u is being evicted at quiescence\n",
				   b);
		if (cached != (atomic_load_explicit(&pp->owner[b],
						    memory_order_relaxed) !=
			       NULL))
			check_fail("block %u: cached flag and owner node "
				   "disagree\n",
				   b);
		if (!cached && list_linked(pp, b))
			check_fail("uncached block %u is linked\n", b);
		if (cached && refs_of(s) == 0) {
			idle++;
			if (!list_linked(pp, b))
				check_fail("evictable block %u is on no list "
					   "(lost)\n",
					   b);
		}
	}
	if ((int64_t)idle != atomic_load_explicit(&pp->evictable,
						  memory_order_relaxed))
		check_fail("%" PRIu64 " evictable blocks, counted %" PRId64
			   "\n",
			   idle,
			   atomic_load_explicit(&pp->evictable,
						memory_order_relaxed));
	return 0;
}

/* ------------------------------------------------------------------ */
/* Manager side: the map                                               */
/* ------------------------------------------------------------------ */

static unsigned long hash_key(const struct kvp_hash *h)
{
	unsigned long k;

	/* Block hashes are uniform (SHA-256, keyed XXH3): any word will do. */
	memcpy(&k, h->b, sizeof(k));
	return k;
}

static int node_match(struct cds_lfht_node *ht_node, const void *key)
{
	struct prefix_node *node =
		caa_container_of(ht_node, struct prefix_node, node);

	/* Pairs with kvp_rcu_publish() in prefix_register. */
	kvp_rcu_found(node);
	return memcmp(&node->hash, key, sizeof(node->hash)) == 0;
}

/*
 * Buckets to start with.  A map never holds more nodes than the pool has
 * blocks (a node caches one block), so a table of about that many buckets
 * keeps chains short without waiting for rculfhash's lazy growth, which
 * lets the load reach 8 nodes per bucket (a cache miss each) before it
 * resizes.  Capped, so a huge pool does not pay megabytes up front; the
 * table still grows past the cap (and shrinks to 64) on its own.
 */
#define KVP_PREFIX_MAP_MAX_INIT (1ul << 20)

static unsigned long prefix_map_buckets(uint32_t num_blocks)
{
	unsigned long n = 64;

	while (n < num_blocks && n < KVP_PREFIX_MAP_MAX_INIT)
		n <<= 1;
	return n;
}

int prefix_map_init(struct kvp_manager *m)
{
	if (pthread_mutex_init(&m->event_lock, NULL) != 0)
		return -ENOMEM;
	if (kvp_fault_point(sizeof(struct cds_lfht *))) {
		/* Test builds: as if liburcu had no memory. */
		pthread_mutex_destroy(&m->event_lock);
		return -ENOMEM;
	}
	m->prefix_map = cds_lfht_new_flavor(
		prefix_map_buckets(m->pool->num_blocks), 64, 0,
		CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING, &urcu_memb_flavor,
		NULL);
	if (!m->prefix_map) {
		pthread_mutex_destroy(&m->event_lock);
		return -ENOMEM;
	}
	return 0;
}

void prefix_map_fini(struct kvp_manager *m)
{
	if (!m->prefix_map)
		return;
	if (pool_prefix(m->pool)) /* else it never got one: nothing cached */
		(void)prefix_clear(m, true);
	/* Wait for evictors still reporting on our nodes (see the top),
	 * then for the nodes' reclamation. */
	urcu_memb_synchronize_rcu();
	kvp_rcu_barrier();
	if (cds_lfht_destroy(m->prefix_map, NULL) != 0)
		kvp_fatal("cds_lfht_destroy on a non-empty prefix map");
	m->prefix_map = NULL;
	pthread_mutex_destroy(&m->event_lock);
}

static struct prefix_node *map_lookup(struct kvp_manager *m,
				      const struct kvp_hash *h)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;

	cds_lfht_lookup(m->prefix_map, hash_key(h), node_match, h, &it);
	n = cds_lfht_iter_get_node(&it);
	return n ? caa_container_of(n, struct prefix_node, node) : NULL;
}

/*
 * Read side: a reference on node's block if it still caches it; *revived
 * counts the blocks it took from zero.
 */
static bool take_one(struct kvp_pool *pool, struct prefix_pool *pp,
		     struct prefix_node *node, uint32_t *revived)
{
	uint32_t b = node->block;
	_Atomic uint32_t *st = &pool->state[b];
	uint32_t s = atomic_load_explicit(st, memory_order_relaxed);

	do {
		if (!(s & KVP_ST_CACHED) || (s & KVP_ST_EVICTING) ||
		    refs_of(s) == KVP_MAX_REFS)
			return false;
		/* Acquire: the block's data and owner[b] as published by
		 * its registration and its holders' releases. */
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s + 1, memory_order_acquire, memory_order_relaxed));
	*revived += refs_of(s) == 0;
	if (atomic_load_explicit(&pp->owner[b], memory_order_acquire) !=
	    node) {
		/* ABA: evicted and cached again under another hash. */
		(void)kvp_pool_free(pool, &b, 1);
		return false;
	}
	return true;
}

#define KVP_TAKE_CHUNK 32

uint32_t prefix_take(struct kvp_manager *m, const struct kvp_hash *hashes,
		     uint32_t n, uint32_t *blocks)
{
	struct kvp_pool *pool = m->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	struct prefix_node *nodes[KVP_TAKE_CHUNK];
	uint32_t i = 0, revived = 0;

	kvp_rcu_read_lock();
	/* In chunks: first the lookups (reads), asking for each block's
	 * state line in exclusive mode as its node is found, so that the
	 * lines other threads hold travel in parallel; then the CASes. */
	while (i < n) {
		uint32_t k = 0, j;

		while (k < KVP_TAKE_CHUNK && i + k < n) {
			struct prefix_node *node = map_lookup(m, &hashes[i + k]);

			if (!node)
				break;
			__builtin_prefetch(&pool->state[node->block], 1);
			nodes[k++] = node;
		}
		for (j = 0; j < k; j++) {
			if (!take_one(pool, pp, nodes[j], &revived))
				break;
			blocks[i + j] = nodes[j]->block;
		}
		i += j;
		if (j < KVP_TAKE_CHUNK)
			break; /* a miss (or the end) */
	}
	kvp_rcu_read_unlock();
	/* One update for the whole prefix: a line other threads share. */
	if (revived) {
		atomic_fetch_sub_explicit(&pp->evictable, revived,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&pp->revived, revived,
					  memory_order_relaxed);
	}
	return i;
}

int prefix_register(struct kvp_manager *m, uint32_t b,
		    const struct kvp_hash *h)
{
	struct kvp_pool *pool = m->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	_Atomic uint32_t *st = &pool->state[b];
	struct prefix_node *node, *none = NULL;
	struct cds_lfht_node *got;
	uint32_t s;

	/* Relaxed: a hint; the CAS on owner[b] decides. */
	if (atomic_load_explicit(&pp->owner[b], memory_order_relaxed))
		return 0; /* a fork's sibling registered it */
	node = kvp_malloc_aligned(KVP_CACHELINE, sizeof(*node));
	if (!node)
		return -ENOMEM;
	node->hash = *h;
	node->mgr = m;
	node->block = b;
	node->evict_next = NULL;
	/* Two sequences sharing b may commit it at once: one wins owner[b].
	 * Release: the node's fields, for the evictor's acquire exchange
	 * (hits are ordered by the CACHED CAS below). */
	if (!atomic_compare_exchange_strong_explicit(&pp->owner[b], &none,
						     node, memory_order_release,
						     memory_order_relaxed)) {
		kvp_free_aligned(node, KVP_CACHELINE, sizeof(*node));
		return 0;
	}
	/* Release: owner[b] and the block's data before CACHED (pairs with
	 * take_one's acquire CAS).  Only holders change the count now. */
	s = atomic_load_explicit(st, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(
		st, &s, s | KVP_ST_CACHED, memory_order_release,
		memory_order_relaxed))
		;
	kvp_rcu_read_lock();
	kvp_rcu_publish(node);
	got = cds_lfht_add_unique(m->prefix_map, hash_key(h), node_match, h,
				  &node->node);
	kvp_rcu_read_unlock();
	if (got == &node->node) {
		mgr_stat_add(m, prefix_cached, 1);
		return 1;
	}
	/* Another block caches h: undo (nobody could find ours).  Under the
	 * lock, as every clearing of CACHED. */
	pp_lock(pp);
	s = atomic_load_explicit(st, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(
		st, &s, s & ~KVP_ST_CACHED, memory_order_relaxed,
		memory_order_relaxed))
		;
	atomic_store_explicit(&pp->owner[b], NULL, memory_order_relaxed);
	list_unlink(pool, pp, b); /* a release may have linked it */
	pp_unlock(pp);
	kvp_free_aligned(node, KVP_CACHELINE, sizeof(*node));
	return 0;
}

int prefix_clear(struct kvp_manager *m, bool force)
{
	struct kvp_pool *pool = m->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;
	uint32_t first = KVP_NIL, last = KVP_NIL, nfreed = 0;

	kvp_rcu_read_lock();
	pp_lock(pp);
	if (!force) {
		cds_lfht_for_each(m->prefix_map, &it, n)
		{
			struct prefix_node *node = caa_container_of(
				n, struct prefix_node, node);

			/* Pairs with kvp_rcu_publish() in prefix_register. */
			kvp_rcu_found(node);
			if (refs_of(atomic_load_explicit(
				    &pool->state[node->block],
				    memory_order_relaxed))) {
				pp_unlock(pp);
				kvp_rcu_read_unlock();
				return -EBUSY;
			}
		}
	}
	cds_lfht_for_each(m->prefix_map, &it, n)
	{
		struct prefix_node *node =
			caa_container_of(n, struct prefix_node, node);
		uint32_t b, s, nw;
		_Atomic uint32_t *st;

		kvp_rcu_found(node);
		b = node->block;
		if (atomic_load_explicit(&pp->owner[b],
					 memory_order_relaxed) != node)
			continue; /* an evictor took it: it deletes the node */
		st = &pool->state[b];
		s = atomic_load_explicit(st, memory_order_relaxed);
		/* A racing hit may take a reference until our CAS: then the
		 * block stays with its holder, uncached (the hit sees owner
		 * cleared and drops it).  An evictable block becomes an
		 * ordinary free one.  Acquire: its releasers' writes happen
		 * before its next allocation (our push below releases). */
		do {
			nw = s & ~KVP_ST_CACHED;
		} while (!atomic_compare_exchange_weak_explicit(
			st, &s, nw, memory_order_acquire,
			memory_order_relaxed));
		list_unlink(pool, pp, b);
		atomic_store_explicit(&pp->owner[b], NULL,
				      memory_order_relaxed);
		if (refs_of(s) == 0) {
			atomic_fetch_sub_explicit(&pp->evictable, 1,
						  memory_order_relaxed);
			atomic_fetch_add_explicit(&pp->cleared, 1,
						  memory_order_relaxed);
			/* On no list: chain it for the free stack. */
			set_next(pool, b, first);
			if (first == KVP_NIL)
				last = b;
			first = b;
			nfreed++;
		}
		if (cds_lfht_del(m->prefix_map, n))
			kvp_fatal("a cached block's node was missing");
		mgr_stat_add(m, prefix_cached, -1);
		kvp_rcu_call(&node->rcu, node_free_rcu);
	}
	pp_unlock(pp);
	kvp_rcu_read_unlock();
	/* Free all along (evictable, then on the stack): one push, and
	 * neither an allocation nor a free for the pool's counts. */
	if (nfreed)
		stack_push_chain(&pool->stack, pool->next, first, last,
				 nfreed);
	return 0;
}

void prefix_emit(struct kvp_manager *m, enum kvp_event_type type,
		 const struct kvp_hash *hashes, uint32_t n,
		 const struct kvp_hash *parent)
{
	struct kvp_event ev;

	if (!m->event_cb)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.type = type;
	ev.hashes = hashes;
	ev.nhashes = n;
	ev.parent = parent;
	if (type == KVP_EVENT_STORED) {
		ev.block_tokens = m->block_tokens;
		ev.num_tokens = n * m->block_tokens;
	}
	m->event_cb(&ev, m->event_arg);
}

int prefix_check_manager(struct kvp_manager *m, uint64_t *nodes)
{
	struct kvp_pool *pool = m->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;
	int err = 0;

	if (!m->prefix_map)
		return 0;
	kvp_rcu_read_lock();
	cds_lfht_for_each(m->prefix_map, &it, n)
	{
		struct prefix_node *node =
			caa_container_of(n, struct prefix_node, node);

		kvp_rcu_found(node);
		(*nodes)++;
		if (node->block >= pool->num_blocks ||
		    atomic_load_explicit(&pp->owner[node->block],
					 memory_order_relaxed) != node) {
			fprintf(stderr,
				"kvp_manager_check: a prefix node's block %u "
				"does not point back to it\n",
				node->block);
			err = -EFAULT;
		}
	}
	kvp_rcu_read_unlock();
	return err;
}
