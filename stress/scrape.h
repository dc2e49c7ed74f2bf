/* SPDX-License-Identifier: MIT */
/*
 * scrape.h - a metrics scraper for the stress programs (stress_prefix
 * --scrape 1): a thread renders kvp_metrics_format over the pool and its
 * managers again and again while the workers run, and checks each scrape:
 *  - well formed: every sample belongs to the family of the TYPE line
 *    before it, and the text ends with "# EOF";
 *  - every counter series (a sample named ..._total) never decreases from
 *    one scrape to the next.
 * At quiescence, scrape_check_quiet() checks that the block states sum to
 * the pool's size and that no sequence runs.
 *
 * The including program defines fail() (stress_common.h).
 */
#ifndef KVP_STRESS_SCRAPE_H
#define KVP_STRESS_SCRAPE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#define SCRAPE_SERIES 128

struct scraper {
	struct kvp_pool *pool;
	struct kvp_manager *const *mgrs;
	uint32_t nmgrs;
	_Atomic int stop;
	pthread_t tid;
	char *buf;
	size_t cap;
	uint64_t scrapes, samples;
	uint32_t nseries;
	struct {
		char name[160];
		unsigned long long value;
	} series[SCRAPE_SERIES];
};

/* Renders into s->buf, growing it: the text's length. */
static size_t scrape_render(struct scraper *s)
{
	size_t len = 0;
	int err;

	while ((err = kvp_metrics_format(s->pool, s->mgrs, s->nmgrs, 0, s->buf,
					 s->cap, &len)) == -ENOBUFS) {
		s->cap = len + 4096;
		free(s->buf);
		if (!(s->buf = malloc(s->cap)))
			fail("scrape: out of memory\n");
	}
	if (err)
		fail("scrape: kvp_metrics_format: %s\n", kvp_strerror(err));
	return len;
}

/* A counter sample: it must not have gone down since the last scrape. */
static void scrape_counter(struct scraper *s, const char *name, size_t n,
			   unsigned long long v)
{
	uint32_t i;

	if (n >= sizeof(s->series[0].name))
		fail("scrape: a series name of %zu bytes\n", n);
	for (i = 0; i < s->nseries; i++)
		if (!strncmp(s->series[i].name, name, n) &&
		    !s->series[i].name[n])
			break;
	if (i == s->nseries) {
		if (i == SCRAPE_SERIES)
			fail("scrape: more than %d counter series\n",
			     SCRAPE_SERIES);
		memcpy(s->series[i].name, name, n);
		s->series[i].name[n] = '\0';
		s->nseries++;
	} else if (v < s->series[i].value) {
		fail("scrape %llu: %s went down from %llu to %llu\n",
		     (unsigned long long)s->scrapes, s->series[i].name,
		     s->series[i].value, v);
	}
	s->series[i].value = v;
}

static void scrape_check(struct scraper *s, size_t len)
{
	char family[128] = "";
	const char *l = s->buf;

	if (len < 6 || strcmp(s->buf + len - 6, "# EOF\n"))
		fail("scrape: the text does not end with # EOF\n");
	for (; *l; l = strchr(l, '\n') + 1) {
		size_t n = strcspn(l, "{ "), fn = strlen(family);
		const char *sp = strchr(l, '\n');

		if (!strncmp(l, "# TYPE ", 7)) {
			n = strcspn(l + 7, " ");
			if (n >= sizeof(family))
				fail("scrape: a family name too long\n");
			memcpy(family, l + 7, n);
			family[n] = '\0';
			continue;
		}
		if (l[0] == '#')
			continue;
		/* Sample: name[{labels}] value */
		if (!fn || strncmp(l, family, fn) ||
		    (n != fn && strncmp(l + fn, "_total", 6)))
			fail("scrape: sample %.*s outside its family %s\n",
			     (int)(sp - l), l, family);
		s->samples++;
		if (n == fn + 6) {
			const char *v = sp;

			while (v > l && v[-1] != ' ')
				v--;
			scrape_counter(s, l, (size_t)(v - 1 - l),
				       strtoull(v, NULL, 10));
		}
	}
	s->scrapes++;
}

static void *scraper_main(void *arg)
{
	struct scraper *s = arg;

	while (!atomic_load_explicit(&s->stop, memory_order_relaxed))
		scrape_check(s, scrape_render(s));
	return NULL;
}

static void scrape_start(struct scraper *s, struct kvp_pool *pool,
			 struct kvp_manager *const *mgrs, uint32_t n)
{
	memset(s, 0, sizeof(*s));
	s->pool = pool;
	s->mgrs = mgrs;
	s->nmgrs = n;
	if (pthread_create(&s->tid, NULL, scraper_main, s))
		fail("scrape: pthread_create\n");
}

static void scrape_stop(struct scraper *s)
{
	atomic_store(&s->stop, 1);
	pthread_join(s->tid, NULL);
	if (s->scrapes == 0)
		fail("scrape: no scrape completed during the run\n");
}

/* The value of the sample named exactly `series` in the last scrape. */
static unsigned long long scrape_value(struct scraper *s, const char *series)
{
	size_t n = strlen(series);

	for (const char *l = s->buf; *l; l = strchr(l, '\n') + 1)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtoull(l + n + 1, NULL, 10);
	fail("scrape: no sample %s\n", series);
	return 0;
}

/* At quiescence: one more scrape; the states sum to the pool's size. */
static void scrape_check_quiet(struct scraper *s)
{
	static const char *const states[] = {"free", "thread_cache",
					     "evictable", "used"};
	unsigned long long sum = 0, total;
	char series[96];

	scrape_check(s, scrape_render(s));
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		snprintf(series, sizeof(series),
			 "kvpool_pool_blocks{state=\"%s\"}", states[i]);
		sum += scrape_value(s, series);
	}
	total = scrape_value(s, "kvpool_pool_capacity_blocks");
	if (sum != total)
		fail("scrape: at quiescence the block states sum to %llu, the "
		     "pool has %llu\n",
		     sum, total);
	for (uint32_t i = 0; i < s->nmgrs; i++) {
		snprintf(series, sizeof(series),
			 "kvpool_sequences_running{manager=\"%s\"}",
			 kvp_manager_name(s->mgrs[i]));
		if (scrape_value(s, series))
			fail("scrape: %s is not 0 at quiescence\n", series);
	}
	printf("scrape: %llu scrapes (%llu samples, %u counter series) during "
	       "the run: well formed, no counter went down; at quiescence "
	       "the block states sum to %llu\n",
	       (unsigned long long)s->scrapes, (unsigned long long)s->samples,
	       s->nseries, total);
	free(s->buf);
}

#endif /* KVP_STRESS_SCRAPE_H */
