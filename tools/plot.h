/* SPDX-License-Identifier: MIT */
/*
 * plot.h - line plots as PNG through gnuplot (optional: the Debian package
 * gnuplot-nox).  Not thread-safe (runs a child process).
 */
#ifndef KVP_TOOLS_PLOT_H
#define KVP_TOOLS_PLOT_H

#include <stdbool.h>

/* One line of a plot: n points (x[i], y[i]). */
struct plot_series {
	const char *name;
	const double *x, *y;
	unsigned n;
};

/* Whether a `gnuplot` executable is on PATH. */
bool plot_available(void);

/* plot_png flags: logarithmic axes. */
#define PLOT_LOGX 1u
#define PLOT_LOGY 2u

/*
 * Draws the series as lines with points into the PNG file `png` (flags:
 * PLOT_LOGX, PLOT_LOGY): gnuplot draws into a temporary file, which is
 * then copied to png with every write checked.  Returns 0; -1 with one
 * line on stderr (prefixed by prog) if gnuplot is missing or failed (its
 * first error line), or png could not be written (a missing directory, a
 * full device; a partial file is removed).  A caller that was asked for
 * the plot fails then (exit status 1).
 */
int plot_png(const char *prog, const char *png, const char *title,
	     const char *xlabel, const char *ylabel, unsigned flags,
	     const struct plot_series *s, unsigned nseries);

#endif /* KVP_TOOLS_PLOT_H */
