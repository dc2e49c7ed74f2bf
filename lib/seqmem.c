/* SPDX-License-Identifier: MIT */
/*
 * seqmem.c - the memory of sequence structs: slabs, the free list, the
 * retire list and its batches through RCU, and the reclaims that give
 * wholly free slabs back (floor 6, doc/architecture.md "Layers": over
 * btable.c, mgrstat.c, tcache.c, rcu.c and alloc.c; seqslab.c, above it,
 * keeps each thread's stashes and lookup cache).
 *
 * Owns struct seq_slab, struct seqmem and struct seqmem_reader
 * (seqmem.h), and the list of every thread's reader.
 *
 * Correctness argument.
 *
 * A sequence is found through the map (seqmap.c), which stores pointers
 * to type-stable structs: a struct belongs to one manager and lives in a
 * slab that is freed only as below, so a pointer found stays safe to
 * lock even if the sequence is removed and its struct reused meanwhile
 * (seqslab.c validates under the lock).
 *
 * A removed struct is reused at once by its freeing thread (seqslab.c's
 * stash: nobody but lockers checking `dead` reads a dead struct), and by
 * other threads only through the free list after a grace period
 * (seqmem_retire), whose pops run inside read-side sections
 * (seqmem_pop), which rules out ABA.
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
 *    (seqmem_reader_enter, _exit: `busy` 1, then 0) and only if its
 *    epoch is current (seqslab.c's seq_cache_hit).  reclaim_finish first
 *    waits for every thread's busy to clear behind a membarrier
 *    (seqmem_readers_wait): a Dekker pair (owner: store busy, load the
 *    epoch; reclaimer: store the epoch, fence, load busy), as tcache.c's
 *    drains, so an owner either saw the bump and rejects its older
 *    entries, or is waited for.  The hot path pays two stores to
 *    its own line and a compiler barrier, not a read-side section.  An
 *    entry is stamped with the epoch read before its struct was seen
 *    alive (seq_acquire) or while it is locked and alive
 *    (seq_cache_note); a struct of the chain is dead from before the
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
 * for queued reclaims (seqmem_quiesce).
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "manager.h"
#include "mgrstat.h"
#include "rcu.h"
#include "seqmem.h"
#include "tcache.h"

/* Puts a chain of structs, first..last linked through `link`, on the
 * free list with one CAS; only the last one's link is written. */
static void seq_free_push(struct kvp_manager *m, struct kvp_seq *first,
			  struct kvp_seq *last)
{
	struct kvp_seq *top;

	top = atomic_load_explicit(&m->mem.free_seqs, memory_order_relaxed);
	do
		atomic_store_explicit(&last->link, top, memory_order_relaxed);
	/* Release: the structs' last state happens before their reuse. */
	while (!atomic_compare_exchange_weak_explicit(&m->mem.free_seqs, &top,
						      first,
						      memory_order_release,
						      memory_order_relaxed));
}

/*
 * A new slab of dead, unpublished structs for m, on m's slab list (freed
 * with m), or NULL.  Cache-line aligned, so that sequences of different
 * threads never share a line.  The caller hands out its structs
 * (seqslab.c's seq_take: the first now, the others from this thread's
 * stash for m).
 */
static struct seq_slab *slab_new(struct kvp_manager *m)
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
	atomic_fetch_add_explicit(&m->mem.nslabs, 1, memory_order_relaxed);
	/* A CAS push; only the reclaimer unlinks (slabs_unlink). */
	head = atomic_load_explicit(&m->mem.slabs, memory_order_relaxed);
	do
		slab->next = head;
	while (!atomic_compare_exchange_weak_explicit(&m->mem.slabs, &head,
						      slab,
						      memory_order_release,
						      memory_order_relaxed));
	return slab;
}

/* ---- returning slabs (see "Returning slabs" above) ----------------- */

#define KVP_RECLAIM_KEEP 64u /* slabs kept without a reclaim (512 KiB) */
/* Between two reclaims no thread asked for (kvp_thread_flush). */
#define KVP_RECLAIM_PERIOD_NS 1000000000ull

static uint64_t coarse_now_ns(void);
static void reclaim_finish(struct rcu_head *head);
static void seqmem_readers_wait(void);
static bool retire_flush(struct kvp_manager *m, void (*fn)(struct rcu_head *));
static void seq_recycle_asked(struct rcu_head *head);

/* Whether most of m's structs are idle (live sequences under half of
 * them), m holds more than KVP_RECLAIM_KEEP slabs, and a reclaim may
 * start now (asked, or KVP_RECLAIM_PERIOD_NS since the last one). */
static bool reclaim_due(struct kvp_manager *m)
{
	/* Relaxed, all: they only decide whether a reclaim is worth it. */
	uint64_t nslabs =
		atomic_load_explicit(&m->mem.nslabs, memory_order_relaxed);
	uint64_t sum[STAT_FIELDS];
	int64_t live;

	if (nslabs <= KVP_RECLAIM_KEEP)
		return false;
	if (!atomic_load_explicit(&m->mem.asked, memory_order_relaxed) &&
	    coarse_now_ns() - atomic_load_explicit(&m->mem.reclaimed_ns,
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
	m->mem.reclaim_asked = atomic_exchange_explicit(&m->mem.asked, false,
							memory_order_relaxed);
	/* Acquire: pairs with seq_free_push()'s release (the structs' last
	 * state, before reclaim_finish reads and frees them). */
	chain = atomic_exchange_explicit(&m->mem.free_seqs, NULL,
					 memory_order_acquire);
	if (!chain)
		return false;
	m->mem.reclaim_chain = chain;
	/* A new process-unique epoch.  Seq_cst: after the detach, before
	 * seqmem_readers_wait()'s fence (the Dekker pair with readers). */
	atomic_store_explicit(&m->mem.epoch, kvp_next_uid(),
			      memory_order_seq_cst);
	kvp_rcu_call(&m->mem.reclaim_rcu, reclaim_finish);
	return true;
}

/* From an RCU callback: starts a reclaim of m if one is due and none is
 * under way or m is being destroyed. */
static void reclaim_try(struct kvp_manager *m)
{
	uint32_t idle = 0;

	/* Acquire: pairs with seqslab_dying()'s release. */
	if (atomic_load_explicit(&m->mem.closing, memory_order_acquire) ||
	    !reclaim_due(m))
		return;
	/* Acquire: the previous reclaim's writes (slab list, counters). */
	if (!atomic_compare_exchange_strong_explicit(
		    &m->mem.reclaiming, &idle, 1, memory_order_acquire,
		    memory_order_relaxed)) {
		/* The one under way detached its chain before the structs
		 * we just recycled: it starts another when it ends. */
		atomic_store_explicit(&m->mem.again, true,
				      memory_order_relaxed);
		return;
	}
	if (!reclaim_start(m))
		/* Release: pairs with the next reclaimer's acquire. */
		atomic_store_explicit(&m->mem.reclaiming, 0,
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

	/* Acquire: pairs with slab_new()'s release push. */
	head = atomic_load_explicit(&m->mem.slabs, memory_order_acquire);
	while (head && head->nidle == KVP_SEQ_SLAB)
		/* Acquire: a failed CAS reloads a newer push. */
		if (atomic_compare_exchange_weak_explicit(
			    &m->mem.slabs, &head, head->next,
			    memory_order_acquire, memory_order_acquire))
			head = head->next;
	for (prev = head; prev && prev->next;) {
		if (prev->next->nidle == KVP_SEQ_SLAB)
			prev->next = prev->next->next;
		else
			prev = prev->next;
	}
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
		for (int i = 0; i < KVP_SEQ_SLAB; i++)
			btable_fini(&slab->seqs[i].table);
		kvp_free_aligned(slab, _Alignof(struct seq_slab),
				 sizeof(*slab));
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
		caa_container_of(head, struct seqmem, reclaim_rcu),
		struct kvp_manager, mem);
	struct kvp_seq *chain;
	struct seq_slab *counted;
	uint32_t freed;

	kvp_rcu_reclaim_head(head);
	seqmem_readers_wait();
	chain = m->mem.reclaim_chain;
	counted = slabs_count(chain);
	chain_keep(m, chain);
	slabs_unlink(m);
	freed = slabs_free(counted);
	/* Relaxed: counters that pace reclaims and feed the dump. */
	atomic_fetch_sub_explicit(&m->mem.nslabs, freed, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->mem.slabs_returned, freed,
				  memory_order_relaxed);
	atomic_store_explicit(&m->mem.reclaimed_ns, coarse_now_ns(),
			      memory_order_relaxed);
	/* Only when asked: a trim holds the allocator's arena locks for
	 * tens of milliseconds (the threads still freeing a burst would
	 * wait on them), and the slabs freed meanwhile wait for it. */
	m->mem.untrimmed += freed;
	if (m->mem.reclaim_asked && m->mem.untrimmed) {
		kvp_alloc_trim();
		m->mem.untrimmed = 0;
	}
	kvp_rcu_callback_done();
	/* Relaxed: set by a reclaim_try() of an earlier callback (liburcu's
	 * worker runs them one at a time).  Acquire: pairs with
	 * seqslab_dying()'s release. */
	if (atomic_exchange_explicit(&m->mem.again, false,
				     memory_order_relaxed) &&
	    !atomic_load_explicit(&m->mem.closing, memory_order_acquire) &&
	    reclaim_start(m))
		return;
	/* Release: our writes before the next reclaimer's (or the
	 * destruction's) acquire; m may be freed right after. */
	atomic_store_explicit(&m->mem.reclaiming, 0, memory_order_release);
}

/* RCU callback of kvp_thread_flush when it had nothing to retire: a
 * reclaim, if due, after the recycling queued before it. */
static void reclaim_kick(struct rcu_head *head)
{
	struct kvp_manager *m = caa_container_of(
		caa_container_of(head, struct seqmem, kick_rcu),
		struct kvp_manager, mem);

	kvp_rcu_reclaim_head(head);
	atomic_store_explicit(&m->mem.asked, true, memory_order_relaxed);
	reclaim_try(m);
	kvp_rcu_callback_done();
	/* Release: pairs with seqmem_quiesce()'s acquire. */
	atomic_store_explicit(&m->mem.kicking, 0, memory_order_release);
}

/* kvp_thread_flush, for a live manager m (registry lock held): retired
 * structs go to call_rcu, and a reclaim is asked for once they are on
 * the free list (by their callback, or by a kick if there were none).
 * `asked` is set only there: a batch retired earlier, recycled after
 * this call, must not start the asked reclaim before ours arrive. */
void seqmem_ask(struct kvp_manager *m)
{
	uint32_t idle = 0;

	if (retire_flush(m, seq_recycle_asked))
		return;
	/* Acquire: the previous kick's end. */
	if (atomic_compare_exchange_strong_explicit(&m->mem.kicking, &idle,
						    1, memory_order_acquire,
						    memory_order_relaxed))
		kvp_rcu_call(&m->mem.kick_rcu, reclaim_kick);
}

/* A batch of removed (or never published) structs, chained through
 * `link`, becomes reusable: one splice onto the free list.  asked: the
 * batch of a kvp_thread_flush, whose reclaim may start at once. */
static void recycle(struct rcu_head *head, bool asked)
{
	struct kvp_seq *first = caa_container_of(head, struct kvp_seq, rcu);
	struct kvp_seq *last = first, *next;
	struct kvp_manager *m;

	kvp_rcu_reclaim_head(head);
	/* Read while the batch is ours (once pushed, a reclaim may free
	 * its slabs). */
	m = first->mgr;
	/* Relaxed: the batch was handed over with the call_rcu. */
	while ((next = atomic_load_explicit(&last->link,
					    memory_order_relaxed)))
		last = next;
	seq_free_push(m, first, last);
	if (asked)
		/* Relaxed: read by reclaim_try() right below. */
		atomic_store_explicit(&m->mem.asked, true,
				      memory_order_relaxed);
	reclaim_try(m);
	kvp_rcu_callback_done();
}

/* RCU callbacks of recycle(): a batch retired on the way, and the batch
 * of a kvp_thread_flush. */
static void seq_recycle(struct rcu_head *head)
{
	recycle(head, false);
}

static void seq_recycle_asked(struct rcu_head *head)
{
	recycle(head, true);
}

/* Hands every retired struct of m to one call_rcu of fn; false if none
 * was waiting. */
static bool retire_flush(struct kvp_manager *m, void (*fn)(struct rcu_head *))
{
	/* Acquire: pairs with the release pushes of seqmem_retire(). */
	struct kvp_seq *batch = atomic_exchange_explicit(
		&m->mem.retired, NULL, memory_order_acquire);

	if (batch)
		kvp_rcu_call(&batch->rcu, fn);
	return batch != NULL;
}

void seqmem_flush(struct kvp_manager *m)
{
	(void)retire_flush(m, seq_recycle);
}

#define KVP_RETIRE_BATCH 64u		  /* retirements between clock reads */
#define KVP_RETIRE_PERIOD_NS 50000000ull /* 50 ms: <= 20 batches a second */
#define KVP_RETIRE_MAX 16384u		  /* ... unless this many wait */

static uint64_t coarse_now_ns(void)
{
	struct timespec ts;

	/* The coarse clock is read from the vDSO: no system call. */
	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Flushes m's retire list if the rationing below allows it: KVP_RETIRE_MAX
 * structs wait since the last flush, or KVP_RETIRE_PERIOD_NS passed.
 * now_n: m->mem.nretired as the caller saw it.
 */
static void retire_paced(struct kvp_manager *m, uint32_t now_n)
{
	/* Relaxed: these only pace the batches (two threads may both flush:
	 * the second detaches what is left, maybe nothing). */
	uint32_t flushed_n =
		atomic_load_explicit(&m->mem.flushed_n, memory_order_relaxed);
	uint64_t now = coarse_now_ns();

	if (now_n - flushed_n < KVP_RETIRE_MAX &&
	    now - atomic_load_explicit(&m->mem.flushed_ns,
				       memory_order_relaxed) <
		    KVP_RETIRE_PERIOD_NS)
		return;
	atomic_store_explicit(&m->mem.flushed_n, now_n, memory_order_relaxed);
	atomic_store_explicit(&m->mem.flushed_ns, now, memory_order_relaxed);
	seqmem_flush(m);
}

/*
 * Before m grows a slab: structs retired since the last flush (stashes
 * handed back never flush: see seqmem_retire) are flushed, as paced, so
 * that they come back through the free list instead of waiting for m's
 * destruction while new slabs pile up.
 */
static void retire_kick(struct kvp_manager *m)
{
	/* Relaxed: pacing only. */
	uint32_t n =
		atomic_load_explicit(&m->mem.nretired, memory_order_relaxed);

	if (n != atomic_load_explicit(&m->mem.flushed_n, memory_order_relaxed))
		retire_paced(m, n);
}

/*
 * Hands a chain of n dead structs, first..last linked through `link`, back
 * for reuse after a grace period (only the way to other threads needs one:
 * the free list's pops rely on it, see seqmem_pop).  Structs gather on the
 * retire list (a push-only stack: pushing is ABA-safe) and are handed to
 * call_rcu as one batch; the grace period starts at the call_rcu, after
 * every struct of the batch was retired, so it covers all of them.
 * kvp_manager_destroy flushes the rest.  With may_flush false the chain
 * only waits for the next flush (a thread handing back its stash under
 * the registry lock must not queue work on a manager being destroyed).
 *
 * Batches are rationed by time, not only by count: at most one per
 * KVP_RETIRE_PERIOD_NS, unless KVP_RETIRE_MAX structs wait.  A grace
 * period is cheap on an idle CPU but not when every CPU runs a thread of
 * ours: liburcu's call_rcu thread then preempts one of them, often inside
 * a read-side section, and loops on membarrier() (an IPI to every CPU of
 * the process) until that thread runs again (the ChangeLog of 2026-11-22
 * has the membarrier counts).  The price is memory: structs wait up to 50
 * ms (or until KVP_RETIRE_MAX wait) instead of one grace period.
 */
void seqmem_retire(struct kvp_manager *m, struct kvp_seq *first,
		   struct kvp_seq *last, uint32_t n, bool may_flush)
{
	struct kvp_seq *top;
	uint32_t old, now_n;

	top = atomic_load_explicit(&m->mem.retired, memory_order_relaxed);
	do
		atomic_store_explicit(&last->link, top, memory_order_relaxed);
	/* Release: publishes the links to the detaching thread. */
	while (!atomic_compare_exchange_weak_explicit(&m->mem.retired, &top,
						      first,
						      memory_order_release,
						      memory_order_relaxed));
	/* Relaxed: a count that paces the batches. */
	old = atomic_fetch_add_explicit(&m->mem.nretired, n,
					memory_order_relaxed);
	now_n = old + n;
	if (!may_flush || old / KVP_RETIRE_BATCH == now_n / KVP_RETIRE_BATCH)
		return;
	retire_paced(m, now_n);
}


/* Every thread's lookup-cache reader (seqmem_readers_wait). */
static pthread_mutex_t readers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct seqmem_reader *readers; /* readers_lock */

void seqmem_reader_add(struct seqmem_reader *r)
{
	kvp_check_pthread(pthread_mutex_lock(&readers_lock));
	r->next = readers;
	if (r->next)
		r->next->pprev = &r->next;
	r->pprev = &readers;
	readers = r;
	kvp_check_pthread(pthread_mutex_unlock(&readers_lock));
}

void seqmem_reader_del(struct seqmem_reader *r)
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
static void seqmem_readers_wait(void)
{
	tcache_fence_all();
	kvp_check_pthread(pthread_mutex_lock(&readers_lock));
	for (struct seqmem_reader *r = readers; r; r = r->next)
		/* Acquire: pairs with seqmem_reader_exit()'s release (the
		 * owner's use of the struct happens before our free). */
		while (atomic_load_explicit(&r->busy, memory_order_acquire))
			sched_yield();
	kvp_check_pthread(pthread_mutex_unlock(&readers_lock));
}

/*
 * Pops run inside an RCU read-side section: a struct returns to the free
 * list only through call_rcu (or a reclaim's push-back, a grace period
 * after its detach), after every section that might have read it as the
 * head ends, so the CAS cannot suffer ABA.
 */
struct kvp_seq *seqmem_pop(struct kvp_manager *m)
{
	struct kvp_seq *s, *next;

	kvp_rcu_read_lock();
	/* Acquire: pairs with seq_free_push()'s release. */
	s = atomic_load_explicit(&m->mem.free_seqs, memory_order_acquire);
	while (s) {
		/* Relaxed: if s was popped meanwhile, the CAS fails. */
		next = atomic_load_explicit(&s->link, memory_order_relaxed);
		if (atomic_compare_exchange_weak_explicit(
			    &m->mem.free_seqs, &s, next, memory_order_acquire,
			    memory_order_acquire))
			break;
	}
	kvp_rcu_read_unlock();
	return s;
}

struct seq_slab *seqmem_grow(struct kvp_manager *m)
{
	retire_kick(m);
	return slab_new(m);
}

void seqmem_init(struct seqmem *mem)
{
	atomic_init(&mem->slabs, NULL);
	atomic_init(&mem->free_seqs, NULL);
	atomic_init(&mem->retired, NULL);
	atomic_init(&mem->nretired, 0);
	atomic_init(&mem->flushed_n, 0);
	atomic_init(&mem->flushed_ns, 0);
	atomic_init(&mem->epoch, kvp_next_uid());
	atomic_init(&mem->nslabs, 0);
	atomic_init(&mem->slabs_returned, 0);
	atomic_init(&mem->asked, false);
	atomic_init(&mem->again, false);
	atomic_init(&mem->closing, false);
	atomic_init(&mem->reclaiming, 0);
	atomic_init(&mem->kicking, 0);
	atomic_init(&mem->reclaimed_ns, 0);
}

void seqmem_close(struct kvp_manager *m)
{
	/* Release: pairs with reclaim_try()'s acquire. */
	atomic_store_explicit(&m->mem.closing, true, memory_order_release);
}

void seqmem_quiesce(struct kvp_manager *m)
{
	/* A recycling callback may have queued a reclaim during the
	 * barrier, and a reclaim the next one: wait until none is left.
	 * Acquire: pairs with reclaim_finish()'s and reclaim_kick()'s
	 * release (their last touch of m). */
	do
		kvp_rcu_barrier();
	while (atomic_load_explicit(&m->mem.reclaiming,
				    memory_order_acquire) ||
	       atomic_load_explicit(&m->mem.kicking, memory_order_acquire));
}

void seqmem_counts(struct kvp_manager *m, uint64_t *held,
		   uint64_t *returned)
{
	/* Relaxed: statistics. */
	*held = atomic_load_explicit(&m->mem.nslabs, memory_order_relaxed);
	*returned = atomic_load_explicit(&m->mem.slabs_returned,
					 memory_order_relaxed);
}

void seqmem_fini(struct kvp_manager *m)
{
	struct seq_slab *slab, *next;

	for (slab = atomic_load_explicit(&m->mem.slabs, memory_order_acquire);
	     slab; slab = next) {
		next = slab->next;
		for (int i = 0; i < KVP_SEQ_SLAB; i++)
			btable_fini(&slab->seqs[i].table);
		kvp_free_aligned(slab, _Alignof(struct seq_slab),
				 sizeof(*slab));
	}
}
