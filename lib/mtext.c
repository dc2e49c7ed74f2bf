/* SPDX-License-Identifier: MIT */
/*
 * mtext.c - an OpenMetrics / Prometheus text writer (layer 1,
 * doc/architecture.md "Layers"): see mtext.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtext.h"

void mtext_init(struct mtext *mt, bool openmetrics)
{
	memset(mt, 0, sizeof(*mt));
	mt->openmetrics = openmetrics;
}

void mtext_fini(struct mtext *mt)
{
	free(mt->buf);
	mt->buf = NULL;
	mt->len = mt->cap = 0;
}

/* Room for n more bytes and a NUL. */
static bool reserve(struct mtext *mt, size_t n)
{
	size_t cap;
	char *b;

	if (mt->err)
		return false;
	if (mt->len + n < mt->cap)
		return true;
	cap = mt->cap ? mt->cap : 4096;
	while (cap <= mt->len + n)
		cap *= 2;
	b = realloc(mt->buf, cap);
	if (!b) {
		mt->err = -ENOMEM;
		return false;
	}
	mt->buf = b;
	mt->cap = cap;
	return true;
}

static void put(struct mtext *mt, const char *s, size_t n)
{
	if (!reserve(mt, n))
		return;
	memcpy(mt->buf + mt->len, s, n);
	mt->len += n;
	mt->buf[mt->len] = '\0';
}

static void puts_(struct mtext *mt, const char *s)
{
	put(mt, s, strlen(s));
}

static void __attribute__((format(printf, 2, 3)))
putf(struct mtext *mt, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < sizeof(tmp))
		put(mt, tmp, (size_t)n);
}

/* A label value, escaped as both formats want: \\, \" and \n. */
static void put_escaped(struct mtext *mt, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\')
			puts_(mt, "\\\\");
		else if (*v == '"')
			puts_(mt, "\\\"");
		else if (*v == '\n')
			puts_(mt, "\\n");
		else
			put(mt, v, 1);
	}
}

/* The family's name as HELP and TYPE give it. */
static void put_family_name(struct mtext *mt, const struct mtext_family *f)
{
	puts_(mt, f->name);
	if (f->type == MTEXT_COUNTER && !mt->openmetrics)
		puts_(mt, "_total");
}

void mtext_family(struct mtext *mt, const struct mtext_family *f)
{
	puts_(mt, "# HELP ");
	put_family_name(mt, f);
	puts_(mt, " ");
	puts_(mt, f->help);
	puts_(mt, "\n# TYPE ");
	put_family_name(mt, f);
	puts_(mt, f->type == MTEXT_COUNTER ? " counter\n" : " gauge\n");
	if (f->unit && mt->openmetrics) {
		puts_(mt, "# UNIT ");
		puts_(mt, f->name);
		puts_(mt, " ");
		puts_(mt, f->unit);
		puts_(mt, "\n");
	}
}

static void put_series(struct mtext *mt, const struct mtext_family *f,
		       const struct mtext_label *labels, size_t nlabels)
{
	puts_(mt, f->name);
	if (f->type == MTEXT_COUNTER)
		puts_(mt, "_total");
	for (size_t i = 0; i < nlabels; i++) {
		puts_(mt, i ? "," : "{");
		puts_(mt, labels[i].name);
		puts_(mt, "=\"");
		put_escaped(mt, labels[i].value);
		puts_(mt, "\"");
	}
	puts_(mt, nlabels ? "} " : " ");
}

void mtext_sample(struct mtext *mt, const struct mtext_family *f,
		  const struct mtext_label *labels, size_t nlabels,
		  uint64_t value)
{
	put_series(mt, f, labels, nlabels);
	putf(mt, "%" PRIu64 "\n", value);
}

void mtext_sample_real(struct mtext *mt, const struct mtext_family *f,
		       const struct mtext_label *labels, size_t nlabels,
		       double value)
{
	put_series(mt, f, labels, nlabels);
	putf(mt, "%.9g\n", value);
}

void mtext_single(struct mtext *mt, const struct mtext_family *f,
		  uint64_t value)
{
	mtext_family(mt, f);
	mtext_sample(mt, f, NULL, 0, value);
}

void mtext_eof(struct mtext *mt)
{
	if (mt->openmetrics)
		puts_(mt, "# EOF\n");
}

int mtext_finish(struct mtext *mt, char *buf, size_t cap, size_t *len,
		 FILE *f)
{
	int err = mt->err;

	if (!err && f) {
		if (mt->len && fwrite(mt->buf, 1, mt->len, f) != mt->len)
			err = -EIO;
		else if (fflush(f))
			err = -EIO;
	} else if (!err) {
		*len = mt->len;
		if (cap <= mt->len)
			err = -ENOBUFS;
		else if (mt->len)
			memcpy(buf, mt->buf, mt->len + 1);
		else
			buf[0] = '\0';
	}
	mtext_fini(mt);
	return err;
}
