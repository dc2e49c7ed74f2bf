/* SPDX-License-Identifier: MIT */
/*
 * seqmem.c - the memory of sequence structs, one room: each thread's
 * stashes and fresh slab, the lookup cache, the slabs, the free list, the
 * retire list and its batches through RCU, the reclaims that give wholly
 * free slabs back (floor 7, doc/architecture.md "Layers": over btable.c,
 * mgrstat.c, tcache.c, seqmap.c, registry.c, rcu.c and alloc.c).
 *
 * Owns struct kvp_seq's memory and struct seqmem (seqmem.h), struct
 * seq_slab, each thread's struct seq_thread and the list of every
 * thread's reader.  Its door (seqmem.h) is all the sequence layer
 * sees: seqmem_take, seqmem_give, seq_acquire, seqmem_note, seq_prefetch,
 * kvp_thread_flush; nothing here calls back up.
 *
 * Correctness argument.
 *
 * A sequence is found through the map (seqmap.c), which stores pointers
 * to type-stable structs: a struct belongs to one manager and lives in a
 * slab that is freed only as below, so a pointer found stays safe to
 * lock even if the sequence is removed and its struct reused meanwhile.
 * Every mutation and every consistent read of a sequence happens under
 * its own lock, after checking `dead` and the id (seq_acquire).  A lookup
 * that finds the struct dead or holding another id reports -ENOENT: the
 * sequence was removed at some moment between the map read and the
 * check.
 *
 * A removed struct is reused at once by its freeing thread (its stash:
 * nobody but lockers checking `dead` reads a dead struct), and by other
 * threads only through the free list after a grace period (retire),
 * whose pops run inside read-side sections (free_pop), which rules out
 * ABA.
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
 *    epoch is current (seq_cache_hit).  reclaim_finish first waits
 *    for every thread's busy to clear behind a membarrier
 *    (readers_wait): a Dekker pair (owner: store busy, load the
 *    epoch; reclaimer: store the epoch, fence, load busy), as tcache.c's
 *    drains, so an owner either saw the bump and rejects its older
 *    entries, or is waited for.  The hot path pays two stores to
 *    its own line and a compiler barrier, not a read-side section.  An
 *    entry is stamped with the epoch read before its struct was seen
 *    alive (seq_acquire) or while it is locked and alive
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
 * for queued reclaims (quiesce).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "manager.h"
#include "mgrstat.h"
#include "rcu.h"
#include "registry.h"
#include "seqfields.h"
#include "seqmem.h"
#include "seqmap.h"
#include "tcache.h"

/* A slab of sequence structs (seqmem.h's KVP_SEQ_SLAB). */
struct seq_slab {
	struct kvp_seq seqs[KVP_SEQ_SLAB];
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
static struct seqmem_reader *readers; /* readers_lock */

static void reader_add(struct seqmem_reader *r)
{
	kvp_check_pthread(pthread_mutex_lock(&readers_lock));
	r->next = readers;
	if (r->next)
		r->next->pprev = &r->next;
	r->pprev = &readers;
	readers = r;
	kvp_check_pthread(pthread_mutex_unlock(&readers_lock));
}

static void reader_del(struct seqmem_reader *r)
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
	for (struct seqmem_reader *r = readers; r; r = r->next)
		/* Acquire: pairs with seqmem_reader_exit()'s release (the
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
 * (seq_new: the first now, the others from this thread's fresh slab
 * for m).
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

/*
 * Pops run inside an RCU read-side section: a struct returns to the free
 * list only through call_rcu (or a reclaim's push-back, a grace period
 * after its detach), after every section that might have read it as the
 * head ends, so the CAS cannot suffer ABA.
 */
static struct kvp_seq *free_pop(struct kvp_manager *m)
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

/* ---- returning slabs (see "Returning slabs" above) ----------------- */

#define KVP_RECLAIM_KEEP 64u /* slabs kept without a reclaim (512 KiB) */
/* Between two reclaims no thread asked for (kvp_thread_flush). */
#define KVP_RECLAIM_PERIOD_NS 1000000000ull

static uint64_t coarse_now_ns(void);
static void reclaim_finish(struct rcu_head *head);
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
	 * readers_wait()'s fence (the Dekker pair with readers). */
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

	/* Acquire: pairs with seqmem_close()'s release. */
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
	readers_wait();
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
	 * seqmem_close()'s release. */
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
	/* Release: pairs with quiesce()'s acquire. */
	atomic_store_explicit(&m->mem.kicking, 0, memory_order_release);
}

/* kvp_thread_flush, for a live manager m (registry lock held): retired
 * structs go to call_rcu, and a reclaim is asked for once they are on
 * the free list (by their callback, or by a kick if there were none).
 * `asked` is set only there: a batch retired earlier, recycled after
 * this call, must not start the asked reclaim before ours arrive. */
static void ask(struct kvp_manager *m)
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

/* ---- the retire list and recycling -------------------------------- */

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
	/* Acquire: pairs with the release pushes of retire(). */
	struct kvp_seq *batch = atomic_exchange_explicit(
		&m->mem.retired, NULL, memory_order_acquire);

	if (batch)
		kvp_rcu_call(&batch->rcu, fn);
	return batch != NULL;
}

static void retire_all(struct kvp_manager *m)
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
	retire_all(m);
}

/*
 * Before m grows a slab: structs retired since the last flush (stashes
 * handed back never flush: see retire) are flushed, as paced, so
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
 * the free list's pops rely on it, see free_pop).  Structs gather on the
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
static void retire(struct kvp_manager *m, struct kvp_seq *first,
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

/* ---- each thread's stashes and lookup cache ------------------------- */

/*
 * Per-thread state: one heap block per thread, made on first use and
 * freed at thread exit (the library's TLS stays a few words: it may be
 * loaded with dlopen).
 *
 * The lookup cache: id -> struct, direct-mapped, keyed by the manager's
 * epoch (process-unique, redrawn by each reclaim), so an entry of another
 * manager, of a destroyed one, or older than the last reclaim never
 * matches.  A hit is confirmed under the struct's lock (not dead, same
 * id) between the owner's reader marks: a stale entry is only a miss.
 *
 * The stashes: a struct freed by a thread is taken again by that
 * thread's next create or fork, hot and with no atomic and no grace
 * period.  A thread keeps one stash for each of up to KVP_STASHES
 * managers (direct-mapped by uid) of at most KVP_STASH_MAX structs;
 * beyond that, half goes to the manager's retire list.  A stash is handed
 * back when its slot is needed for another manager and at thread exit,
 * under the registry lock and only if its manager is still registered
 * and not dying (registry_lock_live); a destroyed manager's stashed
 * structs went with its slabs and are only forgotten.
 */
#define SEQ_CACHE_SLOTS 1024
struct seq_cache_entry {
	uint64_t epoch; /* its manager's epoch when s was alive */
	uint64_t id;
	struct kvp_seq *s;
};
#define KVP_STASHES 4
#define KVP_STASH_MAX 64u
struct seq_stash {
	uint64_t muid; /* 0: empty */
	uint64_t leaves; /* registry_leaves() when m was set */
	struct kvp_manager *m;
	struct kvp_seq *head, *tail; /* linked through `link` */
	uint32_t n;
	/* The thread's slab of never-used structs for m, and its next one:
	 * handed back with the stash, so that a thread that serves several
	 * managers never abandons a slab's unused structs. */
	struct seq_slab *fresh;
	uint32_t fresh_next;
};
struct seq_thread {
	/* Marks its use of a lookup-cache entry (seq_cache_hit). */
	struct seqmem_reader reader;
	struct seq_cache_entry cache[SEQ_CACHE_SLOTS];
	struct seq_stash stashes[KVP_STASHES];
};
static KVP_TLS struct seq_thread *seq_thr; /* owner thread */
static pthread_key_t seq_thr_key;
static pthread_once_t seq_thr_once = PTHREAD_ONCE_INIT;

static void stash_return(struct seq_stash *st, bool flush);

/* Thread exit: the stashes go back to their managers. */
static void seq_thread_exit(void *arg)
{
	struct seq_thread *th = arg;

	for (int i = 0; i < KVP_STASHES; i++)
		stash_return(&th->stashes[i], false);
	reader_del(&th->reader);
	kvp_free(th, sizeof(*th));
	seq_thr = NULL;
}

static void seq_thr_key_create(void)
{
	kvp_check_pthread(pthread_key_create(&seq_thr_key, seq_thread_exit));
}

/* Makes this thread's state; NULL if out of memory (then every lookup goes
 * to the map and every free to the retire list). */
static __attribute__((noinline)) struct seq_thread *seq_thread_new(void)
{
	struct seq_thread *th;

	kvp_check_pthread(pthread_once(&seq_thr_once, seq_thr_key_create));
	th = kvp_calloc(1, sizeof(*th));
	if (!th)
		return NULL;
	if (pthread_setspecific(seq_thr_key, th) != 0) {
		kvp_free(th, sizeof(*th));
		return NULL;
	}
	reader_add(&th->reader);
	seq_thr = th;
	return th;
}

/* This thread's state, or NULL (see seq_thread_new). */
static inline struct seq_thread *seq_thread(void)
{
	return likely(seq_thr) ? seq_thr : seq_thread_new();
}

static struct seq_cache_entry *seq_cache_slot(uint64_t id)
{
	struct seq_thread *th = seq_thread();

	if (unlikely(!th))
		return NULL;
	return &th->cache[(id ^ (id >> 10) ^ (id >> 20)) &
			  (SEQ_CACHE_SLOTS - 1)];
}

/* Pushes the dead struct s on st's list (no limit: see seqmem_give). */
static void stash_push(struct seq_stash *st, struct kvp_seq *s)
{
	/* Relaxed: the stash is ours alone. */
	atomic_store_explicit(&s->link, st->head, memory_order_relaxed);
	if (!st->head)
		st->tail = s;
	st->head = s;
	st->n++;
}

/* Adds the unused structs of st's fresh slab to its list (dead and never
 * published, as the stashed ones).  Its manager is alive. */
static void stash_add_fresh(struct seq_stash *st)
{
	for (uint32_t i = KVP_SEQ_SLAB; st->fresh && i-- > st->fresh_next;)
		stash_push(st, &st->fresh->seqs[i]);
}

/* Empties st, handing its structs back to its manager if it is alive;
 * with flush (kvp_thread_flush), the manager's retired structs go to
 * call_rcu and a reclaim is asked for after them. */
static void stash_return(struct seq_stash *st, bool flush)
{
	if (st->n || (st->fresh && st->fresh_next < KVP_SEQ_SLAB) ||
	    (flush && st->muid)) {
		/* Only a live manager's structs are touched: a destroyed
		 * manager's went with its slabs. */
		if (registry_lock_live(st->m, st->muid, st->leaves)) {
			stash_add_fresh(st);
			/* The tail kept, not found by a walk down the list:
			 * its structs are cold by now, each link a miss. */
			if (st->n)
				retire(st->m, st->head, st->tail, st->n,
				       false);
			if (flush)
				ask(st->m);
		}
		registry_unlock();
	}
	*st = (struct seq_stash){0};
}

/* This thread's stash for m (emptied first if it held another's), or
 * NULL if out of memory. */
static struct seq_stash *stash_for(struct kvp_manager *m)
{
	struct seq_thread *th = seq_thread();
	struct seq_stash *st;

	if (unlikely(!th))
		return NULL;
	st = &th->stashes[m->uid % KVP_STASHES];
	if (likely(st->muid == m->uid))
		return st;
	stash_return(st, false);
	st->muid = m->uid;
	st->m = m;
	st->leaves = registry_leaves();
	return st;
}

/* ---- the door ------------------------------------------------------ */

/* Into this thread's stash; half a full stash goes to the retire list. */
void seqmem_give(struct kvp_seq *s)
{
	struct seq_stash *st = stash_for(s->mgr);

	if (unlikely(!st)) {
		retire(s->mgr, s, s, 1, true);
		return;
	}
	stash_push(st, s);
	if (st->n > KVP_STASH_MAX) {
		struct kvp_seq *first = st->head, *last = first;

		for (uint32_t i = 1; i < KVP_STASH_MAX / 2; i++)
			last = atomic_load_explicit(&last->link,
						    memory_order_relaxed);
		st->head = atomic_load_explicit(&last->link,
						memory_order_relaxed);
		st->n -= KVP_STASH_MAX / 2;
		retire(s->mgr, first, last, KVP_STASH_MAX / 2, true);
	}
}

/* A struct from this thread's stash for m, or NULL. */
static struct kvp_seq *stash_take(struct kvp_manager *m)
{
	struct seq_stash *st;
	struct kvp_seq *s;

	if (unlikely(!seq_thr))
		return NULL;
	st = &seq_thr->stashes[m->uid % KVP_STASHES];
	if (st->muid != m->uid || !st->head)
		return NULL;
	s = st->head;
	st->head = atomic_load_explicit(&s->link, memory_order_relaxed);
	if (!--st->n)
		st->tail = NULL;
	return s;
}

/* A never-used struct of this thread's fresh slab for m, or NULL. */
static struct kvp_seq *fresh_take(struct kvp_manager *m)
{
	struct seq_stash *st;

	if (unlikely(!seq_thr))
		return NULL;
	st = &seq_thr->stashes[m->uid % KVP_STASHES];
	if (st->muid != m->uid || !st->fresh ||
	    st->fresh_next >= KVP_SEQ_SLAB)
		return NULL;
	return &st->fresh->seqs[st->fresh_next++];
}

/* A struct of a new slab for m; the others become this thread's fresh
 * slab for m.  NULL if out of memory.  Structs retired since the last
 * flush go to call_rcu first, as paced (retire_kick). */
static struct kvp_seq *seq_new(struct kvp_manager *m)
{
	struct seq_slab *slab;
	struct seq_stash *st;

	retire_kick(m);
	slab = slab_new(m);
	if (!slab)
		return NULL;
	/* Without thread state the others wait, unused, for m's
	 * destruction (only after a failed allocation). */
	st = stash_for(m);
	if (st) {
		st->fresh = slab;
		st->fresh_next = 1;
	}
	return &slab->seqs[0];
}

struct kvp_seq *seqmem_take(struct kvp_manager *m)
{
	struct kvp_seq *s;

	/* This thread's last freed structs first (hot), then fresh ones
	 * from its own slab: sequences of different threads then sit apart,
	 * as separate allocations did. */
	s = stash_take(m);
	if (s)
		return s;
	s = fresh_take(m);
	if (s)
		return s;
	s = free_pop(m);
	if (s)
		return s;
	return seq_new(m);
}

/* Locks s if it holds live sequence id; false (unlocked) otherwise. */
static bool seq_lock_live(struct kvp_seq *s, uint64_t id)
{
	seq_lock(s);
	/* Acquire: a struct brought to life unlocked (seq_bring_alive). */
	if (!atomic_load_explicit(&s->dead, memory_order_acquire) &&
	    s->id == id)
		return true;
	seq_unlock(s);
	return false;
}

/* s locked and alive, or the caller's own (dead, not yet alive): either
 * way no reclaim of s's slab can have bumped the epoch read now. */
void seqmem_note(struct kvp_manager *m, uint64_t id, struct kvp_seq *s)
{
	struct seq_cache_entry *e = seq_cache_slot(id);

	if (e)
		*e = (struct seq_cache_entry){
			.epoch = seqmem_epoch(&m->mem), .id = id, .s = s};
}

/*
 * A lookup-cache hit needs no read-side section: between the thread's
 * reader marks, an entry is used only if its epoch is current, and a
 * reclaim waits for the marks to clear after bumping the epoch
 * (readers_wait) before it frees anything.  The map's path runs in
 * a read-side section, and stamps its entry with the epoch read before
 * the struct was found alive, so an entry is never newer than the life
 * it records.
 */
static struct kvp_seq *seq_cache_hit(struct kvp_manager *m,
				     struct seq_cache_entry *e, uint64_t id)
{
	struct seq_thread *th = seq_thr;
	struct kvp_seq *s = NULL;

	seqmem_reader_enter(&th->reader);
	if (e->epoch == seqmem_epoch(&m->mem)) {
		/* Not m's struct: the entry outlived its slab (a broken
		 * epoch) and the memory serves something else now. */
		if (unlikely(e->s->mgr != m))
			kvp_fatal("a lookup-cache entry outlived its slab");
		if (seq_lock_live(e->s, id))
			s = e->s;
	}
	seqmem_reader_exit(&th->reader);
	return s;
}

void seq_prefetch(struct kvp_manager *m, uint64_t id)
{
	struct seq_cache_entry *e = seq_cache_slot(id);

	/* A hint only: the struct may be freed or reused by the time it is
	 * used, and seq_acquire() checks it then (a prefetch never faults). */
	if (e && e->epoch == seqmem_epoch(&m->mem) && e->id == id)
		__builtin_prefetch(e->s, 1, 3);
}

struct kvp_seq *seq_acquire(struct kvp_manager *m, uint64_t id)
{
	struct seq_cache_entry *e = seq_cache_slot(id);
	struct kvp_seq *s;
	uint64_t epoch;

	if (e && e->id == id && (s = seq_cache_hit(m, e, id)))
		return s;
	kvp_rcu_read_lock();
	epoch = seqmem_epoch(&m->mem);
	s = seqmap_lookup(&m->map, id);
	if (s && !seq_lock_live(s, id))
		s = NULL;
	if (s && e)
		*e = (struct seq_cache_entry){
			.epoch = epoch, .id = id, .s = s};
	kvp_rcu_read_unlock();
	return s;
}

/*
 * Returns this thread's stashed structs to their managers, asks each of
 * them for a reclaim after their retired structs' grace period, and
 * flushes the thread's block caches (tcache.c).  Takes the registry lock
 * (a manager may be under destruction meanwhile); no grace period is
 * waited for.
 */
KVP_API void kvp_thread_flush(void)
{
	if (seq_thr)
		for (int i = 0; i < KVP_STASHES; i++)
			stash_return(&seq_thr->stashes[i], true);
	tcache_thread_flush();
}

/* ---- a manager's part ---------------------------------------------- */

void seqmem_init(struct kvp_manager *m)
{
	/* m is zeroed: empty lists, no slab, nothing asked or under way. */
	atomic_init(&m->mem.epoch, kvp_next_uid());
}

void seqmem_close(struct kvp_manager *m)
{
	/* From now on no thread hands stashed structs back to m. */
	registry_dying(m);
	/* Release: pairs with reclaim_try()'s acquire. */
	atomic_store_explicit(&m->mem.closing, true, memory_order_release);
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
	while (atomic_load_explicit(&m->mem.reclaiming,
				    memory_order_acquire) ||
	       atomic_load_explicit(&m->mem.kicking, memory_order_acquire));
}

void seqmem_fini(struct kvp_manager *m)
{
	struct seq_slab *slab, *next;

	/* Every removed struct recycled, and every callback of m done,
	 * before the slabs go. */
	retire_all(m);
	quiesce(m);
	for (slab = atomic_load_explicit(&m->mem.slabs, memory_order_acquire);
	     slab; slab = next) {
		next = slab->next;
		for (int i = 0; i < KVP_SEQ_SLAB; i++)
			btable_fini(&slab->seqs[i].table);
		kvp_free_aligned(slab, _Alignof(struct seq_slab),
				 sizeof(*slab));
	}
}

void seqmem_counts(struct kvp_manager *m, uint64_t *held,
		   uint64_t *returned)
{
	/* Relaxed: statistics. */
	*held = atomic_load_explicit(&m->mem.nslabs, memory_order_relaxed);
	*returned = atomic_load_explicit(&m->mem.slabs_returned,
					 memory_order_relaxed);
}
