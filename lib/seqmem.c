/* SPDX-License-Identifier: MIT */
/*
 * seqmem.c - the memory of sequence structs, one room, and its door: each
 * thread's stashes and fresh slab, the lookup cache, the retire list and
 * its batches through RCU (floor 7, doc/architecture.md "Layers": over
 * seqslab.c, the room's back, which holds the slabs, the free list and
 * the reclaims; and over btable.c, mgrstat.c, tcache.c, seqmap.c,
 * registry.c, rcu.c and alloc.c).
 *
 * Owns struct kvp_seq's memory and struct seqmem (seqmem.h) and each
 * thread's struct seq_thread.  Its door (seqmem.h) is all the sequence
 * layer sees: seqmem_take, seqmem_give, seq_acquire, seqmem_note,
 * seq_prefetch, kvp_thread_flush; nothing here calls back up.
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
 * whose pops run inside read-side sections (seqslab_pop), which rules
 * out ABA.
 *
 * Returning slabs (seqslab.c has the argument).  A reclaim bumps the
 * manager's epoch before its grace period, then waits for every
 * thread's reader mark to clear before it frees a slab.  So this file
 * keeps two rules: a lookup-cache entry is used only between the
 * thread's reader marks (seqslab_reader_enter, _exit) and only if its
 * epoch is current (seq_cache_hit); and an entry is stamped with the
 * epoch read before its struct was seen alive (seq_acquire) or while it
 * is locked and alive (seqmem_note), so it is never newer than the life
 * it records.  Structs reach seqslab.c's free list only through
 * recycle(), a grace period after they left the map.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "alloc.h"
#include "manager.h"
#include "rcu.h"
#include "registry.h"
#include "seqfields.h"
#include "seqmem.h"
#include "seqmap.h"
#include "tcache.h"

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
	seqslab_recycled(m, first, last, asked);
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

/* kvp_thread_flush, for a live manager m (registry lock held): retired
 * structs go to call_rcu, and a reclaim is asked for once they are on
 * the free list (by their callback, or by a kick if there were none).
 * `asked` is set only there: a batch retired earlier, recycled after
 * this call, must not start the asked reclaim before ours arrive. */
static void ask(struct kvp_manager *m)
{
	if (!retire_flush(m, seq_recycle_asked))
		seqslab_kick(m);
}

#define KVP_RETIRE_BATCH 64u		  /* retirements between clock reads */
#define KVP_RETIRE_PERIOD_NS 50000000ull /* 50 ms: <= 20 batches a second */
#define KVP_RETIRE_MAX 16384u		  /* ... unless this many wait */

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
	uint64_t now = seqslab_coarse_ns();

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
	struct kvp_seq *fresh;
	uint32_t fresh_next;
};
struct seq_thread {
	/* Marks its use of a lookup-cache entry (seq_cache_hit). */
	struct seqslab_reader reader;
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
	seqslab_reader_del(&th->reader);
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
	seqslab_reader_add(&th->reader);
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
		stash_push(st, &st->fresh[i]);
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
	return &st->fresh[st->fresh_next++];
}

/* A struct of a new slab for m; the others become this thread's fresh
 * slab for m.  NULL if out of memory.  Structs retired since the last
 * flush go to call_rcu first, as paced (retire_kick). */
static struct kvp_seq *seq_new(struct kvp_manager *m)
{
	struct kvp_seq *slab;
	struct seq_stash *st;

	retire_kick(m);
	slab = seqslab_new(m);
	if (!slab)
		return NULL;
	/* Without thread state the others wait, unused, for m's
	 * destruction (only after a failed allocation). */
	st = stash_for(m);
	if (st) {
		st->fresh = slab;
		st->fresh_next = 1;
	}
	return slab;
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
	s = seqslab_pop(m);
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
			.epoch = seqslab_epoch(&m->mem.sl), .id = id, .s = s};
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

	seqslab_reader_enter(&th->reader);
	if (e->epoch == seqslab_epoch(&m->mem.sl)) {
		/* Not m's struct: the entry outlived its slab (a broken
		 * epoch) and the memory serves something else now. */
		if (unlikely(e->s->mgr != m))
			kvp_fatal("a lookup-cache entry outlived its slab");
		if (seq_lock_live(e->s, id))
			s = e->s;
	}
	seqslab_reader_exit(&th->reader);
	return s;
}

void seq_prefetch(struct kvp_manager *m, uint64_t id)
{
	struct seq_cache_entry *e = seq_cache_slot(id);

	/* A hint only: the struct may be freed or reused by the time it is
	 * used, and seq_acquire() checks it then (a prefetch never faults). */
	if (e && e->epoch == seqslab_epoch(&m->mem.sl) && e->id == id)
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
	epoch = seqslab_epoch(&m->mem.sl);
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
	seqslab_init(m);
}

void seqmem_close(struct kvp_manager *m)
{
	/* From now on no thread hands stashed structs back to m. */
	registry_dying(m);
	seqslab_close(m);
}

void seqmem_fini(struct kvp_manager *m)
{
	/* Every removed struct recycled, and every callback of m done,
	 * before the slabs go. */
	retire_all(m);
	seqslab_fini(m);
}

void seqmem_counts(struct kvp_manager *m, uint64_t *held,
		   uint64_t *returned)
{
	seqslab_counts(m, held, returned);
}
