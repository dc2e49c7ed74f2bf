/* SPDX-License-Identifier: MIT */
/*
 * check_conf.c - the KVP_CONF parser (lib/conf.c, compiled in): the
 * grammar, blanks, empty and duplicate pairs, every key's range, which
 * pairs apply, and that each rejected pair is reported exactly once;
 * then the once-only read of the sources, in a child process.
 * tests/test_conf.sh checks the same through the library and `kvpool
 * conf`, as a process sees it.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"
#include "kvpool.h"

/*
 * The application's string, defined here as an application would: the
 * link succeeds only because conf.c's definition is weak (a second strong
 * one would be a multiple definition), and conf_get() must read this one.
 */
const char *kvp_conf = NULL;

/* What a conf_parse() reported. */
struct reports {
	unsigned n;
	char pair[8][128];
	char why[8][128];
	char source[32];
};

static void collect(void *arg, const char *source, const char *pair, size_t len,
		    const char *why)
{
	struct reports *r = arg;

	if (r->n < 8) {
		snprintf(r->pair[r->n], sizeof(r->pair[0]), "%.*s", (int)len,
			 pair);
		snprintf(r->why[r->n], sizeof(r->why[0]), "%s", why);
	}
	snprintf(r->source, sizeof(r->source), "%s", source);
	r->n++;
}

/* Parses s over the defaults into *c: the rejections, which must be as
 * many as the reports (in *r if not NULL). */
static unsigned parse(struct conf *c, const char *s, struct reports *r)
{
	struct reports local;
	unsigned bad;

	if (!r)
		r = &local;
	memset(r, 0, sizeof(*r));
	conf_defaults(c);
	bad = conf_parse(c, "test", s, collect, r);
	ck_assert_msg(bad == r->n, "\"%s\": %u rejected, %u reported", s, bad,
		      r->n);
	return bad;
}

/* The keys, their ranges and defaults, as kvpool(3) documents them. */
static const struct {
	const char *name;
	int key;
	uint32_t min, max, def;
} keys[] = {
	{"auto_cache_max", CONF_AUTO_CACHE_MAX, 0, 4096, 128},
	{"evict_ahead_max", CONF_EVICT_AHEAD_MAX, 0, 512, 128},
	{"evict_ahead_share", CONF_EVICT_AHEAD_SHARE, 1, 1048576, 256},
	{"idle_batch", CONF_IDLE_BATCH, 1, 256, 256},
	{"prefix_slots_per_block", CONF_PREFIX_SLOTS_PER_BLOCK, 4, 64, 4},
	{"seqmap_grow_ratio", CONF_SEQMAP_GROW_RATIO, 1, 65536, 32},
	{"seqmap_keep_ratio", CONF_SEQMAP_KEEP_RATIO, 1, 65536, 256},
	{"seqmap_shrink_period_us", CONF_SEQMAP_SHRINK_PERIOD_US, 0, 60000000,
	 5000},
};

START_TEST(test_defaults)
{
	struct conf c;

	conf_defaults(&c);
	ck_assert_uint_eq(c.applied, 0);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		ck_assert_msg(c.val[keys[i].key] == keys[i].def,
			      "%s defaults to %u", keys[i].name,
			      c.val[keys[i].key]);
	ck_assert_uint_eq(conf_val(&c, ABORT_CONF), 0);
	ck_assert_uint_eq(conf_val(&c, CONFIRM_CONF), 0);
}
END_TEST

START_TEST(test_pairs_apply)
{
	struct conf c;

	ck_assert_uint_eq(
		parse(&c, "auto_cache_max:64,evict_ahead_max:0", NULL), 0);
	ck_assert_uint_eq(conf_val(&c, AUTO_CACHE_MAX), 64);
	ck_assert_uint_eq(conf_val(&c, EVICT_AHEAD_MAX), 0);
	ck_assert_uint_eq(c.applied, (1u << CONF_AUTO_CACHE_MAX) |
					     (1u << CONF_EVICT_AHEAD_MAX));
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 256);
	ck_assert_uint_eq(parse(&c, "abort_conf:true,confirm_conf:false", NULL),
			  0);
	ck_assert_uint_eq(conf_val(&c, ABORT_CONF), 1);
	ck_assert_uint_eq(conf_val(&c, CONFIRM_CONF), 0);
	/* Leading zeros are still decimal. */
	ck_assert_uint_eq(parse(&c, "idle_batch:0010", NULL), 0);
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 10);
}
END_TEST

START_TEST(test_blanks)
{
	struct conf c;
	struct reports r;

	ck_assert_uint_eq(
		parse(&c, " auto_cache_max : 64 ,\n\tidle_batch:\t8 ", NULL),
		0);
	ck_assert_uint_eq(conf_val(&c, AUTO_CACHE_MAX), 64);
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 8);
	/* Blanks inside a key or a value are not skipped. */
	ck_assert_uint_eq(parse(&c, "auto cache_max:1", &r), 1);
	ck_assert_str_eq(r.pair[0], "auto cache_max:1");
	ck_assert_uint_eq(parse(&c, "idle_batch:1 6", &r), 1);
	ck_assert_ptr_nonnull(strstr(r.why[0], "idle_batch"));
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 256);
	/* The pair is reported trimmed. */
	ck_assert_uint_eq(parse(&c, "  nope:1  ", &r), 1);
	ck_assert_str_eq(r.pair[0], "nope:1");
	ck_assert_str_eq(r.source, "test");
}
END_TEST

START_TEST(test_empty)
{
	struct conf c;
	struct reports r;

	ck_assert_uint_eq(parse(&c, NULL, NULL), 0);
	ck_assert_uint_eq(parse(&c, "", NULL), 0);
	ck_assert_uint_eq(parse(&c, " \t\n", NULL), 0);
	ck_assert_uint_eq(c.applied, 0);
	/* An empty pair between commas, or after a last comma, is one. */
	ck_assert_uint_eq(parse(&c, ",", &r), 2);
	ck_assert_str_eq(r.why[0], "empty pair");
	ck_assert_uint_eq(parse(&c, "idle_batch:3,, ,evict_ahead_max:5,", &r),
			  3);
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 3);
	ck_assert_uint_eq(conf_val(&c, EVICT_AHEAD_MAX), 5);
}
END_TEST

START_TEST(test_duplicates)
{
	struct conf c;

	ck_assert_uint_eq(parse(&c, "idle_batch:8,idle_batch:16", NULL), 0);
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 16);
	/* A rejected later pair leaves the earlier value. */
	ck_assert_uint_eq(parse(&c, "idle_batch:8,idle_batch:0", NULL), 1);
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 8);
	ck_assert_uint_eq(c.applied, 1u << CONF_IDLE_BATCH);
}
END_TEST

/* Each key takes its bounds and refuses what lies just outside. */
START_TEST(test_ranges)
{
	size_t i = (size_t)_i;
	struct conf c;
	struct reports r;
	char s[128];

	snprintf(s, sizeof(s), "%s:%u", keys[i].name, keys[i].min);
	ck_assert_uint_eq(parse(&c, s, NULL), 0);
	ck_assert_uint_eq(c.val[keys[i].key], keys[i].min);
	snprintf(s, sizeof(s), "%s:%u", keys[i].name, keys[i].max);
	ck_assert_uint_eq(parse(&c, s, NULL), 0);
	ck_assert_uint_eq(c.val[keys[i].key], keys[i].max);
	snprintf(s, sizeof(s), "%s:%llu", keys[i].name,
		 (unsigned long long)keys[i].max + 1);
	ck_assert_uint_eq(parse(&c, s, &r), 1);
	ck_assert_ptr_nonnull(strstr(r.why[0], keys[i].name));
	ck_assert_ptr_nonnull(strstr(r.why[0], "out of range"));
	ck_assert_uint_eq(c.val[keys[i].key], keys[i].def);
	ck_assert_uint_eq(c.applied, 0);
	if (keys[i].min > 0) {
		snprintf(s, sizeof(s), "%s:%u", keys[i].name, keys[i].min - 1);
		ck_assert_uint_eq(parse(&c, s, NULL), 1);
		ck_assert_uint_eq(c.val[keys[i].key], keys[i].def);
	}
}
END_TEST

START_TEST(test_bad_numbers)
{
	static const char *bad[] = {
		"auto_cache_max:-1",
		"auto_cache_max:+1",
		"auto_cache_max:1x",
		"auto_cache_max:0x10",
		"auto_cache_max:",
		"auto_cache_max:  ",
		"auto_cache_max:1.5",
		"auto_cache_max:99999999999999999999999",
		"auto_cache_max:4294967360", /* 2^32 + 64: no wrap to 64 */
		"auto_cache_max:true",
	};
	struct conf c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(parse(&c, bad[i], NULL) == 1, "%s applied",
			      bad[i]);
		ck_assert_uint_eq(conf_val(&c, AUTO_CACHE_MAX), 128);
	}
}
END_TEST

START_TEST(test_booleans)
{
	static const char *bad[] = {"abort_conf:1", "abort_conf:yes",
				    "abort_conf:TRUE", "abort_conf:truex",
				    "abort_conf:"};
	struct conf c;

	ck_assert_uint_eq(parse(&c, "confirm_conf:true", NULL), 0);
	ck_assert_uint_eq(conf_val(&c, CONFIRM_CONF), 1);
	ck_assert_uint_eq(
		parse(&c, "confirm_conf:true,confirm_conf:false", NULL), 0);
	ck_assert_uint_eq(conf_val(&c, CONFIRM_CONF), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(parse(&c, bad[i], NULL) == 1, "%s applied",
			      bad[i]);
		ck_assert_uint_eq(conf_val(&c, ABORT_CONF), 0);
	}
}
END_TEST

START_TEST(test_malformed)
{
	static const char *bad[] = {
		"auto_cache_max", ":5",
		"auto-cache:5",	  "\xc3\xa9:1",
		"idle_batch:1:2", "idle_batch 8",
		"foo:1",	  "IDLE_BATCH:8",
	};
	struct conf c;
	struct reports r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(parse(&c, bad[i], &r) == 1, "%s applied", bad[i]);
		ck_assert_str_eq(r.pair[0], bad[i]);
		ck_assert_uint_eq(c.applied, 0);
	}
	ck_assert_uint_eq(parse(&c, "foo:1", &r), 1);
	ck_assert_str_eq(r.why[0], "unknown key foo");
}
END_TEST

/* The pairs after (and before) a rejected one still apply. */
START_TEST(test_rest_applies)
{
	struct conf c;
	struct reports r;

	ck_assert_uint_eq(parse(&c,
				"foo:1,auto_cache_max:3,bar,idle_batch:2,"
				"evict_ahead_max:513,prefix_slots_per_block:8",
				&r),
			  3);
	ck_assert_str_eq(r.pair[0], "foo:1");
	ck_assert_str_eq(r.pair[1], "bar");
	ck_assert_str_eq(r.pair[2], "evict_ahead_max:513");
	ck_assert_uint_eq(conf_val(&c, AUTO_CACHE_MAX), 3);
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 2);
	ck_assert_uint_eq(conf_val(&c, EVICT_AHEAD_MAX), 128);
	ck_assert_uint_eq(conf_val(&c, PREFIX_SLOTS_PER_BLOCK), 8);
	/* Without a report function the count is still returned. */
	conf_defaults(&c);
	ck_assert_uint_eq(
		conf_parse(&c, "test", "foo:1,,idle_batch:7", NULL, NULL), 2);
	ck_assert_uint_eq(conf_val(&c, IDLE_BATCH), 7);
}
END_TEST

/* conf_write's lines, joined by commas, parse back to the same values. */
START_TEST(test_write_round_trip)
{
	struct conf c, d;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(parse(&c,
				"auto_cache_max:7,seqmap_keep_ratio:9,"
				"confirm_conf:true",
				NULL),
			  0);
	ck_assert_int_eq(conf_write(&c, f), 0);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "auto_cache_max:7\n"));
	ck_assert_ptr_nonnull(strstr(text, "confirm_conf:true\n"));
	for (char *p = text; *p; p++)
		if (*p == '\n')
			*p = ',';
	text[len - 1] = '\0'; /* the last newline */
	ck_assert_uint_eq(parse(&d, text, NULL), 0);
	ck_assert_mem_eq(c.val, d.val, sizeof(c.val));
	ck_assert_uint_eq(d.applied, (1u << CONF_NKEYS) - 1);
	free(text);
}
END_TEST

START_TEST(test_write_errors)
{
	FILE *f = fopen("/dev/null", "r");

	ck_assert_int_eq(kvp_conf_write(NULL), -EINVAL);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvp_conf_write(f), -EIO);
	fclose(f);
}
END_TEST

/*
 * The sources, read once: the defaults, then kvp_conf, then KVP_CONF;
 * a change of either after the first read changes nothing.  In a child,
 * as the read happens once per process.
 */
START_TEST(test_sources_once)
{
	pid_t pid = fork();
	int status;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		const struct conf *c;
		int ok;

		kvp_conf = "auto_cache_max:10,idle_batch:7,evict_ahead_max:3";
		setenv("KVP_CONF", "idle_batch:9,evict_ahead_max:600", 1);
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		c = conf_get();
		ok = conf_val(c, AUTO_CACHE_MAX) == 10 &&
		     conf_val(c, IDLE_BATCH) == 9 &&
		     conf_val(c, EVICT_AHEAD_MAX) == 3 && /* 600: rejected */
		     conf_val(c, SEQMAP_GROW_RATIO) == 32;
		kvp_conf = "auto_cache_max:11";
		setenv("KVP_CONF", "idle_batch:1", 1);
		c = conf_get();
		ok = ok && conf_val(c, AUTO_CACHE_MAX) == 10 &&
		     conf_val(c, IDLE_BATCH) == 9;
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child's conf_get() read other values (status %#x)",
		      status);
}
END_TEST

static Suite *conf_suite(void)
{
	Suite *s = suite_create("conf");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_pairs_apply);
	tcase_add_test(tc, test_blanks);
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_duplicates);
	tcase_add_loop_test(tc, test_ranges, 0,
			    (int)(sizeof(keys) / sizeof(keys[0])));
	tcase_add_test(tc, test_bad_numbers);
	tcase_add_test(tc, test_booleans);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_rest_applies);
	tcase_add_test(tc, test_write_round_trip);
	tcase_add_test(tc, test_write_errors);
	tcase_add_test(tc, test_sources_once);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(conf_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
