/* SPDX-License-Identifier: MIT */
/*
 * seqslab.c - sequence structs per thread: stashes, the lookup cache,
 * taking, releasing and finding structs, and the registry of managers
 * (floor 7, doc/architecture.md "Layers": over seqmem.c, seqmap.c,
 * tcache.c and rcu.c; the sequence operations in seq.c sit above it).
 *
 * Owns struct seqslab (seqslab.h), each thread's struct seq_thread
 * (lookup cache and stashes), and the registry of live managers.  The
 * structs' memory (slabs, free and retire lists, reclaims) is seqmem.c's.
 *
 * Correctness argument.
 *
 * A sequence is found through the map (seqmap.c), which stores pointers
 * to type-stable structs (seqmem.c: a slab is freed only when no one can
 * hold a pointer into it), so a pointer found stays safe to lock even if
 * the sequence is removed and its struct reused meanwhile.  Every
 * mutation and every consistent read of a sequence happens under its own
 * lock, after checking `dead` and the id (seq_acquire).  A lookup that
 * finds the struct dead or holding another id reports -ENOENT: the
 * sequence was removed at some moment between the map read and the
 * check.
 *
 * A removed struct is reused at once by its freeing thread (its stash:
 * nobody but lockers checking `dead` reads a dead struct), and by other
 * threads only through the free list after a grace period
 * (seqmem_retire), whose pops run inside read-side sections, which rules
 * out ABA.
 *
 * The lookup cache holds pointers outside any read-side section, so its
 * entries carry the manager's reclaim epoch and are used only between
 * the thread's reader marks (seqmem_reader_enter) and only while their
 * epoch is current (seq_cache_hit); an entry is stamped with the epoch
 * read before its struct was seen alive (seq_acquire) or while it is
 * locked and alive (seq_cache_note).  seqmem.c's "Returning slabs" says
 * why that keeps a cache hit off every slab a reclaim frees.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "manager.h"
#include "rcu.h"
#include "seqslab.h"
#include "tcache.h"

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
 * epoch (a process-unique number that each reclaim redraws: seqmem.h),
 * so an entry of another manager, of a destroyed one, or older than the
 * last reclaim never matches and is never dereferenced.  A hit is
 * confirmed under the struct's lock (not dead, same id) between the
 * owner's reader marks; the struct being type-stable while its slab
 * lives, a stale entry is only a miss.
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
	uint64_t epoch; /* its manager's epoch when s was alive */
	uint64_t id;
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
	seqmem_reader_del(&th->reader);
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
	seqmem_reader_add(&th->reader);
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
				seqmem_retire(st->m, st->head, st->tail,
					      st->n, false);
			if (flush)
				seqmem_ask(st->m);
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
		seqmem_retire(s->mgr, s, s, 1, true);
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
		seqmem_retire(s->mgr, first, last, KVP_STASH_MAX / 2, true);
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
	struct seq_slab *slab = seqmem_grow(m);
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

/* Returns an unpublished, dead struct of m (recycled, or new), or NULL
 * if out of memory. */
struct kvp_seq *seq_take(struct kvp_manager *m)
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
	s = seqmem_pop(m);
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

static inline uint64_t seq_epoch(struct kvp_manager *m)
{
	return seqmem_epoch(&m->mem);
}

/* Remembers s, just published, in this thread's lookup cache.  s is
 * locked and alive, or the caller's own (dead, not yet brought to life):
 * either way the epoch read now is one no reclaim of s's slab can have
 * bumped (see "Returning slabs"). */
void seq_cache_note(struct kvp_manager *m, uint64_t id, struct kvp_seq *s)
{
	struct seq_cache_entry *e = seq_cache_slot(id);

	if (e)
		*e = (struct seq_cache_entry){
			.epoch = seq_epoch(m), .id = id, .s = s};
}

/*
 * A lookup-cache hit needs no read-side section: between the thread's
 * reader marks, an entry is used only if its epoch is current, and a
 * reclaim waits for the marks to clear after bumping the epoch
 * (seqmem_readers_wait) before it frees anything.  The map's path runs in
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
	if (e->epoch == seq_epoch(m)) {
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
	if (e && e->epoch == seq_epoch(m) && e->id == id)
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
	epoch = seq_epoch(m);
	s = seqmap_lookup(&m->map, id);
	if (s && !seq_lock_live(s, id))
		s = NULL;
	if (s && e)
		*e = (struct seq_cache_entry){
			.epoch = epoch, .id = id, .s = s};
	kvp_rcu_read_unlock();
	return s;
}


void seqslab_dying(struct kvp_manager *m)
{
	kvp_check_pthread(pthread_mutex_lock(&mgr_registry_lock));
	m->seqs.dying = true;
	kvp_check_pthread(pthread_mutex_unlock(&mgr_registry_lock));
	seqmem_close(m);
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

void seqslab_each_manager(void (*fn)(struct kvp_manager *o, void *arg),
			  void *arg)
{
	kvp_check_pthread(pthread_mutex_lock(&mgr_registry_lock));
	for (struct kvp_manager *o = mgr_registry; o; o = o->seqs.registry_next)
		fn(o, arg);
	kvp_check_pthread(pthread_mutex_unlock(&mgr_registry_lock));
}
