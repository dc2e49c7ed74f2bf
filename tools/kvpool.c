/*
 * kvpool.c - the `kvpool` command: `kvpool sim` (tools/sim.c) and
 * `kvpool bench` (tools/bench.c).  See kvpool(1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <kvpool.h>

#include "bench_common.h"
#include "tools.h"

/* Prefixes the messages of bench_common.c (bench_die and friends). */
const char bench_prog[] = "kvpool";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvpool <command> [options]\n"
		"\n"
		"commands:\n"
		"  sim     replay a serving workload (synthetic, or a "
		"Mooncake JSON-lines\n"
		"          trace) through scheduler threads sharing one "
		"pool; report\n"
		"          throughput, latencies, prefix hit rate, "
		"utilisation, preemptions\n"
		"  bench   pool, sequence and prefix benchmarks against "
		"mutex, lock-free\n"
		"          and allocator peers, over a thread sweep\n"
		"\n"
		"`kvpool <command> --help` lists a command's options; "
		"kvpool(1) has them all.\n"
		"kvpool %d.%d.%d\n",
		KVP_VERSION_MAJOR, KVP_VERSION_MINOR, KVP_VERSION_PATCH);
}

/*
 * Under an address-space limit (ulimit -v) too small to start, the
 * allocator (jemalloc) and thread creation fail in ways that end in a
 * segmentation fault or an abort inside a library, not a message: check
 * first that the limit leaves room for the threads' stacks and allocator
 * arenas and what the command maps at start, and say so in one line if
 * not.  Later failures (a pool too large) are -ENOMEM, reported as such.
 */
#define START_MB 128u	   /* the command at start, with 2 threads */
#define THREAD_MB 16u	   /* each further thread: stack and arena */

static int check_address_space(const char *cmd, int argc, char **argv)
{
	unsigned long threads = 2, need;
	struct rlimit rl;
	void *p;

	if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--threads")) {
			/* A number, or a list (kvpool bench): its largest. */
			for (char *q = argv[i + 1]; *q;) {
				unsigned long t = strtoul(q, &q, 10);

				if (t > threads && t < 4096)
					threads = t;
				if (*q)
					q++;
			}
		}
	need = START_MB + (threads - 2) * THREAD_MB;
	p = mmap(NULL, need << 20, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p != MAP_FAILED) {
		munmap(p, need << 20);
		return 0;
	}
	fprintf(stderr,
		"kvpool %s: the address-space limit (ulimit -v %llu KB) leaves "
		"less than the %lu MB %lu threads need to start\n",
		cmd, (unsigned long long)(rl.rlim_cur >> 10), need, threads);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("kvpool %d.%d.%d\n", KVP_VERSION_MAJOR,
		       KVP_VERSION_MINOR, KVP_VERSION_PATCH);
		return 0;
	}
	if ((!strcmp(argv[1], "sim") || !strcmp(argv[1], "bench")) &&
	    check_address_space(argv[1], argc, argv))
		return 1;
	if (!strcmp(argv[1], "sim"))
		return sim_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "bench"))
		return bench_main(argc - 1, argv + 1);
	fprintf(stderr, "kvpool: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
