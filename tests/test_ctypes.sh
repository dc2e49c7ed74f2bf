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
"${PYTHON:-python3}" "$s/tests/test_ctypes.py" "$lib"
exec "${PYTHON:-python3}" "$s/tests/test_hash.py" "$lib"
