#!/bin/sh
# SPDX-License-Identifier: MIT
# libkvpool-events' metrics beside the core's, parsed by prometheus_client.
b=${top_builddir:-.}
s=${top_srcdir:-.}
. "$s/tests/python_with.sh"
PY=$(python_with prometheus_client)
if ! "$PY" -c "import prometheus_client" 2>/dev/null; then
	echo "SKIP: test_pub_metrics: no Python with prometheus_client" \
		"(python3-prometheus-client)"
	exit 77
fi
exec "$PY" "$s/tests/test_pub_metrics.py" "$b/tests/pub_metrics_driver"
