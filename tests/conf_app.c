/* SPDX-License-Identifier: MIT */
/*
 * conf_app.c - an application that sets its own KVP_CONF string, as
 * jemalloc's malloc_conf is set: by defining the library's weak global
 * kvp_conf.  Creates a pool (the first: it reads the configuration),
 * prints the per-thread cache size auto_cache_max gave it, then the
 * configuration in effect.  tests/test_conf.sh runs it linked against the
 * shared library (conf_app) and the static one (conf_app_static).
 */
#include <stdio.h>

#include <kvpool.h>

const char *kvp_conf = "auto_cache_max:33,idle_batch:5";

int main(void)
{
	/* 2^20 blocks: num_blocks / (8 * CPUs) is far above 33. */
	struct kvp_pool_config cfg = {
		.num_blocks = 1u << 20, .block_tokens = 16, .device_id = -1};
	struct kvp_pool_stats st;
	struct kvp_pool *pool;
	int rc = kvp_pool_create(&cfg, &pool);

	if (rc) {
		fprintf(stderr, "conf_app: kvp_pool_create: %s\n",
			kvp_strerror(rc));
		return 1;
	}
	kvp_pool_stats(pool, &st);
	kvp_pool_unref(pool);
	printf("cache_blocks in effect:%u\n", st.cache_blocks);
	return kvp_conf_write(stdout) ? 1 : 0;
}
