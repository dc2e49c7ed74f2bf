# SPDX-License-Identifier: MIT
# Sourced by the Python binding's test scripts: checks that the
# interpreter can load the package (exit 77 with a one-line reason
# otherwise) and defines py(), which runs Python against the library just
# built.
b=${top_builddir:-.}
s=${top_srcdir:-.}
py=${PYTHON:-/usr/bin/python3}
lib="$b/lib/.libs/libkvpool.so"
if [ "$py" = : ] || ! command -v "$py" >/dev/null 2>&1; then
	echo "SKIP: Python binding: no Python interpreter ($py)"
	exit 77
fi
if ! "$py" -c "import cffi" 2>/dev/null; then
	echo "SKIP: Python binding: $py cannot import cffi (python3-cffi)"
	exit 77
fi
if [ ! -f "$lib" ]; then
	echo "test: $lib not built (static-only build?)" >&2
	exit 1
fi
# The interpreter is not instrumented: a sanitizer build of the library
# loads only with its runtime preloaded (as tests/test_ctypes.sh does).
preload=
case "${KVP_SANITIZER:-none}" in
tsan | asan)
	preload=$(${CC:-cc} -print-file-name="lib$KVP_SANITIZER.so")
	if [ ! -f "$preload" ]; then
		echo "SKIP: Python binding: no lib$KVP_SANITIZER.so to preload" \
			"into the uninstrumented interpreter"
		exit 77
	fi
	;;
esac
py() {
	# The interpreter's own allocations are not ours to judge.
	LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0" \
		KVPOOL_LIBRARY="$lib" PYTHONPATH="$s/bindings/python" \
		PYTHONDONTWRITEBYTECODE=1 "$py" "$@"
}
# readme_python TITLE [FILE]: runs the Python block of the section "##
# TITLE" of FILE (default README.md, relative to the source tree), as
# written; fails if the section has none.
readme_python() {
	_tmp=$(mktemp)
	_doc=${2:-README.md}
	sed -n "/^## $1/,/^## /p" "$s/$_doc" |
		sed -n '/^```python$/,/^```$/p' | sed '1d;$d' >"$_tmp"
	if [ ! -s "$_tmp" ]; then
		echo "test: $_doc's \"$1\" has no Python example" >&2
		rm -f "$_tmp"
		return 1
	fi
	py "$_tmp" >/dev/null
	_rc=$?
	rm -f "$_tmp"
	return $_rc
}
