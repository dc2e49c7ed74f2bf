/* SPDX-License-Identifier: MIT */
/*
 * plot.c - line plots through gnuplot; see plot.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plot.h"

bool plot_available(void)
{
	const char *path = getenv("PATH");
	char buf[4096];

	if (!path)
		path = "/usr/bin:/bin";
	while (*path) {
		size_t len = strcspn(path, ":");

		if (len > 0 && len < sizeof(buf) - sizeof("/gnuplot")) {
			memcpy(buf, path, len);
			strcpy(buf + len, "/gnuplot");
			if (access(buf, X_OK) == 0)
				return true;
		}
		path += len;
		if (*path == ':')
			path++;
	}
	return false;
}

/* Writes s as a gnuplot string literal (single quotes doubled). */
static void put_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

int plot_png(const char *prog, const char *png, const char *title,
	     const char *xlabel, const char *ylabel, unsigned flags,
	     const struct plot_series *s, unsigned nseries)
{
	char data[] = "/tmp/kvpool-plot-XXXXXX";
	FILE *d, *g;
	int fd, status;

	if (!plot_available()) {
		fprintf(stderr,
			"%s: gnuplot is not installed: no plot written to %s "
			"(Debian: apt-get install gnuplot-nox)\n",
			prog, png);
		return -1;
	}
	fd = mkstemp(data);
	if (fd < 0 || !(d = fdopen(fd, "w"))) {
		fprintf(stderr, "%s: plot data file: %s\n", prog,
			strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(data);
		}
		return -1;
	}
	for (unsigned i = 0; i < nseries; i++) {
		for (unsigned k = 0; k < s[i].n; k++)
			fprintf(d, "%.17g %.17g\n", s[i].x[k], s[i].y[k]);
		fputs("\n\n", d);
	}
	if (fclose(d) != 0) {
		fprintf(stderr, "%s: plot data file: %s\n", prog,
			strerror(errno));
		unlink(data);
		return -1;
	}
	fflush(NULL);
	g = popen("gnuplot", "w");
	if (!g) {
		fprintf(stderr, "%s: cannot run gnuplot: %s\n", prog,
			strerror(errno));
		unlink(data);
		return -1;
	}
	fputs("set terminal pngcairo size 900,600 noenhanced\nset output ", g);
	put_quoted(g, png);
	fputs("\nset title ", g);
	put_quoted(g, title);
	fputs("\nset xlabel ", g);
	put_quoted(g, xlabel);
	fputs("\nset ylabel ", g);
	put_quoted(g, ylabel);
	fputs("\nset grid\nset key outside right\n", g);
	if (flags & PLOT_LOGX)
		fputs("set logscale x\n", g);
	if (flags & PLOT_LOGY)
		fputs("set logscale y\n", g);
	fputs("plot ", g);
	for (unsigned i = 0; i < nseries; i++) {
		fputs(i ? ", " : "", g);
		put_quoted(g, data);
		fprintf(g, " index %u using 1:2 with linespoints title ", i);
		put_quoted(g, s[i].name);
	}
	fputs("\n", g);
	status = pclose(g);
	unlink(data);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr,
			"%s: gnuplot failed (status %d): no plot in "
			"%s\n",
			prog, status, png);
		return -1;
	}
	return 0;
}
