/* SPDX-License-Identifier: MIT */
/*
 * check_errors.c - Check unit tests for the error cases of kvpool.h that
 * check_pool, check_manager, check_data and check_hash do not assert: the
 * descriptions of -EFAULT and -EIO, -ENOMEM (forced by failing the
 * library's own allocations), -EIO of kvp_hash_blocks (forced by failing
 * getrandom), -EOVERFLOW of kvp_export_csr, and a few inputs those tests
 * leave out.  doc/errors.md cites every test below.
 *
 * Every test asserts the exact return value and, where kvpool.h promises
 * it ("a call that fails changes nothing"), that the pool, the sequence
 * and the statistics are as before.
 *
 * Fault injection.  This program defines malloc, calloc, posix_memalign
 * and getrandom; they forward to glibc, except that while a test has armed
 * a fault, calls made from libkvpool's own code (the return address lies
 * in libkvpool.so) by the arming thread fail.  Allocations of liburcu,
 * Check or libc itself never fail.  Sanitizers interpose the allocator
 * themselves, so under ASan/TSan (or without glibc) the fault tests are
 * left out and the rest runs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr, syscall */
#endif
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#include "check_common.h"

#define BT CHECK_BLOCK_TOKENS

/* Helpers only the fault tests use, which sanitizer builds leave out. */
#define FAULT_HELPER __attribute__((unused))

/* Addresses a failed call must not write over *out. */
static FAULT_HELPER char pool_sentinel_storage, mgr_sentinel_storage;
#define POOL_SENTINEL ((struct kvp_pool *)(void *)&pool_sentinel_storage)
#define MGR_SENTINEL ((struct kvp_manager *)(void *)&mgr_sentinel_storage)

/* ------------------------------------------------------------ faults */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVP_FAULTS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||     \
	__has_feature(memory_sanitizer)
#define KVP_FAULTS 0
#endif
#endif
#if !defined(KVP_FAULTS) && defined(__GLIBC__)
#define KVP_FAULTS 1
#endif
#ifndef KVP_FAULTS
#define KVP_FAULTS 0
#endif

/* Library allocations a test lets succeed before failing every later one. */
#define MAX_FAULT_STEPS 32u

#if KVP_FAULTS
#include <link.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

/* libkvpool.so's mapped range, found by fault_setup(). */
static uintptr_t lib_lo, lib_hi;

static _Atomic int alloc_armed, random_armed;
static pthread_t fault_thread; /* the thread whose calls fail */
static unsigned fault_skip;    /* library allocations still allowed */
static unsigned fault_hits;    /* library allocations failed */

static int in_library(const void *ra)
{
	return (uintptr_t)ra >= lib_lo && (uintptr_t)ra < lib_hi;
}

/* Whether the allocation a caller at ra asks for must fail. */
static int alloc_fails(const void *ra)
{
	if (!atomic_load_explicit(&alloc_armed, memory_order_relaxed) ||
	    !in_library(ra) || !pthread_equal(pthread_self(), fault_thread))
		return 0;
	if (fault_skip) {
		fault_skip--;
		return 0;
	}
	fault_hits++;
	return 1;
}

void *malloc(size_t size)
{
	if (alloc_fails(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return __libc_malloc(size);
}

void *calloc(size_t nmemb, size_t size)
{
	if (alloc_fails(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return __libc_calloc(nmemb, size);
}

int posix_memalign(void **memptr, size_t align, size_t size)
{
	void *p;

	if (align == 0 || (align & (align - 1)) || align % sizeof(void *))
		return EINVAL;
	if (alloc_fails(__builtin_return_address(0)))
		return ENOMEM;
	p = __libc_memalign(align, size);
	if (!p)
		return ENOMEM;
	*memptr = p;
	return 0;
}

ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
	if (atomic_load_explicit(&random_armed, memory_order_relaxed) &&
	    in_library(__builtin_return_address(0))) {
		errno = ENOSYS;
		return -1;
	}
	return syscall(SYS_getrandom, buf, len, flags);
}

static int find_library(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t target = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
	int found = 0;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t a, b;

		if (ph->p_type != PT_LOAD)
			continue;
		a = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
		b = a + ph->p_memsz;
		found |= target >= a && target < b;
		lo = a < lo ? a : lo;
		hi = b > hi ? b : hi;
	}
	if (!found)
		return 0;
	lib_lo = lo;
	lib_hi = hi;
	return 1;
}

/* Finds libkvpool.so: the object holding kvp_strerror's static text. */
static void fault_setup(void)
{
	dl_iterate_phdr(find_library, (void *)kvp_strerror(0));
}

/*
 * From now on, the calling thread's allocations made by libkvpool fail
 * after the first `skip` of them.
 */
static void fault_arm(unsigned skip)
{
	ck_assert_msg(lib_hi > lib_lo, "libkvpool.so not found in the process");
	fault_thread = pthread_self();
	fault_skip = skip;
	fault_hits = 0;
	atomic_store(&alloc_armed, 1);
}

/* Ends fault_arm(); returns the number of allocations that failed. */
static unsigned fault_disarm(void)
{
	atomic_store(&alloc_armed, 0);
	return fault_hits;
}
#endif /* KVP_FAULTS */

/* ------------------------------------------------------------ helpers */

static struct kvp_manager *mkmgr(struct kvp_pool *p)
{
	struct kvp_manager_config c;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.policy = KVP_EVICT_LRU;
	return mkmgr_cfg(&c);
}

static void expect_mgr_same(const struct kvp_stats *a,
			    const struct kvp_stats *b)
{
	ck_assert_msg(memcmp(a, b, sizeof(*a)) == 0,
		      "manager statistics changed: sequences %llu -> %llu,"
		      " creates %llu -> %llu, appends %llu -> %llu, forks"
		      " %llu -> %llu, allocated %llu -> %llu, released %llu"
		      " -> %llu, used %llu -> %llu",
		      ULL(a->sequences), ULL(b->sequences), ULL(a->seq_creates),
		      ULL(b->seq_creates), ULL(a->appends), ULL(b->appends),
		      ULL(a->forks), ULL(b->forks), ULL(a->blocks_allocated),
		      ULL(b->blocks_allocated), ULL(a->blocks_released),
		      ULL(b->blocks_released), ULL(a->blocks_used),
		      ULL(b->blocks_used));
}

static FAULT_HELPER struct kvp_seq_info info_of(struct kvp_manager *m,
						uint64_t s)
{
	struct kvp_seq_info in;
	int rc;

	memset(&in, 0, sizeof(in));
	rc = kvp_seq_info(m, s, &in);
	ck_assert_msg(rc == 0, "kvp_seq_info(%llu) = %d (%s)", ULL(s), rc,
		      kvp_strerror(rc));
	return in;
}

/* Every field, the access clock included. */
static FAULT_HELPER void expect_info_same(const struct kvp_seq_info *a,
					  const struct kvp_seq_info *b)
{
	ck_assert_uint_eq(a->num_tokens, b->num_tokens);
	ck_assert_uint_eq(a->num_blocks, b->num_blocks);
	ck_assert_uint_eq(a->last_access, b->last_access);
	ck_assert_uint_eq(a->access_count, b->access_count);
	ck_assert_int_eq(a->priority, b->priority);
}

/* The block table of s; the test fails if it has more than cap blocks. */
static FAULT_HELPER uint32_t table_of(struct kvp_manager *m, uint64_t s,
				      uint32_t *ids, uint32_t cap)
{
	uint32_t n = 0;
	int rc = kvp_seq_blocks(m, s, ids, cap, &n);

	ck_assert_msg(rc == 0, "kvp_seq_blocks(%llu) = %d (%s)", ULL(s), rc,
		      kvp_strerror(rc));
	return n;
}

/* Checks, destroys the manager, checks the pool is whole, drops it. */
static void finish(struct kvp_manager *m, struct kvp_pool *p)
{
	struct kvp_pool_stats st;

	mcheck_ok(m);
	kvp_manager_destroy(m);
	st = pstats(p);
	ck_assert_uint_eq(st.free, st.total);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}

/* ------------------------------------------------------------ strerror */

/* Every value kvpool.h documents as a return value of some function. */
static const int documented[] = {
	0,	 -EINVAL,   -ENOSPC,	-ENOBUFS, -ENOMEM, -ENOENT, -EEXIST,
	-ERANGE, -EALREADY, -EOVERFLOW, -EBUSY,	  -EFAULT, -EIO,
};

/* err has a description of its own: not NULL, not empty, not another
 * documented code's, not the one of a value kvpool never returns. */
static void expect_own_description(int err)
{
	const char *s = kvp_strerror(err);
	const char *unknown = kvp_strerror(-12345);
	size_t i;

	ck_assert_msg(s != NULL && s[0] != '\0', "kvp_strerror(%d) empty", err);
	ck_assert_msg(strcmp(s, unknown) != 0,
		      "kvp_strerror(%d) = \"%s\", the text of an unknown value",
		      err, s);
	for (i = 0; i < ARRAY_SIZE(documented); i++)
		if (documented[i] != err)
			ck_assert_msg(
				strcmp(s, kvp_strerror(documented[i])) != 0,
				"kvp_strerror(%d) == kvp_strerror(%d): %s", err,
				documented[i], s);
}

/* kvp_pool_check and kvp_manager_check return -EFAULT. */
START_TEST(test_strerror_efault)
{
	expect_own_description(-EFAULT);
}
END_TEST

/* kvp_manager_dump and kvp_hash_blocks return -EIO. */
START_TEST(test_strerror_eio)
{
	expect_own_description(-EIO);
}
END_TEST

/* The buffer calls return -ENOBUFS, with a text of its own that names
 * no blocks (it was -ENOSPC, "not enough free blocks"). */
START_TEST(test_strerror_enobufs)
{
	expect_own_description(-ENOBUFS);
	ck_assert_str_eq(kvp_strerror(-ENOBUFS),
			 "the caller's buffer is too small");
	ck_assert_ptr_null(strstr(kvp_strerror(-ENOBUFS), "block"));
}
END_TEST

/* kvp_last_error's record of the buffer just refused. */
static void expect_buffer_error(uint64_t needed, uint64_t cap)
{
	struct kvp_error_info e;

	memset(&e, 0xA5, sizeof(e));
	ck_assert_int_eq(kvp_last_error(&e), 0);
	ck_assert_int_eq(e.err, -ENOBUFS);
	ck_assert_uint_eq(e.buffer, 1);
	ck_assert_uint_eq(e.requested, needed);
	ck_assert_uint_eq(e.available, cap);
}

/*
 * Issue 41's cases: a block table of stride 4 for a 7-block sequence in a
 * pool with 56 free blocks, a copy-on-write with no room for the copy, a
 * listing of 2 sequences into 1 slot, a batch whose copies overflow cow:
 * each is -ENOBUFS with the need and the capacity in kvp_last_error, and
 * changes nothing.
 */
START_TEST(test_buffer_too_small)
{
	struct kvp_pool *p = mkpool(63, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager *m = mkmgr(p);
	const uint64_t s7 = 7, both[2] = {8, 9};
	struct kvp_copy cow[1];
	int32_t table[4] = {-5, -5, -5, -5};
	uint64_t ids[1] = {12345};
	uint32_t n = 0, ncow = 0;

	create_ok(m, 7, 7 * BT); /* 7 blocks: 56 free */
	ck_assert_uint_eq(pstats(p).free, 56);
	ck_assert_int_eq(kvp_export_block_table(m, &s7, 1, table, 4, -1),
			 -ENOBUFS);
	expect_buffer_error(7, 4);
	ck_assert_int_eq(kvp_export_csr(m, &s7, 1, (int32_t[2]){0},
					(int32_t[4]){0}, 4, (int32_t[1]){0}),
			 -ENOBUFS);
	expect_buffer_error(7, 4);
	ck_assert_int_eq(kvp_seq_blocks(m, 7, (uint32_t *)table, 4, &n),
			 -ENOBUFS);
	ck_assert_uint_eq(n, 7);
	expect_buffer_error(7, 4);
	/* A shared, partly filled last block and nowhere to report its
	 * copy. */
	create_ok(m, 8, BT / 2);
	fork_ok(m, 8, 9);
	fork_ok(m, 8, 11);
	ck_assert_int_eq(kvp_seq_append(m, 9, 1, NULL, 0, &ncow), -ENOBUFS);
	ck_assert_uint_eq(ncow, 1);
	expect_buffer_error(1, 0);
	ck_assert_uint_eq(info_of(m, 9).num_tokens, BT / 2);
	/* A batch: 8's copy fills cow, 9 still shares with 11. */
	ncow = 9;
	ck_assert_int_eq(kvp_seq_append_batch(m, both, NULL, 2, cow, 1, &ncow),
			 1);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_int_eq(kvp_seq_append_batch(m, both + 1, NULL, 1, cow, 0,
					      &ncow),
			 -ENOBUFS);
	expect_buffer_error(1, 0);
	ck_assert_uint_eq(info_of(m, 9).num_tokens, BT / 2);
	/* Four sequences listed into one slot. */
	ck_assert_int_eq(kvp_manager_seqs(m, ids, 1, &n), -ENOBUFS);
	ck_assert_uint_eq(n, 4);
	expect_buffer_error(4, 1);
	/* Not enough blocks is still -ENOSPC. */
	ck_assert_uint_eq(pstats(p).free, 54);
	ck_assert_int_eq(kvp_seq_create(m, 10, 64 * BT), -ENOSPC);
	ck_assert_uint_eq(pstats(p).free, 54);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ pool */

/* Pool variants of the free tests: no cache (frees go to the global
 * stack) and a cache large enough to take the whole call. */
static struct kvp_pool *free_variant(int i)
{
	return i == 0 ? mkpool(1024, 0, KVP_POOL_NOCACHE, NULL)
		      : mkpool(1024, 256, 0, NULL);
}

#define NSOLE 10u
#define NSHARED 70u /* more than the 64 ids checked without a buffer */

/* NSOLE blocks with one reference, then NSHARED with two. */
static void alloc_sole_shared(struct kvp_pool *p, uint32_t *ids)
{
	uint32_t i;

	ck_assert_int_eq(kvp_pool_alloc(p, NSOLE + NSHARED, ids), 0);
	for (i = NSOLE; i < NSOLE + NSHARED; i++)
		ck_assert_int_eq(kvp_block_ref(p, ids[i]), 0);
}

static void expect_refs_sole_shared(struct kvp_pool *p, const uint32_t *ids,
				    int sole, int shared)
{
	uint32_t i;

	for (i = 0; i < NSOLE + NSHARED; i++) {
		int want = i < NSOLE ? sole : shared;
		int rc = kvp_block_refcount(p, ids[i]);

		ck_assert_msg(rc == want, "block %u: refcount %d, want %d",
			      ids[i], rc, want);
	}
}

#if KVP_FAULTS
/* Each allocation of kvp_pool_create fails in turn: -ENOMEM, *out kept. */
START_TEST(test_pool_create_enomem)
{
	static const struct kvp_layout lay = {2, 2, 4, KVP_F16};
	const struct kvp_layout *lays[2] = {NULL, &lay};
	int v;

	for (v = 0; v < 2; v++) {
		struct kvp_pool_config c =
			make_cfg(64, 0, KVP_POOL_NOCACHE, lays[v]);
		unsigned skip, enomem = 0;

		for (skip = 0; skip < MAX_FAULT_STEPS; skip++) {
			struct kvp_pool *out = POOL_SENTINEL;
			unsigned hits;
			int rc;

			fault_arm(skip);
			rc = kvp_pool_create(&c, &out);
			hits = fault_disarm();
			if (rc == 0) {
				struct kvp_pool_stats st = pstats(out);

				ck_assert_uint_eq(st.total, 64);
				ck_assert_uint_eq(st.free, 64);
				ck_assert_int_eq(kvp_pool_check(out), 0);
				kvp_pool_unref(out);
				break;
			}
			ck_assert_msg(rc == -ENOMEM,
				      "layout %d, allocation #%u failing:"
				      " kvp_pool_create = %d (%s)",
				      v, skip + 1, rc, kvp_strerror(rc));
			ck_assert_uint_ge(hits, 1);
			ck_assert_msg(out == POOL_SENTINEL,
				      "failed kvp_pool_create wrote *out");
			enomem++;
		}
		ck_assert_uint_lt(skip, MAX_FAULT_STEPS);
		ck_assert_msg(enomem > 0, "no allocation of kvp_pool_create"
					  " could be failed");
	}
}
END_TEST

/*
 * kvp_pool_free allocates nothing, so even with every allocation failing
 * a free of many shared ids (the path that checks repeated ids) succeeds.
 */
START_TEST(test_pool_free_needs_no_memory)
{
	struct kvp_pool *p = free_variant(_i);
	uint32_t ids[NSOLE + NSHARED];
	unsigned hits;
	int rc;

	alloc_sole_shared(p, ids);
	fault_arm(0);
	rc = kvp_pool_free(p, ids, NSOLE + NSHARED);
	hits = fault_disarm();
	ck_assert_msg(rc == 0, "kvp_pool_free = %d (%s), want 0", rc,
		      kvp_strerror(rc));
	ck_assert_uint_eq(hits, 0);
	expect_refs_sole_shared(p, ids, 0, 1);
	ck_assert_int_eq(kvp_pool_free(p, ids + NSOLE, NSHARED), 0);
	ck_assert_uint_eq(pstats(p).free, 1024);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}
END_TEST

/* kvp_pool_check's bitmap cannot be had: -ENOMEM, the pool unchanged. */
START_TEST(test_pool_check_enomem)
{
	struct kvp_pool *p = mkpool(64, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_pool_stats before, after;
	uint32_t ids[5];
	unsigned hits;
	int rc;

	ck_assert_int_eq(kvp_pool_alloc(p, 5, ids), 0);
	before = pstats(p);
	fault_arm(0);
	rc = kvp_pool_check(p);
	hits = fault_disarm();
	ck_assert_msg(rc == -ENOMEM, "kvp_pool_check = %d (%s), want -ENOMEM",
		      rc, kvp_strerror(rc));
	ck_assert_uint_ge(hits, 1);
	after = pstats(p);
	expect_pool_same(&before, &after);
	ck_assert_int_eq(kvp_block_refcount(p, ids[0]), 1);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, 5), 0);
	kvp_pool_unref(p);
}
END_TEST
#endif /* KVP_FAULTS */

/*
 * An id listed more times than it has references, among more than 64
 * shared ids (the sorted path) and after sole-held blocks the first pass
 * takes to zero: -EALREADY and no count changes.
 */
START_TEST(test_pool_free_repeat_many_shared)
{
	struct kvp_pool *p = free_variant(_i);
	uint32_t ids[NSOLE + NSHARED], list[NSOLE + NSHARED + 2];
	struct kvp_pool_stats before, after;
	const uint32_t n = NSOLE + NSHARED + 2;

	alloc_sole_shared(p, ids);
	memcpy(list, ids, sizeof(ids));
	/* ids[NSOLE + 5] has two references and is listed three times. */
	list[NSOLE + NSHARED] = ids[NSOLE + 5];
	list[NSOLE + NSHARED + 1] = ids[NSOLE + 5];
	before = pstats(p);
	ck_assert_int_eq(kvp_pool_free(p, list, n), -EALREADY);
	expect_refs_sole_shared(p, ids, 1, 2);
	after = pstats(p);
	expect_pool_same(&before, &after);
	ck_assert_int_eq(kvp_pool_check(p), 0);

	ck_assert_int_eq(kvp_pool_free(p, ids, NSOLE + NSHARED), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids + NSOLE, NSHARED), 0);
	ck_assert_uint_eq(pstats(p).free, 1024);
	kvp_pool_unref(p);
}
END_TEST

/*
 * An id out of range and an id listed more often than its references:
 * -ERANGE when the repeated id is shared (its multiplicity is checked
 * after the whole list), although it comes first in the list; -EALREADY
 * when the first pass already finds it free.  No count changes.
 */
START_TEST(test_pool_free_error_order)
{
	struct kvp_pool *p = mkpool(8, 0, KVP_POOL_NOCACHE, NULL);
	uint32_t id, list[4];

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	ck_assert_int_eq(kvp_block_ref(p, id), 0); /* 2 references */
	list[0] = list[1] = list[2] = id;
	list[3] = 8;
	ck_assert_int_eq(kvp_pool_free(p, list, 4), -ERANGE);
	ck_assert_int_eq(kvp_block_refcount(p, id), 2);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0); /* 1 reference */
	ck_assert_int_eq(kvp_pool_free(p, list, 4), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, id), 1);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	ck_assert_uint_eq(pstats(p).free, 8);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}
END_TEST

/* ------------------------------------------------------------ manager */

#if KVP_FAULTS
/* Each allocation of kvp_manager_create fails in turn: -ENOMEM. */
START_TEST(test_manager_create_enomem)
{
	struct kvp_pool *p = mkpool(64, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager_config c;
	unsigned skip, enomem = 0;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.policy = KVP_EVICT_LFU;
	for (skip = 0; skip < MAX_FAULT_STEPS; skip++) {
		struct kvp_manager *out = MGR_SENTINEL;
		unsigned hits;
		int rc;

		fault_arm(skip);
		rc = kvp_manager_create(&c, &out);
		hits = fault_disarm();
		if (rc == 0) {
			ck_assert_ptr_ne(out, MGR_SENTINEL);
			create_ok(out, 1, 40);
			finish(out, p);
			break;
		}
		ck_assert_msg(rc == -ENOMEM,
			      "allocation #%u failing: kvp_manager_create = %d"
			      " (%s)",
			      skip + 1, rc, kvp_strerror(rc));
		ck_assert_uint_ge(hits, 1);
		ck_assert_msg(out == MGR_SENTINEL,
			      "failed kvp_manager_create wrote *out");
		ck_assert_uint_eq(pstats(p).free, 64);
		ck_assert_int_eq(kvp_pool_check(p), 0);
		enomem++;
	}
	ck_assert_uint_lt(skip, MAX_FAULT_STEPS);
	ck_assert_uint_gt(enomem, 0);
}
END_TEST

/* Each allocation of kvp_manager_check fails in turn: -ENOMEM. */
START_TEST(test_manager_check_enomem)
{
	struct kvp_pool *p = mkpool(64, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager *m = mkmgr(p);
	struct kvp_stats before, after;
	unsigned skip, enomem = 0;

	create_ok(m, 1, 40);
	before = mstats(m);
	for (skip = 0; skip < MAX_FAULT_STEPS; skip++) {
		unsigned hits;
		int rc;

		fault_arm(skip);
		rc = kvp_manager_check(m);
		hits = fault_disarm();
		if (rc == 0)
			break;
		ck_assert_msg(rc == -ENOMEM,
			      "allocation #%u failing: kvp_manager_check = %d"
			      " (%s)",
			      skip + 1, rc, kvp_strerror(rc));
		ck_assert_uint_ge(hits, 1);
		after = mstats(m);
		expect_mgr_same(&before, &after);
		enomem++;
	}
	ck_assert_uint_lt(skip, MAX_FAULT_STEPS);
	ck_assert_uint_gt(enomem, 0);
	finish(m, p);
}
END_TEST
#endif /* KVP_FAULTS */

/* "NULL arguments are ignored": a NULL manager leaves *st alone. */
START_TEST(test_manager_stats_null_manager)
{
	struct kvp_stats st, copy;

	memset(&st, 0x5C, sizeof(st));
	memcpy(&copy, &st, sizeof(st));
	kvp_manager_stats(NULL, &st);
	ck_assert_int_eq(memcmp(&st, &copy, sizeof(st)), 0);
}
END_TEST

/* ------------------------------------------------------------ sequences */

#if KVP_FAULTS
/* A pool and a manager whose lazily allocated state (the first struct
 * slab, this thread's lookup cache) exists already. */
static struct kvp_manager *warm_mgr(struct kvp_pool **pp)
{
	struct kvp_manager *m;

	*pp = mkpool(1024, 0, KVP_POOL_NOCACHE, NULL);
	m = mkmgr(*pp);
	create_ok(m, 1000, 1);
	(void)info_of(m, 1000);
	return m;
}

/* A sequence of 300 blocks: its table cannot be a small inline one. */
START_TEST(test_seq_create_enomem)
{
	struct kvp_pool *p;
	struct kvp_manager *m = warm_mgr(&p);
	struct kvp_pool_stats pb = pstats(p), pa;
	struct kvp_stats mb = mstats(m), ma;
	unsigned skip, enomem = 0;
	struct kvp_seq_info in;

	for (skip = 0; skip < MAX_FAULT_STEPS; skip++) {
		unsigned hits;
		int rc;

		fault_arm(skip);
		rc = kvp_seq_create(m, 1, 300 * BT);
		hits = fault_disarm();
		if (rc == 0)
			break;
		ck_assert_msg(
			rc == -ENOMEM,
			"allocation #%u failing: kvp_seq_create = %d (%s)",
			skip + 1, rc, kvp_strerror(rc));
		ck_assert_uint_ge(hits, 1);
		expect_gone(m, 1);
		pa = pstats(p);
		expect_pool_same(&pb, &pa);
		ma = mstats(m);
		expect_mgr_same(&mb, &ma);
		mcheck_ok(m);
		enomem++;
	}
	ck_assert_uint_lt(skip, MAX_FAULT_STEPS);
	ck_assert_uint_gt(enomem, 0);
	in = info_of(m, 1);
	ck_assert_uint_eq(in.num_tokens, 300 * BT);
	ck_assert_uint_eq(in.num_blocks, 300);
	finish(m, p);
}
END_TEST

/* 100 full blocks plus 400 more: the table must grow and the 400 new ids
 * need a buffer. */
START_TEST(test_seq_append_enomem)
{
	static uint32_t before[512], after[512];
	struct kvp_pool *p;
	struct kvp_manager *m = warm_mgr(&p);
	struct kvp_pool_stats pb, pa;
	struct kvp_stats mb, ma;
	struct kvp_seq_info ib, ia;
	struct kvp_copy cow[1];
	unsigned skip, enomem = 0;
	uint32_t nb, na, ncow;

	create_ok(m, 1, 100 * BT);
	nb = table_of(m, 1, before, 512);
	ib = info_of(m, 1);
	pb = pstats(p);
	mb = mstats(m);
	for (skip = 0; skip < MAX_FAULT_STEPS; skip++) {
		unsigned hits;
		int rc;

		fault_arm(skip);
		rc = kvp_seq_append(m, 1, 400 * BT, cow, 1, &ncow);
		hits = fault_disarm();
		if (rc == 0)
			break;
		ck_assert_msg(
			rc == -ENOMEM,
			"allocation #%u failing: kvp_seq_append = %d (%s)",
			skip + 1, rc, kvp_strerror(rc));
		ck_assert_uint_ge(hits, 1);
		ia = info_of(m, 1);
		expect_info_same(&ib, &ia);
		na = table_of(m, 1, after, 512);
		ck_assert_uint_eq(na, nb);
		ck_assert_int_eq(memcmp(after, before, nb * sizeof(*after)), 0);
		pa = pstats(p);
		expect_pool_same(&pb, &pa);
		ma = mstats(m);
		expect_mgr_same(&mb, &ma);
		mcheck_ok(m);
		enomem++;
	}
	ck_assert_uint_lt(skip, MAX_FAULT_STEPS);
	ck_assert_uint_gt(enomem, 0);
	ia = info_of(m, 1);
	ck_assert_uint_eq(ia.num_tokens, 500 * BT);
	ck_assert_uint_eq(ia.num_blocks, 500);
	finish(m, p);
}
END_TEST

/* The fork of a 100-block sequence needs a table of its own. */
START_TEST(test_seq_fork_enomem)
{
	static uint32_t ids[128];
	struct kvp_pool *p;
	struct kvp_manager *m = warm_mgr(&p);
	struct kvp_pool_stats pb, pa;
	struct kvp_stats mb, ma;
	struct kvp_seq_info ib, ia;
	unsigned skip, enomem = 0;
	uint32_t n, i;

	create_ok(m, 1, 100 * BT);
	n = table_of(m, 1, ids, 128);
	ib = info_of(m, 1);
	pb = pstats(p);
	mb = mstats(m);
	for (skip = 0; skip < MAX_FAULT_STEPS; skip++) {
		unsigned hits;
		int rc;

		fault_arm(skip);
		rc = kvp_seq_fork(m, 1, 2);
		hits = fault_disarm();
		if (rc == 0)
			break;
		ck_assert_msg(rc == -ENOMEM,
			      "allocation #%u failing: kvp_seq_fork = %d (%s)",
			      skip + 1, rc, kvp_strerror(rc));
		ck_assert_uint_ge(hits, 1);
		expect_gone(m, 2);
		for (i = 0; i < n; i++)
			ck_assert_int_eq(kvp_block_refcount(p, ids[i]), 1);
		ia = info_of(m, 1);
		expect_info_same(&ib, &ia);
		pa = pstats(p);
		expect_pool_same(&pb, &pa);
		ma = mstats(m);
		expect_mgr_same(&mb, &ma);
		mcheck_ok(m);
		enomem++;
	}
	ck_assert_uint_lt(skip, MAX_FAULT_STEPS);
	ck_assert_uint_gt(enomem, 0);
	/* Holders: one chunk both tables share, and the shared tail. */
	for (i = 0; i < n; i++)
		ck_assert_int_eq(kvp_block_refcount(p, ids[i]),
				 i + 1 < n ? 1 : 2);
	finish(m, p);
}
END_TEST

/*
 * kvp_seq_stream_trim allocates nothing: even with every allocation
 * failing, a trim freeing 98 blocks succeeds.
 */
START_TEST(test_seq_stream_trim_needs_no_memory)
{
	struct kvp_pool *p;
	struct kvp_manager *m = warm_mgr(&p);
	struct kvp_seq_info ia;
	uint32_t ev = 0xDEADu;
	unsigned hits;
	int rc;

	create_ok(m, 1, 100 * BT);
	/* Sinks: block 0; window: block 99; blocks 1..98 go. */
	fault_arm(0);
	rc = kvp_seq_stream_trim(m, 1, BT, BT, &ev);
	hits = fault_disarm();
	ck_assert_msg(rc == 0, "kvp_seq_stream_trim = %d (%s), want 0", rc,
		      kvp_strerror(rc));
	ck_assert_uint_eq(hits, 0);
	ck_assert_uint_eq(ev, 98 * BT);
	ia = info_of(m, 1);
	ck_assert_uint_eq(ia.num_tokens, 2 * BT);
	ck_assert_uint_eq(ia.num_blocks, 2);
	mcheck_ok(m);
	finish(m, p);
}
END_TEST
#endif /* KVP_FAULTS */

/* NaN with the sign bit set is NaN: -EINVAL, *n untouched, no victim. */
START_TEST(test_evict_until_negative_nan)
{
	struct kvp_pool *p = mkpool(100, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager *m = mkmgr(p);
	struct kvp_stats before, after;
	uint64_t victims[16];
	uint32_t n = 0xDEADu;
	uint64_t i;

	for (i = 1; i <= 10; i++)
		create_ok(m, i, 10 * BT);
	before = mstats(m);
	ck_assert(isnan(-NAN) && signbit(-NAN));
	ck_assert_int_eq(kvp_evict_until(m, -NAN, victims, 16, &n), -EINVAL);
	ck_assert_uint_eq(n, 0xDEADu);
	after = mstats(m);
	expect_mgr_same(&before, &after);
	ck_assert_uint_eq(after.sequences, 10);
	ck_assert_uint_eq(pstats(p).free, 0);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ exports */

/*
 * kvp_export_csr counting (indices NULL): exactly INT32_MAX indices is a
 * count, one more is -EOVERFLOW.  A sequence listed many times counts
 * each time (kvp_export_block_table's own test lists one twice).
 */
START_TEST(test_export_csr_eoverflow)
{
	enum { BIG = 65536, REPEAT = 32767 }; /* 32767 * 65536 + 65535 */
	struct kvp_pool *p = mkpool(2 * BIG, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager *m = mkmgr(p);
	uint64_t *seqs = malloc((REPEAT + 1) * sizeof(*seqs));
	uint32_t i;

	ck_assert_ptr_nonnull(seqs);
	create_ok(m, 1, BIG * BT);		    /* 65536 blocks */
	create_ok(m, 2, (BIG - 1) * BT);	    /* 65535 blocks */
	ck_assert_int_eq(kvp_seq_fork(m, 1, 3), 0); /* 65536, shared */
	for (i = 0; i < REPEAT; i++)
		seqs[i] = 1;
	ck_assert_uint_eq((uint64_t)REPEAT * BIG + (BIG - 1), INT32_MAX);

	seqs[REPEAT] = 2;
	ck_assert_int_eq(
		kvp_export_csr(m, seqs, REPEAT + 1, NULL, NULL, 0, NULL),
		INT32_MAX);
	seqs[REPEAT] = 3;
	ck_assert_int_eq(
		kvp_export_csr(m, seqs, REPEAT + 1, NULL, NULL, 0, NULL),
		-EOVERFLOW);
	free(seqs);
	finish(m, p);
}
END_TEST

/*
 * kvpool.h lists -EINVAL for kvp_export_csr without naming the inputs:
 * besides a NULL manager and seqs NULL with nseq > 0 (check_manager), an
 * output array missing when indices is given.  Nothing is written.
 */
START_TEST(test_export_csr_missing_outputs)
{
	struct kvp_pool *p = mkpool(16, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager *m = mkmgr(p);
	const uint64_t seqs[] = {1};
	int32_t indptr[2] = {-7, -7}, indices[8], lpl[1] = {-7};
	uint32_t i;

	create_ok(m, 1, 20);
	for (i = 0; i < 8; i++)
		indices[i] = -7;
	ck_assert_int_eq(kvp_export_csr(m, seqs, 1, NULL, indices, 8, lpl),
			 -EINVAL);
	ck_assert_int_eq(kvp_export_csr(m, seqs, 1, indptr, indices, 8, NULL),
			 -EINVAL);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(indices[i], -7);
	ck_assert_int_eq(indptr[0], -7);
	ck_assert_int_eq(indptr[1], -7);
	ck_assert_int_eq(lpl[0], -7);
	/* The same outputs suffice for the count: indptr and last_page_len
	 * are only needed with indices. */
	ck_assert_int_eq(kvp_export_csr(m, seqs, 1, NULL, NULL, 0, NULL), 2);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ hashes */

/*
 * More full blocks than an int can count: -EINVAL (kvpool.h lists -EINVAL
 * for other inputs only), out untouched, tokens never read (the buffer
 * holds one token).
 */
START_TEST(test_hash_too_many_blocks)
{
	const uint32_t tok[1] = {42};
	struct kvp_hash out[1];
	size_t i;

	memset(out, 0xAB, sizeof(out));
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tok,
					 (uint32_t)INT32_MAX + 1u, 1, out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tok,
					 UINT32_MAX, 1, out),
			 -EINVAL);
	for (i = 0; i < sizeof(out[0].b); i++)
		ck_assert_uint_eq(out[0].b[i], 0xAB);
}
END_TEST

/*
 * kvp_hash_blocks_cap: a prompt of 300 blocks into room for 256 (the
 * README's old h[256] past 4,096 tokens) is -ENOBUFS with out untouched and
 * the need in kvp_last_error; room for all gives kvp_hash_blocks's
 * hashes.  Arguments are checked before the capacity.
 */
START_TEST(test_hash_blocks_cap)
{
	enum { NB = 300, CAP = 256 };
	static uint32_t tok[NB * BT + 5];
	static struct kvp_hash out[NB], ref[NB];
	const struct kvp_hash_keys keys = {"tenant", 6, "lora-a"};
	int algo;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(tok); i++)
		tok[i] = (uint32_t)(i * 2654435761u);
	for (algo = KVP_HASH_SHA256; algo <= KVP_HASH_SHA256_CBOR; algo++) {
		memset(out, 0xAB, sizeof(out));
		ck_assert_int_eq(kvp_hash_blocks_cap(algo, NULL, &keys, tok,
						     ARRAY_SIZE(tok), BT, out,
						     CAP),
				 -ENOBUFS);
		expect_buffer_error(NB, CAP);
		ck_assert(all_bytes(out, sizeof(out), 0xAB));
		ck_assert_int_eq(kvp_hash_blocks(algo, NULL, &keys, tok,
						 ARRAY_SIZE(tok), BT, ref),
				 NB);
		ck_assert_int_eq(kvp_hash_blocks_cap(algo, NULL, &keys, tok,
						     ARRAY_SIZE(tok), BT, out,
						     NB),
				 NB);
		ck_assert_mem_eq(out, ref, sizeof(out));
	}
	/* No room needed, none given. */
	ck_assert_int_eq(kvp_hash_blocks_cap(KVP_HASH_SHA256, NULL, NULL, tok,
					     BT - 1, BT, NULL, 0),
			 0);
	ck_assert_int_eq(kvp_hash_blocks_cap(KVP_HASH_SHA256, NULL, NULL, tok,
					     BT, BT, NULL, 0),
			 -ENOBUFS);
	expect_buffer_error(1, 0);
	ck_assert_int_eq(kvp_hash_blocks_cap(KVP_HASH_SHA256, NULL, NULL, tok,
					     BT, BT, NULL, 1),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_blocks_cap((enum kvp_hash_algo)9, NULL, NULL,
					     tok, 2 * BT, BT, out, 1),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_blocks_cap(KVP_HASH_SHA256, NULL, NULL, tok,
					     2 * BT, 0, out, 1),
			 -EINVAL);
}
END_TEST

#if KVP_FAULTS
/*
 * XXH3 without a seed needs the process's random secret; with getrandom
 * failing it is -EIO and out is untouched.  SHA-256 needs no randomness,
 * and a seed replaces the secret.  (The process must not have hashed with
 * an unseeded XXH3 before: Check runs each test in its own process, and
 * the suite runs this one first for CK_FORK=no.)
 */
START_TEST(test_hash_eio_no_randomness)
{
	uint32_t tok[2 * BT];
	struct kvp_hash out[2];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(tok); i++)
		tok[i] = (uint32_t)i * 7u;
	ck_assert(lib_hi > lib_lo);
	memset(out, 0xAB, sizeof(out));
	atomic_store(&random_armed, 1);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, tok,
					 2 * BT, BT, out),
			 -EIO);
	for (i = 0; i < sizeof(out); i++)
		ck_assert_uint_eq(((const unsigned char *)out)[i], 0xAB);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tok,
					 2 * BT, BT, out),
			 2);
	ck_assert_int_eq(kvp_hash_set_xxh3_seed(7), 0);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, tok,
					 2 * BT, BT, out),
			 2);
	atomic_store(&random_armed, 0);
}
END_TEST
#endif /* KVP_FAULTS */

/* ------------------------------------------------------------ suite */

static Suite *errors_suite(void)
{
	Suite *s = suite_create("errors");
	TCase *tc;

#if KVP_FAULTS
	/*
	 * First: under CK_FORK=no (valgrind) every test shares one process,
	 * and this one needs a process that has not drawn its XXH3 secret.
	 */
	tc = tcase_create("hash-randomness");
	tcase_add_test(tc, test_hash_eio_no_randomness);
	suite_add_tcase(s, tc);
#endif

	tc = tcase_create("strerror");
	tcase_add_test(tc, test_strerror_efault);
	tcase_add_test(tc, test_strerror_eio);
	tcase_add_test(tc, test_strerror_enobufs);
	suite_add_tcase(s, tc);

	tc = tcase_create("pool");
	tcase_add_loop_test(tc, test_pool_free_repeat_many_shared, 0, 2);
	tcase_add_test(tc, test_pool_free_error_order);
#if KVP_FAULTS
	tcase_add_test(tc, test_pool_create_enomem);
	tcase_add_loop_test(tc, test_pool_free_needs_no_memory, 0, 2);
	tcase_add_test(tc, test_pool_check_enomem);
#endif
	suite_add_tcase(s, tc);

	tc = tcase_create("manager");
	tcase_add_test(tc, test_manager_stats_null_manager);
	tcase_add_test(tc, test_evict_until_negative_nan);
#if KVP_FAULTS
	tcase_add_test(tc, test_manager_create_enomem);
	tcase_add_test(tc, test_manager_check_enomem);
#endif
	suite_add_tcase(s, tc);

#if KVP_FAULTS
	tc = tcase_create("sequences");
	tcase_add_test(tc, test_seq_create_enomem);
	tcase_add_test(tc, test_seq_append_enomem);
	tcase_add_test(tc, test_seq_fork_enomem);
	tcase_add_test(tc, test_seq_stream_trim_needs_no_memory);
	suite_add_tcase(s, tc);
#endif

	tc = tcase_create("export");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_export_csr_eoverflow);
	tcase_add_test(tc, test_export_csr_missing_outputs);
	tcase_add_test(tc, test_buffer_too_small);
	suite_add_tcase(s, tc);

	tc = tcase_create("hash");
	tcase_add_test(tc, test_hash_too_many_blocks);
	tcase_add_test(tc, test_hash_blocks_cap);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
#if KVP_FAULTS
	fault_setup();
#else
	fprintf(stderr, "check_errors: built with a sanitizer or without"
			" glibc: the fault-injection tests are left out\n");
#endif
	return run_suite(errors_suite());
}
