/* SPDX-License-Identifier: MIT */
/*
 * seqslab.c - the back of the sequence-memory room: slabs of sequence
 * structs, a manager's free list of them, and the reclaims that give
 * wholly free slabs back (floor 7, doc/architecture.md "Layers": called
 * by seqmem.c only; over btable.c, mgrstat.c, tcache.c, rcu.c and
 * alloc.c).
 *
 * Owns struct seq_slab, struct seqslabs and struct seqslab_reader
 * (seqslab.h) and the list of every thread's reader.  seqmem.c, the
 * room's door, hands out and takes back single structs (stashes, the
 * retire list, the lookup cache); it comes here for a new slab, a pop
 * of the free list, a batch recycled after its grace period, and a
 * reclaim asked for.  Nothing here calls seqmem.c.
 *
 * Correctness argument.
 *
 * Sequence structs are type-stable (seqmem.c's argument): a struct
 * belongs to one manager and lives in a slab, and a pointer to it,
 * found in the map, on the free list or in a lookup cache, stays safe
 * to lock while the slab lives.  Structs reach the free list only
 * through seqslab_recycled, from an RCU callback a grace period after
 * they left the map; pops run inside read-side sections (seqslab_pop),
 * so a popped struct comes back only after every pop that read it as
 * the head has ended, which rules out ABA.
 *
 * Returning slabs.  Type-stability holds only while a slab lives, so a
 * slab goes back to the allocator only when no one can still hold a
 * pointer into it.  Who can: a map reader (inside a read-side section);
 * a pop of the free list (inside one); a thread's lookup cache (outside
 * any: an entry lives until overwritten); a stash, the retire list, a
 * batch waiting for call_rcu, a thread's fresh slab (their structs are
 * not on the free list).  A reclaim (reclaim_start, from an RCU callback,
 * one per manager at a time: `reclaiming`) detaches the whole free list,
 * then bumps the manager's epoch (redraws it: epochs are process-unique
 * numbers, kvp_next_uid), then queues reclaim_finish on call_rcu.
 * After that grace period:
 *  - every struct of the chain was removed from the map a grace period
 *    before it reached the free list, so no map reader holds it;
 *  - every pop that read one of them as the head has ended (pops run in
 *    read-side sections, and no later pop can reach a detached struct);
 *  - a lookup-cache entry is used only between its owner's reader marks
 *    (seqslab_reader_enter, _exit: `busy` 1, then 0) and only if its
 *    epoch is current (seqmem.c's seq_cache_hit).  reclaim_finish first waits
 *    for every thread's busy to clear behind a membarrier
 *    (readers_wait): a Dekker pair (owner: store busy, load the
 *    epoch; reclaimer: store the epoch, fence, load busy), as tcache.c's
 *    drains, so an owner either saw the bump and rejects its older
 *    entries, or is waited for.  The hot path pays two stores to
 *    its own line and a compiler barrier, not a read-side section.  An
 *    entry is stamped with the epoch read before its struct was seen
 *    alive (seqmem.c's seq_acquire) or while it is locked and alive
 *    (seqmem_note); a struct of the chain is dead from before the
 *    detach until it is pushed back, so an entry stamped after the bump
 *    never names a struct the reclaim frees.
 * So reclaim_finish owns the chain.  It counts its structs per slab; a
 * slab with all KVP_SEQ_SLAB structs in the chain has none anywhere else
 * (stash, retire list, fresh, live), and it is unlinked from the slab
 * list and freed; the other structs go back on the free list (no ABA: a
 * grace period passed since the detach).  Only the reclaimer unlinks
 * slabs, and pushers only CAS the list's head, so a plain store unlinks
 * a slab below the head.  A reclaim a thread asked for then has the
 * allocator give its free pages back (kvp_alloc_trim: it holds arena
 * locks for a while, so reclaims nobody asked for leave it be).
 *
 * When.  A recycling callback starts a reclaim when live sequences fill
 * under half of the structs, the manager holds more than
 * KVP_RECLAIM_KEEP slabs, and KVP_RECLAIM_PERIOD_NS passed since the last
 * one; kvp_thread_flush hands the thread's stashes back, sends the
 * retired structs to call_rcu and asks for a reclaim once they are on
 * the free list, without the wait.  So memory comes back two grace
 * periods after kvp_thread_flush (the freed structs', then the
 * reclaim's).  While a reclaim's grace period runs, creates that find no
 * stashed or fresh struct allocate new slabs: the period keeps a steady
 * churn from paying that more than once a second.  A lookup-cache hit
 * marks busy and reads the epoch (a line written once per reclaim); the
 * rest runs in callbacks and in kvp_thread_flush.  The destruction waits
 * for queued reclaims (seqslab_fini).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "alloc.h"
#include "manager.h"
#include "mgrstat.h"
#include "rcu.h"
#include "seqmem.h"
#include "seqslab.h"
#include "tcache.h"

/* A slab of sequence structs (seqslab.h's KVP_SEQ_SLAB).  Its structs
 * come first: seqslab_new hands out the slab as its array of structs. */
struct seq_slab {
	struct kvp_seq seqs[KVP_SEQ_SLAB]; /* first: see seqslab_new */
	/* The manager's slab list: set by the pusher before the push;
	 * afterwards written (a slab unlinked) only by the reclaimer, and
	 * read by it and by the destruction, after the last reclaim. */
	struct seq_slab *next;
	/* Reclaimer only (reclaim_finish): the structs of the
	 * slab counted on the detached free list, and the slabs counted. */
	struct seq_slab *counted_next;
	uint32_t nidle;
};

/* ---- the lookup cache's readers (see "Returning slabs") ------------ */

/* Every thread's lookup-cache reader (readers_wait). */
static pthread_mutex_t readers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct seqslab_reader *readers; /* readers_lock */

void seqslab_reader_add(struct seqslab_reader *r)
{
	kvp_check_pthread(pthread_mutex_lock(&readers_lock));
	r->next = readers;
	if (r->next)
		r->next->pprev = &r->next;
	r->pprev = &readers;
	readers = r;
	kvp_check_pthread(pthread_mutex_unlock(&readers_lock));
}

void seqslab_reader_del(struct seqslab_reader *r)
{
	kvp_check_pthread(pthread_mutex_lock(&readers_lock));
	if (r->next)
		r->next->pprev = r->pprev;
	*r->pprev = r->next;
	kvp_check_pthread(pthread_mutex_unlock(&readers_lock));
}

/*
 * Waits until no thread uses a lookup-cache entry it checked against an
 * epoch older than the current one (see "Returning slabs").  The
 * caller bumped the epoch before; the fence (membarrier, as a drain's
 * in tcache.c) orders that store before our loads of `busy` as if each
 * owner had fenced between its store of busy and its load of the epoch.
 * Not a hot path: a reclaim's callback.
 */
static void readers_wait(void)
{
	tcache_fence_all();
	kvp_check_pthread(pthread_mutex_lock(&readers_lock));
	for (struct seqslab_reader *r = readers; r; r = r->next)
		/* Acquire: pairs with seqslab_reader_exit()'s release (the
		 * owner's use of the struct happens before our free). */
		while (atomic_load_explicit(&r->busy, memory_order_acquire))
			sched_yield();
	kvp_check_pthread(pthread_mutex_unlock(&readers_lock));
}

/* ---- slabs and the free list --------------------------------------- */

/* Puts a chain of structs, first..last linked through `link`, on the
 * free list with one CAS; only the last one's link is written. */
static void seq_free_push(struct kvp_manager *m, struct kvp_seq *first,
			  struct kvp_seq *last)
{
	struct kvp_seq *top;

	top = atomic_load_explicit(&m->mem.sl.free_seqs, memory_order_relaxed);
	do
		atomic_store_explicit(&last->link, top, memory_order_relaxed);
	/* Release: the structs' last state happens before their reuse. */
	while (!atomic_compare_exchange_weak_explicit(&m->mem.sl.free_seqs, &top,
						      first,
						      memory_order_release,
						      memory_order_relaxed));
}

/*
 * A new slab of dead, unpublished structs for m, on m's slab list (freed
 * with m), as its array of KVP_SEQ_SLAB structs, or NULL.  Cache-line
 * aligned, so that sequences of different threads never share a line.
 * The caller hands out its structs (seqmem.c: the first now, the others
 * from the thread's fresh slab for m).
 */
struct kvp_seq *seqslab_new(struct kvp_manager *m)
{
	struct seq_slab *slab =
		kvp_malloc_aligned(_Alignof(struct seq_slab), sizeof(*slab));
	struct seq_slab *head;

	if (!slab)
		return NULL;
	memset(slab, 0, sizeof(*slab));
	for (int i = 0; i < KVP_SEQ_SLAB; i++) {
		struct kvp_seq *s = &slab->seqs[i];

		btable_init(&s->table);
		s->mgr = m;
		s->slab = slab;
		atomic_init(&s->dead, true);
	}
	/* Relaxed: it paces reclaims. */
	atomic_fetch_add_explicit(&m->mem.sl.nslabs, 1, memory_order_relaxed);
	/* A CAS push; only the reclaimer unlinks (slabs_unlink). */
	head = atomic_load_explicit(&m->mem.sl.list, memory_order_relaxed);
	do
		slab->next = head;
	while (!atomic_compare_exchange_weak_explicit(&m->mem.sl.list, &head,
						      slab,
						      memory_order_release,
						      memory_order_relaxed));
	return slab->seqs;
}

/*
 * Pops run inside an RCU read-side section: a struct returns to the free
 * list only through call_rcu (or a reclaim's push-back, a grace period
 * after its detach), after every section that might have read it as the
 * head ends, so the CAS cannot suffer ABA.
 */
struct kvp_seq *seqslab_pop(struct kvp_manager *m)
{
	struct kvp_seq *s, *next;

	kvp_rcu_read_lock();
	/* Acquire: pairs with seq_free_push()'s release. */
	s = atomic_load_explicit(&m->mem.sl.free_seqs, memory_order_acquire);
	while (s) {
		/* Relaxed: if s was popped meanwhile, the CAS fails. */
		next = atomic_load_explicit(&s->link, memory_order_relaxed);
		if (atomic_compare_exchange_weak_explicit(
			    &m->mem.sl.free_seqs, &s, next, memory_order_acquire,
			    memory_order_acquire))
			break;
	}
	kvp_rcu_read_unlock();
	return s;
}

/* ---- returning slabs (see "Returning slabs" above) ----------------- */

#define KVP_RECLAIM_KEEP 64u /* slabs kept without a reclaim (512 KiB) */
/* Between two reclaims no thread asked for (kvp_thread_flush). */
#define KVP_RECLAIM_PERIOD_NS 1000000000ull

static void reclaim_finish(struct rcu_head *head);

/* Whether most of m's structs are idle (live sequences under half of
 * them), m holds more than KVP_RECLAIM_KEEP slabs, and a reclaim may
 * start now (asked, or KVP_RECLAIM_PERIOD_NS since the last one). */
static bool reclaim_due(struct kvp_manager *m)
{
	/* Relaxed, all: they only decide whether a reclaim is worth it. */
	uint64_t nslabs =
		atomic_load_explicit(&m->mem.sl.nslabs, memory_order_relaxed);
	uint64_t sum[STAT_FIELDS];
	int64_t live;

	if (nslabs <= KVP_RECLAIM_KEEP)
		return false;
	if (!atomic_load_explicit(&m->mem.sl.asked, memory_order_relaxed) &&
	    seqslab_coarse_ns() - atomic_load_explicit(&m->mem.sl.reclaimed_ns,
						   memory_order_relaxed) <
		    KVP_RECLAIM_PERIOD_NS)
		return false;
	mgr_stat_sum(m->shards, sum);
	live = (int64_t)STAT_OF(sum, sequences);
	return live < (int64_t)(nslabs * KVP_SEQ_SLAB / 2);
}

/*
 * The reclaim of m owned (reclaiming is 1): detaches m's free list, bumps
 * the epoch and queues reclaim_finish after a grace period.  False if the
 * free list was empty (reclaiming stays 1: the caller ends it).
 */
static bool reclaim_start(struct kvp_manager *m)
{
	struct kvp_seq *chain;

	/* Relaxed: a thread asked (kvp_thread_flush); only then does the
	 * reclaim trim the allocator. */
	m->mem.sl.reclaim_asked = atomic_exchange_explicit(&m->mem.sl.asked, false,
							memory_order_relaxed);
	/* Acquire: pairs with seq_free_push()'s release (the structs' last
	 * state, before reclaim_finish reads and frees them). */
	chain = atomic_exchange_explicit(&m->mem.sl.free_seqs, NULL,
					 memory_order_acquire);
	if (!chain)
		return false;
	m->mem.sl.reclaim_chain = chain;
	/* A new process-unique epoch.  Seq_cst: after the detach, before
	 * readers_wait()'s fence (the Dekker pair with readers). */
	atomic_store_explicit(&m->mem.sl.epoch, kvp_next_uid(),
			      memory_order_seq_cst);
	kvp_rcu_call(&m->mem.sl.reclaim_rcu, reclaim_finish);
	return true;
}

/* From an RCU callback: starts a reclaim of m if one is due and none is
 * under way or m is being destroyed. */
static void reclaim_try(struct kvp_manager *m)
{
	uint32_t idle = 0;

	/* Acquire: pairs with seqslab_close()'s release. */
	if (atomic_load_explicit(&m->mem.sl.closing, memory_order_acquire) ||
	    !reclaim_due(m))
		return;
	/* Acquire: the previous reclaim's writes (slab list, counters). */
	if (!atomic_compare_exchange_strong_explicit(
		    &m->mem.sl.reclaiming, &idle, 1, memory_order_acquire,
		    memory_order_relaxed)) {
		/* The one under way detached its chain before the structs
		 * we just recycled: it starts another when it ends. */
		atomic_store_explicit(&m->mem.sl.again, true,
				      memory_order_relaxed);
		return;
	}
	if (!reclaim_start(m))
		/* Release: pairs with the next reclaimer's acquire. */
		atomic_store_explicit(&m->mem.sl.reclaiming, 0,
				      memory_order_release);
}

/* Counts the detached structs of each slab (nidle, which the reclaimer
 * alone writes and leaves 0); returns the slabs counted, linked through
 * counted_next. */
static struct seq_slab *slabs_count(struct kvp_seq *chain)
{
	struct seq_slab *counted = NULL;

	/* Relaxed, here and below: the chain is ours (detached, and a
	 * grace period passed since any popper could read it). */
	for (struct kvp_seq *s = chain; s;
	     s = atomic_load_explicit(&s->link, memory_order_relaxed))
		if (s->slab->nidle++ == 0) {
			s->slab->counted_next = counted;
			counted = s->slab;
		}
	return counted;
}

/* Puts back on m's free list the structs of the chain whose slab keeps
 * some struct elsewhere (nidle short of a whole slab). */
static void chain_keep(struct kvp_manager *m, struct kvp_seq *chain)
{
	struct kvp_seq *first = NULL, *last = NULL, *next;

	for (struct kvp_seq *s = chain; s; s = next) {
		next = atomic_load_explicit(&s->link, memory_order_relaxed);
		if (s->slab->nidle == KVP_SEQ_SLAB)
			continue;
		atomic_store_explicit(&s->link, first, memory_order_relaxed);
		if (!last)
			last = s;
		first = s;
	}
	/* No ABA: a grace period passed since the detach, so no pop that
	 * read one of them as the head is still under way. */
	if (first)
		seq_free_push(m, first, last);
}

/* Unlinks from m's slab list every slab wholly idle (nidle is a whole
 * slab).  Pushers only CAS the head, so a slab below it is unlinked with
 * a plain store, and the head with a CAS. */
static void slabs_unlink(struct kvp_manager *m)
{
	struct seq_slab *head, *prev;

	/* Acquire: pairs with seqslab_new()'s release push. */
	head = atomic_load_explicit(&m->mem.sl.list, memory_order_acquire);
	while (head && head->nidle == KVP_SEQ_SLAB)
		/* Acquire: a failed CAS reloads a newer push. */
		if (atomic_compare_exchange_weak_explicit(
			    &m->mem.sl.list, &head, head->next,
			    memory_order_acquire, memory_order_acquire))
			head = head->next;
	for (prev = head; prev && prev->next;) {
		if (prev->next->nidle == KVP_SEQ_SLAB)
			prev->next = prev->next->next;
		else
			prev = prev->next;
	}
}

/* Frees a slab, unlinked or at m's destruction. */
static void slab_free(struct seq_slab *slab)
{
	for (int i = 0; i < KVP_SEQ_SLAB; i++)
		btable_fini(&slab->seqs[i].table);
	kvp_free_aligned(slab, _Alignof(struct seq_slab), sizeof(*slab));
}

/* Frees the wholly idle slabs among `counted` (unlinked already) and
 * resets the others' counts; returns how many were freed. */
static uint32_t slabs_free(struct seq_slab *counted)
{
	uint32_t freed = 0;

	while (counted) {
		struct seq_slab *slab = counted;

		counted = slab->counted_next;
		if (slab->nidle != KVP_SEQ_SLAB) {
			slab->nidle = 0;
			continue;
		}
		slab_free(slab);
		freed++;
	}
	return freed;
}

/*
 * RCU callback, a grace period after reclaim_start(): no popper, map
 * reader or lookup-cache reader can still hold a struct of the detached
 * chain.  Slabs whose every struct is in it go back to the allocator
 * (and the allocator's free memory to the system); the other structs
 * return to the free list.  Starts the next reclaim if a recycling found
 * this one under way (its structs came after our detach).
 */
static void reclaim_finish(struct rcu_head *head)
{
	struct kvp_manager *m = caa_container_of(
		caa_container_of(head, struct seqslabs, reclaim_rcu),
		struct kvp_manager, mem.sl);
	struct kvp_seq *chain;
	struct seq_slab *counted;
	uint32_t freed;

	kvp_rcu_reclaim_head(head);
	readers_wait();
	chain = m->mem.sl.reclaim_chain;
	counted = slabs_count(chain);
	chain_keep(m, chain);
	slabs_unlink(m);
	freed = slabs_free(counted);
	/* Relaxed: counters that pace reclaims and feed the dump. */
	atomic_fetch_sub_explicit(&m->mem.sl.nslabs, freed, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->mem.sl.returned, freed,
				  memory_order_relaxed);
	atomic_store_explicit(&m->mem.sl.reclaimed_ns, seqslab_coarse_ns(),
			      memory_order_relaxed);
	/* Only when asked: a trim holds the allocator's arena locks for
	 * tens of milliseconds (the threads still freeing a burst would
	 * wait on them), and the slabs freed meanwhile wait for it. */
	m->mem.sl.untrimmed += freed;
	if (m->mem.sl.reclaim_asked && m->mem.sl.untrimmed) {
		kvp_alloc_trim();
		m->mem.sl.untrimmed = 0;
	}
	kvp_rcu_callback_done();
	/* Relaxed: set by a reclaim_try() of an earlier callback (liburcu's
	 * worker runs them one at a time).  Acquire: pairs with
	 * seqslab_close()'s release. */
	if (atomic_exchange_explicit(&m->mem.sl.again, false,
				     memory_order_relaxed) &&
	    !atomic_load_explicit(&m->mem.sl.closing, memory_order_acquire) &&
	    reclaim_start(m))
		return;
	/* Release: our writes before the next reclaimer's (or the
	 * destruction's) acquire; m may be freed right after. */
	atomic_store_explicit(&m->mem.sl.reclaiming, 0, memory_order_release);
}

/* RCU callback of kvp_thread_flush when it had nothing to retire: a
 * reclaim, if due, after the recycling queued before it. */
static void reclaim_kick(struct rcu_head *head)
{
	struct kvp_manager *m = caa_container_of(
		caa_container_of(head, struct seqslabs, kick_rcu),
		struct kvp_manager, mem.sl);

	kvp_rcu_reclaim_head(head);
	atomic_store_explicit(&m->mem.sl.asked, true, memory_order_relaxed);
	reclaim_try(m);
	kvp_rcu_callback_done();
	/* Release: pairs with quiesce()'s acquire. */
	atomic_store_explicit(&m->mem.sl.kicking, 0, memory_order_release);
}

/* ---- what seqmem.c asks for ---------------------------------------- */

void seqslab_recycled(struct kvp_manager *m, struct kvp_seq *first,
		      struct kvp_seq *last, bool asked)
{
	seq_free_push(m, first, last);
	if (asked)
		/* Relaxed: read by reclaim_try() right below. */
		atomic_store_explicit(&m->mem.sl.asked, true,
				      memory_order_relaxed);
	reclaim_try(m);
}

void seqslab_kick(struct kvp_manager *m)
{
	uint32_t idle = 0;

	/* Acquire: the previous kick's end. */
	if (atomic_compare_exchange_strong_explicit(&m->mem.sl.kicking, &idle,
						    1, memory_order_acquire,
						    memory_order_relaxed))
		kvp_rcu_call(&m->mem.sl.kick_rcu, reclaim_kick);
}

/* ---- a manager's part ---------------------------------------------- */

void seqslab_init(struct kvp_manager *m)
{
	/* m is zeroed: empty lists, no slab, nothing asked or under way. */
	atomic_init(&m->mem.sl.epoch, kvp_next_uid());
}

void seqslab_close(struct kvp_manager *m)
{
	/* Release: pairs with reclaim_try()'s acquire. */
	atomic_store_explicit(&m->mem.sl.closing, true, memory_order_release);
}

/* Waits (RCU barriers) until no recycling or reclaim of m is queued. */
static void quiesce(struct kvp_manager *m)
{
	/* A recycling callback may have queued a reclaim during the
	 * barrier, and a reclaim the next one: wait until none is left.
	 * Acquire: pairs with reclaim_finish()'s and reclaim_kick()'s
	 * release (their last touch of m). */
	do
		kvp_rcu_barrier();
	while (atomic_load_explicit(&m->mem.sl.reclaiming,
				    memory_order_acquire) ||
	       atomic_load_explicit(&m->mem.sl.kicking, memory_order_acquire));
}

void seqslab_fini(struct kvp_manager *m)
{
	struct seq_slab *slab, *next;

	quiesce(m);
	for (slab = atomic_load_explicit(&m->mem.sl.list,
					 memory_order_acquire);
	     slab; slab = next) {
		next = slab->next;
		slab_free(slab);
	}
}

void seqslab_counts(struct kvp_manager *m, uint64_t *held,
		    uint64_t *returned)
{
	/* Relaxed: statistics. */
	*held = atomic_load_explicit(&m->mem.sl.nslabs, memory_order_relaxed);
	*returned = atomic_load_explicit(&m->mem.sl.returned,
					 memory_order_relaxed);
}
