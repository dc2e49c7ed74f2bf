/* SPDX-License-Identifier: MIT */
/*
 * check_noalloc.c - appends to a reserved sequence allocate no host
 * memory: 1,024 one-token appends (one block each, so the block table
 * grows past its inline room and through dozens of chunks) call no
 * allocator function.  A control loop on an unreserved sequence must
 * allocate, or the count would prove nothing.
 *
 * The count.  This program defines the allocator's entry points; they
 * forward to glibc's and count the calls the arming thread makes while
 * armed, whoever the caller (libkvpool's calls bind to these
 * definitions, as the executable's come first).  Sanitizers interpose
 * the allocator themselves, and jemalloc in the process would take
 * libkvpool's allocations past malloc: both skip, saying so.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <malloc.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "sanitized.h"

#define TOKENS 1024u

static int skip(const char *why)
{
	printf("SKIP: check_noalloc: %s\n", why);
	return 77;
}

#if KVP_SANITIZED
int main(void)
{
	return skip("the sanitizer's allocator cannot be interposed");
}
#else

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

static __thread int armed; /* counting this thread's calls */
static _Atomic unsigned long calls;

static void count(void)
{
	if (armed)
		atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
}

void *malloc(size_t size)
{
	count();
	return __libc_malloc(size);
}

void *calloc(size_t nmemb, size_t size)
{
	count();
	return __libc_calloc(nmemb, size);
}

void *realloc(void *p, size_t size)
{
	count();
	return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size)
{
	count();
	return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
	count();
	return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
	void *p;

	count();
	if (align == 0 || (align & (align - 1)) || align % sizeof(void *))
		return EINVAL;
	p = __libc_memalign(align, size);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "check_noalloc: %s: %d (%s)\n", what, rc,
		kvp_strerror(rc));
	return 1;
}

/* Allocator calls made by TOKENS one-token appends to seq. */
static int appends(struct kvp_manager *m, uint64_t seq, unsigned long *n)
{
	struct kvp_append_info in;
	int rc = 0;

	atomic_store(&calls, 0);
	armed = 1;
	for (uint32_t t = 0; t < TOKENS && !rc; t++)
		rc = kvp_seq_append_ex(m, seq, 1, NULL, 0, NULL, &in);
	armed = 0;
	*n = atomic_load(&calls);
	return rc;
}

int main(void)
{
	struct kvp_pool_config pc = {.num_blocks = 4 * TOKENS,
				     .block_tokens = 1,
				     .device_id = -1};
	struct kvp_manager_config mc = {.policy = KVP_EVICT_LRU};
	struct kvp_pool *pool;
	struct kvp_manager *m;
	unsigned long reserved, control;
	int rc;

	if (dlsym(RTLD_DEFAULT, "mallocx"))
		return skip("jemalloc is in the process: libkvpool allocates "
			    "with mallocx, which this count does not see");
	if ((rc = kvp_pool_create(&pc, &pool)))
		return fail("kvp_pool_create", rc);
	mc.pool = pool;
	if ((rc = kvp_manager_create(&mc, &m)))
		return fail("kvp_manager_create", rc);
	/* Warm-up: the thread's first calls register it and make its
	 * caches (RCU, the pool's thread cache, the lookup cache). */
	if ((rc = kvp_seq_create(m, 1, 1)) || (rc = kvp_seq_create(m, 2, 1)) ||
	    (rc = kvp_seq_append(m, 2, 1, NULL, 0, NULL)))
		return fail("warm-up", rc);
	if ((rc = kvp_seq_reserve(m, 1, TOKENS + 1)))
		return fail("kvp_seq_reserve", rc);
	if ((rc = appends(m, 1, &reserved)))
		return fail("append (reserved)", rc);
	if ((rc = appends(m, 2, &control)))
		return fail("append (control)", rc);
	printf("check_noalloc: %u appends: %lu allocator calls reserved, "
	       "%lu unreserved\n",
	       TOKENS, reserved, control);
	if (reserved != 0 || control == 0) {
		fprintf(stderr, "check_noalloc: want 0 calls reserved and "
				"some unreserved\n");
		return 1;
	}
	kvp_manager_destroy(m);
	kvp_pool_unref(pool);
	return 0;
}
#endif
