/* SPDX-License-Identifier: MIT */
/*
 * sim_common.c - what several files of `kvpool sim` use and none of them
 * owns: the names of the peers and policies (printed, and parsed by
 * sim_opts.c) and a request's footprint in blocks (the scheduler's
 * admission check, sim_sweep.c's capacities).  It calls nothing of
 * tools/, so every sim file can call it without a circle (sim.h,
 * "The floors").
 */
#include <stdint.h>

#include "sim.h"

const char *const sim_peer_name[] = {"kvpool", "mutex"};
const char *const sim_policy_name[SIM_NUM_POLICIES] = {"lru", "lfu", "longest",
						       "priority"};

uint64_t sim_footprint(const struct wl_req *r, uint32_t bt)
{
	uint64_t in = (r->input_len + (uint64_t)bt - 1) / bt;
	uint64_t all = ((uint64_t)r->input_len + r->output_len + bt - 1) / bt;

	return in + (uint64_t)r->n * (all - in + 1);
}
