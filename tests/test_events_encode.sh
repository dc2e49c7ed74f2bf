#!/bin/sh
# libkvpool-events' encoder against python3-msgpack (2,000 random batches).
b=${top_builddir:-.}
s=${top_srcdir:-.}
# The configured Python, or Debian's when only that one has the modules.
PY=${PYTHON:-python3}
"$PY" -c "import msgpack" 2>/dev/null || ! /usr/bin/python3 -c "import msgpack" \
	2>/dev/null || PY=/usr/bin/python3
exec "$PY" "$s/tests/test_events_encode.py" \
	"$b/tests/events_encode_driver" 2000
