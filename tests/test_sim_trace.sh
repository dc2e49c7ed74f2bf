#!/bin/sh
# kvpool sim on the real Mooncake conversation trace, read from
# ../shared/traces/ beside the source tree (never copied into the
# project): with an unlimited pool the hit rate equals the independent
# computation of tests/sim_hitrate.py.  Skipped (status 77, with the
# reason) when the trace is absent.
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
# 64- and 512-token blocks: 1.4 M and 0.3 M distinct cached blocks.
for cfg in "64 2" "512 2" "512 1"; do
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
echo "test_sim_trace: $((3 - failed)) passed, $failed failed"
[ $failed -eq 0 ]
