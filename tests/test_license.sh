#!/bin/sh
# SPDX-License-Identifier: MIT
# The tree is MIT-licensed: COPYING is present and names it, and every
# source file (C, headers, shell, Python, Rust, the build files) carries an
# SPDX-License-Identifier: MIT line near its top.  The Autoconf Archive's
# m4/ax_*.m4 keep their own licenses (COPYING says so).
s=${top_srcdir:-.}
rc=0
if ! grep -q "^MIT License" "$s/COPYING" 2>/dev/null; then
	echo "test_license: $s/COPYING is missing or is not the MIT license" >&2
	exit 1
fi
for f in $(cd "$s" && find lib include tools tests stress bench events \
	examples bindings -type f \( -name '*.c' -o -name '*.h' -o \
	-name '*.sh' -o -name '*.py' -o -name '*.rs' -o -name '*.toml' \) \
	-not -path '*/target/*' -not -path '*/__pycache__/*' 2>/dev/null) \
	Makefile.am configure.ac; do
	if ! head -n 3 "$s/$f" | grep -q "SPDX-License-Identifier: MIT"; then
		echo "test_license: $f has no SPDX-License-Identifier: MIT line" >&2
		rc=1
	fi
done
grep -q '^license = "MIT"' "$s/bindings/rust/kvpool/Cargo.toml" || {
	echo "test_license: the crate's Cargo.toml names no MIT license" >&2
	rc=1
}
grep -q '^__license__ = "MIT"' "$s/bindings/python/kvpool/__init__.py" || {
	echo "test_license: the Python package has no __license__ = \"MIT\"" >&2
	rc=1
}
[ $rc -eq 0 ] && echo "test_license: COPYING and every source file say MIT"
exit $rc
