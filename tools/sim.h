/* SPDX-License-Identifier: MIT */
/*
 * sim.h - what the files of `kvpool sim` share: the options (struct
 * sim_opts, filled by sim_opts.c), one replay's measurements (struct
 * sim_result, filled by sim_replay.c, printed by sim_report.c and
 * sim_sweep.c) and the functions that cross files.
 *
 * The files: sim.c (the command: workload, replays, report), sim_opts.c
 * (the option table, parsing and --help), sim_replay.c (one replay: the
 * peers' pools and managers, the run, the checks after it), sim_sched.c
 * (the scheduler threads and their queues), sim_report.c (text and JSON
 * reports), sim_sweep.c (pool capacities: the unlimited size, the memory
 * check, --sweep-capacity), sim_metrics.c (--metrics scrapes),
 * sim_common.c (the peers' and policies' names, a request's footprint).
 *
 * The floors.  A file calls only files below it, so no two files call
 * each other, directly or around a circle (tests/test_layers.sh runs
 * tools/lib-callgraph.py over tools/ as over lib/).  Bottom to top:
 * the helpers (hist.c, plot.c, jsonl.c, workload.c) and sim_common.c;
 * sim_report.c, sim_metrics.c, sim_opts.c; sim_sched.c; sim_replay.c;
 * sim_sweep.c; sim.c, the command; kvpool.c.  The check counts a
 * header's inline functions as calls to the .c file of its name, so
 * this header, which every floor includes, has none: what the floors
 * below sim.c share lives in sim_common.c.
 *
 * Single-threaded apart from sim_sched.c's threads, which read the
 * options and the workload only.
 */
#ifndef KVP_TOOLS_SIM_H
#define KVP_TOOLS_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include <kvpool.h>

#include "hist.h"
#include "workload.h"

#define SIM_DEFAULT_SYNTH_BLOCKS 4096u /* --blocks for a synthetic workload */
#define SIM_APPEND_SAMPLE 8u	       /* time 1 append in this many */

/* The block managers a replay can run on. */
enum peer { PEER_KVPOOL, PEER_MUTEX };

/* The timed operations. */
enum op {
	OP_CREATE,
	OP_COMMIT,
	OP_APPEND,
	OP_FORK,
	OP_FREE,
	OP_EVICT,
	NUM_OPS
};

/* Names as printed and parsed (sim_common.c). */
extern const char *const sim_peer_name[];
extern const char *const sim_policy_name[]; /* by enum kvp_policy */
#define SIM_NUM_POLICIES 4u

/* The command line (sim_opts.c); read-only once parsed, but for pub. */
struct sim_opts {
	uint32_t threads;
	uint32_t models;
	uint32_t blocks; /* 0 = unlimited */
	bool blocks_given;
	uint32_t block_tokens;
	enum kvp_policy policy;
	uint32_t max_running; /* requests, all threads */
	float watermark;
	bool unordered;
	const char *trace;
	bool sysprompt; /* --workload sysprompt */
	bool retain;	/* --retain-system N:P[:STEPS] */
	uint32_t retain_tokens, retain_prio;
	uint64_t retain_steps;
	uint64_t seed;
	uint32_t requests;
	bool json;
	bool sweep;
	bool sweep_policies; /* --sweep-policies: every policy's hit rate */
	const char *capacities;
	const char *plot;
	const char *csv; /* --csv FILE ("-": stdout), the comparing sweep */
	bool compare;
	uint32_t reps;
	const char *dump;
	uint32_t max_attempts;
	bool progress;
	/* The sweep's place ("capacity 3 of 8 (12500 blocks), lfu") and its
	 * start (hist_now_ns), shown with each replay's progress; NULL
	 * outside a sweep. */
	const char *progress_label;
	uint64_t progress_t0;
	/* Events (--publish): libkvpool-events' publisher, NULL without. */
	const char *publish, *replay_ep, *hash_seed, *topic;
	bool cbor; /* --hash sha256_cbor */
	double linger;
	uint32_t pub_hwm; /* at most INT32_MAX */
	uint32_t replay_ring;
	struct kvp_pub *pub; /* set by sim.c when it starts publishing */
	/* --metrics FILE, --metrics-every N (sim_metrics.c) */
	const char *metrics;
	uint64_t metrics_every;
};

/* What one replay measured. */
struct sim_result {
	enum peer peer;
	enum kvp_policy policy;
	uint32_t blocks;
	double seconds;
	uint64_t completed, rejected, abandoned, preemptions;
	uint64_t ops[NUM_OPS]; /* successful calls */
	uint64_t victims;      /* sequences evicted by policy */
	uint64_t cows;
	uint64_t block_ops;
	uint64_t decoded;	/* tokens appended */
	uint64_t queries, hits; /* prompt tokens asked / served (harness) */
	/* --retain-system (kvpool only; tokens 0 without): see sim.c. */
	uint32_t retain_tokens, retain_prio;
	uint64_t retain_steps, retained_evicted;
	struct kvp_stats st; /* kvp_stats_add over the managers */
	double util_peak, util_mean;
	struct hist lat[NUM_OPS];
};

/* sim_common.c: the blocks request r can hold at once on a pool of
 * bt-token blocks: its prompt, each sample's private decode blocks and
 * one copy-on-write block per sample. */
uint64_t sim_footprint(const struct wl_req *r, uint32_t bt);

/* sim_opts.c: fills *o from argv; exits 0 after --help, 2 on a usage
 * error (one line, and a pointer to --help). */
void sim_parse_args(struct sim_opts *o, int argc, char **argv);

/* sim_replay.c: runs one replay of w on peer's managers and fills *res;
 * exits 1 if the pool or managers cannot be created, aborts if the
 * managers are unsound afterwards. */
void sim_replay(const struct sim_opts *o, const struct workload *w,
		enum peer peer, uint32_t blocks, enum kvp_policy policy,
		struct sim_result *res);

/* sim_report.c */
void sim_print_workload(const struct sim_opts *o, const struct workload *w,
			uint32_t blocks, bool unlimited);
void sim_print_result(const struct sim_result *x);
bool sim_same_work(const struct sim_result *a, const struct sim_result *b,
		   bool print);
void sim_json_report(const struct sim_opts *o, const struct workload *w,
		     bool unlimited, const struct sim_result *k,
		     const struct sim_result *mx);
void sim_print_events(const struct sim_opts *o, const struct sim_result *k);
const struct sim_result *sim_median_of(struct sim_result *v, unsigned n);

/* sim_sweep.c */
uint64_t sim_unlimited_blocks(const struct sim_opts *o,
			      const struct workload *w);
/* The same for `distinct` distinct prompt blocks: before hashing, a
 * lower bound with the longest prompt's full blocks (all distinct). */
uint64_t sim_unlimited_of(const struct sim_opts *o, const struct workload *w,
			  uint64_t distinct);
/* A pool's host memory per block, about: the pool's and the manager's
 * metadata and prefix maps. */
#define SIM_BLOCK_BYTES 128u
/* Whether need bytes fit the host memory: 0, or 1 after one line saying
 * that what needs more, `with` at its end: "a pool of N blocks needs
 * about X GB, more than ... allows (with the workload's block hashes)". */
int sim_memory_check(uint64_t need, const char *what, const char *with);
int sim_pool_memory_check(uint64_t blocks);
int sim_sweep(const struct sim_opts *o, const struct workload *w,
	      uint64_t unlimited);

#endif /* KVP_TOOLS_SIM_H */
