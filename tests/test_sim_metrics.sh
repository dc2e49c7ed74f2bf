#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpool sim --metrics FILE [--metrics-every N]: the final scrape and the
# periodic ones are complete OpenMetrics texts that prometheus_client's
# parser reads, the periodic ones numbered in order, their counters never
# decreasing from one to the next and to the final one; the options'
# misuse and failed writes give one line and a non-zero status.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
kv="$b/tools/kvpool"
. "$s/tests/python_with.sh"
PY=$(python_with prometheus_client)
if ! "$PY" -c "import prometheus_client" 2>/dev/null; then
	echo "SKIP: test_sim_metrics: no Python with prometheus_client" \
		"(python3-prometheus-client)"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() {
	echo "ok: $*"
	passed=$((passed + 1))
}
bad() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}

if "$kv" sim --requests 400 --threads 2 --models 2 --metrics "$tmp/m" \
	--metrics-every 40 >/dev/null 2>"$tmp/err"; then
	ok "sim --metrics --metrics-every ran"
else
	bad "sim --metrics --metrics-every: $(cat "$tmp/err")"
fi
if "$PY" - "$tmp/m" <<'PYEOF'; then
import glob, sys
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as parse
base = sys.argv[1]
names = sorted(glob.glob(base + ".*"))
n = len(names)
assert n >= 2, "only %d periodic scrapes" % n
# Six digits, so that a listing's order is the scrapes' (FILE.10 sorted
# before FILE.2).
assert names == ["%s.%06d" % (base, k) for k in range(1, n + 1)], names
last = {}
for path in names + [base]:
    text = open(path).read()
    fams = {f.name: f for f in parse(text)}  # raises on malformed text
    models = {s.labels["manager"] for s in
              fams["kvpool_sequence_appends"].samples}
    assert models == {"model0", "model1"}, (path, models)
    for f in fams.values():
        if f.type != "counter":
            continue
        for s in f.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert s.value >= last.get(key, 0), (path, key, s.value,
                                                 last.get(key))
            last[key] = s.value
assert last[("kvpool_sequence_appends_total",
             (("manager", "model0"),))] > 0
print("%d periodic scrapes and the final one parse; counters never "
      "decrease" % n)
PYEOF
	ok "the scrapes parse in order"
else
	bad "the scrapes"
fi

# usage_status ARGS...: status 2 and one line (and, for most, a pointer
# to --help).
usage_status() {
	"$kv" sim --requests 50 "$@" >/dev/null 2>"$tmp/err"
	rc=$?
	if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -le 2 ]; then
		ok "sim $*: $(head -n 1 "$tmp/err")"
	else
		bad "sim $*: status $rc, stderr: $(cat "$tmp/err")"
	fi
}
usage_status --metrics-every 5
usage_status --metrics "$tmp/x" --metrics-every 0
usage_status --metrics "$tmp/x" --sweep-capacity --capacities 100
usage_status --metrics
# write_fails ARGS...: status 1 and one line naming the file.
write_fails() {
	"$kv" sim --requests 200 "$@" >/dev/null 2>"$tmp/err"
	rc=$?
	if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q "writing" "$tmp/err"; then
		ok "sim $*: $(cat "$tmp/err")"
	else
		bad "sim $*: status $rc, stderr: $(cat "$tmp/err")"
	fi
}
write_fails --metrics "$tmp/no/such/dir/m"
write_fails --metrics "$tmp/no/such/dir/m" --metrics-every 10
[ -w /dev/full ] && write_fails --metrics /dev/full

echo "test_sim_metrics: $passed passed, $failed failed"
[ $failed -eq 0 ]
