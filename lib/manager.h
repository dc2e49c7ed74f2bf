/* SPDX-License-Identifier: MIT */
/*
 * manager.h - struct kvp_manager, owned by manager.c (layer 10,
 * doc/architecture.md "Layers"): its configuration, read-only after
 * creation but for the policy, and the state of the files below it that it embeds (the
 * sequence map, the structs' slabs, the statistics shards, the prefix
 * cache).  Each embedded part is touched only through its own file.
 */
#ifndef KVP_MANAGER_H
#define KVP_MANAGER_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "compiler.h"
#include "mgrstat.h"
#include "pool.h"
#include "prefix.h"
#include "seqmap.h"
#include "registry.h"
#include "seqmem.h"

struct kvp_manager {
	/* Read-only after creation. */
	uint64_t uid; /* unique per process: keys the lookup caches */
	struct kvp_pool *pool; /* a reference of ours */
	uint32_t block_tokens;
	/* log2(block_tokens) for a power of two, else 32. */
	uint32_t bt_shift;
	float eviction_threshold, watermark;
	uint32_t flags;
	uint32_t max_pinned; /* in effect; 0 without prefix caching */
	struct seqmap map;
	/* Its place in the registry of managers (registry.c). */
	struct registry_link reg;
	/* Its sequence structs: slabs, stashes, recycling, reclaims
	 * (seqmem.c). */
	struct seqmem mem;
	struct mgr_shard shards[KVP_MGR_SHARDS];
	/* KVP_PREFIX_CACHE: the prefix cache (prefix.c's; zeroed and unused
	 * otherwise). */
	struct prefix_cache prefix;
	/* Cold, so last: the hot fields above keep their places. */
	char name[KVP_NAME_MAX]; /* kvp_manager_name */
	/* enum kvp_policy: kvp_manager_set_policy may change it while
	 * victims are chosen.  Atomic, relaxed: each choice reads it once,
	 * and it orders nothing else. */
	_Atomic int policy;
};

/* The pool m allocates from. */
struct kvp_pool *manager_pool(const struct kvp_manager *m);

#endif /* KVP_MANAGER_H */
