#!/bin/sh
# SPDX-License-Identifier: MIT
# Every name() a comment of lib/ or include/ cites exists: a function,
# macro or function pointer of lib/ or include/, or a known external
# function (tools/cited-names.py lists them).  A renamed or deleted
# function leaves no stale citation behind.  Prints file:line and the
# name of each miss and fails; tests/cited_names.allow lists temporary
# exceptions.
s=${top_srcdir:-.}
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
	if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1; then
		exec "$py" "$s/tools/cited-names.py" "$s" \
			"$s/tests/cited_names.allow"
	fi
done
echo "SKIP: no python3 to run tools/cited-names.py"
exit 77
