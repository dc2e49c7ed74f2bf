/* SPDX-License-Identifier: MIT */
/*
 * mtext.h - an OpenMetrics / Prometheus text writer (layer 1,
 * doc/architecture.md "Layers": over libc only).
 *
 * Owns struct mtext, a growing buffer that metrics.c renders a pool's and
 * its managers' families into, and that libkvpool-events compiles too
 * for its publisher's families (each library keeps its own hidden copy).
 * Not a hot path: it allocates with malloc and frees before returning.
 *
 * The two formats differ only where this file says: OpenMetrics 1.0
 * names a counter family without `_total` in HELP and TYPE (its samples
 * carry it), allows UNIT lines, and ends with "# EOF"; the Prometheus
 * text format 0.0.4 names the family as its samples and has neither UNIT
 * nor EOF.
 */
#ifndef KVP_MTEXT_H
#define KVP_MTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum mtext_type { MTEXT_COUNTER, MTEXT_GAUGE };

/* A metric family.  unit, when set, ends the name ("..._blocks":
 * "blocks"), as OpenMetrics requires of a UNIT line; help is plain text
 * without backslashes, quotes or newlines. */
struct mtext_family {
	const char *name;
	enum mtext_type type;
	const char *unit; /* or NULL */
	const char *help;
};

struct mtext_label {
	const char *name, *value; /* value: any bytes but NUL; escaped */
};

struct mtext {
	char *buf;
	size_t len, cap;
	bool openmetrics; /* else Prometheus 0.0.4 */
	int err;	  /* the first error: -ENOMEM */
};

void mtext_init(struct mtext *mt, bool openmetrics);
/* The HELP, TYPE (and UNIT) lines of a family. */
void mtext_family(struct mtext *mt, const struct mtext_family *f);
/* One sample of f with labels[0..nlabels); a counter's carries `_total`. */
void mtext_sample(struct mtext *mt, const struct mtext_family *f,
		  const struct mtext_label *labels, size_t nlabels,
		  uint64_t value);
void mtext_sample_real(struct mtext *mt, const struct mtext_family *f,
		       const struct mtext_label *labels, size_t nlabels,
		       double value);
/* A family with one unlabelled sample: its lines and the sample. */
void mtext_single(struct mtext *mt, const struct mtext_family *f,
		  uint64_t value);
/* "# EOF" (OpenMetrics only). */
void mtext_eof(struct mtext *mt);
/* The first error (0: mt->buf[0..len) holds the text, NUL after it). */
static inline int mtext_error(const struct mtext *mt)
{
	return mt->err;
}
void mtext_fini(struct mtext *mt);

/*
 * Hands the text out as kvp_metrics_format and kvp_metrics_write promise:
 * into buf[0..cap) (-ENOBUFS with the length in *len when it does not fit
 * with its NUL), or to f (-EIO on a write error; f NULL: buf).  Frees mt.
 */
int mtext_finish(struct mtext *mt, char *buf, size_t cap, size_t *len,
		 FILE *f);

#endif /* KVP_MTEXT_H */
