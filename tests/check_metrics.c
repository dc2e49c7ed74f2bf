/* SPDX-License-Identifier: MIT */
/*
 * check_metrics.c - kvp_metrics_write / kvp_metrics_format: argument
 * checks that change nothing, the buffer protocol (-ENOBUFS with the
 * length), write errors, manager names (strict UTF-8) and ids, the
 * counters the metrics added (commits left uncached, events), escaping,
 * and the block states summing to the pool's size.
 * bindings/python/tests/test_metrics.py parses the text with
 * prometheus_client and checks the golden families.
 */
#include <pthread.h>

#include "check_common.h"

static struct kvp_manager *mkmgr(struct kvp_pool *p, const char *name,
				 uint32_t flags)
{
	struct kvp_manager_config c = {.pool = p, .flags = flags,
				       .name = name};
	struct kvp_manager *m = NULL;

	ck_assert_int_eq(kvp_manager_create(&c, &m), 0);
	return m;
}

/* The text for pool and ms[0..n), flags; the caller frees it. */
static char *render(struct kvp_pool *p, struct kvp_manager **ms, uint32_t n,
		    uint32_t flags)
{
	size_t len = 0;
	char *buf;

	ck_assert_int_eq(kvp_metrics_format(p, ms, n, flags, NULL, 0, &len),
			 -ENOBUFS);
	ck_assert_uint_gt(len, 0);
	buf = malloc(len + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(kvp_metrics_format(p, ms, n, flags, buf, len + 1,
					    &len),
			 0);
	ck_assert_uint_eq(strlen(buf), len);
	return buf;
}

/* The value of the sample line that starts with `series ` in text. */
static unsigned long long sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *l = text; l && *l; l = strchr(l, '\n'), l += !!l)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtoull(l + n + 1, NULL, 10);
	ck_abort_msg("no sample %s", series);
	return 0;
}

START_TEST(test_bad_args)
{
	struct kvp_pool *p = mkpool(64, 0, 0, NULL), *q = mkpool(8, 0, 0, NULL);
	struct kvp_manager *a = mkmgr(p, "a", 0), *b = mkmgr(p, "b", 0);
	struct kvp_manager *twin = mkmgr(p, "a", 0), *other = mkmgr(q, "o", 0);
	struct kvp_manager *dup[] = {a, a}, *names[] = {a, twin};
	struct kvp_manager *foreign[] = {a, other}, *null[] = {a, NULL};
	struct kvp_manager *ok[] = {a, b};
	struct kvp_stats before, after;
	char buf[64] = "untouched";
	size_t len = 7;

	kvp_seq_create(a, 1, 20);
	kvp_manager_stats(a, &before);
	ck_assert_int_eq(kvp_metrics_write(NULL, ok, 2, 0, stdout), -EINVAL);
	ck_assert_int_eq(kvp_metrics_write(p, ok, 2, 0, NULL), -EINVAL);
	ck_assert_int_eq(kvp_metrics_write(p, NULL, 1, 0, stdout), -EINVAL);
	ck_assert_int_eq(kvp_metrics_write(p, dup, 2, 0, stdout), -EINVAL);
	ck_assert_int_eq(kvp_metrics_write(p, names, 2, 0, stdout), -EINVAL);
	ck_assert_int_eq(kvp_metrics_write(p, foreign, 2, 0, stdout), -EINVAL);
	ck_assert_int_eq(kvp_metrics_write(p, null, 2, 0, stdout), -EINVAL);
	ck_assert_int_eq(kvp_metrics_write(p, ok, 2, 1u << 7, stdout), -EINVAL);
	ck_assert_int_eq(kvp_metrics_format(p, ok, 2, 0, buf, sizeof(buf),
					    NULL),
			 -EINVAL);
	ck_assert_int_eq(kvp_metrics_format(p, ok, 2, 0, NULL, 8, &len),
			 -EINVAL);
	ck_assert_int_eq(kvp_metrics_format(p, dup, 2, 0, buf, sizeof(buf),
					    &len),
			 -EINVAL);
	ck_assert_str_eq(buf, "untouched");
	ck_assert_uint_eq(len, 7);
	kvp_manager_stats(a, &after);
	ck_assert_mem_eq(&before, &after, sizeof(before));
	/* No managers at all: the pool's families. */
	ck_assert_int_eq(kvp_metrics_format(p, NULL, 0, 0, NULL, 0, &len),
			 -ENOBUFS);
	kvp_manager_destroy(a);
	kvp_manager_destroy(b);
	kvp_manager_destroy(twin);
	kvp_manager_destroy(other);
	kvp_pool_unref(p);
	kvp_pool_unref(q);
}
END_TEST

START_TEST(test_buffer_protocol)
{
	struct kvp_pool *p = mkpool(64, 0, 0, NULL);
	struct kvp_manager *m = mkmgr(p, "m", 0);
	char *text = render(p, &m, 1, 0), *small;
	size_t len = 0, want = strlen(text);
	FILE *f;
	char *mem = NULL;
	size_t memlen = 0;

	/* A buffer one byte short (no room for the NUL) is too small. */
	small = malloc(want);
	ck_assert_int_eq(kvp_metrics_format(p, &m, 1, 0, small, want, &len),
			 -ENOBUFS);
	ck_assert_uint_eq(len, want);
	free(small);
	/* kvp_metrics_write writes the same text. */
	f = open_memstream(&mem, &memlen);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvp_metrics_write(p, &m, 1, 0, f), 0);
	fclose(f);
	ck_assert_str_eq(mem, text);
	free(mem);
	ck_assert_ptr_nonnull(strstr(text, "\n# EOF\n"));
	ck_assert_str_eq(text + want - 6, "# EOF\n");
	free(text);
	/* Without EOF, and in Prometheus 0.0.4 (counters named _total in
	 * TYPE, no UNIT). */
	text = render(p, &m, 1, KVP_METRICS_NO_EOF);
	ck_assert_ptr_null(strstr(text, "# EOF"));
	free(text);
	text = render(p, &m, 1, KVP_METRICS_PROMETHEUS);
	ck_assert_ptr_null(strstr(text, "# EOF"));
	ck_assert_ptr_null(strstr(text, "# UNIT"));
	ck_assert_ptr_nonnull(
		strstr(text, "# TYPE kvpool_sequence_forks_total counter\n"));
	free(text);
	/* A write error. */
	f = fopen("/dev/full", "w");
	if (f) {
		ck_assert_int_eq(kvp_metrics_write(p, &m, 1, 0, f), -EIO);
		fclose(f);
	}
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_names_and_ids)
{
	struct kvp_pool *p = mkpool(64, 0, 0, NULL);
	struct kvp_manager_config c = {.pool = p};
	struct kvp_manager *m = NULL, *a, *b;
	char name[KVP_NAME_MAX + 1];
	const char *bad[] = {"", "a\nb", "tab\t", "del\x7f"};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		c.name = bad[i];
		ck_assert_int_eq(kvp_manager_create(&c, &m), -EINVAL);
		ck_assert_ptr_null(m);
	}
	memset(name, 'x', sizeof(name));
	name[KVP_NAME_MAX] = '\0';
	c.name = name; /* KVP_NAME_MAX bytes: one too many */
	ck_assert_int_eq(kvp_manager_create(&c, &m), -EINVAL);
	name[KVP_NAME_MAX - 1] = '\0';
	a = mkmgr(p, name, 0);
	ck_assert_str_eq(kvp_manager_name(a), name);
	b = mkmgr(p, NULL, 0);
	ck_assert_uint_ne(kvp_manager_id(a), kvp_manager_id(b));
	snprintf(name, sizeof(name), "%llu", ULL(kvp_manager_id(b)));
	ck_assert_str_eq(kvp_manager_name(b), name);
	ck_assert_ptr_null(kvp_manager_name(NULL));
	ck_assert_uint_eq(kvp_manager_id(NULL), 0);
	kvp_manager_destroy(a);
	kvp_manager_destroy(b);
	kvp_pool_unref(p);
}
END_TEST

/* Names are UTF-8, strictly: each form refused with -EINVAL (nothing
 * created), each boundary code point taken and reported as given. */
START_TEST(test_names_utf8)
{
	struct kvp_pool *p = mkpool(64, 0, 0, NULL);
	struct kvp_manager_config c = {.pool = p};
	struct kvp_manager *m = NULL;
	char name[KVP_NAME_MAX];
	static const char *const bad[] = {
		"\xff\xfe",		 /* bytes UTF-8 never uses */
		"a\xfe", "\xf8\x88\x80\x80\x80", /* 5-byte form */
		"\xfc\x84\x80\x80\x80\x80",	     /* 6-byte form */
		"\x80", "a\xbf" "b",	 /* a continuation byte alone */
		"ab\xc0\x80",		 /* overlong NUL */
		"\xc1\xbf",		 /* overlong U+007F */
		"\xe0\x80\x80", "\xe0\x9f\xbf",	/* overlong 3-byte */
		"\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf", /* overlong 4-byte */
		"\xed\xa0\x80", "\xed\xbf\xbf",	/* surrogates */
		"\xed\xa0\xbd\xed\xb8\x80",	/* a CESU-8 pair */
		"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", /* > U+10FFFF */
		"a\xc3", "\xe2\x82", "x\xf0\x9f\x98", /* truncated */
		"\xc3\x28", "\xe2\x28\xa1",	/* a bad continuation */
		"\xc2\x80", "\xc2\x85", "\xc2\x9f", /* C1 controls */
	};
	static const char *const good[] = {
		"\xc2\xa0",	     /* U+00A0, after the C1 controls */
		"caf\xc3\xa9",	     /* U+00E9 */
		"\xdf\xbf",	     /* U+07FF, the last 2-byte */
		"\xe0\xa0\x80",    /* U+0800, the first 3-byte */
		"\xe2\x82\xac",    /* U+20AC */
		"\xed\x9f\xbf",    /* U+D7FF, before the surrogates */
		"\xee\x80\x80",    /* U+E000, after them */
		"\xef\xbf\xbf",    /* U+FFFF */
		"\xf0\x90\x80\x80", /* U+10000, the first 4-byte */
		"\xf0\x9f\x98\x80", /* U+1F600 */
		"\xf4\x8f\xbf\xbf", /* U+10FFFF, the last */
		"~",		     /* U+007E, before DEL */
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		c.name = bad[i];
		m = NULL;
		ck_assert_msg(kvp_manager_create(&c, &m) == -EINVAL,
			      "bad name %zu taken", i);
		ck_assert_ptr_null(m);
	}
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		m = mkmgr(p, good[i], 0);
		ck_assert_str_eq(kvp_manager_name(m), good[i]);
		kvp_manager_destroy(m);
	}
	/* The longest name ends with a whole 4-byte character; one byte
	 * cut from it is a truncated sequence. */
	memset(name, 'x', sizeof(name));
	memcpy(name + KVP_NAME_MAX - 5, "\xf0\x9f\x98\x80", 4);
	name[KVP_NAME_MAX - 1] = '\0';
	m = mkmgr(p, name, 0);
	ck_assert_str_eq(kvp_manager_name(m), name);
	kvp_manager_destroy(m);
	name[KVP_NAME_MAX - 2] = '\0';
	c.name = name;
	m = NULL;
	ck_assert_int_eq(kvp_manager_create(&c, &m), -EINVAL);
	ck_assert_ptr_null(m);
	kvp_pool_unref(p);
}
END_TEST

static void count_event(const struct kvp_event *ev, void *arg)
{
	(void)ev;
	(*(unsigned *)arg)++;
}

START_TEST(test_counters)
{
	struct kvp_pool *p = mkpool(64, 0, 0, NULL);
	struct kvp_manager *m = mkmgr(p, "q\"b\\s", KVP_PREFIX_CACHE);
	uint32_t toks[48];
	struct kvp_hash h[3];
	struct kvp_stats st;
	unsigned events = 0;
	char *text;

	for (uint32_t i = 0; i < 48; i++)
		toks[i] = i;
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, toks, 48,
					 CHECK_BLOCK_TOKENS, h),
			 3);
	ck_assert_int_eq(kvp_manager_set_event_cb(m, count_event, &events), 0);
	kvp_seq_create(m, 1, 48);
	kvp_seq_create(m, 2, 48);
	ck_assert_int_eq(kvp_seq_commit(m, 1, h, 3), 3);
	/* Seq 2's blocks: the hashes are cached by seq 1's. */
	ck_assert_int_eq(kvp_seq_commit(m, 2, h, 3), 0);
	kvp_seq_free(m, 2);
	kvp_manager_stats(m, &st);
	ck_assert_uint_eq(st.prefix_commits, 3);
	ck_assert_uint_eq(st.prefix_uncached, 3);
	ck_assert_uint_eq(st.events, events);
	ck_assert_uint_gt(events, 0);
	text = render(p, &m, 1, 0);
	/* The name, escaped. */
	ck_assert_uint_eq(
		sample(text, "kvpool_prefix_cache_commits_uncached_total"
			     "{manager=\"q\\\"b\\\\s\"}"),
		3);
	ck_assert_uint_eq(sample(text, "kvpool_prefix_cache_events_total"
				       "{manager=\"q\\\"b\\\\s\"}"),
			  events);
	ck_assert_uint_eq(sample(text, "kvpool_sequences_running"
				       "{manager=\"q\\\"b\\\\s\"}"),
			  1);
	free(text);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

/* At quiescence the block states partition the pool, cached idle blocks
 * and another thread's cache included. */
static void *alloc_and_keep_cached(void *arg)
{
	uint32_t ids[4];

	ck_assert_int_eq(kvp_pool_alloc(arg, 4, ids), 0);
	ck_assert_int_eq(kvp_pool_free(arg, ids, 4), 0);
	return NULL; /* thread exit returns the cache */
}

START_TEST(test_states_sum)
{
	struct kvp_pool *p = mkpool(256, 16, 0, NULL);
	struct kvp_manager *m = mkmgr(p, "m", KVP_PREFIX_CACHE);
	uint32_t toks[64], ids[8];
	struct kvp_hash h[4];
	struct kvp_pool_stats ps;
	unsigned long long total = 0;
	const char *states[] = {"free", "thread_cache", "evictable", "used"};
	pthread_t t;
	char *text, series[64];

	for (uint32_t i = 0; i < 64; i++)
		toks[i] = 7 * i;
	kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, toks, 64,
			CHECK_BLOCK_TOKENS, h);
	kvp_seq_create(m, 1, 64);
	kvp_seq_commit(m, 1, h, 4);
	kvp_seq_free(m, 1); /* 4 evictable blocks */
	kvp_seq_create(m, 2, 100);
	ck_assert_int_eq(kvp_pool_alloc(p, 8, ids), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, 8), 0); /* in our cache */
	pthread_create(&t, NULL, alloc_and_keep_cached, p);
	pthread_join(t, NULL);
	text = render(p, &m, 1, 0);
	kvp_pool_stats(p, &ps);
	for (size_t i = 0; i < ARRAY_SIZE(states); i++) {
		snprintf(series, sizeof(series),
			 "kvpool_pool_blocks{state=\"%s\"}", states[i]);
		total += sample(text, series);
	}
	ck_assert_uint_eq(total, 256);
	ck_assert_uint_eq(sample(text, "kvpool_pool_blocks{state=\"evictable\"}"),
			  ps.evictable);
	ck_assert_uint_ge(ps.evictable, 4);
	ck_assert_uint_gt(
		sample(text, "kvpool_pool_blocks{state=\"thread_cache\"}"), 0);
	ck_assert_uint_eq(sample(text, "kvpool_pool_blocks{state=\"used\"}"),
			  7);
	free(text);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

static Suite *metrics_suite(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_bad_args);
	tcase_add_test(tc, test_buffer_protocol);
	tcase_add_test(tc, test_names_and_ids);
	tcase_add_test(tc, test_names_utf8);
	tcase_add_test(tc, test_counters);
	tcase_add_test(tc, test_states_sum);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(metrics_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
