#!/bin/sh
# SPDX-License-Identifier: MIT
# The log compiler of `make check` (Makefile.am's LOG_COMPILER): runs one
# test under a time limit, KVP_TEST_TIMEOUT seconds (default 900), so
# that a test that hangs fails, with one line in its log, instead of
# holding the whole run until CI's own limit.  A test that times out is a
# hard error (99); every other status passes through (0, 1, 77 skip,
# 99).  timeout(1) runs the test in its own process group and signals
# the whole group: TERM first, KILL 10 s later.
#
# usage: tests/run-test.sh TEST [ARG...]
limit=${KVP_TEST_TIMEOUT:-900}
timeout --kill-after=10 "$limit" "$@"
rc=$?
case $rc in
124 | 137)
	echo "$1: timed out after $limit s (KVP_TEST_TIMEOUT), status $rc" >&2
	exit 99
	;;
esac
exit $rc
