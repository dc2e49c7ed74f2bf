/* SPDX-License-Identifier: MIT */
/*
 * plot.c - line plots through gnuplot, or their gnuplot script; see
 * plot.h.  The data travel inside the script as datablocks (gnuplot 5),
 * so a plot needs no temporary file and a script stands alone.
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

/* The data's x range: every series' points. */
static void x_range(const struct plot_panel *p, unsigned np, double *lo,
		    double *hi)
{
	bool any = false;

	*lo = *hi = 0;
	for (unsigned i = 0; i < np; i++)
		for (unsigned k = 0; k < p[i].nseries; k++)
			for (unsigned j = 0; j < p[i].s[k].n; j++) {
				double x = p[i].s[k].x[j];

				if (!any || x < *lo)
					*lo = x;
				if (!any || x > *hi)
					*hi = x;
				any = true;
			}
}

/* `set xtics (a, b, ...)`: the distinct x values of the data, in order
 * (at most 64). */
static void x_tics(FILE *g, const struct plot_panel *p, unsigned np)
{
	double v[64];
	unsigned n = 0;

	for (unsigned i = 0; i < np; i++)
		for (unsigned k = 0; k < p[i].nseries; k++)
			for (unsigned j = 0; j < p[i].s[k].n && n < 64; j++) {
				double x = p[i].s[k].x[j];
				unsigned at = 0;

				while (at < n && v[at] < x)
					at++;
				if (at < n && v[at] == x)
					continue;
				memmove(v + at + 1, v + at, (n - at) * sizeof(*v));
				v[at] = x;
				n++;
			}
	fputs("set xtics (", g);
	for (unsigned i = 0; i < n; i++)
		fprintf(g, "%s%.17g", i ? ", " : "", v[i]);
	fputs(")\n", g);
}

/* The gnuplot script that draws the panels into png: the data as
 * datablocks ($d0, $d1, ...), then one plot per panel. */
static void plot_script(FILE *g, const char *png, const char *title,
			const char *xlabel, unsigned xflags,
			const struct plot_panel *p, unsigned np)
{
	unsigned b = 0;
	double lo, hi;

	fprintf(g, "set terminal pngcairo size 900,%u noenhanced\nset output ",
		np > 1 ? 420 * np : 600);
	put_quoted(g, png);
	fputs("\n", g);
	for (unsigned i = 0; i < np; i++)
		for (unsigned k = 0; k < p[i].nseries; k++) {
			fprintf(g, "$d%u << EOD\n", b++);
			for (unsigned j = 0; j < p[i].s[k].n; j++)
				fprintf(g, "%.17g %.17g\n", p[i].s[k].x[j],
					p[i].s[k].y[j]);
			fputs("EOD\n", g);
		}
	fputs(np > 1 ? "set multiplot layout " : "set title ", g);
	if (np > 1)
		fprintf(g, "%u,1 title ", np);
	put_quoted(g, title);
	fputs("\nset xlabel ", g);
	put_quoted(g, xlabel);
	fputs("\nset grid\nset key outside right\n", g);
	if (xflags & PLOT_LOGX)
		fputs("set logscale x\n", g);
	x_range(p, np, &lo, &hi);
	fprintf(g, "set xrange [%.17g:%.17g]\n", lo, hi);
	if (xflags & PLOT_XTICS)
		x_tics(g, p, np);
	b = 0;
	for (unsigned i = 0; i < np; i++) {
		fputs("set ylabel ", g);
		put_quoted(g, p[i].ylabel);
		fputs((p[i].flags & PLOT_LOGY) ? "\nset logscale y\nplot "
					       : "\nunset logscale y\nplot ",
		      g);
		for (unsigned k = 0; k < p[i].nseries; k++) {
			fprintf(g,
				"%s$d%u using 1:2 with linespoints title ",
				k ? ", " : "", b++);
			put_quoted(g, p[i].s[k].name);
		}
		fputs("\n", g);
	}
	if (np > 1)
		fputs("unset multiplot\n", g);
}

/* FILE.gp: the script for FILE.png.  Returns 0 or -1 after a message. */
static int write_script(const char *prog, const char *out, const char *title,
			const char *xlabel, unsigned xflags,
			const struct plot_panel *p, unsigned np)
{
	size_t len = strlen(out);
	char *png = malloc(len + 2);
	FILE *f;
	int rc = 0;

	if (!png) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return -1;
	}
	memcpy(png, out, len - 3);
	strcpy(png + len - 3, ".png");
	f = fopen(out, "w");
	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, out, strerror(errno));
		free(png);
		return -1;
	}
	plot_script(f, png, title, xlabel, xflags, p, np);
	if ((ferror(f) | fclose(f)) != 0) {
		fprintf(stderr, "%s: writing %s: %s\n", prog, out,
			strerror(errno));
		rc = -1;
	}
	free(png);
	return rc;
}

int plot_panels(const char *prog, const char *out, const char *title,
		const char *xlabel, unsigned xflags,
		const struct plot_panel *panels, unsigned npanels)
{
	size_t len = strlen(out);
	FILE *g;
	int status;

	if (len > 3 && !strcmp(out + len - 3, ".gp"))
		return write_script(prog, out, title, xlabel, xflags, panels,
				    npanels);
	if (!plot_available()) {
		fprintf(stderr,
			"%s: gnuplot is not installed: no plot written to %s "
			"(Debian: apt-get install gnuplot-nox; or --plot "
			"FILE.gp writes the script)\n",
			prog, out);
		return -1;
	}
	fflush(NULL);
	g = popen("gnuplot", "w");
	if (!g) {
		fprintf(stderr, "%s: cannot run gnuplot: %s\n", prog,
			strerror(errno));
		return -1;
	}
	plot_script(g, out, title, xlabel, xflags, panels, npanels);
	status = pclose(g);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr,
			"%s: gnuplot failed (status %d): no plot in "
			"%s\n",
			prog, status, out);
		return -1;
	}
	return 0;
}

int plot_png(const char *prog, const char *png, const char *title,
	     const char *xlabel, const char *ylabel, unsigned flags,
	     const struct plot_series *s, unsigned nseries)
{
	const struct plot_panel p = {ylabel, flags & PLOT_LOGY, s, nseries};

	return plot_panels(prog, png, title, xlabel, flags & ~PLOT_LOGY, &p,
			   1);
}
