#!/bin/sh
# SPDX-License-Identifier: MIT
# make check: the metrics text (kvp_metrics_write through Pool.metrics)
# parsed by prometheus_client's own parsers in both formats, checked
# against a golden list of families and against the stats, scraped while
# threads churn (counters never decrease), and the Collector registered in
# a registry.
. "${top_srcdir:-.}/bindings/python/pyenv.sh"
if ! py -c "import prometheus_client" 2>/dev/null; then
	echo "SKIP: metrics: $py cannot import prometheus_client" \
		"(python3-prometheus-client)"
	exit 77
fi
set -e
py "$s/bindings/python/tests/test_metrics.py"
# doc/python.md's collector example, as written.
readme_python "Metrics for Prometheus" doc/python.md
echo "metrics: doc/python.md's collector example ran"
