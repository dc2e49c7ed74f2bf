/*
 * check_ring.c - Check unit tests for the bounded MPMC ring of block ids
 * (lib/ring.h, lib/ring.c, compiled into this program: the ring is
 * internal to the library).
 *
 * Single-threaded cases compare the ring with a model queue; one case
 * runs a producer against a consumer on a ring kept full.  Worker threads
 * never call ck_assert: they record their first failure, which the main
 * thread asserts on.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

#include "check_common.h"

/* An address that ring_create must not write over *out on failure. */
static char out_sentinel_storage;
#define OUT_SENTINEL ((struct kvp_ring *)(void *)&out_sentinel_storage)

/* A FIFO model: ids model[head..tail) are in the ring, oldest first. */
struct model {
	uint32_t *ids;
	uint64_t head, tail;
};

static struct kvp_ring *make_ring(uint32_t capacity)
{
	struct kvp_ring *r = NULL;

	ck_assert_int_eq(ring_create(capacity, &r), 0);
	ck_assert_ptr_nonnull(r);
	return r;
}

/* Pushes n fresh ids (next, next + 1, ...) to the ring and the model. */
static void push_fresh(struct kvp_ring *r, struct model *m, uint32_t *next,
		       uint32_t n)
{
	uint32_t ids[64];

	ck_assert_uint_le(n, ARRAY_SIZE(ids));
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = (*next)++;
		m->ids[m->tail++] = ids[i];
	}
	ring_push(r, ids, n);
}

/* Pops up to max and checks them against the model; returns how many. */
static uint32_t pop_check(struct kvp_ring *r, struct model *m, uint32_t max)
{
	uint32_t ids[64], k, want;

	ck_assert_uint_le(max, ARRAY_SIZE(ids));
	want = m->tail - m->head < max ? (uint32_t)(m->tail - m->head) : max;
	k = ring_pop(r, ids, max);
	ck_assert_uint_eq(k, want);
	for (uint32_t i = 0; i < k; i++)
		ck_assert_uint_eq(ids[i], m->ids[m->head++]);
	ck_assert_uint_eq(ring_count(r), m->tail - m->head);
	return k;
}

/* The ring holds exactly the model's ids, in order. */
static void snapshot_check(const struct kvp_ring *r, const struct model *m)
{
	uint64_t n = m->tail - m->head;
	uint32_t *ids = calloc(n + 1, sizeof(*ids));

	ck_assert_ptr_nonnull(ids);
	ck_assert_uint_eq(ring_snapshot(r, ids, n), n);
	for (uint64_t i = 0; i < n; i++)
		ck_assert_uint_eq(ids[i], m->ids[m->head + i]);
	free(ids);
}

/* ------------------------------------------------------------ create */

START_TEST(test_create_bad_capacity)
{
	static const uint32_t bad[] = {0, RING_MAX_CAPACITY + 1, UINT32_MAX};
	struct kvp_ring *r;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		r = OUT_SENTINEL;
		ck_assert_int_eq(ring_create(bad[i], &r), -EINVAL);
		ck_assert_ptr_eq(r, OUT_SENTINEL);
	}
	ck_assert_int_eq(ring_create(8, NULL), -EINVAL);
	ring_destroy(NULL);
}
END_TEST

START_TEST(test_capacity_rounding)
{
	static const struct {
		uint32_t asked;
		uint64_t got;
	} c[] = {
		{1, 1},	      {2, 2},	    {3, 4},	  {4, 4},
		{5, 8},	      {7, 8},	    {8, 8},	  {9, 16},
		{1000, 1024}, {1024, 1024}, {1025, 2048}, {65535, 65536},
	};
	struct kvp_ring *r;

	for (size_t i = 0; i < ARRAY_SIZE(c); i++) {
		r = make_ring(c[i].asked);
		ck_assert_uint_eq(ring_capacity(r), c[i].got);
		ck_assert_uint_eq(ring_count(r), 0);
		ring_destroy(r);
	}
}
END_TEST

/* ------------------------------------------------------------ order */

START_TEST(test_fifo_order)
{
	struct kvp_ring *r = make_ring(16);
	uint32_t model_ids[16], next = 100, id;
	struct model m = {.ids = model_ids};

	ck_assert_uint_eq(ring_pop(r, &id, 1), 0);
	for (int i = 0; i < 10; i++)
		push_fresh(r, &m, &next, 1);
	ck_assert_uint_eq(ring_count(r), 10);
	snapshot_check(r, &m);
	while (pop_check(r, &m, 1))
		;
	ck_assert_uint_eq(ring_count(r), 0);
	ck_assert_uint_eq(ring_pop(r, &id, 1), 0);
	ring_destroy(r);
}
END_TEST

START_TEST(test_bulk)
{
	struct kvp_ring *r = make_ring(64);
	uint32_t model_ids[64], next = 0;
	struct model m = {.ids = model_ids};

	push_fresh(r, &m, &next, 5);
	push_fresh(r, &m, &next, 17);
	push_fresh(r, &m, &next, 1);
	ck_assert_uint_eq(ring_count(r), 23);
	ck_assert_uint_eq(pop_check(r, &m, 3), 3);
	ck_assert_uint_eq(pop_check(r, &m, 12), 12);
	push_fresh(r, &m, &next, 41);
	snapshot_check(r, &m);
	ck_assert_uint_eq(pop_check(r, &m, 49), 49);
	ck_assert_uint_eq(ring_count(r), 0);
	ring_destroy(r);
}
END_TEST

START_TEST(test_pop_more_than_present)
{
	struct kvp_ring *r = make_ring(8);
	uint32_t model_ids[8], next = 7, ids[64];
	struct model m = {.ids = model_ids};

	push_fresh(r, &m, &next, 3);
	ck_assert_uint_eq(pop_check(r, &m, 10), 3);
	ck_assert_uint_eq(ring_pop(r, ids, 64), 0);
	ck_assert_uint_eq(ring_pop(r, ids, 0), 0);
	push_fresh(r, &m, &next, 2);
	ck_assert_uint_eq(ring_pop(r, ids, 0), 0);
	ck_assert_uint_eq(ring_count(r), 2);
	ck_assert_uint_eq(pop_check(r, &m, 64), 2);
	ring_destroy(r);
}
END_TEST

/* A full ring (capacity entries, one batch) empties in order. */
START_TEST(test_full)
{
	struct kvp_ring *r = make_ring(32);
	uint32_t model_ids[64], next = 0;
	struct model m = {.ids = model_ids};

	for (int lap = 0; lap < 2; lap++) {
		push_fresh(r, &m, &next, 32);
		ck_assert_uint_eq(ring_count(r), 32);
		snapshot_check(r, &m);
		ck_assert_uint_eq(pop_check(r, &m, 32), 32);
	}
	ring_destroy(r);
}
END_TEST

/*
 * Many laps of a small ring in uneven batches: positions pass the
 * capacity thousands of times, batches straddle the end of the cells.
 */
START_TEST(test_wrap_around)
{
	enum { CAP = 8, LAPS = 5000 };
	struct kvp_ring *r = make_ring(CAP);
	struct model m;
	uint32_t next = 0, n;
	uint64_t seed = 1;

	m.ids = malloc(sizeof(*m.ids) * CAP * LAPS * 2);
	ck_assert_ptr_nonnull(m.ids);
	m.head = m.tail = 0;
	while (m.tail < (uint64_t)CAP * LAPS) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		n = (uint32_t)(seed >> 33) % (CAP + 1);
		if (n > CAP - (m.tail - m.head))
			n = (uint32_t)(CAP - (m.tail - m.head));
		push_fresh(r, &m, &next, n);
		pop_check(r, &m, (uint32_t)(seed >> 45) % (CAP + 2));
	}
	snapshot_check(r, &m);
	while (pop_check(r, &m, 3))
		;
	ck_assert_uint_eq(m.head, m.tail);
	free(m.ids);
	ring_destroy(r);
}
END_TEST

START_TEST(test_snapshot_cap)
{
	struct kvp_ring *r = make_ring(16);
	uint32_t model_ids[16], next = 50, ids[4] = {0};
	struct model m = {.ids = model_ids};

	push_fresh(r, &m, &next, 10);
	ck_assert_uint_eq(pop_check(r, &m, 2), 2);
	ck_assert_uint_eq(ring_snapshot(r, ids, 3), 8);
	ck_assert_uint_eq(ids[0], 52);
	ck_assert_uint_eq(ids[2], 54);
	ck_assert_uint_eq(ids[3], 0);
	ck_assert_uint_eq(ring_snapshot(r, NULL, 0), 8);
	ring_destroy(r);
}
END_TEST

/* ------------------------------------------------------------ threads */

enum { SPSC_IDS = 200000, SPSC_CAP = 4 };

struct spsc {
	struct kvp_ring *r;
	char err[128];
};

/* Pushes 0..SPSC_IDS-1 in batches of up to 3, never past the capacity. */
static void *spsc_producer(void *arg)
{
	struct spsc *s = arg;
	uint32_t next = 0, ids[3], n;

	while (next < SPSC_IDS) {
		/* The one producer: count only shrinks under us. */
		n = SPSC_CAP - (uint32_t)ring_count(s->r);
		n = n > 3 ? 3 : n;
		n = n > SPSC_IDS - next ? SPSC_IDS - next : n;
		if (n == 0)
			sched_yield();
		for (uint32_t i = 0; i < n; i++)
			ids[i] = next++;
		ring_push(s->r, ids, n);
	}
	return NULL;
}

/* Pops everything in batches of up to 2 and checks the order. */
static void *spsc_consumer(void *arg)
{
	struct spsc *s = arg;
	uint32_t want = 0, ids[2], k;

	while (want < SPSC_IDS) {
		k = ring_pop(s->r, ids, 2);
		if (k == 0)
			sched_yield();
		for (uint32_t i = 0; i < k; i++, want++) {
			if (ids[i] != want && !s->err[0]) {
				snprintf(s->err, sizeof(s->err),
					 "popped %u, expected %u", ids[i],
					 want);
				return NULL;
			}
		}
	}
	return NULL;
}

/* A producer against a consumer on a ring kept full: both waits run. */
START_TEST(test_spsc_threads)
{
	struct spsc s = {.r = make_ring(SPSC_CAP)};
	pthread_t p, c;

	ck_assert_int_eq(pthread_create(&c, NULL, spsc_consumer, &s), 0);
	ck_assert_int_eq(pthread_create(&p, NULL, spsc_producer, &s), 0);
	ck_assert_int_eq(pthread_join(p, NULL), 0);
	ck_assert_int_eq(pthread_join(c, NULL), 0);
	ck_assert_msg(!s.err[0], "%s", s.err);
	ck_assert_uint_eq(ring_count(s.r), 0);
	ring_destroy(s.r);
}
END_TEST

/* ------------------------------------------------------------ suite */

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc;

	tc = tcase_create("create");
	tcase_add_test(tc, test_create_bad_capacity);
	tcase_add_test(tc, test_capacity_rounding);
	suite_add_tcase(s, tc);

	tc = tcase_create("order");
	tcase_add_test(tc, test_fifo_order);
	tcase_add_test(tc, test_bulk);
	tcase_add_test(tc, test_pop_more_than_present);
	tcase_add_test(tc, test_full);
	tcase_add_test(tc, test_wrap_around);
	tcase_add_test(tc, test_snapshot_cap);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_spsc_threads);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return run_suite(ring_suite());
}
