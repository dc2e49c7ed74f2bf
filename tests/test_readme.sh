#!/bin/sh
# SPDX-License-Identifier: MIT
# The README as a newcomer reads it: at most 300 lines (what it is, the
# two command lines, install, a first program in C, Python and Rust,
# threads, where to read more); every C block in it compiles as written,
# with the project's warnings as errors, and one that has main() links
# against the library just built and runs; every doc/ file it links to
# exists; it does not claim that every call returns 0, and it has a
# section on threads.  And doc/errors.md cites only tests that make check
# runs.  (The Python and
# Rust programs run in bindings/python/test.sh and bindings/rust/test.sh.)
b=${top_builddir:-.}
s=${top_srcdir:-.}
cc=${CC:-cc}
readme="$s/README.md"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
bad() {
	echo "test_readme: FAIL: $*"
	failed=1
}
san=
case "${KVP_SANITIZER:-none}" in
tsan) san=-fsanitize=thread ;;
asan) san=-fsanitize=address,undefined ;;
esac

lines=$(wc -l <"$readme")
[ "$lines" -le 300 ] || bad "README.md has $lines lines (at most 300)"
grep -qi "every function returns 0" "$readme" &&
	bad "README.md says every function returns 0 (some return counts)"
for f in $(grep -o '(doc/[a-z0-9_-]*\.md)' "$readme" | tr -d '()' | sort -u); do
	[ -f "$s/$f" ] || bad "README.md links to $f, which does not exist"
done
grep -q '^## Using kvpool from many threads' "$readme" ||
	bad "README.md has no section on using kvpool from many threads"
# doc/errors.md cites the tests that assert each row: each one is built
# and run by make check (it said check_errors.c was not in Makefile.am).
grep -q 'in `Makefile.am` yet' "$s/doc/errors.md" &&
	bad "doc/errors.md says a test is not in Makefile.am"
for t in $(grep -o 'check_[a-z_]*\.c' "$s/doc/errors.md" | sort -u); do
	grep -q "^TESTS += tests/${t%.c}\$" "$s/Makefile.am" ||
		bad "doc/errors.md cites tests/$t, which make check does not run"
done

# Each ```c block into its own file.
awk -v dir="$tmp" '
/^```c$/ { n++; f = sprintf("%s/block%d.c", dir, n); inblk = 1; next }
/^```$/ { inblk = 0; next }
inblk { print > f }
' "$readme"
n=0
for c in "$tmp"/block*.c; do
	[ -f "$c" ] || break
	n=$((n + 1))
	# shellcheck disable=SC2086 # $san: none or one flag
	if ! "$cc" -std=gnu11 -Wall -Wextra -Wshadow -Wstrict-prototypes \
		-Wmissing-prototypes -Werror $san -I"$s/include" -c "$c" \
		-o "$c.o" 2>"$c.err"; then
		bad "README.md's C block $n does not compile: $(cat "$c.err")"
		continue
	fi
	grep -q '^int main(' "$c" || continue
	# shellcheck disable=SC2086
	if ! "$cc" $san "$c.o" -o "$c.exe" "$b/lib/.libs/libkvpool.so" \
		-Wl,-rpath,"$b/lib/.libs" 2>"$c.err"; then
		bad "README.md's C block $n does not link: $(cat "$c.err")"
	elif ! "$c.exe" >"$c.out" 2>&1; then
		bad "README.md's C block $n fails: $(cat "$c.out")"
	fi
done
[ $n -ge 1 ] || bad "README.md has no C block"
[ $failed -eq 0 ] || exit 1
echo "test_readme: $lines lines; its $n C block(s) compile and run"
