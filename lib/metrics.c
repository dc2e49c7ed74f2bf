/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - a pool's and its managers' metrics as OpenMetrics or
 * Prometheus text (layer 7, doc/architecture.md "Layers": over
 * pool_stats.c, manager.c and mtext.c).
 *
 * Owns the metric families: their names, types, help and where each
 * value comes from.  A counter is one whose every source only grows (the
 * pool's allocs and frees are derived from counts that a revival undone
 * takes back, so they are not exported: a scrape could see them fall).  It reads only what kvp_pool_stats and
 * kvp_manager_stats read (per-thread counters summed, relaxed loads), so a
 * scrape costs the hot paths nothing and takes none of their locks.
 * Names follow vLLM's where it has one (prefix_cache_queries/hits in
 * tokens, num_preemptions, kv_cache_usage), under the `kvpool_` prefix.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "error.h"
#include "manager.h"
#include "mtext.h"

#include "kvpool.h"

#define KNOWN_FLAGS (KVP_METRICS_PROMETHEUS | KVP_METRICS_NO_EOF)

/* ---- the pool's families (no label) ---- */

static const struct mtext_family f_blocks = {
	"kvpool_pool_blocks", MTEXT_GAUGE, "blocks",
	"Blocks of the pool by state: free (never cached, or uncached), "
	"thread_cache (free, parked in a thread's cache), evictable (cached, "
	"unreferenced: allocation reclaims them) and used; they sum to the "
	"pool's size at quiescence."};
static const struct mtext_family f_capacity = {
	"kvpool_pool_capacity_blocks", MTEXT_GAUGE, "blocks",
	"Blocks in the pool."};
static const struct mtext_family f_usage = {
	"kvpool_kv_cache_usage_ratio", MTEXT_GAUGE, "ratio",
	"KV cache usage, 0 to 1: used blocks over the pool's size, idle "
	"cached blocks counting as free (vLLM's kv_cache_usage_perc)."};
static const struct mtext_family f_peak = {
	"kvpool_pool_peak_used_blocks", MTEXT_GAUGE, "blocks",
	"Highest number of used blocks observed (a lower bound of the "
	"peak for pools with thread caches)."};
static const struct mtext_family f_threads = {
	"kvpool_pool_thread_caches", MTEXT_GAUGE, NULL,
	"Thread caches attached to the pool."};
static const struct mtext_family f_reclaims = {
	"kvpool_pool_cache_evictions", MTEXT_COUNTER, NULL,
	"Cached blocks that allocations reclaimed (evicted from the prefix "
	"cache), all managers together."};

/* ---- each manager's families (label manager) ---- */

struct mgr_family {
	struct mtext_family f;
	size_t off; /* of its uint64_t in struct kvp_stats */
};

#define MGR(name, type, unit, field, help)                                   \
	{{"kvpool_" name, type, unit, help}, offsetof(struct kvp_stats, field)}

static const struct mgr_family mgr_families[] = {
	MGR("sequences_running", MTEXT_GAUGE, NULL, sequences,
	    "Live sequences."),
	MGR("sequence_tokens", MTEXT_GAUGE, "tokens", tokens,
	    "Tokens held by live sequences."),
	MGR("prefix_cache_queries", MTEXT_COUNTER, NULL, prefix_queries,
	    "Tokens looked up in the prefix cache (vLLM's "
	    "prefix_cache_queries)."),
	MGR("prefix_cache_hits", MTEXT_COUNTER, NULL, prefix_hits,
	    "Of the tokens looked up, those served from cached blocks (vLLM's "
	    "prefix_cache_hits)."),
	MGR("prefix_cache_blocks", MTEXT_GAUGE, "blocks", prefix_cached_blocks,
	    "Blocks the manager caches now."),
	MGR("prefix_cache_pinned_blocks", MTEXT_GAUGE, "blocks", prefix_pinned,
	    "Of its cached blocks, those pinned by their retention priority."),
	MGR("prefix_cache_commits", MTEXT_COUNTER, NULL, prefix_commits,
	    "Blocks registered in the prefix cache by commits."),
	MGR("prefix_cache_commits_uncached", MTEXT_COUNTER, NULL,
	    prefix_uncached,
	    "Blocks a commit left uncached: another block caches their hash."),
	MGR("prefix_cache_evictions", MTEXT_COUNTER, NULL, prefix_evictions,
	    "Of its cached blocks, those evicted to serve allocations."),
	MGR("num_preemptions", MTEXT_COUNTER, NULL, evictions,
	    "Sequences preempted (evicted by kvp_evict or kvp_evict_until)."),
	MGR("sequence_creates", MTEXT_COUNTER, NULL, seq_creates,
	    "Sequences created."),
	MGR("sequence_frees", MTEXT_COUNTER, NULL, seq_frees,
	    "Sequences freed, preempted ones included."),
	MGR("sequence_appends", MTEXT_COUNTER, NULL, appends,
	    "Successful appends."),
	MGR("sequence_forks", MTEXT_COUNTER, NULL, forks, "Successful forks."),
	MGR("cow_copies", MTEXT_COUNTER, NULL, cow_copies,
	    "Copy-on-write copies of a shared last block."),
	MGR("manager_blocks_allocated", MTEXT_COUNTER, NULL, blocks_allocated,
	    "Blocks the manager took from the pool."),
	MGR("manager_blocks_released", MTEXT_COUNTER, NULL, blocks_released,
	    "Block-table entries the manager let go of."),
	MGR("prefix_cache_events", MTEXT_COUNTER, NULL, events,
	    "Prefix cache events handed to the manager's event callback."),
};

static int validate(struct kvp_pool *pool, struct kvp_manager *const *mgrs,
		    uint32_t n, uint32_t flags)
{
	if (!pool || (!mgrs && n) || (flags & ~KNOWN_FLAGS))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (!mgrs[i] || manager_pool(mgrs[i]) != pool)
			return -EINVAL;
		/* One series per label value: no manager twice, no two
		 * names alike.  Quadratic, for the handful a pool has. */
		for (uint32_t j = 0; j < i; j++)
			if (mgrs[j] == mgrs[i] ||
			    !strcmp(kvp_manager_name(mgrs[j]),
				    kvp_manager_name(mgrs[i])))
				return -EINVAL;
	}
	return 0;
}

static void render_pool(struct mtext *mt, struct kvp_pool *pool)
{
	struct kvp_pool_stats st;
	uint64_t listed;
	struct mtext_label state = {"state", NULL};

	kvp_pool_stats(pool, &st);
	listed = st.free - st.in_thread_caches - st.evictable;
	if (st.free < st.in_thread_caches + st.evictable)
		listed = 0; /* read while threads ran */
	mtext_family(mt, &f_blocks);
	state.value = "free";
	mtext_sample(mt, &f_blocks, &state, 1, listed);
	state.value = "thread_cache";
	mtext_sample(mt, &f_blocks, &state, 1, st.in_thread_caches);
	state.value = "evictable";
	mtext_sample(mt, &f_blocks, &state, 1, st.evictable);
	state.value = "used";
	mtext_sample(mt, &f_blocks, &state, 1, st.used);
	mtext_single(mt, &f_capacity, st.total);
	mtext_family(mt, &f_usage);
	mtext_sample_real(mt, &f_usage, NULL, 0,
			  st.total ? (double)st.used / (double)st.total : 0);
	mtext_single(mt, &f_peak, st.peak_used);
	mtext_single(mt, &f_threads, st.threads);
	mtext_single(mt, &f_reclaims, st.cache_evictions);
}

/* The managers' families, each with one sample per manager. */
static void render_managers(struct mtext *mt, struct kvp_manager *const *mgrs,
			    uint32_t n, const struct kvp_stats *st)
{
	for (size_t f = 0; f < KVP_ARRAY_SIZE(mgr_families); f++) {
		const struct mgr_family *mf = &mgr_families[f];

		mtext_family(mt, &mf->f);
		for (uint32_t i = 0; i < n; i++) {
			struct mtext_label l = {"manager",
						kvp_manager_name(mgrs[i])};
			uint64_t v;

			memcpy(&v, (const char *)&st[i] + mf->off, sizeof(v));
			mtext_sample(mt, &mf->f, &l, 1, v);
		}
	}
}

static int render(struct kvp_pool *pool, struct kvp_manager *const *mgrs,
		  uint32_t n, uint32_t flags, struct mtext *mt)
{
	struct kvp_stats *st = NULL;
	int err = validate(pool, mgrs, n, flags);

	if (err)
		return err;
	if (n && !(st = calloc(n, sizeof(*st))))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		kvp_manager_stats(mgrs[i], &st[i]);
	mtext_init(mt, !(flags & KVP_METRICS_PROMETHEUS));
	render_pool(mt, pool);
	render_managers(mt, mgrs, n, st);
	if (!(flags & KVP_METRICS_NO_EOF))
		mtext_eof(mt);
	free(st);
	return 0;
}

KVP_API int kvp_metrics_write(struct kvp_pool *pool,
			      struct kvp_manager *const *managers, uint32_t n,
			      uint32_t flags, FILE *f)
{
	struct mtext mt;
	int err;

	if (!f)
		return -EINVAL;
	err = render(pool, managers, n, flags, &mt);
	return err ? err : mtext_finish(&mt, NULL, 0, NULL, f);
}

KVP_API int kvp_metrics_format(struct kvp_pool *pool,
			       struct kvp_manager *const *managers,
			       uint32_t n, uint32_t flags, char *buf,
			       size_t cap, size_t *len)
{
	struct mtext mt;
	int err;

	if (!len || (!buf && cap))
		return -EINVAL;
	err = render(pool, managers, n, flags, &mt);
	if (!err)
		err = mtext_finish(&mt, buf, cap, len, NULL);
	if (err == -ENOBUFS) /* the text and its NUL */
		kvp_note_buffer((uint64_t)*len + 1, cap);
	return err;
}
