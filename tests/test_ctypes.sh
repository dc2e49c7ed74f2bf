#!/bin/sh
# SPDX-License-Identifier: MIT
# The built shared library must load through Python ctypes (dlopen): no
# initial-exec TLS from a linked jemalloc (lib/alloc.c explains why).
set -e
b=${top_builddir:-.}
s=${top_srcdir:-.}
lib="$b/lib/.libs/libkvpool.so"
if [ ! -f "$lib" ]; then
	echo "test_ctypes: $lib not built (static-only build?)" >&2
	exit 1
fi
# An ASan build of the library needs its runtime loaded first in a Python
# that was not built with it: preload it, so the test still runs.  TSan's
# runtime cannot be preloaded into an uninstrumented interpreter (it must
# start with the process and see every thread: Python segfaults), so a
# TSan build skips.
# The flavour comes from configure (KVP_SANITIZER, set by `make check`):
# clang's shared objects do not name their sanitizer runtime in NEEDED
# (they leave its symbols undefined), so readelf is only the fallback
# for a run by hand.
san=${KVP_SANITIZER:-}
if [ -z "$san" ]; then
	san=none
	readelf -d "$lib" 2>/dev/null | grep -q "libtsan" && san=tsan
	readelf -d "$lib" 2>/dev/null | grep -q "libasan" && san=asan
fi
if [ "$san" = tsan ]; then
	echo "SKIP: test_ctypes: the library is built with ThreadSanitizer," \
		"which an uninstrumented Python cannot load"
	exit 77
fi
preload=
if [ "$san" = asan ]; then
	for rt in libasan.so libclang_rt.asan-x86_64.so; do
		preload=$(${CC:-cc} -print-file-name=$rt)
		[ -f "$preload" ] && break
	done
	echo "test_ctypes: preloading $preload"
fi
py() {
	# The interpreter's own allocations are not ours to judge.
	LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0" \
		"${PYTHON:-python3}" "$@"
}

# Initial-exec TLS comes from glibc's small static TLS reserve for dlopen():
# keep it small (lib/compiler.h, KVP_TLS).
if command -v readelf >/dev/null 2>&1; then
	tls=$(readelf -lW "$lib" | awk '$1 == "TLS" { print $6 }')
	if [ -n "$tls" ] && [ $((tls)) -gt 128 ]; then
		echo "test_ctypes: $((tls)) bytes of TLS, more than 128" >&2
		exit 1
	fi
	echo "test_ctypes: ${tls:-0} bytes of TLS"
fi
py "$s/tests/test_ctypes.py" "$lib"
py "$s/tests/test_hash.py" "$lib"
