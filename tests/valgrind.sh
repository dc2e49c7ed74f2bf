#!/bin/sh
# SPDX-License-Identifier: MIT
# `make check-valgrind`: the unit tests under valgrind memcheck, each in
# one process (CK_FORK=no), through libtool so that the uninstalled
# libkvpool is the one checked.  Any error or definite leak fails the run;
# tests/valgrind.supp silences liburcu's and glibc's own reports only.
# --fair-sched=yes: valgrind runs one thread at a time, and its default
# lock lets a thread that spins (a test waiting on another, an adaptive
# mutex) take its turn back before the others run.
# Prints one line per program and a closing "N passed, N failed".
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
libtool=${LIBTOOL:-$b/libtool}
passed=0
failed=0
for t in check_pool check_manager check_data check_errors check_hash \
	check_prefix check_xxh3_seeded check_control \
	check_faults fuzz_replay; do
	[ -x "$b/tests/$t" ] || continue
	args=
	vgopts=
	[ "$t" = fuzz_replay ] && args="--random ${VALGRIND_FUZZ_INPUTS:-300} 11"
	# check_errors defines malloc itself to inject failures: valgrind
	# must leave the program's own malloc alone (it still sees glibc's).
	[ "$t" = check_errors ] &&
		vgopts="--soname-synonyms=somalloc=nouserintercepts"
	log="$b/tests/$t.valgrind.log"
	t0=$(date +%s)
	# Under the time limit of every test (tests/run-test.sh).
	rc=0
	CK_FORK=no CK_DEFAULT_TIMEOUT=600 timeout --kill-after=10 \
		"${KVP_TEST_TIMEOUT:-900}" $libtool --mode=execute \
		valgrind --quiet --error-exitcode=99 --leak-check=full \
		--fair-sched=yes $vgopts \
		--errors-for-leak-kinds=definite --show-leak-kinds=definite \
		--suppressions="$s/tests/valgrind.supp" \
		--gen-suppressions=all \
		"$b/tests/$t" $args >"$log" 2>&1 || rc=$?
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		echo "valgrind: $t: ok ($(($(date +%s) - t0)) s)"
	else
		failed=$((failed + 1))
		echo "valgrind: $t: FAILED ($(($(date +%s) - t0)) s), see $log"
		[ $rc -eq 124 ] || [ $rc -eq 137 ] &&
			echo "valgrind: $t: timed out after ${KVP_TEST_TIMEOUT:-900} s (KVP_TEST_TIMEOUT)"
		grep -E "^==[0-9]+== " "$log" | head -n 40
	fi
done
echo "valgrind: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
