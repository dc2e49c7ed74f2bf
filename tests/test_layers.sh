#!/bin/sh
# lib/ is layered (doc/architecture.md, "Layers"): no file calls a file that
# calls it back, directly or around a circle.  tools/lib-callgraph.py prints
# the call graph between lib/'s files from the objects and the headers'
# inline functions, and fails on a cycle.
b=${top_builddir:-.}
s=${top_srcdir:-.}
py=${PYTHON:-python3}
if ! command -v nm >/dev/null 2>&1; then
	echo "SKIP: nm (binutils) is not installed"
	exit 77
fi
exec "$py" "$s/tools/lib-callgraph.py" "$s/lib" "$b/lib"
