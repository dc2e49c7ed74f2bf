/*
 * idle.h - the idle (evictable) cached blocks of a pool, in one FIFO
 * ring per retention priority (layer 5, beside ptable.c; prefix.c ties
 * them).  The correctness argument is in idle.c.
 *
 * Synchronisation table:
 *
 *   operation            may run concurrently with     note
 *   -------------------  ----------------------------  ----------------
 *   idle_released,       each other, themselves        lock-free
 *   idle_requeue,
 *   idle_take,
 *   idle_rotate
 *   idle_level_ensure    everything                    a mutex, once per
 *                                                      level and pool
 *   idle_check           nothing on the pool           quiescence
 */
#ifndef KVP_IDLE_H
#define KVP_IDLE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool.h"

struct kvp_pool;
struct idle;

#define IDLE_LEVELS (KVP_RETAIN_PIN + 1)

/* The ring a block going idle joins: its retention priority now (may
 * demote an expired word on the way).  Read inside an RCU read-side
 * section. */
typedef uint32_t (*idle_level_fn)(void *ctx, uint32_t b);

/* The queues of pool (the default priority's ring made now, the others
 * by idle_level_ensure).  0 or -ENOMEM. */
int idle_create(struct kvp_pool *pool, struct idle **out);
void idle_destroy(struct idle *q);

/* Makes level's ring if it has none.  0 or -ENOMEM (the caller uses a
 * lower priority). */
int idle_level_ensure(struct idle *q, uint32_t level);
/* Whether level has a ring (relaxed; true once true). */
bool idle_level_ready(struct idle *q, uint32_t level);

/* A free took cached blocks ids[0..n) to zero references, in that order:
 * each joins the tail of its level's ring (level_of NULL: the default
 * priority's), unless it still has an entry (then it is moved to the
 * tail when an evictor reaches that entry). */
void idle_released(struct idle *q, const uint32_t *ids, uint32_t n,
		   idle_level_fn level_of, void *ctx);

/* Block b, idle again after a hit that is being undone: back in the
 * order where its entry still is, else at its level's tail. */
void idle_requeue(struct idle *q, uint32_t b, uint32_t level);

/*
 * Claims between min and max idle blocks (1 <= min <= max), lowest
 * priority first, oldest first within one (the extras past min only from
 * the priority that gave the min-th), never a pinned one.  Each is left
 * CACHED | EVICTING (bstate.h), the caller's to finish.  Returns how
 * many, or 0 (nothing claimed) if it found fewer than min.
 */
uint32_t idle_take(struct idle *q, uint32_t min, uint32_t max, uint32_t *ids,
		   idle_level_fn level_of, void *ctx);

/* Gives back a claim idle_take made (the block idle again, queued). */
void idle_unclaim(struct idle *q, uint32_t b, uint32_t level);

/*
 * Passes once over the entries of the rings above the default priority:
 * each idle block moves to the tail of the ring level_of gives now (its
 * own, in order, or a lower one once its retention expired); entries of
 * held blocks are dropped (their release queues them again).
 */
void idle_rotate(struct idle *q, idle_level_fn level_of, void *ctx);

/* Entries in the rings below the pinned priority (approximate). */
uint64_t idle_count(struct idle *q);

/* Quiescent check: every idle block has exactly one entry, no entry is
 * lost or doubled.  0 or -EFAULT (details on stderr). */
int idle_check(struct idle *q);

#endif /* KVP_IDLE_H */
