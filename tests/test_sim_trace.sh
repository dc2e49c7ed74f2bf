#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpool sim on the real Mooncake conversation trace, read from
# ../shared/traces/ beside the source tree (never copied into the
# project): with an unlimited pool the hit rate equals the independent
# computation of tests/sim_hitrate.py.  Skipped (status 77, with the
# reason) when the trace is absent.
#
# 512-token blocks by default (0.3 M distinct cached blocks, about a
# second per replay).  KVP_SIM_TRACE_BLOCKS="16 64" adds configurations
# (block tokens, 2 threads): with 1.4 M and 5.8 M cached blocks the
# library's prefix map can slow down by orders of magnitude (replays of
# 10 s to over 15 min were measured), so they are not part of make check.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
kv="$b/tools/kvpool"
py=${PYTHON:-python3}
trace="$s/../shared/traces/conversation_trace.jsonl"
if [ ! -r "$trace" ]; then
	echo "SKIP: test_sim_trace: no trace at $trace (the project's shared/ directory is not beside the source tree)"
	exit 77
fi
failed=0
# A replay takes seconds; a stuck one fails the test instead of the run.
to=
command -v timeout >/dev/null 2>&1 && to="timeout 600"
n=0
for cfg in "512 2" "512 1" $(for bt in ${KVP_SIM_TRACE_BLOCKS:-}; do
	echo "$bt,2"
done); do
	cfg=$(echo "$cfg" | tr , ' ')
	n=$((n + 1))
	set -- $cfg
	want=$("$py" "$s/tests/sim_hitrate.py" "$trace" --block-tokens "$1" |
		awk '{ printf "%.3f\n", $1 }')
	got=$($to "$kv" sim --trace "$trace" --blocks 0 --block-tokens "$1" \
		--threads "$2" --json | "$py" -c 'import json, sys
d = json.load(sys.stdin)["kvpool"]
print("%.3f" % d["hit_rate"])
sys.stderr.write("replay %.2f s\n" % d["seconds"])')
	if [ -n "$want" ] && [ "$got" = "$want" ]; then
		echo "ok: conversation trace, $1-token blocks, $2 thread(s): hit rate $got == $want"
	else
		echo "FAIL: conversation trace, $1-token blocks, $2 thread(s): kvpool sim '$got', independent '$want'"
		failed=$((failed + 1))
	fi
done
echo "test_sim_trace: $((n - failed)) passed, $failed failed"
[ $failed -eq 0 ]
