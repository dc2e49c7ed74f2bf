#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpool sim: with an unlimited pool (--blocks 0) the prefix hit rate equals
# the one tests/sim_hitrate.py computes from the trace file on its own, for
# tests/data/sim_small.jsonl (block sizes, thread and model counts) and for
# the embedded synthetic workload; malformed trace lines fail with
# FILE:LINE, exit status 2 and nothing on stdout; options; the capacity
# sweep; the mutex comparison; runs under memory pressure for every policy.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
kv="$b/tools/kvpool"
py=${PYTHON:-python3}
small="$s/tests/data/sim_small.jsonl"
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

# The hit rate (3 decimals) kvpool sim reports, or "error".
sim_rate() {
	"$kv" sim --json --blocks 0 "$@" >"$tmp/out.json" 2>"$tmp/err" ||
		{ cat "$tmp/err"; echo error; return; }
	"$py" -c 'import json, sys
print("%.3f" % json.load(open(sys.argv[1]))["kvpool"]["hit_rate"])' \
		"$tmp/out.json"
}

# The independent hit rate (3 decimals).
py_rate() {
	"$py" "$s/tests/sim_hitrate.py" "$@" | awk '{ printf "%.3f\n", $1 }'
}

check_rate() { # check_rate TRACE BLOCK_TOKENS MODELS THREADS [sim options]
	t=$1 bt=$2 m=$3 th=$4
	shift 4
	want=$(py_rate "$t" --block-tokens "$bt" --models "$m")
	got=$(sim_rate --trace "$t" --block-tokens "$bt" --models "$m" \
		--threads "$th" "$@")
	if [ "$got" = "$want" ]; then
		ok "hit rate $got == $want ($(basename "$t"), $bt-token blocks, $m model(s), $th thread(s) $*)"
	else
		bad "hit rate: kvpool sim $got, independent $want ($(basename "$t"), $bt-token blocks, $m model(s), $th thread(s) $*)"
	fi
}

# The option, malformed-input, help and output checks run the CLI's
# single-threaded parsing and writing: under TSan, which has nothing to
# find there and makes each of the 99 runs cost a second, they are
# skipped with one line (they run in every other flavour).
cli_checks() {
	[ "${KVP_SANITIZER:-none}" != tsan ]
}
cli_checks || echo "SKIP: test_sim: under TSan the option, malformed-input," \
	"help and output checks are skipped (single-threaded CLI code;" \
	"every other flavour runs them)"

# ---- exact hit rates
for bt in 16 7 512 600; do
	for m in 1 2; do
		for th in 1 4; do
			check_rate "$small" $bt $m $th
		done
	done
done
check_rate "$small" 32 1 2 --policy longest --max-running 3
"$kv" sim --requests 600 --seed 7 --dump-workload "$tmp/synth.jsonl" ||
	bad "--dump-workload"
check_rate "$tmp/synth.jsonl" 16 1 2
check_rate "$tmp/synth.jsonl" 16 3 3
# The dump is the workload itself: the same numbers either way.
a=$("$kv" sim --requests 600 --seed 7 --blocks 0 --json | "$py" -c \
	'import json,sys; d=json.load(sys.stdin)["kvpool"]; print(d["prefix_hits"], d["forks"], d["cow_copies"])')
c=$("$kv" sim --trace "$tmp/synth.jsonl" --blocks 0 --json | "$py" -c \
	'import json,sys; d=json.load(sys.stdin)["kvpool"]; print(d["prefix_hits"], d["forks"], d["cow_copies"])')
[ -n "$a" ] && [ "$a" = "$c" ] && ok "synthetic == its dump ($a)" ||
	bad "synthetic ($a) != its dump ($c)"

if cli_checks; then
# ---- malformed lines: FILE:LINE, status 2, nothing on stdout
good='{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}'
malformed() { # malformed NAME LINE EXPECTED-MESSAGE (file from stdin)
	f="$tmp/$1.jsonl"
	cat >"$f"
	"$kv" sim --trace "$f" >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	if [ $rc -eq 2 ] && [ ! -s "$tmp/stdout" ] &&
		grep -q "$f:$2: .*$3" "$tmp/stderr"; then
		ok "malformed ($1): $(cat "$tmp/stderr")"
	else
		bad "malformed ($1): status $rc, stdout $(wc -c <"$tmp/stdout") bytes, stderr: $(cat "$tmp/stderr") (expected $f:$2: ...$3)"
	fi
}
printf '%s\n%s\n' "$good" '{"timestamp": 1, "input_length": 100, "output_length": 5, "hash_ids": [1}' |
	malformed syntax 2 "expected ']'"
printf '%s\n%s\n%s\n' "$good" "$good" '{"timestamp": 2, "output_length": 5, "hash_ids": [1]}' |
	malformed missing 3 'missing field "input_length"'
printf '%s\n%s\n' "$good" '{"timestamp": 1, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2]}' |
	malformed ids 2 "hash_ids has 2 ids, but input_length 1500 needs 3"
printf '%s\n' '{"timestamp": 0, "input_length": -3, "output_length": 5, "hash_ids": [1]}' |
	malformed range 1 '"input_length" must be an integer'
printf '%s\n\n%s\n' "$good" "$good x" | malformed trailing 3 "unexpected 'x'"
printf '%s\n' '{"timestamp": 0, "input_length": 100, "input_length": 100, "output_length": 5, "hash_ids": [1]}' |
	malformed duplicate 1 'duplicate field "input_length"'
printf '%s\n' '{"timestamp": "0", "input_length": 100, "output_length": 5, "hash_ids": [1]}' |
	malformed type 1 "expected a number"
printf '%s\n' "$good" '{"timestamp": 1, "input_length": 100, "output_length": 5, "hash_ids": [1.5]}' |
	malformed fraction 2 '"hash_ids" entries must be integers'
# Unprintable bytes of a line are shown escaped: raw, an ESC or BEL went
# to the terminal and a NUL cut the message short.
unprintable() { # unprintable NAME PRINTF-LINE EXPECTED-TEXT
	printf "$2" >"$tmp/$1.jsonl"
	"$kv" sim --trace "$tmp/$1.jsonl" >/dev/null 2>"$tmp/stderr"
	rc=$?
	if [ $rc -eq 2 ] && grep -qF "$3" "$tmp/stderr" &&
		[ "$(tr -d '\n' <"$tmp/stderr" | tr -d '\040-\176' | wc -c)" -eq 0 ]; then
		ok "unprintable ($1): $(cat "$tmp/stderr")"
	else
		bad "unprintable ($1): status $rc, stderr: $(cat -v "$tmp/stderr") (expected $3)"
	fi
}
unprintable esc '\033[31mX\n' "column 1: expected '{', found '\\x1b'"
unprintable bel '\007\n' "expected '{', found '\\x07'"
unprintable nul '\000abc\n' "expected '{', found '\\x00'"
unprintable vt "$good"'\013\n' "unexpected '\\x0b' after the object"
"$kv" sim --trace "$tmp/does-not-exist.jsonl" >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
[ $rc -eq 2 ] && grep -q "does-not-exist.jsonl: No such file" "$tmp/stderr" &&
	ok "missing file: $(cat "$tmp/stderr")" || bad "missing file: status $rc"

# ---- options
usage_status() { # usage_status WANT ARGS...
	want=$1
	shift
	"$kv" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
	rc=$?
	[ $rc -eq "$want" ] && ok "kvpool $*: status $rc" ||
		bad "kvpool $*: status $rc, expected $want ($(head -c 200 "$tmp/stderr"))"
}
usage_status 0 --help
usage_status 0 sim --help
usage_status 0 bench --help
usage_status 2 frobnicate
usage_status 2 sim --frobnicate
usage_status 2 sim --threads 0
usage_status 2 sim --policy fifo
usage_status 2 sim --compare spinlock
usage_status 2 sim --json=yes
usage_status 2 bench --frobnicate 1
grep -q "unknown option '--frobnicate'" "$tmp/stderr" &&
	ok "unknown options are named" || bad "unknown option message: $(cat "$tmp/stderr")"

# ---- a malformed capacity list: one line on stderr, status 2
for caps in abc 400,,800 400, -1; do
	usage_status 2 sim --requests 20 --sweep-capacity --compare mutex \
		--capacities "$caps"
	[ "$(wc -l <"$tmp/stderr")" -eq 1 ] &&
		ok "--capacities $caps: one line" ||
		bad "--capacities $caps: $(cat "$tmp/stderr")"
done

fi # cli_checks
# ---- the policies' sweep: a header and policies x capacities rows
"$kv" sim --trace "$small" --sweep-policies --capacities 400,800,100000 \
	>"$tmp/sweep.csv" 2>"$tmp/stderr"
rows=$(grep -c '^[a-z]*,[0-9]' "$tmp/sweep.csv")
head -n 1 "$tmp/sweep.csv" | grep -q '^policy,blocks,capacity_fraction,hit_rate' &&
	[ "$rows" -eq 12 ] && ok "sweep: 12 rows" ||
	bad "sweep: $rows rows: $(cat "$tmp/sweep.csv" "$tmp/stderr")"
if command -v gnuplot >/dev/null 2>&1; then
	"$kv" sim --requests 300 --sweep-capacity --capacities 3000,6000,50000 \
		--plot "$tmp/sweep.png" >/dev/null 2>"$tmp/stderr"
	head -c 8 "$tmp/sweep.png" 2>/dev/null | od -c | grep -q 'P   N   G' &&
		ok "sweep plot: a PNG" || bad "sweep plot: no PNG ($(cat "$tmp/stderr"))"
else
	echo "skip: the PNG (gnuplot is not installed; the FILE.gp scripts below are checked)"
fi

if cli_checks; then
# ---- what the plots draw (FILE.gp: the script, no gnuplot needed): the
# sweep, both managers' hit rate and throughput by capacity (four policy
# curves on top of each other were its default); the policies only when
# asked; the bench's x axis the thread counts given (it ran 1-10 for 1,2)
"$kv" sim --requests 300 --sweep-capacity --capacities 3000,50000 \
	--plot "$tmp/sweep.gp" >/dev/null 2>"$tmp/stderr" &&
	"$py" - "$tmp/sweep.gp" <<'PYEOF' && ok "sweep plot: hit rate and throughput, kvpool and mutex" ||
import re, sys
g = open(sys.argv[1]).read()
assert "set output '%s.png'" % sys.argv[1][:-3] in g, g
ylabels = re.findall(r"^set ylabel '(.*)'$", g, re.M)
assert ylabels == ["prefix hit rate (tokens)", "requests per second"], ylabels
plots = re.findall(r"^plot (.*)$", g, re.M)
assert len(plots) == 2, plots
for p in plots:
    assert re.findall(r"title '([^']*)'", p) == ["kvpool", "mutex"], p
assert "set xrange [3000:50000]" in g, g
PYEOF
	bad "sweep plot script: $(cat "$tmp/sweep.gp" "$tmp/stderr" 2>/dev/null | head -40)"
"$kv" sim --requests 300 --sweep-policies --capacities 3000,50000 \
	--plot "$tmp/pol.gp" >/dev/null 2>"$tmp/stderr" &&
	[ "$(grep -o "title '[a-z]*'" "$tmp/pol.gp" | tr '\n' ' ')" = \
		"title 'lru' title 'lfu' title 'longest' title 'priority' " ] &&
	ok "--sweep-policies plot: the four policies" ||
	bad "--sweep-policies plot: $(cat "$tmp/pol.gp" "$tmp/stderr" 2>/dev/null | head -30)"
"$kv" bench --threads 1,2 --workloads pair --seconds 0.01 --reps 1 \
	--plot "$tmp/bench.gp" >/dev/null 2>"$tmp/stderr" &&
	grep -qx 'set xrange \[1:2\]' "$tmp/bench.gp" &&
	grep -qx 'set xtics (1, 2)' "$tmp/bench.gp" &&
	ok "bench plot: the x axis runs 1 to 2, tics at 1 and 2" ||
	bad "bench plot: $(grep -E 'xrange|xtics' "$tmp/bench.gp") $(cat "$tmp/stderr")"

# ---- every option's help ends with a full stop, and fits 80 columns
# (--retain-system's stopped mid-sentence)
for cmd in sim bench; do
	"$kv" $cmd --help >"$tmp/help" 2>&1
	if "$py" - "$tmp/help" <<'PYEOF'; then
import sys
text = open(sys.argv[1]).read().splitlines()
long = [l for l in text if len(l) > 80]
assert not long, "lines over 80 columns: %r" % long
opts, cur = [], None
for line in text:
    if line.startswith("  -"):
        cur = [line]
        opts.append(cur)
    elif line.startswith("      ") and cur is not None:
        cur.append(line)
    else:
        cur = None
assert len(opts) > 5, opts
bad = [o[0].split()[0] for o in opts if not o[-1].rstrip().endswith(".")]
assert not bad, "help without a full stop: %s" % ", ".join(bad)
PYEOF
		ok "kvpool $cmd --help: every option's help ends with a full stop"
	else
		bad "kvpool $cmd --help"
	fi
done

# ---- the sweep's progress: on a terminal (script(1) gives it one), each
# replay says which capacity of how many, and the time since the sweep
# began; none when stderr is a file
if command -v script >/dev/null 2>&1; then
	script -qec "'$kv' sim --requests 300 --sweep-capacity --capacities 3000,50000 >/dev/null" \
		"$tmp/tty.txt" >/dev/null 2>&1
	tr '\r' '\n' <"$tmp/tty.txt" >"$tmp/tty"
	grep -q "capacity 1 of 2 (3000 blocks), rep 1 of 1: kvpool .* s into the sweep" "$tmp/tty" &&
		grep -q "capacity 2 of 2 (unlimited), rep 1 of 1: mutex" "$tmp/tty" &&
		ok "sweep progress on a terminal" ||
		bad "sweep progress: $(head -c 600 "$tmp/tty")"
else
	echo "skip: the sweep's progress on a terminal (no script(1))"
fi
"$kv" sim --requests 300 --sweep-capacity --capacities 3000,50000 \
	>/dev/null 2>"$tmp/stderr"
grep -q "capacity 1 of" "$tmp/stderr" && bad "progress on a file: $(cat "$tmp/stderr")" ||
	ok "no progress when stderr is not a terminal"

# ---- each CSV row is written when its capacity is done, not at the end:
# the first row is in the file while the sweep still runs
rows_early() { # rows_early FILE ARGS...: the first row before the exit
	f=$1
	shift
	"$kv" sim "$@" >"$tmp/early.out" 2>/dev/null &
	pid=$!
	n=0
	while [ $n -lt 600 ] && kill -0 $pid 2>/dev/null; do
		c=$(grep -c '^[a-z0-9]*,' "$f" 2>/dev/null)
		[ "${c:-0}" -ge 2 ] && break
		sleep 0.05
		n=$((n + 1))
	done
	running=no
	kill -0 $pid 2>/dev/null && running=yes
	wait $pid
	[ $running = yes ]
}
rows_early "$tmp/early.out" --requests 2000 --sweep-policies \
	--capacities 2000,3000,4000,200000 &&
	ok "--sweep-policies: rows while the sweep runs" ||
	bad "--sweep-policies: no row before the end"
rows_early "$tmp/early.csv" --requests 2000 --sweep-capacity \
	--capacities 2000,3000,4000,200000 --reps 2 --csv "$tmp/early.csv" &&
	ok "--sweep-capacity --csv: rows while the sweep runs" ||
	bad "--sweep-capacity --csv: no row before the end"

fi # cli_checks
# ---- the comparing sweep: a table row and a CSV row per capacity; with
# one thread and an unlimited pool both peers do identical work, so the
# same hit rate
"$kv" sim --trace "$small" --sweep-capacity --compare mutex --threads 1 \
	--capacities 400,0 --reps 2 --csv "$tmp/cmp.csv" \
	>"$tmp/cmp.txt" 2>"$tmp/stderr" &&
	"$py" -c 'import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2, rows
assert rows[0]["blocks"] == "400" and rows[0]["unlimited"] == "0", rows
assert rows[1]["unlimited"] == "1", rows
assert rows[1]["kvpool_hit_rate"] == rows[1]["mutex_hit_rate"], rows
for r in rows:
    assert float(r["ratio"]) > 0 and float(r["kvpool_s"]) >= 0, r
table = open(sys.argv[2]).read().split("\n")
assert table[0].split()[:4] == ["capacity", "kvpool_s", "mutex_s", "ratio"], table
assert table[1].split()[0] == "400" and table[2].split()[0] == "unlimited", table' \
		"$tmp/cmp.csv" "$tmp/cmp.txt" &&
	ok "sweep --compare mutex: table and CSV" ||
	bad "sweep --compare mutex: $(cat "$tmp/cmp.txt" "$tmp/cmp.csv" "$tmp/stderr")"
"$kv" sim --trace "$small" --csv "$tmp/x.csv" >/dev/null 2>"$tmp/stderr"
[ $? -eq 2 ] && [ "$(wc -l <"$tmp/stderr")" -le 2 ] &&
	ok "--csv without the comparing sweep: usage error" ||
	bad "--csv without the sweep: $(cat "$tmp/stderr")"

# ---- the mutex comparison does identical work
"$kv" sim --trace "$small" --blocks 0 --compare mutex --json >"$tmp/cmp.json" &&
	"$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["identical_work"] is True, d
assert d["throughput_ratio_kvpool_over_mutex"] > 0
assert d["kvpool"]["hit_rate"] == d["mutex"]["hit_rate"]' "$tmp/cmp.json" &&
	ok "compare mutex: identical work" || bad "compare mutex: $(cat "$tmp/cmp.json")"

# ---- memory pressure, every policy: every request accounted for, the
# invariants checked after the replay (kvpool sim aborts otherwise)
npre=0
for p in lru lfu longest priority; do
	for mode in "" --unordered; do
		if "$kv" sim --requests 400 --blocks 1500 --max-running 128 \
			--policy $p --threads 3 --models 2 $mode --json \
			>"$tmp/p.json" 2>"$tmp/stderr" &&
			"$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))["kvpool"]
assert d["completed"] + d["rejected"] + d["abandoned"] == 400, d
print(d["preemptions"], "%.3f" % d["hit_rate"])' "$tmp/p.json" >"$tmp/msg"; then
			read -r n rate <"$tmp/msg"
			npre=$((npre + n))
			ok "pressure, policy $p $mode: $n preemptions, hit rate $rate"
		else
			bad "pressure, policy $p $mode: $(cat "$tmp/p.json" "$tmp/stderr" "$tmp/msg")"
		fi
	done
done
[ $npre -gt 0 ] && ok "pressure: $npre preemptions in all" ||
	bad "pressure: no preemption at all"

# ---- retention: --retain-system's malformed values are usage errors; on
# the system-prompt workload at a capacity where plain LRU evicts the
# system prompts, pinning them keeps every one of their blocks, and the
# hit rate is not lower
for v in 2048 2048:16 2048:3: 2048:3:0 0:3 2048:3:5:1 x:1 2048:-1; do
	usage_status 2 sim --retain-system "$v"
done
usage_status 2 sim --workload sys
usage_status 2 sim --trace "$small" --workload sysprompt
if "$kv" sim --workload sysprompt --requests 3000 --retain-system 2048:15 \
	--sweep-capacity --capacities 4096 >"$tmp/ret.csv" 2>"$tmp/stderr" &&
	"$py" -c 'import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert int(r["retained_range_evicted"]) > 0, r
assert int(r["retained_range_evicted_retained"]) == 0, r
assert float(r["hit_rate_retained"]) >= float(r["hit_rate"]), r
print(r["retained_range_evicted"], r["hit_rate"], r["hit_rate_retained"])' \
		"$tmp/ret.csv" >"$tmp/msg"; then
	read -r ev h0 h1 <"$tmp/msg"
	ok "retention: plain LRU evicted $ev system-prompt blocks, pinned none; hit rate $h0 -> $h1"
else
	bad "retention sweep: $(cat "$tmp/ret.csv" "$tmp/stderr" "$tmp/msg" 2>/dev/null)"
fi

if cli_checks; then
# ---- honest limits and outputs (each failed before its fix)
# one_line STATUS PATTERN ARGS...: kvpool sim exits STATUS with one stderr
# line matching PATTERN (a bounded run: timeout 60 s).
one_line() {
	want=$1 pat=$2
	shift 2
	timeout 60 "$kv" sim "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc -eq "$want" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q "$pat" "$tmp/err"; then
		ok "sim $*: $(cat "$tmp/err")"
	else
		bad "sim $*: status $rc (want $want), stderr: $(cat "$tmp/err")"
	fi
}
one_line 1 "needs about .* GB, more than" --sweep-capacity \
	--capacities 2147483647 --requests 50
one_line 1 "needs about .* GB, more than" --blocks 2147483647 --requests 50
one_line 2 "/dev/zero:1: a line longer than 16 MiB" --trace /dev/zero
# An 11 KB line asking for 2^31 tokens: refused from the lengths alone,
# before hashing (it hashed for about 54 s at 6.3 GB first), within 10 s
# and 1 GB of address space.
"$py" -c 'import json
print(json.dumps({"timestamp": 0, "input_length": 2147483647,
                  "output_length": 1, "hash_block_tokens": 1048576,
                  "hash_ids": list(range(2048))}))' >"$tmp/big.jsonl"
case "${KVP_SANITIZER:-none}" in
none | "")
	(ulimit -v 1000000 2>/dev/null; timeout 10 "$kv" sim --trace "$tmp/big.jsonl" \
		>"$tmp/out" 2>"$tmp/err")
	rc=$?
	if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q "a pool of .* blocks needs about .* GB, more than .*(with the workload's block hashes)" "$tmp/err"; then
		ok "sim --trace big.jsonl: $(cat "$tmp/err")"
	else
		bad "sim --trace big.jsonl: status $rc (want 1), stderr: $(cat "$tmp/err")"
	fi
	;;
*)
	echo "skip: sim --trace big.jsonl under ulimit -v: a sanitizer's runtime reserves terabytes of address space"
	;;
esac
# stdout lost on a full device: status 1 and one line saying so.
one_line_full() {
	timeout 60 "$kv" sim "$@" >/dev/full 2>"$tmp/err"
	rc=$?
	if [ $rc -eq 1 ] && grep -q "writing the output" "$tmp/err"; then
		ok "sim $* >/dev/full: $(tail -n 1 "$tmp/err")"
	else
		bad "sim $* >/dev/full: status $rc, stderr: $(cat "$tmp/err")"
	fi
}
if [ -w /dev/full ]; then
	one_line_full --requests 50
	one_line_full --sweep-capacity --requests 100 --capacities 100,200
	if "$kv" sim --requests 50 --sweep-capacity --compare mutex --capacities 100 \
		--csv /dev/full >/dev/null 2>"$tmp/err"; then
		bad "sim --csv /dev/full: status 0"
	else
		ok "sim --csv /dev/full: $(tail -n 1 "$tmp/err")"
	fi
fi

# A requested plot not written is a failure: exit 1 and one line saying
# why (each exited 0, or printed gnuplot's 8 lines, before its fix).
# plot_fails NAME PATTERN CMD...: the last stderr line matches PATTERN and
# is the only one naming the plot.
plot_fails() {
	name=$1 pat=$2
	shift 2
	"$@" >/dev/null 2>"$tmp/err"
	rc=$?
	if [ $rc -eq 1 ] && tail -n 1 "$tmp/err" | grep -q "$pat" &&
		[ "$(grep -vc "sweeping\|busy\|capacities x" "$tmp/err")" -eq 1 ]; then
		ok "$name: $(tail -n 1 "$tmp/err")"
	else
		bad "$name: status $rc (want 1), stderr: $(cat "$tmp/err")"
	fi
}
sweep="sim --requests 100 --sweep-capacity --capacities 100,200"
bench="bench --seconds 0.01 --reps 1 --threads 1 --workloads pair"
if command -v gnuplot >/dev/null 2>&1; then
	[ -w /dev/full ] && plot_fails "sim --plot /dev/full" \
		"/dev/full: No space left" "$kv" $sweep --plot /dev/full
	plot_fails "sim --plot into a missing directory" \
		"$tmp/no/x.png: No such file" "$kv" $sweep --plot "$tmp/no/x.png"
	plot_fails "bench --plot into a missing directory" \
		"$tmp/no/x.png: No such file" "$kv" $bench --plot "$tmp/no/x.png"
	[ -w /dev/full ] && plot_fails "bench --plot /dev/full" \
		"/dev/full: No space left" "$kv" $bench --plot /dev/full
	mkdir -p "$tmp/gp"
	printf '#!/bin/sh\ncat >/dev/null\nfor i in 1 2 3 4 5 6 7 8; do echo "gnuplot: error $i" >&2; done\nexit 3\n' \
		>"$tmp/gp/gnuplot"
	chmod +x "$tmp/gp/gnuplot"
	PATH="$tmp/gp:$PATH" plot_fails "sim --plot, gnuplot failing" \
		"gnuplot failed (exit 3): no plot in .*: gnuplot: error 1" \
		"$kv" $sweep --plot "$tmp/x.png"
	if "$kv" $sweep --plot "$tmp/ok.png" >/dev/null 2>&1 && [ -s "$tmp/ok.png" ]; then
		ok "sim --plot: a PNG of $(wc -c <"$tmp/ok.png") bytes"
	else
		bad "sim --plot $tmp/ok.png: not written"
	fi
else
	echo "skip: the --plot checks with gnuplot: no gnuplot on PATH (tools/install-deps.sh installs gnuplot-nox)"
fi
if [ -x "$b/libtool" ]; then
	plot_fails "sim --plot without gnuplot" "gnuplot is not installed" \
		"$b/libtool" --mode=execute env PATH=/nonexistent "$kv" $sweep \
		--plot "$tmp/x.png"
fi
# A --csv file that cannot be written is 1 (a failed write), not 2.
for c in /dev/full "$tmp/no/x.csv"; do
	[ "$c" = /dev/full ] && [ ! -w /dev/full ] && continue
	"$kv" $bench --csv "$c" >/dev/null 2>"$tmp/err"
	rc=$?
	[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		ok "bench --csv $c: $(cat "$tmp/err")" ||
		bad "bench --csv $c: status $rc (want 1), stderr: $(cat "$tmp/err")"
done
# A blank before a sign is not a number; an empty workload list is no run.
usage_status 2 sim --seed " -1"
usage_status 2 sim --metrics /dev/null --metrics-every " -1"
usage_status 2 bench --threads " -1"
usage_status 2 bench --workloads ""
usage_status 2 bench --workloads ,

fi # cli_checks
echo "test_sim: $passed passed, $failed failed"
[ $failed -eq 0 ]
