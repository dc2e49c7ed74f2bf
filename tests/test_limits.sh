#!/bin/sh
# SPDX-License-Identifier: MIT
# Memory limits: under `ulimit -v`, pools and managers too large to
# allocate fail with -ENOMEM and leak nothing (tests/limits_probe.c), and
# `kvpool sim` exits with one clear line and status 1 whether the limit
# is too small to start, to create the pool or to create the manager.
b=${top_builddir:-.}
lib="$b/lib/.libs/libkvpool.so"
# The flavour comes from configure (KVP_SANITIZER, set by `make check`):
# clang's shared objects do not name their sanitizer runtime in NEEDED,
# so readelf is only the fallback for a run by hand.
san=${KVP_SANITIZER:-}
if [ -z "$san" ] && [ -f "$lib" ] &&
	readelf -d "$lib" 2>/dev/null | grep -qE "lib[at]san"; then
	san=sanitizer
fi
if [ -n "$san" ] && [ "$san" != none ]; then
	echo "SKIP: test_limits: a sanitizer's runtime reserves terabytes of" \
		"address space, so ulimit -v cannot apply"
	exit 77
fi
fails=0

# Without glibc's per-thread cache of freed chunks, mallinfo2() counts
# exactly the bytes in use.
if ! (ulimit -v 300000 &&
	GLIBC_TUNABLES=glibc.malloc.tcache_count=0 "$b/tests/limits_probe"); then
	echo "test_limits: limits_probe failed" >&2
	fails=$((fails + 1))
fi

# sim ULIMIT_KB PATTERN ARGS...: status 1 and one line matching PATTERN.
sim() {
	limit=$1 pattern=$2
	shift 2
	err=$( (ulimit -v "$limit" && "$b/tools/kvpool" sim "$@" >/dev/null) 2>&1)
	rc=$?
	lines=$(printf '%s\n' "$err" | wc -l)
	if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] ||
		! printf '%s\n' "$err" | grep -q "$pattern"; then
		echo "test_limits: kvpool sim $* under ulimit -v $limit:" \
			"status $rc, want 1 and one line matching '$pattern':" >&2
		printf '%s\n' "$err" >&2
		fails=$((fails + 1))
	else
		echo "test_limits: ulimit -v $limit, sim $*: $err"
	fi
}
sim 20000 "ulimit -v 20000 KB" --requests 100
sim 150000 "leaves less than the 352 MB 16 threads need" --requests 100 \
	--threads 16
sim 400000 "a pool of 50000000 blocks needs about 6.4 GB, more than the" \
	--requests 100 --blocks 50000000
sim 400000 "the 1120 MB 64 threads need" --requests 100 --threads=64
if [ -x "$b/events/.libs/libkvpool-events.so" ] ||
	[ -f "$b/events/.libs/libkvpool-events.so" ]; then
	sim 250000 "the 256 MB 2 threads need" --requests 100 --threads 2 \
		--publish tcp://127.0.0.1:0
fi
sim 400000 "kvp_manager_create: out of host memory" --requests 100 \
	--blocks 3000000
[ $fails -eq 0 ]
