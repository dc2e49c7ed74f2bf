#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/ab.sh - A/B throughput of two revisions, both builds interleaved in
# one run: the "no regression beyond P%" check.
#
# usage: bench/ab.sh [-n N] [-s SET] [-p P] [-t TRACE] [-o DIR] [A [B]]
#
#   A, B      git revisions (default: the merge base of main and HEAD, and
#             HEAD).  Each is exported with `git archive` into DIR/src-<hash>
#             and built out of tree in DIR/build-<hash> (reused by later
#             runs when its build completed; committed sources only, so the
#             working tree's edits are not measured).
#   -n N      rounds (default 3).  Each round runs A then B, the measures
#             of SET:
#               sim T=1, sim T=2  `kvpool sim --trace TRACE --blocks 50000
#                                 --threads T --reps 1 --json`: the replay's
#                                 block operations per second;
#               evict/...         `bench_evict --threads 1,2 --reps 3
#                                 --seconds 0.3`: requests per second of each
#                                 kvpool workload and thread count (about
#                                 10 s; the mutex peer's rows are left out);
#               pool/..., seq/... `bench_pool` / `bench_seq --threads 1,2
#                                 --reps 3 --seconds 0.2`: kvpool's
#                                 operations per second, each workload and
#                                 thread count (the peers' rows left out).
#   -s SET    comma-separated subset of sim,evict,pool,seq (default
#             sim,evict).
#   -p P      the regression threshold in percent (default 5).
#   -t TRACE  the conversation trace (default ../shared/traces/
#             conversation_trace.jsonl from the repository's top); when it
#             is absent the sim part is skipped, with one line saying so.
#   -o DIR    where sources, builds and logs go (default /tmp/kvpool-ab).
#
# Prints, per measure, the median over rounds of A and of B, each side's
# spread ((max - min) / median over its rounds: the noise to read the ratio
# against) and B/A (every measure is a throughput: higher is better), then
# the verdict line "no regression beyond P%: PASS" (every B/A >= 1 - P/100)
# or FAIL with the measures below.  Exit status: 0 PASS, 1 FAIL, 2 a usage or
# build error.
set -eu

die() {
	echo "ab.sh: $*" >&2
	exit 2
}

rounds=3
set_=sim,evict
pct=5
trace=
out=/tmp/kvpool-ab
while getopts n:s:p:t:o:h opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	s) set_=$OPTARG ;;
	p) pct=$OPTARG ;;
	t) trace=$OPTARG ;;
	o) out=$OPTARG ;;
	h)
		sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "usage: bench/ab.sh [-n N] [-s SET] [-p P] [-t TRACE] [-o DIR] [A [B]]" ;;
	esac
done
shift $((OPTIND - 1))
[ $# -le 2 ] || die "at most two revisions, got $#"
case $rounds in
'' | *[!0-9]* | 0) die "-n: expected a positive integer, got '$rounds'" ;;
esac
case $pct in
'' | *[!0-9]*) die "-p: expected a whole percentage, got '$pct'" ;;
esac
for m in ${set_//,/ }; do
	case $m in
	sim | evict | pool | seq) ;;
	*) die "-s: unknown measure '$m' (sim, evict, pool, seq)" ;;
	esac
done
want() { case ",$set_," in *",$1,"*) return 0 ;; esac; return 1; }

top=$(git rev-parse --show-toplevel 2>/dev/null) ||
	die "not inside a git repository"
cd "$top"
[ -n "$trace" ] || trace=$top/../shared/traces/conversation_trace.jsonl

if [ $# -ge 1 ]; then
	rev_a=$1
else
	base=main
	git rev-parse -q --verify "main^{commit}" >/dev/null || base=origin/main
	rev_a=$(git merge-base "$base" HEAD) ||
		die "no merge base of $base and HEAD"
fi
rev_b=${2:-HEAD}
hash_a=$(git rev-parse -q --verify "$rev_a^{commit}") ||
	die "A: '$rev_a' is not a commit"
hash_b=$(git rev-parse -q --verify "$rev_b^{commit}") ||
	die "B: '$rev_b' is not a commit"
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)

# build HASH: exports and builds the revision (once); echoes its build dir.
build() {
	local h=$1 src=$out/src-$1 bld=$out/build-$1 log=$out/build-$1.log
	if [ -e "$bld/.ab-built" ]; then
		echo "$bld"
		return
	fi
	echo "ab.sh: building ${h:0:12} in $bld (log: $log)" >&2
	rm -rf "$src" "$bld"
	mkdir -p "$src" "$bld"
	if ! {
		git archive --format=tar "$h" | tar -x -C "$src" &&
			(cd "$src" && autoreconf -fi) &&
			(cd "$bld" && "$src/configure") &&
			make -C "$bld" -j2 tools/kvpool bench/bench_evict \
				bench/bench_pool bench/bench_seq
	} >"$log" 2>&1; then
		tail -n 20 "$log" >&2
		die "building ${h:0:12} failed: see $log"
	fi
	touch "$bld/.ab-built"
	echo "$bld"
}

bld_a=$(build "$hash_a")
bld_b=$(build "$hash_b")

sim=yes
if ! want sim; then
	sim=no
elif [ ! -r "$trace" ]; then
	echo "ab.sh: no trace at $trace: the sim part is skipped"
	sim=no
else
	trace=$(cd "$(dirname "$trace")" && pwd)/$(basename "$trace")
fi

results=$out/results.$$
: >"$results"
trap 'rm -f "$results" "$results.csv"' EXIT

# measure SIDE BUILD ROUND: appends "side measure value" lines to $results.
measure() {
	local side=$1 bld=$2 round=$3 log json v t
	log=$out/run-$side-$round.log
	: >"$log"
	if [ $sim = yes ]; then
		for t in 1 2; do
			json=$("$bld/tools/kvpool" sim --trace "$trace" \
				--blocks 50000 --threads $t --reps 1 --json \
				2>>"$log") ||
				die "$side: kvpool sim --threads $t failed (see $log)"
			v=$(printf '%s\n' "$json" |
				grep -o '"block_ops_per_s": [0-9.e+]*' |
				head -n 1 | sed 's/.*: //')
			[ -n "$v" ] ||
				die "$side: no block_ops_per_s in sim's output"
			echo "$side sim-T$t-blockops/s $v" >>"$results"
		done
	fi
	if want evict; then
		"$bld/bench/bench_evict" --threads 1,2 --reps 3 --seconds 0.3 \
			--csv "$results.csv" >>"$log" 2>&1 ||
			die "$side: bench_evict failed (see $log)"
		# workload,threads,requests_per_s,ns_per_block_thread
		awk -F, -v side="$side" 'NR > 1 && $1 != "mutex" {
			printf "%s evict/%s/T%s-req/s %s\n", side, $1, $2, $3
		}' "$results.csv" >>"$results"
	fi
	for b in pool seq; do
		want $b || continue
		"$bld/bench/bench_$b" --threads 1,2 --reps 3 --seconds 0.2 \
			--csv "$results.csv" >>"$log" 2>&1 ||
			die "$side: bench_$b failed (see $log)"
		# workload,peer,threads,rep_median_mops,ns_per_...
		awk -F, -v side="$side" -v b=$b 'NR > 1 && $2 == "kvpool" {
			printf "%s %s/%s/T%s-Mops/s %s\n", side, b, $1, $3, $4
		}' "$results.csv" >>"$results"
	done
}

echo "ab.sh: A = ${hash_a:0:12} ($rev_a), B = ${hash_b:0:12} ($rev_b)," \
	"$rounds rounds interleaved A B; logs in $out"
echo "ab.sh: CPU load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
	measure A "$bld_a" $r
	measure B "$bld_b" $r
	echo "ab.sh: round $r of $rounds done" >&2
done

awk -v n="$rounds" -v pct="$pct" '
# median(key) also sets lo and hi, the smallest and largest value.
function median(key,    m, i, j, t, v) {
	m = cnt[key]
	for (i = 1; i <= m; i++)
		v[i] = val[key, i]
	for (i = 2; i <= m; i++)
		for (j = i; j > 1 && v[j - 1] > v[j]; j--) {
			t = v[j]; v[j] = v[j - 1]; v[j - 1] = t
		}
	lo = v[1]
	hi = v[m]
	return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
}
# The spread of one side over its rounds, (hi - lo) / median, in percent.
function spread(med) {
	return med > 0 ? 100 * (hi - lo) / med : 0
}
{
	key = $1 SUBSEP $2
	val[key, ++cnt[key]] = $3
	if (!($2 in seen)) {
		seen[$2] = 1
		order[++nm] = $2
	}
}
END {
	printf "%-30s %12s %6s %12s %6s %7s\n", "measure (median of " n ")",
		"A", "spread", "B", "spread", "B/A"
	fail = ""
	for (i = 1; i <= nm; i++) {
		m = order[i]
		a = median("A" SUBSEP m)
		sa = spread(a)
		b = median("B" SUBSEP m)
		sb = spread(b)
		ratio = a > 0 ? b / a : 0
		printf "%-30s %12.0f %5.0f%% %12.0f %5.0f%% %7.3f%s\n", m, a,
			sa, b, sb, ratio, ratio < 1 - pct / 100 ? "  <" : ""
		if (ratio < 1 - pct / 100)
			fail = fail " " m
	}
	if (fail == "") {
		print "no regression beyond " pct "%: PASS"
	} else {
		print "no regression beyond " pct "%: FAIL (" substr(fail, 2) ")"
		exit 1
	}
}' "$results"
