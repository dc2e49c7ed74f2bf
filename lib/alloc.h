/*
 * alloc.h - the library's host-memory allocator.
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

void *kvp_malloc(size_t size);
void *kvp_calloc(size_t nmemb, size_t size); /* NULL on overflow too */
void kvp_free(void *ptr, size_t size);	     /* NULL is ignored */
/* align: a power of two >= sizeof(void *). */
void *kvp_malloc_aligned(size_t align, size_t size);
void kvp_free_aligned(void *ptr, size_t align, size_t size);

/* "jemalloc" or "libc": which allocator the process settled on. */
const char *kvp_allocator_name(void);

#endif /* KVP_ALLOC_H */
