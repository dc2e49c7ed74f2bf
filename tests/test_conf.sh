#!/bin/sh
# SPDX-License-Identifier: MIT
# KVP_CONF as a process sees it (kvpool(3), "Configuration"): the
# environment applied (`kvpool conf`), an application's kvp_conf applied
# and overridden by the environment (tests/conf_app, linked against the
# shared and the static library), one `<kvpool>: ` line per bad pair with
# the rest still applied, abort_conf:true fatal, confirm_conf:true.
b=${top_builddir:-.}
kvpool="$b/tools/kvpool"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ulimit -c 0 2>/dev/null

fail() {
	echo "test_conf: $*" >&2
	fails=$((fails + 1))
}

# run NAME CONF PROGRAM...: PROGRAM with KVP_CONF=CONF (unset if CONF is
# "-"); its stdout in $tmp/NAME.out, its stderr in $tmp/NAME.err, its
# status in $rc.
run() {
	name=$1 conf=$2
	shift 2
	if [ "$conf" = - ]; then
		(unset KVP_CONF; "$@") >"$tmp/$name.out" 2>"$tmp/$name.err"
	else
		KVP_CONF=$conf "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	fi
	rc=$?
}

# has NAME LINE: the stdout of run NAME has the line LINE.
has() {
	grep -qxF "$2" "$tmp/$1.out" || fail "$1: no line '$2' in:
$(cat "$tmp/$1.out" "$tmp/$1.err")"
}

# reports NAME N: the stderr of run NAME is N lines, each beginning
# `<kvpool>: `.
reports() {
	lines=$(grep -c '' "$tmp/$1.err")
	ours=$(grep -c '^<kvpool>: ' "$tmp/$1.err")
	[ "$lines" -eq "$2" ] && [ "$ours" -eq "$2" ] ||
		fail "$1: $lines lines on stderr ($ours <kvpool>:), not $2:
$(cat "$tmp/$1.err")"
}

run defaults - "$kvpool" conf
[ $rc -eq 0 ] || fail "defaults: status $rc"
has defaults auto_cache_max:128
has defaults seqmap_shrink_period_us:5000
has defaults abort_conf:false
reports defaults 0

run env "auto_cache_max:64, seqmap_grow_ratio:8" "$kvpool" conf
[ $rc -eq 0 ] || fail "env: status $rc"
has env auto_cache_max:64
has env seqmap_grow_ratio:8
reports env 0

run empty "" "$kvpool" conf
has empty auto_cache_max:128
reports empty 0

# The application's string, then the environment's.
for app in conf_app conf_app_static; do
	run $app - "$b/tests/$app"
	[ $rc -eq 0 ] || fail "$app: status $rc: $(cat "$tmp/$app.err")"
	has $app auto_cache_max:33
	has $app idle_batch:5
	has $app "cache_blocks in effect:32"
	reports $app 0
	run $app-env auto_cache_max:20 "$b/tests/$app"
	[ $rc -eq 0 ] || fail "$app-env: status $rc"
	has $app-env auto_cache_max:20
	has $app-env idle_batch:5
	has $app-env "cache_blocks in effect:20"
	reports $app-env 0
done

run unknown "no_such_key:1,idle_batch:8" "$kvpool" conf
[ $rc -eq 0 ] || fail "unknown: status $rc"
has unknown idle_batch:8
reports unknown 1
grep -q '^<kvpool>: KVP_CONF: .*no_such_key' "$tmp/unknown.err" ||
	fail "unknown: the line names neither the source nor the key"

run bad "idle_batch:0,evict_ahead_max:x,,auto_cache_max,prefix_slots_per_block:8" \
	"$kvpool" conf
[ $rc -eq 0 ] || fail "bad: status $rc"
has bad idle_batch:256
has bad prefix_slots_per_block:8
reports bad 4

run abort "abort_conf:true,no_such_key:1" "$kvpool" conf
[ $rc -gt 128 ] || fail "abort: status $rc, not killed by a signal"
grep -q '^<kvpool>: KVP_CONF: .*no_such_key' "$tmp/abort.err" ||
	fail "abort: the bad pair was not reported"
[ -s "$tmp/abort.out" ] && fail "abort: the configuration was printed"

run abort-ok "abort_conf:true,idle_batch:4" "$kvpool" conf
[ $rc -eq 0 ] || fail "abort-ok: status $rc without an error"

run confirm "confirm_conf:true,auto_cache_max:64" "$kvpool" conf
[ $rc -eq 0 ] || fail "confirm: status $rc"
reports confirm 2
grep -qxF '<kvpool>: confirm_conf: auto_cache_max:64 (from KVP_CONF)' \
	"$tmp/confirm.err" || fail "confirm: auto_cache_max:64 not confirmed"

run confirm-app confirm_conf:true "$b/tests/conf_app"
reports confirm-app 3
grep -qxF '<kvpool>: confirm_conf: idle_batch:5 (from kvp_conf)' \
	"$tmp/confirm-app.err" || fail "confirm-app: idle_batch:5 not confirmed"

if [ $fails -ne 0 ]; then
	echo "test_conf: $fails failures" >&2
	exit 1
fi
echo "test_conf: KVP_CONF, kvp_conf (shared and static) and their reports as documented"
