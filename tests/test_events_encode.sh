#!/bin/sh
# SPDX-License-Identifier: MIT
# libkvpool-events' encoder against python3-msgpack (2,000 random batches).
b=${top_builddir:-.}
s=${top_srcdir:-.}
. "$s/tests/python_with.sh"
PY=$(python_with msgpack)
exec "$PY" "$s/tests/test_events_encode.py" \
	"$b/tests/events_encode_driver" 2000
