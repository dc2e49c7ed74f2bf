/* SPDX-License-Identifier: MIT */
/*
 * fault.h - allocation-failure injection for test programs that compile
 * the library's sources with -DKVP_FAULT_INJECTION (tests/check_faults,
 * tests/fuzz_api).  lib/alloc.h routes every host allocation of the
 * library (and the arena's mmap and liburcu's hash table) through
 * kvp_fault_hit(); this file decides which one fails.  Only allocations
 * of the thread that armed the fault are counted.
 */
#ifndef KVP_TEST_FAULT_H
#define KVP_TEST_FAULT_H

#include <stdbool.h>
#include <stddef.h>

/* From now on, the nth allocation (1-based) of the calling thread fails,
 * once; the others succeed. */
void fault_arm(unsigned long nth);
/* Stops counting; returns the number of allocations seen while armed. */
unsigned long fault_disarm(void);
/* Stops and resumes counting (a test's own observations between calls
 * must not count as the library's allocations). */
void fault_suspend(void);
void fault_resume(void);
/* Whether the armed failure happened, and where (function, size). */
bool fault_fired(void);
const char *fault_site(void);
size_t fault_size(void);
/* Bytes the library holds, by the sizes it passed (lib/alloc.c). */
long long fault_live_bytes(void);

/* Every site that failed at least once since the start, for reports. */
struct fault_site_count {
	const char *site;
	size_t min_size, max_size;
	unsigned long failures;
};
unsigned fault_sites(const struct fault_site_count **sites);

#endif /* KVP_TEST_FAULT_H */
