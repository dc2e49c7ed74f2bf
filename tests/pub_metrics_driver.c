/* SPDX-License-Identifier: MIT */
/*
 * pub_metrics_driver.c - writes one scrape of a pool, its manager and its
 * publisher to stdout, as a server would serve them together: the core's
 * families (kvp_metrics_write with KVP_METRICS_NO_EOF), then the
 * publisher's (kvp_pub_metrics_write, which closes with "# EOF").
 * tests/test_pub_metrics.py parses it with prometheus_client.  Checks the
 * argument errors on the way; exits 1 on a failed check.
 *
 * usage: pub_metrics_driver [--prometheus]
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvpool-events.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "pub_metrics_driver: %s\n", #cond);  \
			return 1;                                            \
		}                                                            \
	} while (0)

int main(int argc, char **argv)
{
	uint32_t flags = argc > 1 && !strcmp(argv[1], "--prometheus")
				 ? KVP_METRICS_PROMETHEUS
				 : 0;
	struct kvp_pool_config pc = {.num_blocks = 64, .block_tokens = 4};
	struct kvp_pub_config cfg = {.endpoint = "tcp://127.0.0.1:*"};
	struct kvp_manager_config mc = {.flags = KVP_PREFIX_CACHE,
					.name = "driver"};
	struct kvp_manager *m;
	struct kvp_pool *pool;
	struct kvp_pub *pub;
	struct kvp_hash h[4];
	uint32_t toks[16];
	char buf[8];
	size_t len = 0;

	for (uint32_t i = 0; i < 16; i++)
		toks[i] = i * 3;
	CHECK(kvp_pool_create(&pc, &pool) == 0);
	mc.pool = pool;
	CHECK(kvp_manager_create(&mc, &m) == 0);
	CHECK(kvp_pub_create(&cfg, &pub) == 0);
	CHECK(kvp_manager_set_event_cb(m, kvp_pub_event_cb, pub) == 0);
	CHECK(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, toks, 16, 4, h) ==
	      4);
	CHECK(kvp_seq_create(m, 1, 16) == 0);
	CHECK(kvp_seq_commit(m, 1, h, 4) == 4);
	CHECK(kvp_seq_free(m, 1) == 0);
	CHECK(kvp_prefix_reset(m) == 0);
	CHECK(kvp_pub_flush(pub, 5000) == 0);
	/* Errors change nothing and write nothing. */
	CHECK(kvp_pub_metrics_write(NULL, 0, stdout) == -EINVAL);
	CHECK(kvp_pub_metrics_write(pub, 0, NULL) == -EINVAL);
	CHECK(kvp_pub_metrics_write(pub, 1u << 9, stdout) == -EINVAL);
	CHECK(kvp_pub_metrics_format(pub, 0, NULL, 0, NULL) == -EINVAL);
	CHECK(kvp_pub_metrics_format(pub, 0, buf, sizeof(buf), &len) ==
	      -ENOBUFS);
	CHECK(len > sizeof(buf));
	CHECK(kvp_metrics_write(pool, &m, 1, flags | KVP_METRICS_NO_EOF,
				stdout) == 0);
	CHECK(kvp_pub_metrics_write(pub, flags, stdout) == 0);
	kvp_pub_destroy(pub);
	kvp_manager_destroy(m);
	kvp_pool_unref(pool);
	return 0;
}
