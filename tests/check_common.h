/*
 * check_common.h - helpers shared by the Check unit tests (check_pool,
 * check_manager).
 */
#ifndef KVP_CHECK_COMMON_H
#define KVP_CHECK_COMMON_H

#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Tokens per block of the pools make_cfg() describes. */
#define CHECK_BLOCK_TOKENS 16u

/* A pool config on the host (device_id -1), CHECK_BLOCK_TOKENS tokens per
 * block. */
static inline struct kvp_pool_config make_cfg(uint32_t num_blocks,
					      uint32_t cache_blocks,
					      uint32_t flags,
					      const struct kvp_layout *layout)
{
	struct kvp_pool_config c;

	memset(&c, 0, sizeof(c));
	c.num_blocks = num_blocks;
	c.block_tokens = CHECK_BLOCK_TOKENS;
	c.cache_blocks = cache_blocks;
	c.device_id = -1;
	c.layout = layout;
	c.flags = flags;
	return c;
}

/* Creates the pool make_cfg() describes; the test fails if it cannot. */
static inline struct kvp_pool *mkpool(uint32_t num_blocks,
				      uint32_t cache_blocks, uint32_t flags,
				      const struct kvp_layout *layout)
{
	struct kvp_pool_config c =
		make_cfg(num_blocks, cache_blocks, flags, layout);
	struct kvp_pool *p = NULL;
	int rc = kvp_pool_create(&c, &p);

	ck_assert_msg(rc == 0,
		      "kvp_pool_create(%u blocks, cache %u, flags %#x)"
		      " = %d (%s)",
		      num_blocks, cache_blocks, flags, rc, kvp_strerror(rc));
	ck_assert_ptr_nonnull(p);
	return p;
}

/* Worker threads record their first failure here. */
struct errbuf {
	char msg[256];
};

static inline void wfail(struct errbuf *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline void wfail(struct errbuf *e, const char *fmt, ...)
{
	va_list ap;

	if (e->msg[0])
		return;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	if (!e->msg[0])
		e->msg[0] = '?';
}

/* Runs suite s; the exit status of a test program. */
static inline int run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* KVP_CHECK_COMMON_H */
