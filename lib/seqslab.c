/*
 * seqslab.c - sequence structs: slabs, recycling through per-thread
 * stashes and RCU, the lookup cache, and the registry of managers (layer
 * 7, doc/architecture.md "Layers": over seqmap.c, rcu.c, alloc.c and
 * btable.c; the sequence operations in seq.c sit above it).
 *
 * Owns struct kvp_seq's life cycle (seqslab.h), struct seq_slab, struct
 * seqslab, each thread's struct seq_thread (lookup cache and stashes),
 * and the registry of live managers.
 *
 * Correctness argument.
 *
 * A sequence is found through the map (seqmap.c), which stores pointers
 * to type-stable structs: a struct belongs to one manager and is freed
 * only with it, so a pointer found stays safe to lock even if the
 * sequence is removed and its struct reused meanwhile.  Every mutation
 * and every consistent read of a sequence happens under its own lock,
 * after checking `dead` and the id (seq_acquire).  A lookup that finds
 * the struct dead or holding another id reports -ENOENT: the sequence
 * was removed at some moment between the map read and the check.
 *
 * A removed struct is reused at once by its freeing thread (its stash:
 * nobody but lockers checking `dead` reads a dead struct), and by other
 * threads only through the free list after a grace period (retire_push),
 * whose pops run inside read-side sections, which rules out ABA.
 *
 * Returning slabs.  Type-stability holds only while a slab lives, so a
 * slab goes back to the allocator only when no one can still hold a
 * pointer into it.  Who can: a map reader (inside a read-side section);
 * a pop of the free list (inside one); a thread's lookup cache (outside
 * any: an entry lives until overwritten); a stash, the retire list, a
 * batch waiting for call_rcu, a thread's fresh slab (their structs are
 * not on the free list).  A reclaim (reclaim_start, from an RCU callback,
 * one per manager at a time: `reclaiming`) detaches the whole free list,
 * then bumps the manager's epoch, then queues reclaim_finish on call_rcu.
 * After that grace period:
 *  - every struct of the chain was removed from the map a grace period
 *    before it reached the free list, so no map reader holds it;
 *  - every pop that read one of them as the head has ended (pops run in
 *    read-side sections, and no later pop can reach a detached struct);
 *  - a lookup-cache entry is used only between its owner's stores of
 *    `busy` (1, then 0) and only if its epoch is current (seq_cache_hit).
 *    reclaim_finish first waits for every thread's busy to clear behind
 *    a membarrier (seq_threads_wait): a Dekker pair (owner: store busy,
 *    load the epoch; reclaimer: store the epoch, fence, load busy), as
 *    tcache.c's drains, so an owner either saw the bump and rejects its
 *    older entries, or is waited for.  The hot path pays two stores to
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
 * a slab below the head.  The allocator then gives its free pages back
 * (kvp_alloc_trim).
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
 * rest runs in callbacks and in kvp_thread_flush.  The destruction waits for queued reclaims
 * (seqslab_quiesce).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "manager.h"
#include "mgrstat.h"
#include "rcu.h"
#include "seqslab.h"
#include "tcache.h"

/* Puts a chain of structs, first..last linked through `link`, on the
 * free list with one CAS; only the last one's link is written. */
static void seq_free_push(struct kvp_manager *m, struct kvp_seq *first,
			  struct kvp_seq *last)
{
	struct kvp_seq *top;

	top = atomic_load_explicit(&m->seqs.free_seqs, memory_order_relaxed);
	do
		atomic_store_explicit(&last->link, top, memory_order_relaxed);
	/* Release: the structs' last state happens before their reuse. */
	while (!atomic_compare_exchange_weak_explicit(&m->seqs.free_seqs, &top,
						      first,
						      memory_order_release,
						      memory_order_relaxed));
}

/*
 * A new slab of dead, unpublished structs for m, on m's slab list (freed
 * with m), or NULL.  Cache-line aligned, so that sequences of different
 * threads never share a line.  The caller hands out its structs
 * (seq_take: the first now, the others from this thread's stash for m).
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
	atomic_fetch_add_explicit(&m->seqs.nslabs, 1, memory_order_relaxed);
	/* A CAS push; only the reclaimer unlinks (slabs_unlink). */
	head = atomic_load_explicit(&m->seqs.slabs, memory_order_relaxed);
	do
		slab->next = head;
	while (!atomic_compare_exchange_weak_explicit(&m->seqs.slabs, &head,
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
static void seq_threads_wait(void);
static bool retire_flush(struct kvp_manager *m, void (*fn)(struct rcu_head *));
static void seq_recycle_asked(struct rcu_head *head);

/* Whether most of m's structs are idle (live sequences under half of
 * them), m holds more than KVP_RECLAIM_KEEP slabs, and a reclaim may
 * start now (asked, or KVP_RECLAIM_PERIOD_NS since the last one). */
static bool reclaim_due(struct kvp_manager *m)
{
	/* Relaxed, all: they only decide whether a reclaim is worth it. */
	uint64_t nslabs =
		atomic_load_explicit(&m->seqs.nslabs, memory_order_relaxed);
	uint64_t sum[STAT_FIELDS];
	int64_t live;

	if (nslabs <= KVP_RECLAIM_KEEP)
		return false;
	if (!atomic_load_explicit(&m->seqs.asked, memory_order_relaxed) &&
	    coarse_now_ns() - atomic_load_explicit(&m->seqs.reclaimed_ns,
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

	atomic_store_explicit(&m->seqs.asked, false, memory_order_relaxed);
	/* Acquire: pairs with seq_free_push()'s release (the structs' last
	 * state, before reclaim_finish reads and frees them). */
	chain = atomic_exchange_explicit(&m->seqs.free_seqs, NULL,
					 memory_order_acquire);
	if (!chain)
		return false;
	m->seqs.reclaim_chain = chain;
	/* Seq_cst: after the detach, before the grace period that
	 * call_rcu starts; a lookup-cache reader that misses it began its
	 * read-side section before that grace period (seq_acquire). */
	atomic_fetch_add_explicit(&m->seqs.epoch, 1, memory_order_seq_cst);
	kvp_rcu_call(&m->seqs.reclaim_rcu, reclaim_finish);
	return true;
}

/* From an RCU callback: starts a reclaim of m if one is due and none is
 * under way or m is being destroyed. */
static void reclaim_try(struct kvp_manager *m)
{
	uint32_t idle = 0;

	/* Acquire: pairs with seqslab_dying()'s release. */
	if (atomic_load_explicit(&m->seqs.closing, memory_order_acquire) ||
	    !reclaim_due(m))
		return;
	/* Acquire: the previous reclaim's writes (slab list, counters). */
	if (!atomic_compare_exchange_strong_explicit(
		    &m->seqs.reclaiming, &idle, 1, memory_order_acquire,
		    memory_order_relaxed)) {
		/* The one under way detached its chain before the structs
		 * we just recycled: it starts another when it ends. */
		atomic_store_explicit(&m->seqs.again, true,
				      memory_order_relaxed);
		return;
	}
	if (!reclaim_start(m))
		/* Release: pairs with the next reclaimer's acquire. */
		atomic_store_explicit(&m->seqs.reclaiming, 0,
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
	head = atomic_load_explicit(&m->seqs.slabs, memory_order_acquire);
	while (head && head->nidle == KVP_SEQ_SLAB)
		/* Acquire: a failed CAS reloads a newer push. */
		if (atomic_compare_exchange_weak_explicit(
			    &m->seqs.slabs, &head, head->next,
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
		caa_container_of(head, struct seqslab, reclaim_rcu),
		struct kvp_manager, seqs);
	struct kvp_seq *chain;
	struct seq_slab *counted;
	uint32_t freed;

	kvp_rcu_reclaim_head(head);
	seq_threads_wait();
	chain = m->seqs.reclaim_chain;
	counted = slabs_count(chain);
	chain_keep(m, chain);
	slabs_unlink(m);
	freed = slabs_free(counted);
	/* Relaxed: counters that pace reclaims and feed the dump. */
	atomic_fetch_sub_explicit(&m->seqs.nslabs, freed, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->seqs.slabs_returned, freed,
				  memory_order_relaxed);
	atomic_store_explicit(&m->seqs.reclaimed_ns, coarse_now_ns(),
			      memory_order_relaxed);
	if (freed)
		kvp_alloc_trim();
	kvp_rcu_callback_done();
	/* Relaxed: set by a reclaim_try() of an earlier callback (liburcu's
	 * worker runs them one at a time).  Acquire: pairs with
	 * seqslab_dying()'s release. */
	if (atomic_exchange_explicit(&m->seqs.again, false,
				     memory_order_relaxed) &&
	    !atomic_load_explicit(&m->seqs.closing, memory_order_acquire) &&
	    reclaim_start(m))
		return;
	/* Release: our writes before the next reclaimer's (or the
	 * destruction's) acquire; m may be freed right after. */
	atomic_store_explicit(&m->seqs.reclaiming, 0, memory_order_release);
}

/* RCU callback of kvp_thread_flush when it had nothing to retire: a
 * reclaim, if due, after the recycling queued before it. */
static void reclaim_kick(struct rcu_head *head)
{
	struct kvp_manager *m = caa_container_of(
		caa_container_of(head, struct seqslab, kick_rcu),
		struct kvp_manager, seqs);

	kvp_rcu_reclaim_head(head);
	atomic_store_explicit(&m->seqs.asked, true, memory_order_relaxed);
	reclaim_try(m);
	kvp_rcu_callback_done();
	/* Release: pairs with seqslab_quiesce()'s acquire. */
	atomic_store_explicit(&m->seqs.kicking, 0, memory_order_release);
}

/* kvp_thread_flush, for a live manager m (registry lock held): retired
 * structs go to call_rcu, and a reclaim is asked for once they are on
 * the free list (by their callback, or by a kick if there were none).
 * `asked` is set only there: a batch retired earlier, recycled after
 * this call, must not start the asked reclaim before ours arrive. */
static void reclaim_ask(struct kvp_manager *m)
{
	uint32_t idle = 0;

	if (retire_flush(m, seq_recycle_asked))
		return;
	/* Acquire: the previous kick's end. */
	if (atomic_compare_exchange_strong_explicit(&m->seqs.kicking, &idle,
						    1, memory_order_acquire,
						    memory_order_relaxed))
		kvp_rcu_call(&m->seqs.kick_rcu, reclaim_kick);
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
		atomic_store_explicit(&m->seqs.asked, true,
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
	/* Acquire: pairs with the release pushes of retire_push(). */
	struct kvp_seq *batch = atomic_exchange_explicit(
		&m->seqs.retired, NULL, memory_order_acquire);

	if (batch)
		kvp_rcu_call(&batch->rcu, fn);
	return batch != NULL;
}

void seqslab_flush(struct kvp_manager *m)
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
 * now_n: m->seqs.nretired as the caller saw it.
 */
static void retire_paced(struct kvp_manager *m, uint32_t now_n)
{
	/* Relaxed: these only pace the batches (two threads may both flush:
	 * the second detaches what is left, maybe nothing). */
	uint32_t flushed_n =
		atomic_load_explicit(&m->seqs.flushed_n, memory_order_relaxed);
	uint64_t now = coarse_now_ns();

	if (now_n - flushed_n < KVP_RETIRE_MAX &&
	    now - atomic_load_explicit(&m->seqs.flushed_ns,
				       memory_order_relaxed) <
		    KVP_RETIRE_PERIOD_NS)
		return;
	atomic_store_explicit(&m->seqs.flushed_n, now_n, memory_order_relaxed);
	atomic_store_explicit(&m->seqs.flushed_ns, now, memory_order_relaxed);
	seqslab_flush(m);
}

/*
 * Before m grows a slab: structs retired since the last flush (stashes
 * handed back never flush: see retire_push) are flushed, as paced, so
 * that they come back through the free list instead of waiting for m's
 * destruction while new slabs pile up.
 */
static void retire_kick(struct kvp_manager *m)
{
	/* Relaxed: pacing only. */
	uint32_t n =
		atomic_load_explicit(&m->seqs.nretired, memory_order_relaxed);

	if (n != atomic_load_explicit(&m->seqs.flushed_n, memory_order_relaxed))
		retire_paced(m, n);
}

/*
 * Hands a chain of n dead structs, first..last linked through `link`, back
 * for reuse after a grace period (only the way to other threads needs one:
 * the free list's pops rely on it, see seq_take).  Structs gather on the
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
static void retire_push(struct kvp_manager *m, struct kvp_seq *first,
			struct kvp_seq *last, uint32_t n, bool may_flush)
{
	struct kvp_seq *top;
	uint32_t old, now_n;

	top = atomic_load_explicit(&m->seqs.retired, memory_order_relaxed);
	do
		atomic_store_explicit(&last->link, top, memory_order_relaxed);
	/* Release: publishes the links to the detaching thread. */
	while (!atomic_compare_exchange_weak_explicit(&m->seqs.retired, &top,
						      first,
						      memory_order_release,
						      memory_order_relaxed));
	/* Relaxed: a count that paces the batches. */
	old = atomic_fetch_add_explicit(&m->seqs.nretired, n,
					memory_order_relaxed);
	now_n = old + n;
	if (!may_flush || old / KVP_RETIRE_BATCH == now_n / KVP_RETIRE_BATCH)
		return;
	retire_paced(m, now_n);
}

/*
 * Every live manager of the process, so that kvp_manager_check can count
 * the references of all the managers that share a pool.  Creation and
 * destruction only.
 */
static pthread_mutex_t mgr_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvp_manager *mgr_registry; /* mgr_registry_lock */
/* Managers removed from the registry so far.  Synchronization: written
 * under mgr_registry_lock, read relaxed (a stash's snapshot of it). */
static _Atomic uint64_t mgr_unregistered;

void seqslab_register(struct kvp_manager *m)
{
	kvp_check_pthread(pthread_mutex_lock(&mgr_registry_lock));
	m->seqs.registry_next = mgr_registry;
	mgr_registry = m;
	kvp_check_pthread(pthread_mutex_unlock(&mgr_registry_lock));
}

/* Whether m, with this uid, is registered.  mgr_registry_lock held. */
static bool mgr_registered(struct kvp_manager *m, uint64_t uid)
{
	for (struct kvp_manager *o = mgr_registry; o; o = o->seqs.registry_next)
		if (o == m)
			return o->uid == uid;
	return false;
}

void seqslab_unregister(struct kvp_manager *m)
{
	struct kvp_manager **pp;

	kvp_check_pthread(pthread_mutex_lock(&mgr_registry_lock));
	for (pp = &mgr_registry; *pp; pp = &(*pp)->seqs.registry_next) {
		if (*pp == m) {
			*pp = m->seqs.registry_next;
			atomic_store_explicit(
				&mgr_unregistered,
				atomic_load_explicit(&mgr_unregistered,
						     memory_order_relaxed) +
					1,
				memory_order_relaxed);
			break;
		}
	}
	kvp_check_pthread(pthread_mutex_unlock(&mgr_registry_lock));
}

/*
 * Per-thread state of the sequence layer: one heap block per thread, made
 * on first use and freed at thread exit (the library's TLS stays a few
 * words: it may be loaded with dlopen).
 *
 * The lookup cache: id -> struct, direct-mapped, keyed by the manager's
 * uid (never reused), so an entry of a destroyed manager never matches,
 * and stamped with the manager's reclaim epoch, so an entry older than
 * the last reclaim is never dereferenced.  A hit is confirmed under the
 * struct's lock (not dead, same id) between the owner's busy marks; the
 * struct being type-stable while its slab lives, a stale entry is only a
 * miss.
 *
 * The stashes of free structs: a struct freed by a thread is taken again
 * by that thread's next create or fork, at once and hot in its cache,
 * with no atomic operation and no grace period (nothing but the owner and
 * lockers checking `dead` reads a dead struct; the map never does).  A
 * thread keeps one stash for each of up to KVP_STASHES managers
 * (direct-mapped by uid) of at most KVP_STASH_MAX structs; beyond that,
 * half goes to the manager's retire list.  A stash is handed back to its
 * manager when its slot is needed for another manager and when the thread
 * exits, under mgr_registry_lock and only if the manager is still
 * registered and not dying (so never touching a destroyed manager); a
 * destroyed manager's stashed structs went with its slabs and are only
 * forgotten.
 */
#define SEQ_CACHE_SLOTS 1024
struct seq_cache_entry {
	uint64_t muid, id;
	uint64_t epoch; /* the manager's reclaim epoch when s was alive */
	struct kvp_seq *s;
};
#define KVP_STASHES 4
#define KVP_STASH_MAX 64u
struct seq_stash {
	uint64_t muid; /* 0: empty */
	uint64_t unregistered; /* mgr_unregistered when m was set */
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
	/* 1 while the owner uses a lookup-cache entry (seq_acquire), for
	 * seq_threads_wait().  Written by the owner, read by reclaimers. */
	_Atomic uint32_t busy;
	/* Every thread's state, for seq_threads_wait(): seq_threads_lock. */
	struct seq_thread *next, **pprev;
	struct seq_cache_entry cache[SEQ_CACHE_SLOTS];
	struct seq_stash stashes[KVP_STASHES];
};
static KVP_TLS struct seq_thread *seq_thr; /* owner thread */
static pthread_mutex_t seq_threads_lock = PTHREAD_MUTEX_INITIALIZER;
static struct seq_thread *seq_threads; /* seq_threads_lock */

/*
 * Waits until no thread uses a lookup-cache entry it checked against an
 * epoch older than the current one (see "Returning slabs").  The
 * caller bumped the epoch before; the fence (membarrier, as a drain's
 * in tcache.c) orders that store before our loads of `busy` as if each
 * owner had fenced between its store of busy and its load of the epoch.
 * Not a hot path: a reclaim's callback.
 */
static void seq_threads_wait(void)
{
	tcache_fence_all();
	kvp_check_pthread(pthread_mutex_lock(&seq_threads_lock));
	for (struct seq_thread *th = seq_threads; th; th = th->next)
		/* Acquire: pairs with the owner's release store of 0 (its
		 * use of the struct happens before our free). */
		while (atomic_load_explicit(&th->busy, memory_order_acquire))
			sched_yield();
	kvp_check_pthread(pthread_mutex_unlock(&seq_threads_lock));
}
static pthread_key_t seq_thr_key;
static pthread_once_t seq_thr_once = PTHREAD_ONCE_INIT;

static void stash_return(struct seq_stash *st, bool flush);

/* Thread exit: the stashes go back to their managers. */
static void seq_thread_exit(void *arg)
{
	struct seq_thread *th = arg;

	for (int i = 0; i < KVP_STASHES; i++)
		stash_return(&th->stashes[i], false);
	kvp_check_pthread(pthread_mutex_lock(&seq_threads_lock));
	if (th->next)
		th->next->pprev = th->pprev;
	*th->pprev = th->next;
	kvp_check_pthread(pthread_mutex_unlock(&seq_threads_lock));
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
	kvp_check_pthread(pthread_mutex_lock(&seq_threads_lock));
	th->next = seq_threads;
	if (th->next)
		th->next->pprev = &th->next;
	th->pprev = &seq_threads;
	seq_threads = th;
	kvp_check_pthread(pthread_mutex_unlock(&seq_threads_lock));
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

/* Pushes the dead struct s on st's list (no limit: see seq_release). */
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
		kvp_check_pthread(pthread_mutex_lock(&mgr_registry_lock));
		/* No manager left the registry since m was set (and m was
		 * registered then, being in use): registered still, with
		 * no walk of the registry.  Only then are its structs
		 * touched: a destroyed manager's went with its slabs. */
		if ((atomic_load_explicit(&mgr_unregistered,
					  memory_order_relaxed) ==
			     st->unregistered ||
		     mgr_registered(st->m, st->muid)) &&
		    !st->m->seqs.dying) {
			stash_add_fresh(st);
			/* The tail kept, not found by a walk down the list:
			 * its structs are cold by now, each link a miss. */
			if (st->n)
				retire_push(st->m, st->head, st->tail, st->n,
					    false);
			if (flush)
				reclaim_ask(st->m);
		}
		kvp_check_pthread(pthread_mutex_unlock(&mgr_registry_lock));
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
	/* Relaxed: compared under mgr_registry_lock, where it is written;
	 * a stale (lower) value only costs a walk. */
	st->unregistered =
		atomic_load_explicit(&mgr_unregistered, memory_order_relaxed);
	return st;
}

/*
 * Recycles a dead struct whose sequence was never published, or was
 * removed from the map (its references dropped): into this thread's
 * stash; half a full stash goes to the retire list.
 */
void seq_release(struct kvp_seq *s)
{
	struct seq_stash *st = stash_for(s->mgr);

	if (unlikely(!st)) {
		retire_push(s->mgr, s, s, 1, true);
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
		retire_push(s->mgr, first, last, KVP_STASH_MAX / 2, true);
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
 * slab for m.  NULL if out of memory. */
static struct kvp_seq *seq_new(struct kvp_manager *m)
{
	struct seq_slab *slab = slab_new(m);
	struct seq_stash *st;

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

/*
 * Returns an unpublished, dead struct of m (recycled, or new), or NULL if
 * out of memory.  Pops run inside an RCU read-side section: a struct
 * returns to the free list only through call_rcu, after every section
 * that might have read it as the head ends, so the CAS cannot suffer ABA.
 */
struct kvp_seq *seq_take(struct kvp_manager *m)
{
	struct kvp_seq *s, *next;

	/* This thread's last freed structs first (hot), then fresh ones
	 * from its own slab: sequences of different threads then sit apart,
	 * as separate allocations did. */
	s = stash_take(m);
	if (s)
		return s;
	s = fresh_take(m);
	if (s)
		return s;
	kvp_rcu_read_lock();
	/* Acquire: pairs with seq_recycle()'s release push. */
	s = atomic_load_explicit(&m->seqs.free_seqs, memory_order_acquire);
	while (s) {
		/* Relaxed: if s was popped meanwhile, the CAS fails. */
		next = atomic_load_explicit(&s->link, memory_order_relaxed);
		if (atomic_compare_exchange_weak_explicit(
			    &m->seqs.free_seqs, &s, next, memory_order_acquire,
			    memory_order_acquire))
			break;
	}
	kvp_rcu_read_unlock();
	if (s)
		return s;
	retire_kick(m);
	return seq_new(m);
}

/* Locks s if it holds live sequence id; false (unlocked) otherwise. */
static bool seq_lock_live(struct kvp_seq *s, uint64_t id)
{
	seq_lock(s);
	if (!atomic_load_explicit(&s->dead, memory_order_relaxed) &&
	    s->id == id)
		return true;
	seq_unlock(s);
	return false;
}

/* m's reclaim epoch.  Acquire: pairs with reclaim_start()'s increment,
 * so that a reader of the new epoch sees the detach before it. */
static inline uint64_t seq_epoch(struct kvp_manager *m)
{
	return atomic_load_explicit(&m->seqs.epoch, memory_order_acquire);
}

/* Remembers s, just published, in this thread's lookup cache.  s is
 * locked and alive: the epoch read now is one no reclaim of s's slab
 * can have bumped (see "Returning slabs"). */
void seq_cache_note(struct kvp_manager *m, uint64_t id, struct kvp_seq *s)
{
	struct seq_cache_entry *e = seq_cache_slot(id);

	if (e)
		*e = (struct seq_cache_entry){
			.muid = m->uid, .id = id, .epoch = seq_epoch(m), .s = s};
}

/*
 * A lookup-cache hit needs no read-side section: between the owner's
 * `busy` marks, an entry is used only if its epoch is current, and a
 * reclaim waits for `busy` to clear after bumping the epoch
 * (seq_threads_wait) before it frees anything.  The map's path runs in
 * a read-side section, and stamps its entry with the epoch read before
 * the struct was found alive, so an entry is never newer than the life
 * it records.
 */
static struct kvp_seq *seq_cache_hit(struct kvp_manager *m,
				     struct seq_cache_entry *e, uint64_t id)
{
	struct seq_thread *th = seq_thr;
	struct kvp_seq *s = NULL;

	/* Relaxed: ordered before the epoch's load by the fence below, or
	 * by the reclaimer's membarrier (tcache_enter's pattern). */
	atomic_store_explicit(&th->busy, 1, memory_order_relaxed);
	if (unlikely(!tcache_membarrier_ok))
		atomic_thread_fence(memory_order_seq_cst);
	else
		kvp_compiler_barrier();
	if (e->epoch == seq_epoch(m)) {
		/* Not m's struct: the entry outlived its slab (a broken
		 * epoch) and the memory serves something else now. */
		if (unlikely(e->s->mgr != m))
			kvp_fatal("a lookup-cache entry outlived its slab");
		if (seq_lock_live(e->s, id))
			s = e->s;
	}
	/* Release: our use of the struct before a reclaimer's free. */
	atomic_store_explicit(&th->busy, 0, memory_order_release);
	return s;
}

struct kvp_seq *seq_acquire(struct kvp_manager *m, uint64_t id)
{
	struct seq_cache_entry *e = seq_cache_slot(id);
	struct kvp_seq *s;
	uint64_t epoch;

	if (e && e->muid == m->uid && e->id == id &&
	    (s = seq_cache_hit(m, e, id)))
		return s;
	kvp_rcu_read_lock();
	epoch = seq_epoch(m);
	s = seqmap_lookup(&m->map, id);
	if (s && !seq_lock_live(s, id))
		s = NULL;
	if (s && e)
		*e = (struct seq_cache_entry){
			.muid = m->uid, .id = id, .epoch = epoch, .s = s};
	kvp_rcu_read_unlock();
	return s;
}


void seqslab_init(struct seqslab *sl)
{
	atomic_init(&sl->slabs, NULL);
	atomic_init(&sl->free_seqs, NULL);
	atomic_init(&sl->retired, NULL);
	atomic_init(&sl->nretired, 0);
	atomic_init(&sl->flushed_n, 0);
	atomic_init(&sl->flushed_ns, 0);
	atomic_init(&sl->epoch, 0);
	atomic_init(&sl->nslabs, 0);
	atomic_init(&sl->slabs_returned, 0);
	atomic_init(&sl->asked, false);
	atomic_init(&sl->again, false);
	atomic_init(&sl->closing, false);
	atomic_init(&sl->reclaiming, 0);
	atomic_init(&sl->kicking, 0);
	atomic_init(&sl->reclaimed_ns, 0);
}

void seqslab_dying(struct kvp_manager *m)
{
	kvp_check_pthread(pthread_mutex_lock(&mgr_registry_lock));
	m->seqs.dying = true;
	kvp_check_pthread(pthread_mutex_unlock(&mgr_registry_lock));
	/* Release: pairs with reclaim_try()'s acquire. */
	atomic_store_explicit(&m->seqs.closing, true, memory_order_release);
}

void seqslab_quiesce(struct kvp_manager *m)
{
	/* A recycling callback may have queued a reclaim during the
	 * barrier, and a reclaim the next one: wait until none is left.
	 * Acquire: pairs with reclaim_finish()'s and reclaim_kick()'s
	 * release (their last touch of m). */
	do
		kvp_rcu_barrier();
	while (atomic_load_explicit(&m->seqs.reclaiming,
				    memory_order_acquire) ||
	       atomic_load_explicit(&m->seqs.kicking, memory_order_acquire));
}

void seqslab_counts(struct kvp_manager *m, uint64_t *held,
		    uint64_t *returned)
{
	/* Relaxed: statistics. */
	*held = atomic_load_explicit(&m->seqs.nslabs, memory_order_relaxed);
	*returned = atomic_load_explicit(&m->seqs.slabs_returned,
					 memory_order_relaxed);
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

void seqslab_fini(struct kvp_manager *m)
{
	struct seq_slab *slab, *next;

	for (slab = atomic_load_explicit(&m->seqs.slabs, memory_order_acquire);
	     slab; slab = next) {
		next = slab->next;
		for (int i = 0; i < KVP_SEQ_SLAB; i++)
			btable_fini(&slab->seqs[i].table);
		kvp_free_aligned(slab, _Alignof(struct seq_slab),
				 sizeof(*slab));
	}
}

void seqslab_each_manager(void (*fn)(struct kvp_manager *o, void *arg),
			  void *arg)
{
	kvp_check_pthread(pthread_mutex_lock(&mgr_registry_lock));
	for (struct kvp_manager *o = mgr_registry; o; o = o->seqs.registry_next)
		fn(o, arg);
	kvp_check_pthread(pthread_mutex_unlock(&mgr_registry_lock));
}
