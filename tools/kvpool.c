/* SPDX-License-Identifier: MIT */
/*
 * kvpool.c - the `kvpool` command: `kvpool sim` (tools/sim.c),
 * `kvpool bench` (tools/bench.c) and `kvpool conf` (here).  See kvpool(1).
 */
#include <errno.h>
#include <stdbool.h>
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
		"  conf    print the configuration in effect (KVP_CONF), one "
		"key:value a line\n"
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
#define EVENTS_MB 64u	   /* --publish: each thread's event buffer */

/* The value of option name in argv[i] ("--name V" or "--name=V"), or
 * NULL. */
static const char *opt_value(int argc, char **argv, int i, const char *name)
{
	size_t n = strlen(name);

	if (strncmp(argv[i], name, n) != 0)
		return NULL;
	if (argv[i][n] == '=')
		return argv[i] + n + 1;
	return !argv[i][n] && i + 1 < argc ? argv[i + 1] : NULL;
}

/* --threads: a number, or a list (kvpool bench): its largest; 2 without. */
static unsigned long threads_of(int argc, char **argv)
{
	unsigned long threads = 2;

	for (int i = 1; i < argc; i++) {
		const char *v = opt_value(argc, argv, i, "--threads");

		for (char *q = (char *)v; q && *q;) {
			unsigned long t = strtoul(q, &q, 10);

			if (t > threads && t < 4096)
				threads = t;
			if (*q)
				q++;
		}
	}
	return threads;
}

static int check_address_space(const char *cmd, int argc, char **argv)
{
	unsigned long threads = threads_of(argc, argv), need;
	bool publish = false;
	struct rlimit rl;
	void *p;

	if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	for (int i = 1; i < argc; i++)
		publish |= opt_value(argc, argv, i, "--publish") != NULL;
	need = START_MB + (threads - 2) * THREAD_MB +
	       (publish ? threads * EVENTS_MB : 0);
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

/* A report lost on its way out (a full disk, /dev/full, a closed pipe)
 * is an error, said in one line: status rc, or 1. */
static int output_check(const char *cmd, int rc)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return rc;
	fprintf(stderr, "kvpool %s: writing the output: %s\n", cmd,
		errno ? strerror(errno) : "write error");
	return rc ? rc : 1;
}

/* kvpool conf: the configuration in effect (kvp_conf_write). */
static int conf_main(int argc, char **argv)
{
	int rc;

	if (argc > 1 &&
	    (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: kvpool conf\n"
		       "Prints the configuration in effect, one key:value a "
		       "line: the defaults,\n"
		       "then the environment's KVP_CONF (kvpool(3) lists the "
		       "keys).\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "kvpool conf: unexpected argument '%s'\n",
			argv[1]);
		return 2;
	}
	rc = kvp_conf_write(stdout);
	if (rc) {
		fprintf(stderr, "kvpool conf: %s\n", kvp_strerror(rc));
		return 1;
	}
	return 0;
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
		return output_check("sim", sim_main(argc - 1, argv + 1));
	if (!strcmp(argv[1], "bench"))
		return output_check("bench", bench_main(argc - 1, argv + 1));
	if (!strcmp(argv[1], "conf"))
		return output_check("conf", conf_main(argc - 1, argv + 1));
	fprintf(stderr, "kvpool: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
