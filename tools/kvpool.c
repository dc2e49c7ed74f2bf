/*
 * kvpool.c - the `kvpool` command: `kvpool sim` (tools/sim.c) and
 * `kvpool bench` (tools/bench.c).  See kvpool(1).
 */
#include <stdio.h>
#include <string.h>

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
	if (!strcmp(argv[1], "sim"))
		return sim_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "bench"))
		return bench_main(argc - 1, argv + 1);
	fprintf(stderr, "kvpool: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
