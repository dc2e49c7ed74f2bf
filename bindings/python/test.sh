#!/bin/sh
# SPDX-License-Identifier: MIT
# make check: the Python binding's unit tests (with NumPy when importable,
# then without), its API tests (closed handles, argument errors, the C
# functions it covers), the 4-thread test and the README's and examples/'
# Python programs, against the library just built.
. "${top_srcdir:-.}/bindings/python/pyenv.sh"
set -e
py "$s/bindings/python/tests/test_kvpool.py" 2>&1
if py -c "import numpy" 2>/dev/null; then
	echo "python: tests passed with NumPy; again without"
	KVPOOL_NO_NUMPY=1 py \
		"$s/bindings/python/tests/test_kvpool.py" 2>&1
else
	echo "python: NumPy not importable: exports tested as lists only"
fi
py "$s/bindings/python/tests/test_api.py" 2>&1
py "$s/bindings/python/tests/test_threads.py"
py "$s/bindings/python/tests/test_limits.py" 2>&1
py "$s/examples/scheduler.py" >/dev/null
echo "python: examples/scheduler.py ran"
# The README's example, as written.
readme_python "A first program in Python"
echo "python: the README's example ran"
