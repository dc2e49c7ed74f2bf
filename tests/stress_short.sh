#!/bin/sh
# SPDX-License-Identifier: MIT
# Short runs of the stress programs for `make check` (`make stress` runs
# long ones).  Each program checks its invariants and exits non-zero on a
# violation; under TSan, halt_on_error makes any report fatal.
set -e
b=${top_builddir:-.}
"$b/stress/stress_pool" 4 2
"$b/stress/stress_pool" 2 1 --cache 0
"$b/stress/stress_pool" 3 1 --blocks 64 --cache 8
"$b/stress/stress_seq" 4 2
# A pool that runs out: -ENOSPC details, preemption on demand.
"$b/stress/stress_seq" 3 1 --blocks 64
"$b/stress/stress_seq" 3 1 --fork-tree --blocks 64 --ids 16
# Slabs of sequence structs go back while other threads look them up.
"$b/stress/stress_seq" 3 2 --reclaim --blocks 8192
# kvp_seq_fork_n of up to 64 children racing frees, truncates and
# appends of the source and of earlier children.
"$b/stress/stress_fork" 3 2
"$b/stress/stress_fork" 3 1 --blocks 256 --ids 8
"$b/stress/stress_seqmap" 4 40000
"$b/stress/stress_seqmap" 3 20000 --ids 4 --fresh 60
"$b/stress/stress_churn" 2000 8
"$b/stress/stress_prefix" 3 2
"$b/stress/stress_prefix" 3 2 --blocks 1024 --prefixes 32
# Metrics scraped while 4 threads churn: well formed, counters never go
# down, block states sum to the pool's size at quiescence.
"$b/stress/stress_prefix" 4 2 --scrape 1
# A pool full of cached blocks: the fill takes most of a short run under
# TSan, so the run is long enough and the pool small enough for the
# eviction share the program requires.
"$b/stress/stress_prefix" 3 3 --blocks 2048 --prefixes 16 --full 1
"$b/stress/stress_prefix" 3 3 --blocks 512 --prefixes 16 --full 1 --retain 1
"$b/stress/stress_integrity" 3 2
"$b/stress/stress_integrity" 3 2 --blocks 48 --full 1
