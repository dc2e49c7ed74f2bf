/* SPDX-License-Identifier: MIT */
/*
 * compiler.h - small compiler helpers shared by the library's files.
 * Floor 1 of lib/ (doc/architecture.md, "Layers").
 */
#ifndef KVP_COMPILER_H
#define KVP_COMPILER_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define KVP_CACHELINE 64
#define kvp_cacheline_aligned _Alignas(KVP_CACHELINE)

/* Keeps the compiler from moving memory accesses across this point. */
#define kvp_compiler_barrier() __asm__ __volatile__("" ::: "memory")

/* A spin-wait hint to the CPU. */
#if defined(__x86_64__) || defined(__i386__)
#define kvp_cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define kvp_cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define kvp_cpu_relax() kvp_compiler_barrier()
#endif

/*
 * Prefetches the line at p for writing: it arrives exclusive, so an
 * atomic read-modify-write to it then costs no second transfer (a read
 * prefetch of a line another CPU wrote brings it shared, and the write
 * must then invalidate the other copy: a second round trip).  GCC's
 * __builtin_prefetch(p, 1) is a read prefetch on x86-64 unless the build
 * targets a CPU with PREFETCHW, so the instruction is written out: every
 * x86-64 CPU decodes it (Intel before Broadwell as a no-op).  A prefetch
 * never faults.
 */
#if defined(__x86_64__) || defined(__i386__)
#define kvp_prefetch_w(p)                                                    \
	__asm__("prefetchw %0" : : "m"(*(const volatile char *)(p)))
#else
#define kvp_prefetch_w(p) __builtin_prefetch((p), 1)
#endif

/*
 * Thread-local state of the library, initial-exec: a %fs-relative access
 * instead of a call on every operation.  A dlopen()ed library may use a
 * little initial-exec TLS from glibc's static TLS reserve (Mesa's libEGL
 * does); kvpool keeps its total under 128 bytes, and tests/test_ctypes.sh
 * checks both the size and that the library loads through ctypes.
 * (Debian's jemalloc fails to dlopen with 2,632 bytes.)
 */
#define KVP_TLS __thread __attribute__((tls_model("initial-exec")))

#define KVP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Debug checks are compiled always and switched by this constant, so they
 * cannot rot (jemalloc's config_debug).
 */
#ifdef KVP_DEBUG
static const bool config_debug = true;
#else
static const bool config_debug = false;
#endif

/* Unrecoverable failure of a system primitive: report where, then abort. */
#define kvp_fatal(msg)                                                       \
	do {                                                                 \
		fprintf(stderr, "kvpool: fatal: %s (%s:%s:%d)\n", (msg),     \
			__FILE__, __func__, __LINE__);                       \
		abort();                                                     \
	} while (0)

#define kvp_check_pthread(call)                                              \
	do {                                                                 \
		if (unlikely((call) != 0))                                   \
			kvp_fatal(#call);                                    \
	} while (0)

#endif /* KVP_COMPILER_H */
