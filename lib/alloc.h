/* SPDX-License-Identifier: MIT */
/*
 * alloc.h - the library's host-memory allocator.
 * Floor 2 of lib/ (doc/architecture.md, "Layers").
 *
 * Every allocation kvpool makes for itself goes through these functions, so
 * that one choice, made once per process, decides the allocator: jemalloc's
 * mallocx/sdallocx on a private arena when jemalloc is already in the
 * process (or the build links it), the libc allocator otherwise.  The
 * choice never changes afterwards, so a pointer always returns to the
 * allocator that made it.  Sizes must be passed back to kvp_free exactly.
 */
#ifndef KVP_ALLOC_H
#define KVP_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *kvp_malloc(size_t size);
void *kvp_calloc(size_t nmemb, size_t size); /* NULL on overflow too */
void kvp_free(void *ptr, size_t size);	     /* NULL is ignored */
/* align: a power of two >= sizeof(void *). */
void *kvp_malloc_aligned(size_t align, size_t size);
void kvp_free_aligned(void *ptr, size_t align, size_t size);

/* Gives the allocator's free memory back to the system, as far as it
 * can (seqmem.c, after returning slabs).  Slow: it may walk every arena
 * under its lock. */
void kvp_alloc_trim(void);

/* "jemalloc" or "libc": which allocator the process settled on. */
const char *kvp_allocator_name(void);

/*
 * A number never handed out before in this process (from 1): the identity
 * of an object the library allocates (a pool's caches, a manager), which,
 * unlike its address, is never reused.  Lock-free.
 */
uint64_t kvp_next_uid(void);

/*
 * Asks for transparent huge pages over the whole 2 MiB pages inside
 * [p, p + bytes), where the kernel gives them only on request (the data
 * arena; prefix tables and per-block prefix records, read at random:
 * fewer TLB misses).  Before the pages are first touched; a refusal
 * changes nothing.
 */
void kvp_advise_huge(void *p, size_t bytes);

/*
 * Fault injection, for test programs only (tests/check_faults and
 * tests/fuzz_api compile the library's sources themselves with
 * -DKVP_FAULT_INJECTION; libkvpool is never built with it).  Every host
 * allocation of the library, and the two made for it elsewhere (the
 * arena's mmap, liburcu's hash table), first asks kvp_fault_point(),
 * which names the calling function and the size; the test decides
 * whether it fails (tests/fault.h).  In other builds kvp_fault_point() is
 * the constant false and the macros below do not exist.
 */
#ifdef KVP_FAULT_INJECTION
#include <stdbool.h>
bool kvp_fault_hit(const char *site, size_t size);
#define kvp_fault_point(size) kvp_fault_hit(__func__, (size))
#ifndef KVP_ALLOC_DEFINING
static inline void *kvp_malloc_at(size_t size, const char *site)
{
	return kvp_fault_hit(site, size) ? NULL : kvp_malloc(size);
}
static inline void *kvp_calloc_at(size_t nmemb, size_t size, const char *site)
{
	size_t bytes = 0;

	(void)__builtin_mul_overflow(nmemb, size, &bytes);
	return kvp_fault_hit(site, bytes) ? NULL : kvp_calloc(nmemb, size);
}
static inline void *kvp_malloc_aligned_at(size_t align, size_t size,
					  const char *site)
{
	return kvp_fault_hit(site, size) ? NULL
					 : kvp_malloc_aligned(align, size);
}
#define kvp_malloc(size) kvp_malloc_at((size), __func__)
#define kvp_calloc(nmemb, size) kvp_calloc_at((nmemb), (size), __func__)
#define kvp_malloc_aligned(align, size)                                      \
	kvp_malloc_aligned_at((align), (size), __func__)
#endif
#else
#define kvp_fault_point(size) false
#endif

#endif /* KVP_ALLOC_H */
