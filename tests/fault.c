/* SPDX-License-Identifier: MIT */
/*
 * fault.c - see fault.h.  The hooks kvp_fault_hit() and kvp_fault_track()
 * are called by lib/alloc.c, lib/pool_create.c and lib/seqmap.c in
 * -DKVP_FAULT_INJECTION builds only.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "fault.h"

bool kvp_fault_hit(const char *site, size_t size);
void kvp_fault_track(long long delta);

#define MAX_SITES 64

static _Atomic bool armed;
static pthread_t armer;
static unsigned long target, seen;
static bool fired;
static const char *fired_site;
static size_t fired_size;
static _Atomic long long live;
static struct fault_site_count sites[MAX_SITES];
static unsigned nsites;

static void note_site(const char *site, size_t size)
{
	unsigned i;

	for (i = 0; i < nsites; i++)
		if (strcmp(sites[i].site, site) == 0)
			break;
	if (i == nsites) {
		if (nsites == MAX_SITES)
			return;
		sites[nsites++] = (struct fault_site_count){
			.site = site, .min_size = size, .max_size = size};
	}
	if (size < sites[i].min_size)
		sites[i].min_size = size;
	if (size > sites[i].max_size)
		sites[i].max_size = size;
	sites[i].failures++;
}

bool kvp_fault_hit(const char *site, size_t size)
{
	if (!atomic_load_explicit(&armed, memory_order_relaxed) ||
	    !pthread_equal(pthread_self(), armer))
		return false;
	if (++seen != target)
		return false;
	fired = true;
	fired_site = site;
	fired_size = size;
	note_site(site, size);
	return true;
}

void kvp_fault_track(long long delta)
{
	atomic_fetch_add_explicit(&live, delta, memory_order_relaxed);
}

void fault_arm(unsigned long nth)
{
	armer = pthread_self();
	target = nth;
	seen = 0;
	fired = false;
	fired_site = NULL;
	fired_size = 0;
	atomic_store(&armed, nth != 0);
}

unsigned long fault_disarm(void)
{
	atomic_store(&armed, false);
	return seen;
}

static bool suspended_armed;

void fault_suspend(void)
{
	suspended_armed = atomic_exchange(&armed, false);
}

void fault_resume(void)
{
	atomic_store(&armed, suspended_armed);
}

bool fault_fired(void)
{
	return fired;
}

const char *fault_site(void)
{
	return fired_site ? fired_site : "(none)";
}

size_t fault_size(void)
{
	return fired_size;
}

long long fault_live_bytes(void)
{
	return atomic_load(&live);
}

unsigned fault_sites(const struct fault_site_count **out)
{
	*out = sites;
	return nsites;
}
