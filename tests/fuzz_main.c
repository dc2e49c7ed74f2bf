/* SPDX-License-Identifier: MIT */
/*
 * fuzz_main.c - runs tests/fuzz_api.c without libFuzzer: over files (the
 * seed corpus, a crash reproducer) or over pseudo-random inputs, so that
 * `make check` (and its ASan and valgrind runs) exercise the harness and
 * the model with any compiler.
 *
 *   fuzz_replay FILE...          each file is one input
 *   fuzz_replay --random N SEED  N inputs from a xorshift generator (`make
 *                                fuzz-long`: 10 M of them)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void fuzz_api_record_calls(int on);

/* Pool configurations of a --random run (16 of the 4,608 an
 * input can name; another seed draws others).  NFORKY of them are
 * fork-heavy (tests/fuzz_api.c: the high bits of the third byte), half
 * of those with prefix caching forced on. */
#define NHEADERS 16
#define NFORKY 6

static uint64_t rng;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int run_file(const char *path)
{
	static uint8_t buf[1 << 20];
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f) {
		fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
		return 1;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "--random") == 0) {
		unsigned long n = strtoul(argv[2], NULL, 0), i;
		static uint8_t buf[1024];
		uint32_t headers[NHEADERS];
		struct timespec t0, t1;
		double secs;

		rng = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
		rng = rng ? rng : 1;
		for (i = 0; i < NHEADERS; i++) {
			uint8_t *h = (uint8_t *)&headers[i];

			headers[i] = (uint32_t)next();
			if (i < NFORKY)
				h[2] = (uint8_t)((h[2] & 0x0F) | 0xC0 |
						 (i & 1 ? 0x10 : 0));
			else if ((h[2] & 0xE0) == 0xC0)
				h[2] ^= 0x80; /* not fork-heavy */
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (i = 0; i < n; i++) {
			size_t len = 8 + next() % (sizeof(buf) - 8);

			if (i && i % 250000 == 0) {
				printf("fuzz_replay: %lu inputs\n", i);
				fflush(stdout);
			}
			for (size_t k = 0; k < len; k++)
				buf[k] = (uint8_t)next();
			/* The pool configuration (the first 4 bytes) from
			 * NHEADERS drawn from the seed: the harness caches
			 * pools, and evicting one destroys its managers,
			 * each an RCU barrier (10 ms or more). */
			memcpy(buf, &headers[next() % NHEADERS],
			       sizeof(headers[0]));
			LLVMFuzzerTestOneInput(buf, len);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		secs = (double)(t1.tv_sec - t0.tv_sec) +
		       (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
		printf("fuzz_replay: %lu random inputs, library and model"
		       " agree (%.1f s, %.0f inputs/s)\n",
		       n, secs, secs > 0 ? (double)n / secs : 0.0);
		return 0;
	}
	/* Files are few and may be a failure's reproducer: the calls are
	 * recorded, to be printed if the library and the model disagree. */
	fuzz_api_record_calls(1);
	for (int i = 1; i < argc; i++)
		if (run_file(argv[i]))
			return 1;
	printf("fuzz_replay: %d inputs, library and model agree\n", argc - 1);
	return 0;
}
