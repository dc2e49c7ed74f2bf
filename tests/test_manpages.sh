#!/bin/sh
# SPDX-License-Identifier: MIT
# The man pages match the headers (tests/test_manpages.py): kvpool(3)
# lists every function and struct of kvpool.h, kvpool-events(3) every
# function of kvpool-events.h, and no page cites a page or a function
# that does not exist.
s=${top_srcdir:-.}
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
	if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1; then
		exec "$py" "$s/tests/test_manpages.py" "$s"
	fi
done
echo "SKIP: no python3 to run tests/test_manpages.py"
exit 77
