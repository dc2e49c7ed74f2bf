/* SPDX-License-Identifier: MIT */
/*
 * sim_metrics.c - `kvpool sim --metrics FILE [--metrics-every N]`: scrapes
 * of a kvpool replay's pool and managers (kvp_metrics_write, OpenMetrics
 * text), as a Prometheus server would take them from the scheduler's
 * process.
 *
 * --metrics-every N: whichever scheduler thread makes a multiple of N
 * steps (all threads' steps counted together) writes the next scrape.
 * The scrapes are numbered and written under a lock, so FILE.000001,
 * FILE.000002, ... (six digits, so that a listing sorts them) are in the
 * order they were taken (two threads crossing multiples at
 * once could otherwise write an earlier state under a later number).  A
 * failed write is remembered (the first one), no further periodic scrape
 * is written, and sim_metrics_final() reports it after the replay: the
 * scheduler threads never exit the process.
 * --metrics: the final scrape, after the replay, into FILE.  Only the
 * kvpool peer is scraped (the mutex peer has no metrics).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvpool.h>

#include "sim_run.h"

/* One scrape of r into path: 0 or a negative errno. */
static int write_scrape(const struct run *r, const char *path)
{
	FILE *f = fopen(path, "w");
	int err;

	if (!f)
		return -errno;
	err = kvp_metrics_write(r->pool, r->kmgr, r->w->models, 0, f);
	if (fclose(f) != 0 && !err)
		err = -EIO;
	return err;
}

/* sim_run.h */
void sim_metrics_step(struct run *r)
{
	uint64_t n = r->o->metrics_every, k;
	char path[4096];
	int err;

	/* Relaxed: a count; the scrape reads the library's own state. */
	k = atomic_fetch_add_explicit(&r->metrics_steps, 1,
				      memory_order_relaxed) + 1;
	if (k % n != 0)
		return;
	pthread_mutex_lock(&r->metrics_lock);
	if (!r->metrics_err) {
		k = ++r->metrics_written;
		if (snprintf(path, sizeof(path), "%s.%06llu", r->o->metrics,
			     (unsigned long long)k) >= (int)sizeof(path))
			err = -ENAMETOOLONG;
		else
			err = write_scrape(r, path);
		if (err) {
			r->metrics_err = err; /* the first failure */
			r->metrics_err_at = k;
		}
	}
	pthread_mutex_unlock(&r->metrics_lock);
}

/* sim_run.h */
void sim_metrics_final(struct run *r)
{
	int err = r->metrics_err; /* the threads are joined */

	if (err) {
		fprintf(stderr, "kvpool sim: --metrics-every: writing %s.%06llu: "
				"%s\n",
			r->o->metrics, (unsigned long long)r->metrics_err_at,
			strerror(-err));
		exit(1);
	}
	err = write_scrape(r, r->o->metrics);
	if (err) {
		fprintf(stderr, "kvpool sim: --metrics: writing %s: %s\n",
			r->o->metrics, strerror(-err));
		exit(1);
	}
}
