#!/bin/sh
# SPDX-License-Identifier: MIT
# doc/errors.md agrees with the tests and with kvpool.h: every test a row
# cites (file.c:test_name) exists in tests/, and an input kvpool.h calls
# valid is not a row of rejection (num_blocks 0 is an empty pool, not
# -EINVAL, unless cache_blocks asks for a cache).  Prints each
# disagreement and fails.
s=${top_srcdir:-.}
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
	if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1; then
		exec "$py" - "$s" <<'PY'
import os
import re
import sys

src = sys.argv[1]
doc = open(os.path.join(src, "doc", "errors.md")).read()
bad = []
for f, t in set(re.findall(r"\b([a-z_]+\.c):(test_[a-z0-9_]+)", doc)):
    path = os.path.join(src, "tests", f)
    if not os.path.exists(path) or \
            "START_TEST(%s)" % t not in open(path).read():
        bad.append("cites %s:%s, which tests/ does not have" % (f, t))
section = re.search(r"^## kvp_pool_create\n(.*?)^## ", doc, re.M | re.S)
for row in (section.group(1) if section else "").splitlines():
    cells = row.split("|")
    if len(cells) > 3 and re.search(r"`num_blocks` 0\b", cells[1]) and \
            "-EINVAL" in cells[2] and "cache_blocks" not in cells[1]:
        bad.append("kvp_pool_create: %s says -EINVAL; kvpool.h makes "
                   "num_blocks 0 an empty pool" % cells[1].strip())
for b in bad:
    print("doc/errors.md: " + b)
if bad:
    sys.exit(1)
print("doc/errors.md: its citations exist, its kvp_pool_create rows agree "
      "with kvpool.h")
PY
	fi
done
echo "SKIP: no python3 to check doc/errors.md"
exit 77
