/* SPDX-License-Identifier: MIT */
/*
 * plot.h - line plots as PNG through gnuplot (the Debian package
 * gnuplot-nox), or as the gnuplot script that draws them.  Not
 * thread-safe (runs a child process).
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

/* Flags: logarithmic axes (PLOT_LOGX for the shared x axis, PLOT_LOGY
 * per panel), and x tics at the data's x values (thread counts) rather
 * than gnuplot's round numbers.  The x range is always the data's. */
#define PLOT_LOGX 1u
#define PLOT_LOGY 2u
#define PLOT_XTICS 4u

/* A panel: series against the plot's shared x axis. */
struct plot_panel {
	const char *ylabel;
	unsigned flags; /* PLOT_LOGY */
	const struct plot_series *s;
	unsigned nseries;
};

/*
 * Draws the panels one above the other (lines with points), sharing the
 * x axis (xflags: PLOT_LOGX, PLOT_XTICS), into the PNG file `out`; or,
 * when `out` ends in ".gp", writes the gnuplot script that draws them
 * (the data inline) into `out`, for `gnuplot FILE.gp` to render FILE.png
 * later, with no gnuplot needed now.  gnuplot draws into a temporary
 * file, copied to `out` with every write checked.  Returns 0; -1 with
 * one line on stderr (prefixed by prog) if gnuplot is missing or failed
 * (its first error line), or `out` could not be written (a missing
 * directory, a full device; a partial file is removed).  A caller asked
 * for the plot then fails (exit status 1).
 */
int plot_panels(const char *prog, const char *out, const char *title,
		const char *xlabel, unsigned xflags,
		const struct plot_panel *panels, unsigned npanels);

/* plot_panels with one panel (flags: PLOT_LOGX, PLOT_LOGY, PLOT_XTICS). */
int plot_png(const char *prog, const char *png, const char *title,
	     const char *xlabel, const char *ylabel, unsigned flags,
	     const struct plot_series *s, unsigned nseries);

#endif /* KVP_TOOLS_PLOT_H */
