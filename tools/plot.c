/* SPDX-License-Identifier: MIT */
/*
 * plot.c - line plots through gnuplot, or their gnuplot script; see
 * plot.h.  The data travel inside the script as datablocks (gnuplot 5),
 * so a script stands alone.  gnuplot draws into a temporary directory
 * (the PNG, and its stderr), and the PNG is then copied out with every
 * write checked: gnuplot itself exits 0 after writing to a full device,
 * and prints a page of errors for a missing directory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
	if (lo == hi) { /* one x (one thread count): gnuplot refuses an
			   empty range */
		lo = lo > 0 ? lo / 2 : lo - 1;
		hi = hi > 0 ? hi * 2 : hi + 1;
	}
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

/* The temporary directory's files. */
struct plot_tmp {
	char dir[32], png[48], err[48];
};

/* The first line of gnuplot's stderr with something in it (blank if
 * none), control characters blanked, for the one line that says why it
 * failed. */
static void first_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	while (f && fgets(buf, (int)len, f)) {
		buf[strcspn(buf, "\n")] = '\0';
		if (buf[strspn(buf, " \t^")])
			break; /* gnuplot echoes the line, then a caret */
		buf[0] = '\0';
	}
	if (f)
		fclose(f);
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
}

/* Copies the file from to the path to, checking every write (a full
 * device, a missing directory); a partial regular file is removed.
 * Returns 0, or -1 with errno. */
static int copy_out(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out, e = 0;
	struct stat st;
	ssize_t n = 0;

	if (in < 0)
		return -1;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (out < 0) {
		e = errno;
		close(in);
		errno = e;
		return -1;
	}
	while (e == 0 && (n = read(in, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0, w; e == 0 && off < n; off += w)
			if ((w = write(out, buf + off, (size_t)(n - off))) < 0)
				e = errno;
	if (e == 0 && n < 0)
		e = errno;
	if (close(out) != 0 && e == 0)
		e = errno;
	close(in);
	if (e && stat(to, &st) == 0 && S_ISREG(st.st_mode))
		unlink(to);
	errno = e;
	return e ? -1 : 0;
}

/* Runs gnuplot on the panels' script for t->png, its stderr into
 * t->err.  Returns its wait status, or -1. */
static int run_gnuplot(const struct plot_tmp *t, const char *title,
		       const char *xlabel, unsigned xflags,
		       const struct plot_panel *panels, unsigned npanels)
{
	char cmd[96];
	FILE *g;

	/* t->err is mkdtemp's: no character the shell would interpret. */
	snprintf(cmd, sizeof(cmd), "gnuplot 2>'%s'", t->err);
	fflush(NULL);
	g = popen(cmd, "w");
	if (!g)
		return -1;
	plot_script(g, t->png, title, xlabel, xflags, panels, npanels);
	return pclose(g);
}

/* Why gnuplot failed, for one line: "exit N" or "signal N". */
static void how_failed(int status, char *buf, size_t len)
{
	if (status != -1 && WIFEXITED(status))
		snprintf(buf, len, "exit %d", WEXITSTATUS(status));
	else if (status != -1 && WIFSIGNALED(status))
		snprintf(buf, len, "signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "not run");
}

int plot_panels(const char *prog, const char *out, const char *title,
		const char *xlabel, unsigned xflags,
		const struct plot_panel *panels, unsigned npanels)
{
	struct plot_tmp t = {.dir = "/tmp/kvpool-plot-XXXXXX"};
	size_t len = strlen(out);
	char why[160], how[32];
	struct stat st;
	int status, rc = -1;

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
	if (!mkdtemp(t.dir)) {
		fprintf(stderr, "%s: plot: %s\n", prog, strerror(errno));
		return -1;
	}
	snprintf(t.png, sizeof(t.png), "%s/plot.png", t.dir);
	snprintf(t.err, sizeof(t.err), "%s/err", t.dir);
	status = run_gnuplot(&t, title, xlabel, xflags, panels, npanels);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
	    stat(t.png, &st) != 0 || st.st_size == 0) {
		first_line(t.err, why, sizeof(why));
		how_failed(status, how, sizeof(how));
		fprintf(stderr, "%s: gnuplot failed (%s): no plot in %s%s%s\n",
			prog, how, out, why[0] ? ": " : "", why);
	} else if (copy_out(t.png, out) != 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, out, strerror(errno));
	} else {
		rc = 0;
	}
	unlink(t.png);
	unlink(t.err);
	rmdir(t.dir);
	return rc;
}

int plot_png(const char *prog, const char *png, const char *title,
	     const char *xlabel, const char *ylabel, unsigned flags,
	     const struct plot_series *s, unsigned nseries)
{
	const struct plot_panel p = {ylabel, flags & PLOT_LOGY, s, nseries};

	return plot_panels(prog, png, title, xlabel, flags & ~PLOT_LOGY, &p,
			   1);
}
