#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/run-test.sh, the time limit of every `make check` test: a test
# that outlives KVP_TEST_TIMEOUT is stopped and reported as a hard error
# (99) with one line naming it; other statuses (0, 1, 77) pass through.
s=${top_srcdir:-.}
run="$s/tests/run-test.sh"
fail=0
check() { # check WHAT WANT GOT
	if [ "$2" = "$3" ]; then
		echo "ok: $1: status $3"
	else
		echo "FAIL: $1: status $3, expected $2"
		fail=1
	fi
}
for want in 0 1 77; do
	KVP_TEST_TIMEOUT=5 sh "$run" sh -c "exit $want" 2>/dev/null
	check "exit $want" "$want" $?
done
t0=$(date +%s)
msg=$(KVP_TEST_TIMEOUT=1 sh "$run" sh -c 'sleep 60' 2>&1)
rc=$?
t=$(($(date +%s) - t0))
check "a hang" 99 $rc
case $msg in
*"timed out after 1 s"*) echo "ok: a hang says: $msg" ;;
*) echo "FAIL: a hang says: $msg" && fail=1 ;;
esac
if [ "$t" -gt 15 ]; then
	echo "FAIL: a hang took $t s to stop (limit 1 s)"
	fail=1
fi
exit $fail
