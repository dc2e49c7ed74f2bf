/* SPDX-License-Identifier: MIT */
/*
 * seqmap.c - seq_id -> sequence: a lock-free open-addressing table
 * (linear probing) read under RCU, rebuilt by one thread at a time.
 * Floor 6 of lib/ (doc/architecture.md, "Layers"): calls alloc.c,
 * conf.c and rcu.c; seqmem.c and the files above it call it.
 *
 * A slot is two words: key (0 = empty) and val (NULL = absent).  Id 0
 * lives outside the table, in map->zero.
 *
 * Correctness argument.
 *
 * Keys.  A slot's key goes from 0 to an id once, by CAS, and never
 * changes again in that table.  An inserter probes from the id's home slot
 * and stops at the first slot whose key is the id, or is 0 and which it
 * then claims by CAS (if the CAS fails it reads the winner's key and goes
 * on deciding with it).  So an id occupies at most one slot of a table:
 * if it sat in slots i and j, j later in the probe order, j's claimer
 * would have passed i holding another key, and keys never change.  A
 * lookup or remove probes the same way and stops at the id's slot or at
 * an empty one (the id is in no slot after an empty one).
 *
 * Values.  At the id's one slot, insert CASes val from NULL to v and fails
 * with -EEXIST if it finds another value; remove CASes val from v to NULL.
 * These CASes are the linearization points: exactly one insert of a
 * present id wins and exactly one remove of an entry succeeds.  Values
 * are released by the insert's CAS and acquired by lookups, so what the
 * inserter wrote into the value before inserting it is visible to a
 * finder.  The map never dereferences values: a value removed may be
 * reused at once by its owner.
 *
 * Rebuilds.  Keys of removed entries stay until the table is rebuilt (the
 * ids of forks are fresh ids).  A rebuild copies the live entries into a
 * new table, sized from their number, and is triggered when about half of
 * a table's slots hold keys (claims are sampled, one in 32 adding 32 to
 * the table's counter, so the shared counter is written once per 32
 * claims on average), when a claim probed far, or when the table is full.
 * The rebuilder freezes the old table (CAS of `frozen` from 0 to 1: one
 * rebuilder per table; the CAS runs in a read-side section of its own,
 * and only while the table is still published, since another rebuild
 * may have replaced it and queued its free), then waits for a grace
 * period.  Every insert and
 * remove runs in a read-side section and checks `frozen` after loading
 * the table, before it touches a slot; by RCU's guarantee, a section
 * that did not see the flag has ended before the grace period ends, so
 * after it no one writes the old table.  Writers that see the flag leave
 * their section and retry (waiting, with sched_yield, for the new table:
 * a rebuild blocks writers for one grace period and a copy).  The copy
 * is published by a release store of map->table; the old table stays
 * readable for lookups until a grace period later (call_rcu).  Lookups
 * never wait: a lookup that loaded the old table sees exactly the
 * contents the map had from the freeze until the first write to the new
 * table, which includes the moment it loaded the table pointer.
 *
 * Rebuilds are rationed by their own cost: the rebuilder times its grace
 * period, and a table that lived less than seqmap_grow_ratio times that
 * gets twice the capacity (one younger than seqmap_keep_ratio times keeps
 * it, an older one may shrink; both are conf.h's keys, 32 and 256 by
 * default).  So a fast churn of fresh ids spends a
 * bounded share of its time in rebuilds, and the table stays as small as
 * that share allows: every insert of a fresh id touches a new slot, and a
 * table that outgrows the core's cache makes each of them a cache miss.
 *
 * Shrinks.  A period is seqmap_shrink_period_us (conf.h; 5 ms by
 * default).  Removes are counted as claims are (sampled, into the table's
 * `removed`), and a remove that finds the live entries under 1/16 of the
 * slots asks for a rebuild sized from them alone (count_remove): so a
 * table grown for a burst goes back to its size for what is left.  Only
 * a table that counted no claim for a period shrinks: a churn of fresh
 * ids, whose tables fill with the keys of removed entries, is left to
 * the growth's rationing (which shrinks an old table by half at most).
 * And only a table older than a period, or built by a shrink: a drain
 * shrinks its table a few times in a row, by 4 or more each time.  The remove that
 * asks pays the rebuild (a grace period), as the insert that asks for a
 * growth does, and only outside a read-side section of its caller's
 * (a manager's destruction removes everything inside one; it skips).
 *
 * TSan sees the slots' atomics; the grace periods are liburcu's asm and
 * are annotated as rcu.h describes (kvp_rcu_reclaim after
 * synchronize_rcu, kvp_rcu_reclaim_head in the callback).
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "compiler.h"
#include "conf.h"
#include "rcu.h"
#include "seqmap.h"

/* A manager's table starts at 4 KiB.  Debug builds (the TSan stress
 * runs) start tinier: every program that creates more than a few dozen
 * ids then rebuilds under its traffic. */
#define KVP_SEQMAP_MIN_SLOTS (config_debug ? 64u : 256u)
#define KVP_SEQMAP_MAX_SLOTS (1ull << 32)
#define KVP_SEQMAP_CLAIM_BATCH 32u  /* claims per shared-counter add */
#define KVP_SEQMAP_LONG_PROBE 128u  /* a claim this far asks for a rebuild */

struct seqmap_slot {
	_Atomic uint64_t key; /* 0 = empty; set once by CAS */
	_Atomic(void *) val;  /* NULL = absent */
};

struct seqmap_table {
	uint64_t mask;	   /* slots - 1; immutable */
	uint64_t built_ns; /* when it was built; immutable */
	/* Whether a shrink built it (count_remove); immutable. */
	bool shrunk;
	/* 1 once a rebuilder owns the table: no one writes it any more. */
	kvp_cacheline_aligned _Atomic uint32_t frozen;
	/* Keys claimed and values removed, counted in batches, and when a
	 * claim batch was last counted (approximate, relaxed). */
	kvp_cacheline_aligned _Atomic uint64_t claimed;
	_Atomic uint64_t removed, claimed_ns;
	struct rcu_head rcu;
	kvp_cacheline_aligned struct seqmap_slot slots[];
};

static uint64_t seq_hash(uint64_t id)
{
	/* splitmix64's finaliser over id / 4, the low two bits kept: four
	 * consecutive ids (a scheduler's, a fork's children) share a home
	 * line of the table, groups of four spread over all of it. */
	uint64_t g = id >> 2;

	g ^= g >> 30;
	g *= 0xbf58476d1ce4e5b9ull;
	g ^= g >> 27;
	g *= 0x94d049bb133111ebull;
	g ^= g >> 31;
	return g << 2 | (id & 3);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	/* Read from the vDSO, no system call; sampled claims and removes
	 * and the rebuilds read it. */
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t table_bytes(uint64_t slots)
{
	return sizeof(struct seqmap_table) + slots * sizeof(struct seqmap_slot);
}

/* An empty table of `slots` slots (a power of two), or NULL. */
static struct seqmap_table *table_new(uint64_t slots)
{
	size_t bytes = table_bytes(slots);
	struct seqmap_table *t = kvp_malloc_aligned(KVP_CACHELINE, bytes);

	if (!t)
		return NULL;
	/* All zero: empty keys, absent values. */
	memset(t, 0, bytes);
	if (bytes >= (2u << 20))
		kvp_advise_huge(t, bytes);
	t->mask = slots - 1;
	t->built_ns = now_ns();
	atomic_init(&t->claimed_ns, t->built_ns);
	return t;
}

static void table_free(struct seqmap_table *t)
{
	kvp_free_aligned(t, KVP_CACHELINE, table_bytes(t->mask + 1));
}

static void table_free_rcu(struct rcu_head *head)
{
	kvp_rcu_reclaim_head(head);
	table_free(caa_container_of(head, struct seqmap_table, rcu));
	kvp_rcu_callback_done();
}

int seqmap_init(struct seqmap *map)
{
	struct seqmap_table *t = table_new(KVP_SEQMAP_MIN_SLOTS);

	if (!t)
		return -ENOMEM;
	const struct conf *conf = conf_get();

	map->grow_ratio = conf_val(conf, SEQMAP_GROW_RATIO);
	map->keep_ratio = conf_val(conf, SEQMAP_KEEP_RATIO);
	map->period_ns = conf_val(conf, SEQMAP_SHRINK_PERIOD_US) * 1000ull;
	atomic_init(&map->zero, NULL);
	atomic_init(&map->rebuilds, 0);
	atomic_init(&map->table, t);
	return 0;
}

void seqmap_fini(struct seqmap *map)
{
	struct seqmap_table *t =
		atomic_load_explicit(&map->table, memory_order_acquire);

	if (t)
		table_free(t);
	atomic_store_explicit(&map->table, NULL, memory_order_relaxed);
}

/* The slot of id in t, or NULL if id is in no slot (read side). */
static struct seqmap_slot *slot_find(struct seqmap_table *t, uint64_t id)
{
	uint64_t i = seq_hash(id);

	for (uint64_t n = 0; n <= t->mask; n++, i++) {
		struct seqmap_slot *sl = &t->slots[i & t->mask];
		/* Relaxed: a key is an id, it publishes nothing. */
		uint64_t k = atomic_load_explicit(&sl->key,
						  memory_order_relaxed);

		if (k == id)
			return sl;
		if (k == 0)
			return NULL;
	}
	return NULL;
}

void *seqmap_lookup(struct seqmap *map, uint64_t id)
{
	struct seqmap_table *t;
	struct seqmap_slot *sl;

	/* Acquire, here and below: pairs with the inserter's release. */
	if (unlikely(id == 0))
		return atomic_load_explicit(&map->zero, memory_order_acquire);
	t = atomic_load_explicit(&map->table, memory_order_acquire);
	sl = slot_find(t, id);
	return sl ? atomic_load_explicit(&sl->val, memory_order_acquire)
		  : NULL;
}

/*
 * Counts a claim of the key whose hash is h in t; true if t should be
 * rebuilt.  Sampled: one claim in KVP_SEQMAP_CLAIM_BATCH (by bits of the
 * hash that do not pick the slot, well mixed) adds the batch, so the
 * shared counter is written once per batch on average and threads keep
 * no state.
 */
static bool count_claim(struct seqmap_table *t, uint64_t h)
{
	uint64_t c;

	if ((h >> 58) % KVP_SEQMAP_CLAIM_BATCH != 0)
		return false;
	c = atomic_fetch_add_explicit(&t->claimed, KVP_SEQMAP_CLAIM_BATCH,
				      memory_order_relaxed) +
	    KVP_SEQMAP_CLAIM_BATCH;
	/* Relaxed: it only keeps count_remove() from shrinking t. */
	atomic_store_explicit(&t->claimed_ns, now_ns(), memory_order_relaxed);
	return c > (t->mask + 1) / 2;
}

/*
 * Counts a remove of the key whose hash is h from t, sampled as
 * count_claim() counts claims; true if t should shrink: its live entries
 * (claimed less removed, both approximate) fill under 1/16 of it, no
 * claim was counted for a period (a churn of fresh ids, whose tables fill
 * with the keys of removed entries, is left to the growth's rationing),
 * and it is older than a period or was itself built by a shrink (a
 * drain's last removes shrink it a few times in a row).
 */
static bool count_remove(struct seqmap *map, struct seqmap_table *t,
			 uint64_t h)
{
	uint64_t r, c, live, now, slots = t->mask + 1;

	if ((h >> 58) % KVP_SEQMAP_CLAIM_BATCH != 0 ||
	    slots <= KVP_SEQMAP_MIN_SLOTS)
		return false;
	r = atomic_fetch_add_explicit(&t->removed, KVP_SEQMAP_CLAIM_BATCH,
				      memory_order_relaxed) +
	    KVP_SEQMAP_CLAIM_BATCH;
	c = atomic_load_explicit(&t->claimed, memory_order_relaxed);
	live = c > r ? c - r : 0;
	if (live >= slots / 16)
		return false;
	now = now_ns();
	return now - atomic_load_explicit(&t->claimed_ns,
					  memory_order_relaxed) >=
		       map->period_ns &&
	       (t->shrunk || now - t->built_ns >= map->period_ns);
}

/*
 * Freezes t for its rebuild, if t is still the map's table and no other
 * thread froze it.  The caller's read-side section that found t has
 * ended, and another rebuild may have replaced t and queued its free
 * since: so the flag is taken inside a section of our own, and only
 * while t is still published (its free then waits for our section).
 */
static bool freeze(struct seqmap *map, struct seqmap_table *t)
{
	uint32_t unfrozen = 0;
	bool won;

	kvp_rcu_read_lock();
	/* Relaxed: only compared; t's fields are read only if it is ours. */
	won = atomic_load_explicit(&map->table, memory_order_relaxed) == t &&
	      atomic_compare_exchange_strong_explicit(&t->frozen, &unfrozen, 1,
						      memory_order_seq_cst,
						      memory_order_relaxed);
	kvp_rcu_read_unlock();
	return won;
}

/*
 * The size of t's successor for `live` entries: four slots per entry, or
 * as rationed for a growing table (see the argument above); a shrinking
 * one (shrink: count_remove asked) is sized from its entries alone.
 */
static uint64_t rebuild_slots(const struct seqmap *map,
			      struct seqmap_table *t, uint64_t live,
			      bool shrink, uint64_t start, uint64_t gp)
{
	uint64_t slots = KVP_SEQMAP_MIN_SLOTS, age, floor;

	while (slots < 4 * live && slots < KVP_SEQMAP_MAX_SLOTS)
		slots *= 2;
	if (shrink)
		return slots;
	/* Rationed by this rebuild's grace period, gp, which began at
	 * start: a table that lasted less than grow_ratio of them doubles,
	 * one that lasted less than keep_ratio keeps its size,
	 * an older one shrinks by half at most, so a steady churn settles on
	 * one size.  (The scan and copy are left out: they grow with the
	 * table, and half a table's worth of inserts pays for them whatever
	 * its size.) */
	age = start - t->built_ns;
	if (age < map->grow_ratio * gp)
		floor = 2 * (t->mask + 1);
	else if (age < map->keep_ratio * gp)
		floor = t->mask + 1;
	else
		floor = (t->mask + 1) / 2;
	if (slots < floor && floor <= KVP_SEQMAP_MAX_SLOTS)
		slots = floor;
	return slots;
}

/*
 * Rebuilds t unless another thread already is, or did (then returns at
 * once: the caller retries and waits for the new table).  Not in a
 * read-side section.  shrink: a remove asked (count_remove).  0, or
 * -ENOMEM (t is thawed and stays).
 */
static int rebuild(struct seqmap *map, struct seqmap_table *t, bool shrink)
{
	struct seqmap_table *nt;
	uint64_t live = 0, start, gp;

	if (!freeze(map, t))
		return 0;
	start = now_ns();
	/* Every writer that missed the flag leaves its section. */
	urcu_memb_synchronize_rcu();
	kvp_rcu_reclaim();
	gp = now_ns() - start;
	for (uint64_t i = 0; i <= t->mask; i++)
		if (atomic_load_explicit(&t->slots[i].val,
					 memory_order_relaxed))
			live++;
	nt = table_new(rebuild_slots(map, t, live, shrink, start, gp));
	if (!nt) {
		/* Release: pairs with the writers' acquire of the flag. */
		atomic_store_explicit(&t->frozen, 0, memory_order_release);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i <= t->mask; i++) {
		/* Acquire: the inserter's release, for the new table's
		 * finders (who acquire the new table from us). */
		void *v = atomic_load_explicit(&t->slots[i].val,
					       memory_order_acquire);
		uint64_t k, j;

		if (!v)
			continue;
		k = atomic_load_explicit(&t->slots[i].key,
					 memory_order_relaxed);
		/* Private until published: plain probing. */
		for (j = seq_hash(k);; j++)
			if (!atomic_load_explicit(&nt->slots[j & nt->mask].key,
						  memory_order_relaxed))
				break;
		atomic_store_explicit(&nt->slots[j & nt->mask].key, k,
				      memory_order_relaxed);
		atomic_store_explicit(&nt->slots[j & nt->mask].val, v,
				      memory_order_relaxed);
	}
	atomic_store_explicit(&nt->claimed, live, memory_order_relaxed);
	nt->shrunk = shrink;
	/* The last claim counted is the map's, not the table's. */
	atomic_store_explicit(&nt->claimed_ns,
			      atomic_load_explicit(&t->claimed_ns,
						   memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&nt->removed, 0, memory_order_relaxed);
	/* Release: the copy before any use of the new table. */
	atomic_store_explicit(&map->table, nt, memory_order_release);
	atomic_fetch_add_explicit(&map->rebuilds, 1, memory_order_relaxed);
	/* Lookups may still read the old table. */
	kvp_rcu_call(&t->rcu, table_free_rcu);
	return 0;
}

/*
 * Enters a read-side section and returns the current table, which no
 * rebuilder has frozen: writes to it count (see the argument above).
 */
static struct seqmap_table *write_begin(struct seqmap *map)
{
	for (unsigned spins = 0;; spins++) {
		struct seqmap_table *t;

		kvp_rcu_read_lock();
		t = atomic_load_explicit(&map->table, memory_order_acquire);
		/* Acquire: a thawed table's state (rebuild failure). */
		if (likely(!atomic_load_explicit(&t->frozen,
						 memory_order_acquire)))
			return t;
		kvp_rcu_read_unlock();
		/* A rebuild is under way: it needs our section gone. */
		if (spins < 16)
			kvp_cpu_relax();
		else
			sched_yield();
	}
}

int seqmap_insert(struct seqmap *map, uint64_t id, void *v)
{
	for (;;) {
		struct seqmap_table *t;
		struct seqmap_slot *sl = NULL;
		bool grow = false;
		void *cur = NULL;
		uint64_t h, i, n;
		int err;

		if (unlikely(id == 0))
			/* Release: v's contents before a finder's acquire. */
			return atomic_compare_exchange_strong_explicit(
				       &map->zero, &cur, v,
				       memory_order_release,
				       memory_order_relaxed)
				       ? 0
				       : -EEXIST;
		t = write_begin(map);
		h = i = seq_hash(id);
		for (n = 0; n <= t->mask; n++, i++) {
			uint64_t k;

			sl = &t->slots[i & t->mask];
			k = atomic_load_explicit(&sl->key,
						 memory_order_relaxed);
			if (k == 0 &&
			    atomic_compare_exchange_strong_explicit(
				    &sl->key, &k, id, memory_order_relaxed,
				    memory_order_relaxed)) {
				grow = count_claim(t, h) ||
				       n >= KVP_SEQMAP_LONG_PROBE ||
				       n > t->mask / 4;
				break;
			}
			/* k: the key there (maybe just claimed by another). */
			if (k == id)
				break;
			sl = NULL;
		}
		if (sl) {
			/* Release: v's contents before a finder's acquire. */
			bool won = atomic_compare_exchange_strong_explicit(
				&sl->val, &cur, v, memory_order_release,
				memory_order_relaxed);

			kvp_rcu_read_unlock();
			if (grow)
				(void)rebuild(map, t, false); /* -ENOMEM: keep */
			return won ? 0 : -EEXIST;
		}
		/* Full: rebuild (or wait for the one under way), retry. */
		kvp_rcu_read_unlock();
		err = rebuild(map, t, false);
		if (err)
			return err;
	}
}

bool seqmap_remove(struct seqmap *map, uint64_t id, void *v)
{
	struct seqmap_table *t;
	struct seqmap_slot *sl;
	bool done, shrink;

	if (unlikely(id == 0))
		return atomic_compare_exchange_strong_explicit(
			&map->zero, &v, NULL, memory_order_relaxed,
			memory_order_relaxed);
	t = write_begin(map);
	sl = slot_find(t, id);
	/* Relaxed: removing publishes nothing (the value's owner orders its
	 * own reuse). */
	done = sl && atomic_compare_exchange_strong_explicit(
			     &sl->val, &v, NULL, memory_order_relaxed,
			     memory_order_relaxed);
	shrink = done && count_remove(map, t, seq_hash(id));
	kvp_rcu_read_unlock();
	/* Not from inside a caller's read-side section (a destruction
	 * empties its map in one): its grace period would wait for us. */
	if (shrink && !urcu_memb_read_ongoing())
		(void)rebuild(map, t, true); /* -ENOMEM: keep it */
	return done;
}

/* The next value at or after iter->next, or NULL. */
static void *iter_scan(struct seqmap_iter *iter)
{
	struct seqmap_table *t = iter->t;

	while (iter->next <= t->mask) {
		void *v = atomic_load_explicit(&t->slots[iter->next++].val,
					       memory_order_acquire);

		if (v)
			return v;
	}
	return NULL;
}

void *seqmap_first(struct seqmap *map, struct seqmap_iter *iter)
{
	void *v = atomic_load_explicit(&map->zero, memory_order_acquire);

	iter->t = atomic_load_explicit(&map->table, memory_order_acquire);
	iter->next = 0;
	return v ? v : iter_scan(iter);
}

void *seqmap_next(struct seqmap *map, struct seqmap_iter *iter)
{
	(void)map;
	return iter_scan(iter);
}

uint64_t seqmap_iter_key(const struct seqmap_iter *iter)
{
	/* next 0: seqmap_first returned the zero slot's value. */
	if (iter->next == 0)
		return 0;
	/* Relaxed: a key is an id, set once before its value. */
	return atomic_load_explicit(&iter->t->slots[iter->next - 1].key,
				    memory_order_relaxed);
}
