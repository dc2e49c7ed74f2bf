/* SPDX-License-Identifier: MIT */
/*
 * stress_seqmap.c - the sequence map (lib/seqmap.c) alone: concurrent
 * insert, remove, lookup and iteration, every result checked afterwards
 * against a sequential replay.
 *
 * Usage: stress_seqmap [THREADS [OPS]] [--ids K] [--fresh PCT]
 *
 * THREADS threads (default 4) each run OPS operations (default 40000) over
 * a small shared id space of K ids (default 16; id 0, which the map keeps
 * outside its table, and ids near UINT64_MAX among them), so that inserts
 * of one id race, removes race inserts, and a thread removes values
 * other threads inserted (it looked them up).  PCT percent of the
 * operations (default 30) instead insert, look up and remove a fresh id
 * of their own, each call checked at once: fresh ids fill the table with
 * keys of removed entries and force rebuilds under the other threads'
 * traffic (the program fails if none happened).
 *
 * Every shared-id operation is logged with the interval of a global
 * logical clock it ran in (a tick taken before and after the call), and
 * values are unique (thread, log index).  Afterwards each id's history is
 * replayed: an entry's value is certainly present between the end of its
 * insert and the start of its remove, and possibly present between the
 * start of its insert and the end of its remove.  The replay checks:
 *  - a remove that succeeded removed a value inserted under that id, and
 *    no value was removed twice;
 *  - no two values of one id were certainly present at once (exactly one
 *    insert of a present id wins);
 *  - a lookup returned a value possibly present during the call, or NULL
 *    while none was certainly present throughout;
 *  - an insert that failed with -EEXIST ran while another value was
 *    possibly present; a remove that failed ran while its value was not
 *    certainly present throughout;
 *  - at the end, each id maps to exactly its value that was inserted and
 *    never removed (if any), and iteration visits exactly those.
 * Under TSan (make stress, CI) the map's atomics and RCU hand-offs are
 * checked too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rcu.h"
#include "seqmap.h"

#define STRESS_PROG "stress_seqmap"
#include "stress_common.h"

enum kind { OP_INSERT, OP_REMOVE, OP_LOOKUP };

struct logent {
	uint8_t kind;
	uint8_t ok; /* insert: 0 returned; remove: true returned */
	uint32_t j; /* index of the id */
	uintptr_t v; /* inserted, removed (attempted) or found (0 = NULL) */
	uint64_t s, e; /* clock before and after the call */
};

struct worker {
	pthread_t tid;
	unsigned idx;
	struct logent *log;
	uint64_t n;
	uint64_t fresh; /* fresh-id rounds done */
};

static struct seqmap map;
static _Atomic uint64_t clk = 1;
static unsigned nthreads = 4, nids = 16, fresh_pct = 30;
static uint64_t nops = 40000;
static struct worker *workers;

/* The shared ids: 0, small ones, and ones near UINT64_MAX. */
static uint64_t id_of(uint32_t j)
{
	return j % 2 ? UINT64_MAX - j / 2 : j / 2;
}

/* A unique non-NULL value: thread and log index. */
static uintptr_t val_of(unsigned t, uint64_t i)
{
	return (uintptr_t)((i + 1) << 8 | t);
}

static struct logent *ent_of(uintptr_t v)
{
	unsigned t = (unsigned)(v & 0xff);
	uint64_t i = (uint64_t)(v >> 8) - 1;

	if (v == 0 || t >= nthreads || i >= workers[t].n)
		return NULL;
	return &workers[t].log[i];
}

static uint64_t tick(void)
{
	return atomic_fetch_add(&clk, 1);
}

static void fresh_round(struct worker *w)
{
	/* Thread-private ids, never reused: bit 62 keeps them apart from
	 * the shared ones. */
	uint64_t id = (1ull << 62) | ((uint64_t)w->idx << 40) | w->fresh++;
	uintptr_t v = (uintptr_t)(w->fresh << 8 | 0xff);
	void *got;
	int err;

	if ((err = seqmap_insert(&map, id, (void *)v)) != 0)
		fail("insert of fresh id %#" PRIx64 ": %d\n", id, err);
	kvp_rcu_read_lock();
	got = seqmap_lookup(&map, id);
	kvp_rcu_read_unlock();
	if (got != (void *)v)
		fail("fresh id %#" PRIx64 ": lookup found %p, not %p\n", id,
		     got, (void *)v);
	if (seqmap_insert(&map, id, (void *)(v + 256)) != -EEXIST)
		fail("a second insert of fresh id %#" PRIx64 " won\n", id);
	if (!seqmap_remove(&map, id, (void *)v))
		fail("remove of fresh id %#" PRIx64 " failed\n", id);
	if (seqmap_remove(&map, id, (void *)v))
		fail("fresh id %#" PRIx64 " removed twice\n", id);
}

/*
 * Walks the map: every value must be a logged one or a fresh one, and the
 * shared ids give at most one value each (an id has one slot in the table
 * walked).  Fresh values are not bounded: a thread may insert and remove
 * several fresh ids, each in a slot of its own, while one walk passes.
 */
static void iterate(void)
{
	struct seqmap_iter it;
	uint64_t shared = 0;

	kvp_rcu_read_lock();
	for (void *v = seqmap_first(&map, &it); v;
	     v = seqmap_next(&map, &it)) {
		uintptr_t u = (uintptr_t)v;

		if ((u & 0xff) == 0xff)
			continue;
		if ((u & 0xff) >= nthreads)
			fail("iteration found a value %p nobody inserted\n", v);
		shared++;
	}
	kvp_rcu_read_unlock();
	if (shared > nids)
		fail("iteration visited %" PRIu64 " values of shared ids, at "
		     "most %u can be present\n",
		     shared, nids);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = 0x5eed0000ull + w->idx;
	uintptr_t *mine = calloc(nids, sizeof(*mine));

	if (!mine)
		fail("out of memory\n");
	for (uint64_t i = 0; i < nops; i++) {
		uint64_t r = rnd(&seed);
		uint32_t j = (uint32_t)(r >> 32) % nids;
		struct logent *le = &w->log[w->n];
		unsigned pick = (unsigned)(r % 100);

		if (pick < fresh_pct) {
			fresh_round(w);
			continue;
		}
		if (r % 997 == 0) {
			iterate();
			continue;
		}
		pick = (unsigned)((r >> 8) % 100);
		memset(le, 0, sizeof(*le));
		le->j = j;
		if (pick < 40) {
			le->kind = OP_INSERT;
			le->v = val_of(w->idx, w->n);
			le->s = tick();
			le->ok = seqmap_insert(&map, id_of(j), (void *)le->v) ==
				 0;
			le->e = tick();
			if (le->ok)
				mine[j] = le->v;
		} else if (pick < 65) {
			void *v = NULL;

			le->kind = OP_REMOVE;
			if (mine[j] && pick < 55) {
				v = (void *)mine[j];
			} else {
				/* Someone else's, maybe: found first. */
				kvp_rcu_read_lock();
				v = seqmap_lookup(&map, id_of(j));
				kvp_rcu_read_unlock();
			}
			if (!v)
				continue;
			le->v = (uintptr_t)v;
			le->s = tick();
			le->ok = seqmap_remove(&map, id_of(j), v);
			le->e = tick();
			if (mine[j] == le->v)
				mine[j] = 0;
		} else {
			le->kind = OP_LOOKUP;
			le->s = tick();
			kvp_rcu_read_lock();
			le->v = (uintptr_t)seqmap_lookup(&map, id_of(j));
			kvp_rcu_read_unlock();
			le->e = tick();
		}
		w->n++;
	}
	free(mine);
	return NULL;
}

/* ------------------------------------------------------------ the replay */

/* A value's insert and (if any) successful remove. */
struct life {
	struct logent *ins, *rem;
};

static bool certainly_throughout(const struct life *l, uint64_t s,
				 uint64_t e)
{
	return l->ins->e < s && (!l->rem || l->rem->s > e);
}

static bool possibly_during(const struct life *l, uint64_t s, uint64_t e)
{
	return l->ins->s < e && (!l->rem || l->rem->e > s);
}

static int by_certain_start(const void *a, const void *b)
{
	const struct life *x = a, *y = b;

	return x->ins->e < y->ins->e ? -1 : x->ins->e > y->ins->e;
}

static void replay_id(uint32_t j, uint64_t *nchecked)
{
	struct life *lv = NULL;
	size_t nl = 0, cap = 0;
	uint64_t max_end = 0;
	uintptr_t live = 0;
	void *found;

	/* The lives: every successful insert of this id. */
	for (unsigned t = 0; t < nthreads; t++)
		for (uint64_t i = 0; i < workers[t].n; i++) {
			struct logent *le = &workers[t].log[i];

			if (le->j != j || le->kind != OP_INSERT || !le->ok)
				continue;
			if (nl == cap) {
				cap = cap ? 2 * cap : 64;
				lv = realloc(lv, cap * sizeof(*lv));
				if (!lv)
					fail("out of memory\n");
			}
			lv[nl++] = (struct life){.ins = le, .rem = NULL};
		}
	qsort(lv, nl, sizeof(*lv), by_certain_start);
	/* Successful removes end their value's life. */
	for (unsigned t = 0; t < nthreads; t++)
		for (uint64_t i = 0; i < workers[t].n; i++) {
			struct logent *le = &workers[t].log[i], *ins;
			size_t k;

			if (le->j != j || le->kind != OP_REMOVE || !le->ok)
				continue;
			ins = ent_of(le->v);
			if (!ins || ins->kind != OP_INSERT || !ins->ok ||
			    ins->j != j)
				fail("id %" PRIu64 ": a remove succeeded for a "
				     "value never inserted under it\n",
				     id_of(j));
			for (k = 0; k < nl && lv[k].ins != ins; k++)
				;
			if (lv[k].rem)
				fail("id %" PRIu64 ": value %#lx removed twice\n",
				     id_of(j), (unsigned long)le->v);
			if (le->e < ins->s)
				fail("id %" PRIu64 ": value %#lx removed before "
				     "its insert began\n",
				     id_of(j), (unsigned long)le->v);
			lv[k].rem = le;
		}
	/* Certain lives of one id never overlap. */
	for (size_t k = 0; k < nl; k++) {
		uint64_t a = lv[k].ins->e,
			 b = lv[k].rem ? lv[k].rem->s : UINT64_MAX;

		if (b <= a)
			continue; /* never certainly present */
		if (a < max_end)
			fail("id %" PRIu64 ": two values certainly present at "
			     "once (clock %" PRIu64 ")\n",
			     id_of(j), a);
		max_end = b;
	}
	/* Every other result. */
	for (unsigned t = 0; t < nthreads; t++)
		for (uint64_t i = 0; i < workers[t].n; i++) {
			struct logent *le = &workers[t].log[i];
			bool ok = false;

			if (le->j != j)
				continue;
			(*nchecked)++;
			switch (le->kind) {
			case OP_INSERT:
				if (le->ok)
					continue;
				for (size_t k = 0; k < nl && !ok; k++)
					ok = possibly_during(&lv[k], le->s,
							     le->e);
				if (!ok)
					fail("id %" PRIu64 ": an insert failed "
					     "while no value was present\n",
					     id_of(j));
				break;
			case OP_REMOVE:
				if (le->ok)
					continue;
				for (size_t k = 0; k < nl; k++)
					if ((uintptr_t)lv[k].ins ==
						    (uintptr_t)ent_of(le->v) &&
					    certainly_throughout(&lv[k], le->s,
								 le->e))
						fail("id %" PRIu64 ": a remove "
						     "failed while its value "
						     "was present\n",
						     id_of(j));
				break;
			case OP_LOOKUP:
				if (le->v) {
					struct logent *ins = ent_of(le->v);

					for (size_t k = 0; k < nl && !ok; k++)
						ok = lv[k].ins == ins &&
						     possibly_during(&lv[k],
								     le->s,
								     le->e);
					if (!ok)
						fail("id %" PRIu64 ": a lookup "
						     "found %#lx, not present "
						     "then\n",
						     id_of(j),
						     (unsigned long)le->v);
				} else {
					for (size_t k = 0; k < nl; k++)
						if (certainly_throughout(
							    &lv[k], le->s,
							    le->e))
							fail("id %" PRIu64
							     ": a lookup found "
							     "nothing while "
							     "%#lx was "
							     "present\n",
							     id_of(j),
							     (unsigned long)lv[k]
								     .ins->v);
				}
				break;
			}
		}
	/* The end state. */
	for (size_t k = 0; k < nl; k++) {
		if (lv[k].rem)
			continue;
		if (live)
			fail("id %" PRIu64 ": two values never removed\n",
			     id_of(j));
		live = lv[k].ins->v;
	}
	kvp_rcu_read_lock();
	found = seqmap_lookup(&map, id_of(j));
	kvp_rcu_read_unlock();
	if ((uintptr_t)found != live)
		fail("id %" PRIu64 ": the map holds %p at the end, the replay "
		     "%#lx\n",
		     id_of(j), found, (unsigned long)live);
	free(lv);
}

static unsigned long parse(const char *s, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0) {
		fprintf(stderr, STRESS_PROG ": bad %s '%s'\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	uint64_t nchecked = 0, present = 0, visited = 0, fresh = 0,
		 rebuilds;
	struct seqmap_iter it;
	int pos = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ids") && i + 1 < argc) {
			nids = (unsigned)parse(argv[++i], "--ids");
		} else if (!strcmp(argv[i], "--fresh") && i + 1 < argc) {
			fresh_pct = (unsigned)strtoul(argv[++i], NULL, 10);
			if (fresh_pct > 90) {
				fprintf(stderr,
					STRESS_PROG ": --fresh is 0..90\n");
				exit(2);
			}
		} else if (argv[i][0] != '-' && pos == 0) {
			nthreads = (unsigned)parse(argv[i], "THREADS");
			pos++;
		} else if (argv[i][0] != '-' && pos == 1) {
			nops = parse(argv[i], "OPS");
			pos++;
		} else {
			fprintf(stderr,
				"usage: " STRESS_PROG " [THREADS [OPS]] [--ids K] "
				"[--fresh PCT]\n");
			exit(2);
		}
	}
	if (nthreads > 200 || nids > 1000000) {
		fprintf(stderr, STRESS_PROG ": at most 200 threads and "
					    "1000000 ids\n");
		exit(2);
	}
	if (seqmap_init(&map) != 0)
		fail("seqmap_init: out of memory\n");
	workers = calloc(nthreads, sizeof(*workers));
	if (!workers)
		fail("out of memory\n");
	for (unsigned t = 0; t < nthreads; t++) {
		workers[t].idx = t;
		workers[t].log = calloc(nops, sizeof(struct logent));
		if (!workers[t].log)
			fail("out of memory\n");
	}
	for (unsigned t = 0; t < nthreads; t++)
		if (pthread_create(&workers[t].tid, NULL, run, &workers[t]))
			fail("pthread_create\n");
	for (unsigned t = 0; t < nthreads; t++)
		if (pthread_join(workers[t].tid, NULL))
			fail("pthread_join\n");
	for (unsigned t = 0; t < nthreads; t++)
		fresh += workers[t].fresh;

	for (uint32_t j = 0; j < nids; j++)
		replay_id(j, &nchecked);
	for (uint32_t j = 0; j < nids; j++) {
		kvp_rcu_read_lock();
		present += seqmap_lookup(&map, id_of(j)) != NULL;
		kvp_rcu_read_unlock();
	}
	kvp_rcu_read_lock();
	for (void *v = seqmap_first(&map, &it); v; v = seqmap_next(&map, &it))
		visited++;
	kvp_rcu_read_unlock();
	if (visited != present)
		fail("iteration visits %" PRIu64 " values, %" PRIu64
		     " ids are present\n",
		     visited, present);
	rebuilds = atomic_load(&map.rebuilds);
	/* Each table of the map holds at least 16384 slots and is rebuilt
	 * when about half hold keys. */
	if (fresh >= 3 * 16384 && rebuilds == 0)
		fail("%" PRIu64 " fresh ids but no rebuild\n", fresh);
	/* Empty it: seqmap_fini frees the table only. */
	for (uint32_t j = 0; j < nids; j++) {
		void *v;

		kvp_rcu_read_lock();
		v = seqmap_lookup(&map, id_of(j));
		kvp_rcu_read_unlock();
		if (v && !seqmap_remove(&map, id_of(j), v))
			fail("final remove of id %" PRIu64 " failed\n",
			     id_of(j));
	}
	kvp_rcu_barrier();
	seqmap_fini(&map);
	for (unsigned t = 0; t < nthreads; t++)
		free(workers[t].log);
	free(workers);
	printf(STRESS_PROG ": %u threads, %" PRIu64 " shared-id results "
	       "replayed over %u ids (%" PRIu64 " present at the end), "
	       "%" PRIu64 " fresh ids, %" PRIu64 " rebuilds: OK\n",
	       nthreads, nchecked, nids, present, fresh, rebuilds);
	return 0;
}
