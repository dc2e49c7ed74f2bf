# SPDX-License-Identifier: MIT
# Sourced by the test scripts: python_with MOD[,MOD...] prints the Python
# to run them with: the configured one ($PYTHON), or Debian's
# /usr/bin/python3 when only that one has the modules.
python_with() {
	py=${PYTHON:-python3}
	if ! "$py" -c "import $1" 2>/dev/null &&
		/usr/bin/python3 -c "import $1" 2>/dev/null; then
		py=/usr/bin/python3
	fi
	echo "$py"
}
