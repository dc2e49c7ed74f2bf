#!/bin/sh
# The built shared library must load through Python ctypes (dlopen): no
# initial-exec TLS from a linked jemalloc (DESIGN.md section 4).
set -e
b=${top_builddir:-.}
s=${top_srcdir:-.}
lib="$b/lib/.libs/libkvpool.so"
if [ ! -f "$lib" ]; then
	echo "test_ctypes: $lib not built (static-only build?)" >&2
	exit 1
fi
exec "${PYTHON:-python3}" "$s/tests/test_ctypes.py" "$lib"
