/* SPDX-License-Identifier: MIT */
/*
 * alloc.c - host memory for the library's own structures.
 * Floor 2 of lib/ (doc/architecture.md, "Layers").
 *
 * A shared library that links Debian's libjemalloc cannot be dlopen()ed
 * (initial-exec TLS), which would break Python ctypes users.  So by
 * default the library does not link jemalloc; on first use it
 * looks jemalloc up in the process (dlsym(RTLD_DEFAULT)) and, if present,
 * allocates from a private arena with mallocx/sdallocx.  Built with
 * --with-jemalloc=yes the library links jemalloc and always uses it.
 * Sanitizer builds never use it: they cannot see mallocx allocations.
 *
 * Also the identities of allocated objects (kvp_next_uid) and the request
 * for transparent huge pages (kvp_advise_huge).  Floor 2 of lib/
 * (doc/architecture.md, "Layers"): calls nothing of the library's above
 * compiler.h.
 */
#include <dlfcn.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define KVP_ALLOC_DEFINING /* the functions themselves, not the macros */
#include "alloc.h"
#include "compiler.h"

#ifdef KVP_FAULT_INJECTION
/* Test builds: live bytes by the sizes given, so a test can see leaks and
 * frees whose size differs from the allocation's (tests/fault.c). */
void kvp_fault_track(long long delta);
#define track(delta) kvp_fault_track(delta)
#else
#define track(delta) ((void)(delta))
#endif

#ifdef KVP_LINK_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

typedef void *(*mallocx_fn)(size_t, int);
typedef void (*sdallocx_fn)(void *, size_t, int);
typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

/* jemalloc's MALLOCX_ARENA(a): arena index plus one, shifted by 20. */
#define KVP_MALLOCX_ARENA(a) ((int)(((unsigned)(a) + 1) << 20))
#define KVP_MALLOCX_ZERO ((int)0x40)

/* Written once under `once`; read-only afterwards. */
static struct {
	mallocx_fn mallocx;
	sdallocx_fn sdallocx;
	mallctl_fn mallctl;
	int flags; /* MALLOCX_ARENA of the private arena */
	unsigned arena;
} je;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void alloc_init(void)
{
#if defined(KVP_LINK_JEMALLOC)
	mallocx_fn mx = mallocx;
	sdallocx_fn sdx = sdallocx;
	mallctl_fn ctl = mallctl;
#elif defined(KVP_JEMALLOC_RUNTIME) && !defined(KVP_TSAN) &&                \
	!defined(KVP_ASAN)
	mallocx_fn mx = (mallocx_fn)dlsym(RTLD_DEFAULT, "mallocx");
	sdallocx_fn sdx = (sdallocx_fn)dlsym(RTLD_DEFAULT, "sdallocx");
	mallctl_fn ctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
#else
	mallocx_fn mx = NULL;
	sdallocx_fn sdx = NULL;
	mallctl_fn ctl = NULL;
#endif
	unsigned arena;
	size_t len = sizeof(arena);

	if (!mx || !sdx || !ctl)
		return;
	/* A private arena keeps kvpool's metadata away from the engine's. */
	if (ctl("arenas.create", &arena, &len, NULL, 0) != 0)
		return;
	je.flags = KVP_MALLOCX_ARENA(arena);
	je.arena = arena;
	je.mallctl = ctl;
	je.sdallocx = sdx;
	je.mallocx = mx;
}

static inline bool use_jemalloc(void)
{
	kvp_check_pthread(pthread_once(&once, alloc_init));
	return je.mallocx != NULL;
}

void *kvp_malloc(size_t size)
{
	size_t asked = size;
	void *p;

	if (size == 0)
		size = 1;
	p = use_jemalloc() ? je.mallocx(size, je.flags) : malloc(size);
	if (p)
		track((long long)asked);
	return p;
}

void *kvp_calloc(size_t nmemb, size_t size)
{
	size_t bytes;
	void *p;

	if (__builtin_mul_overflow(nmemb, size, &bytes))
		return NULL;
	if (bytes == 0)
		bytes = 1;
	p = use_jemalloc() ? je.mallocx(bytes, je.flags | KVP_MALLOCX_ZERO)
			   : calloc(1, bytes);
	if (p)
		track((long long)(nmemb * size));
	return p;
}

void kvp_free(void *ptr, size_t size)
{
	if (!ptr)
		return;
	track(-(long long)size);
	if (size == 0)
		size = 1;
	if (use_jemalloc())
		je.sdallocx(ptr, size, je.flags);
	else
		free(ptr);
}

/* jemalloc's MALLOCX_ALIGN(a): log2 of the alignment in the low bits. */
static int mallocx_align(size_t align)
{
	return __builtin_ctzl(align);
}

void *kvp_malloc_aligned(size_t align, size_t size)
{
	size_t asked = size;
	void *p;

	if (size == 0)
		size = 1;
	if (use_jemalloc())
		p = je.mallocx(size, je.flags | mallocx_align(align));
	else if (posix_memalign(&p, align, size) != 0)
		p = NULL;
	if (p)
		track((long long)asked);
	return p;
}

void kvp_free_aligned(void *ptr, size_t align, size_t size)
{
	if (!ptr)
		return;
	track(-(long long)size);
	if (size == 0)
		size = 1;
	/* sdallocx needs the allocation's flags: the alignment changes the
	 * size class. */
	if (use_jemalloc())
		je.sdallocx(ptr, size, je.flags | mallocx_align(align));
	else
		free(ptr);
}

/*
 * jemalloc: purges the private arena's dirty pages at once (its decay
 * would take seconds).  glibc: malloc_trim(0), which gives back every
 * free whole page of every arena, wherever it lies (free() gives back
 * only the top of a heap, and never the pages of chunks it keeps in its
 * fast bins).  It walks the arenas under their locks: a slow path.
 */
void kvp_alloc_trim(void)
{
	if (use_jemalloc()) {
		char name[64];

		snprintf(name, sizeof(name), "arena.%u.purge", je.arena);
		(void)je.mallctl(name, NULL, NULL, NULL, 0);
		return;
	}
#ifdef __GLIBC__
	(void)malloc_trim(0);
#endif
}

const char *kvp_allocator_name(void)
{
	return use_jemalloc() ? "jemalloc" : "libc";
}

static _Atomic uint64_t last_uid; /* atomic */

uint64_t kvp_next_uid(void)
{
	/* Relaxed: uniqueness is all that matters. */
	return atomic_fetch_add_explicit(&last_uid, 1, memory_order_relaxed) +
	       1;
}

#define KVP_HUGE_PAGE ((size_t)2 << 20)

/*
 * Whether transparent huge pages must be asked for with madvise: the
 * kernel's mode, read once per process ("always" gives them to large
 * anonymous mappings unasked, "never" refuses them).
 */
static pthread_once_t thp_once = PTHREAD_ONCE_INIT;
static bool thp_needs_madvise; /* written once under thp_once */

static void thp_probe(void)
{
	char mode[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");

	if (!f)
		return;
	if (fgets(mode, sizeof(mode), f))
		thp_needs_madvise = strstr(mode, "[madvise]") != NULL;
	fclose(f);
}

void kvp_advise_huge(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
	uintptr_t a = ((uintptr_t)p + KVP_HUGE_PAGE - 1) & ~(KVP_HUGE_PAGE - 1);
	uintptr_t e = ((uintptr_t)p + bytes) & ~(KVP_HUGE_PAGE - 1);

	if (e <= a)
		return;
	kvp_check_pthread(pthread_once(&thp_once, thp_probe));
	if (thp_needs_madvise)
		(void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
	(void)p;
	(void)bytes;
#endif
}
