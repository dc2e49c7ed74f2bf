/* SPDX-License-Identifier: MIT */
/*
 * hexarg.h - the text form the test drivers read (tests/*_driver.c):
 * bytes in hex, strings as 'x' and their bytes in hex, '-' for none.
 */
#ifndef KVP_TESTS_HEXARG_H
#define KVP_TESTS_HEXARG_H

#include <stdio.h>
#include <string.h>

/* Decodes n bytes of hex text h into out; returns 0, or -1 if h is not
 * that. */
static inline int hexarg_bytes(const char *h, unsigned char *out, size_t n)
{
	if (strlen(h) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (unsigned char)v;
	}
	return 0;
}

/* Decodes a string argument into buf (cap bytes, NUL-terminated), its
 * length in *len (may be NULL).  Returns buf, NULL for '-', or sets *bad
 * and returns NULL if malformed. */
static inline char *hexarg_str(const char *h, char *buf, size_t cap,
			       size_t *len, int *bad)
{
	size_t n;

	if (strcmp(h, "-") == 0)
		return NULL;
	n = strlen(h + 1) / 2;
	if (h[0] != 'x' || strlen(h + 1) % 2 || n >= cap ||
	    hexarg_bytes(h + 1, (unsigned char *)buf, n) != 0) {
		*bad = 1;
		return NULL;
	}
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

#endif /* KVP_TESTS_HEXARG_H */
