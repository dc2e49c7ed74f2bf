/* SPDX-License-Identifier: MIT */
/*
 * fuzz_conf.c - libFuzzer target for the KVP_CONF parser (lib/conf.c,
 * compiled in): `make fuzz-conf` (and `make fuzz`).  An input is a
 * configuration string (up to its first NUL).  Checked, besides no crash
 * and no sanitizer report:
 *
 *   - every rejected pair is reported once: conf_parse() returns as many
 *     rejections as the report function saw, and each reported pair is a
 *     comma-free piece of the input;
 *   - the string is its pairs: applying the pieces between commas one by
 *     one gives the same rejections and the same values (a blank piece
 *     is one empty pair, unless the whole string is blank: no pairs);
 *   - every value stays in its range: what conf_write() prints parses
 *     back with no rejection to the same values.
 *
 * Built with -DKVP_FUZZ_REPLAY it is tests/fuzz_conf_replay, which runs
 * the seed corpus (tests/fuzz_conf_corpus) and pseudo-random strings
 * without libFuzzer, in `make check` (tests/fuzz_conf_replay.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct tally {
	const char *s; /* the input */
	size_t len;
	unsigned reports;
};

static void fail(const char *what, const char *s)
{
	fprintf(stderr, "fuzz_conf: %s, for input \"%s\"\n", what, s);
	abort();
}

static void count(void *arg, const char *source, const char *pair, size_t len,
		  const char *why)
{
	struct tally *t = arg;

	t->reports++;
	if (!why || !*why || strcmp(source, "fuzz") != 0)
		fail("a report without a reason or its source", t->s);
	if (pair < t->s || pair + len > t->s + t->len || memchr(pair, ',', len))
		fail("a reported pair is not a piece of the input", t->s);
}

static bool blank(const char *p, const char *e)
{
	for (; p < e; p++)
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), *piece = malloc(size + 1), *text = NULL;
	struct tally t = {s, 0, 0};
	struct conf whole, pieces, back;
	unsigned bad, bad_pieces = 0;
	size_t textlen = 0;
	FILE *f;

	if (!s || !piece)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	t.len = strlen(s);

	conf_defaults(&whole);
	bad = conf_parse(&whole, "fuzz", s, count, &t);
	if (bad != t.reports)
		fail("rejections and reports differ", s);

	conf_defaults(&pieces);
	if (!blank(s, s + t.len)) {
		for (const char *p = s;;) {
			const char *e = strchr(p, ',');
			size_t n = e ? (size_t)(e - p) : strlen(p);

			memcpy(piece, p, n);
			piece[n] = '\0';
			if (blank(piece, piece + n))
				bad_pieces++;
			else
				bad_pieces += conf_parse(&pieces, "fuzz", piece,
							 NULL, NULL);
			if (!e)
				break;
			p = e + 1;
		}
	}
	if (bad != bad_pieces)
		fail("the pieces one by one reject another number", s);
	if (memcmp(whole.val, pieces.val, sizeof(whole.val)) != 0 ||
	    whole.applied != pieces.applied)
		fail("the pieces one by one give other values", s);

	f = open_memstream(&text, &textlen);
	if (!f || conf_write(&whole, f) != 0)
		abort();
	fclose(f);
	for (char *p = text; *p; p++)
		if (*p == '\n')
			*p = ',';
	conf_defaults(&back);
	/* One rejection: the empty pair after the last comma. */
	if (conf_parse(&back, "fuzz", text, NULL, NULL) != 1 ||
	    memcmp(whole.val, back.val, sizeof(whole.val)) != 0)
		fail("the values written do not parse back", s);
	free(text);
	free(piece);
	free(s);
	return 0;
}

#ifdef KVP_FUZZ_REPLAY
/*
 *   fuzz_conf_replay FILE...          each file is one input
 *   fuzz_conf_replay --random N SEED  N strings of keys, values and
 *                                     separators from a xorshift generator
 */
static uint64_t rng;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static const char *words[] = {
	"auto_cache_max",
	"evict_ahead_max",
	"evict_ahead_share",
	"idle_batch",
	"prefix_slots_per_block",
	"seqmap_grow_ratio",
	"seqmap_keep_ratio",
	"seqmap_shrink_period_us",
	"abort_conf",
	"confirm_conf",
	"foo",
	":",
	":",
	",",
	",",
	" ",
	"\t",
	"0",
	"1",
	"4",
	"64",
	"256",
	"513",
	"4294967296",
	"99999999999999999999",
	"-1",
	"true",
	"false",
	"x",
};
#define NWORDS (sizeof(words) / sizeof(words[0]))

int main(int argc, char **argv)
{
	static char buf[1 << 16];

	if (argc >= 3 && strcmp(argv[1], "--random") == 0) {
		unsigned long n = strtoul(argv[2], NULL, 0);

		rng = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
		rng = rng ? rng : 1;
		for (unsigned long i = 0; i < n; i++) {
			size_t len = 0, words_n = next() % 24;

			for (size_t w = 0; w < words_n; w++) {
				/* One word in 16 is a random byte. */
				char byte[2] = {(char)(next() % 255 + 1), '\0'};
				const char *word =
					next() % 16 ? words[next() % NWORDS]
						    : byte;
				size_t wl = strlen(word);

				memcpy(buf + len, word, wl);
				len += wl;
			}
			LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
		}
		printf("fuzz_conf_replay: %lu random strings, every rejection"
		       " reported\n",
		       n);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		size_t n;

		if (!f) {
			perror(argv[i]);
			return 1;
		}
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
	}
	printf("fuzz_conf_replay: %d inputs, every rejection reported\n",
	       argc - 1);
	return 0;
}
#endif
