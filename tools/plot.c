/* SPDX-License-Identifier: MIT */
/*
 * plot.c - line plots through gnuplot; see plot.h.
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

/* The temporary directory's files. */
struct plot_tmp {
	char dir[32], data[48], png[48], err[48];
};

/* Writes the series as gnuplot's data file; 0 or -1 (errno). */
static int write_data(const char *path, const struct plot_series *s,
		      unsigned nseries)
{
	FILE *d = fopen(path, "w");

	if (!d)
		return -1;
	for (unsigned i = 0; i < nseries; i++) {
		for (unsigned k = 0; k < s[i].n; k++)
			fprintf(d, "%.17g %.17g\n", s[i].x[k], s[i].y[k]);
		fputs("\n\n", d);
	}
	return (ferror(d) | fclose(d)) ? -1 : 0;
}

/* Runs gnuplot on the script for t->png, its stderr into t->err.
 * Returns its wait status, or -1. */
static int run_gnuplot(const struct plot_tmp *t, const char *title,
		       const char *xlabel, const char *ylabel, unsigned flags,
		       const struct plot_series *s, unsigned nseries)
{
	char cmd[96];
	FILE *g;

	/* t->err is mkdtemp's: no character the shell would interpret. */
	snprintf(cmd, sizeof(cmd), "gnuplot 2>'%s'", t->err);
	fflush(NULL);
	g = popen(cmd, "w");
	if (!g)
		return -1;
	fputs("set terminal pngcairo size 900,600 noenhanced\nset output ", g);
	put_quoted(g, t->png);
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
		put_quoted(g, t->data);
		fprintf(g, " index %u using 1:2 with linespoints title ", i);
		put_quoted(g, s[i].name);
	}
	fputs("\n", g);
	return pclose(g);
}

/* The first line of gnuplot's stderr (blank if none), for the one line
 * that says why it failed. */
static void first_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	while (f && fgets(buf, (int)len, f)) {
		buf[strcspn(buf, "\n")] = '\0';
		if (buf[strspn(buf, " \t^")])
			break; /* gnuplot echoes the line, then a caret */
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
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, e = 0;
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

int plot_png(const char *prog, const char *png, const char *title,
	     const char *xlabel, const char *ylabel, unsigned flags,
	     const struct plot_series *s, unsigned nseries)
{
	struct plot_tmp t = {.dir = "/tmp/kvpool-plot-XXXXXX"};
	char why[160];
	struct stat st;
	int status, rc = -1;

	if (!plot_available()) {
		fprintf(stderr,
			"%s: gnuplot is not installed: no plot written to %s "
			"(Debian: apt-get install gnuplot-nox)\n",
			prog, png);
		return -1;
	}
	if (!mkdtemp(t.dir)) {
		fprintf(stderr, "%s: plot: %s\n", prog, strerror(errno));
		return -1;
	}
	snprintf(t.data, sizeof(t.data), "%s/data", t.dir);
	snprintf(t.png, sizeof(t.png), "%s/plot.png", t.dir);
	snprintf(t.err, sizeof(t.err), "%s/err", t.dir);
	status = write_data(t.data, s, nseries) ? -2
		 : run_gnuplot(&t, title, xlabel, ylabel, flags, s, nseries);
	if (status == -2) {
		fprintf(stderr, "%s: plot data file: %s\n", prog,
			strerror(errno));
	} else if (status == -1 || !WIFEXITED(status) ||
		   WEXITSTATUS(status) != 0 || stat(t.png, &st) != 0 ||
		   st.st_size == 0) {
		char how[32];

		first_line(t.err, why, sizeof(why));
		if (status != -1 && WIFEXITED(status))
			snprintf(how, sizeof(how), "exit %d",
				 WEXITSTATUS(status));
		else if (status != -1 && WIFSIGNALED(status))
			snprintf(how, sizeof(how), "signal %d",
				 WTERMSIG(status));
		else
			snprintf(how, sizeof(how), "not run");
		fprintf(stderr, "%s: gnuplot failed (%s): no plot in %s%s%s\n",
			prog, how, png, why[0] ? ": " : "", why);
	} else if (copy_out(t.png, png) != 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, png, strerror(errno));
	} else {
		rc = 0;
	}
	unlink(t.data);
	unlink(t.png);
	unlink(t.err);
	rmdir(t.dir);
	return rc;
}
