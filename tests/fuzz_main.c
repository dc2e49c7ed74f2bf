/*
 * fuzz_main.c - runs tests/fuzz_api.c without libFuzzer: over files (the
 * seed corpus, a crash reproducer) or over pseudo-random inputs, so that
 * `make check` (and its ASan and valgrind runs) exercise the harness and
 * the model with any compiler.
 *
 *   fuzz_replay FILE...          each file is one input
 *   fuzz_replay --random N SEED  N inputs from a xorshift generator
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
		uint64_t headers[16];

		rng = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
		rng = rng ? rng : 1;
		for (i = 0; i < 16; i++)
			headers[i] = next();
		for (i = 0; i < n; i++) {
			size_t len = 8 + next() % (sizeof(buf) - 8);

			for (size_t k = 0; k < len; k++)
				buf[k] = (uint8_t)next();
			/* A few pool and manager configurations only: the
			 * harness caches them (destroying a manager takes an
			 * RCU barrier, 10 ms). */
			if (next() % 16) {
				uint64_t h = headers[next() % 16];

				memcpy(buf, &h, sizeof(h));
			}
			LLVMFuzzerTestOneInput(buf, len);
		}
		printf("fuzz_replay: %lu random inputs, library and model"
		       " agree\n", n);
		return 0;
	}
	for (int i = 1; i < argc; i++)
		if (run_file(argv[i]))
			return 1;
	printf("fuzz_replay: %d inputs, library and model agree\n", argc - 1);
	return 0;
}
