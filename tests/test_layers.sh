#!/bin/sh
# SPDX-License-Identifier: MIT
# lib/ and tools/ are layered (doc/architecture.md, "Layers"; tools/sim.h,
# "The floors"): no file calls a file that calls it back, directly or around
# a circle.  tools/lib-callgraph.py prints the call graph between the files
# of lib/, then of tools/ (the kvpool command's objects), from the objects
# and the headers' inline functions, and fails on a cycle in either.  And
# the libraries link no libstdc++.
b=${top_builddir:-.}
s=${top_srcdir:-.}
py=${PYTHON:-python3}
if ! command -v nm >/dev/null 2>&1; then
	echo "SKIP: nm (binutils) is not installed"
	exit 77
fi
# The libraries are C and link no C++ runtime: stress/tsan.supp's
# libstdc++ suppression then covers libzmq's code only.
for so in "$b/lib/.libs/libkvpool.so" "$b/events/.libs/libkvpool-events.so"; do
	if [ -f "$so" ] && command -v readelf >/dev/null 2>&1 &&
		readelf -d "$so" | grep -q "NEEDED.*libstdc++"; then
		echo "test_layers: $so links libstdc++" >&2
		exit 1
	fi
done
rc=0
"$py" "$s/tools/lib-callgraph.py" "$s/lib" "$b/lib" || rc=1
"$py" "$s/tools/lib-callgraph.py" "$s/tools" "$b/tools" kvpool- || rc=1
exit $rc
