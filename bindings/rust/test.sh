#!/bin/sh
# SPDX-License-Identifier: MIT
# make check: the Rust crate's tests (cargo test --offline: unit, engine
# shaped tests, the porting tests, the zero-allocation proof, doc tests,
# and building its examples), then examples/rust_paged_cache, the docs
# (cargo doc, every public item documented, no warning), clippy with no
# warning (when installed), and the README's Rust example, against the
# library just built ($KVPOOL_LIB_DIR instead of pkg-config).
b=${top_builddir:-.}
s=${top_srcdir:-.}
# ASan build: the test binaries run with the ASan runtime preloaded (as
# the Python test's interpreter).  TSan build: Rust's std is not
# instrumented, so TSan reports its Arc and the test harness as racing
# (that needs nightly's -Zsanitizer=thread): skip.
runner=
case "${KVP_SANITIZER:-none}" in
tsan)
	echo "SKIP: Rust binding: TSan cannot check uninstrumented Rust std" \
		"(false reports on Arc); the tsan build is covered by the Python" \
		"binding's thread test"
	exit 77
	;;
asan)
	pre=$(${CC:-cc} -print-file-name=libasan.so)
	if [ ! -f "$pre" ]; then
		echo "SKIP: Rust binding: no libasan.so to preload"
		exit 77
	fi
	runner="env LD_PRELOAD=$pre"
	;;
esac
cargo=${CARGO:-$(command -v cargo)}
if [ -z "$cargo" ] && [ -x "$HOME/.cargo/bin/cargo" ]; then
	cargo=$HOME/.cargo/bin/cargo
fi
if [ -z "$cargo" ]; then
	echo "SKIP: Rust binding: no cargo on PATH (tools/install-deps.sh" \
		"installs Debian's)"
	exit 77
fi
rustc=${RUSTC:-$(dirname "$cargo")/rustc}
[ -x "$rustc" ] || rustc=rustc
lib=$(cd "$b/lib/.libs" 2>/dev/null && pwd)
if [ -z "$lib" ] || [ ! -f "$lib/libkvpool.so" ]; then
	echo "test: $b/lib/.libs/libkvpool.so not built" >&2
	exit 1
fi
crate="$s/bindings/rust/kvpool"
if [ -n "$runner" ]; then
	# cargo runs tests and examples through CARGO_TARGET_<HOST>_RUNNER.
	host=$("$rustc" -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
	export "CARGO_TARGET_${host}_RUNNER=$runner"
	# The test harness's own allocations are not ours to judge.
	export ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0"
fi
# cargo is not a make: it must not see make's jobserver.
unset MAKEFLAGS MFLAGS MAKELEVEL
export KVPOOL_LIB_DIR="$lib" CARGO_TARGET_DIR="$b/bindings/rust/target"
set -e
echo "rust: $("$cargo" --version) ($("$rustc" --version 2>/dev/null))"
# --locked: Cargo.lock is in the source tree, which may be read-only.
"$cargo" test --offline --locked --quiet --manifest-path "$crate/Cargo.toml" 2>&1
"$cargo" run --offline --locked --quiet --manifest-path "$crate/Cargo.toml" \
	--example rust_paged_cache
# The migration examples' demos (their tests ran above).
for ex in from_oxillama from_cjc from_kapsl from_paged_eviction \
	from_inference_lab; do
	"$cargo" run --offline --locked --quiet \
		--manifest-path "$crate/Cargo.toml" --example "$ex" >/dev/null
done
# The docs: #![deny(missing_docs)] in the crate, broken links here.
if [ -x "$(dirname "$rustc")/rustdoc" ] || command -v rustdoc >/dev/null; then
	RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" "$cargo" doc --offline \
		--locked --quiet --no-deps --manifest-path "$crate/Cargo.toml"
	echo "rust: cargo doc: no warnings"
else
	echo "rust: cargo doc skipped: no rustdoc beside $rustc"
fi
if "$cargo" clippy --version >/dev/null 2>&1; then
	"$cargo" clippy --offline --locked --quiet --all-targets \
		--manifest-path "$crate/Cargo.toml" -- -D warnings
	echo "rust: cargo clippy: no warnings"
else
	echo "rust: cargo clippy skipped: not installed for $("$cargo" --version)"
fi
# Debian 12's Rust (1.63, the oldest the crate supports) as well, when it
# is installed beside the cargo used above.
if [ -x /usr/bin/cargo ] && [ -x /usr/bin/rustc ] &&
	[ "$(command -v "$cargo")" != /usr/bin/cargo ]; then
	# Its cargo runs doc tests without the runner, so without ASan
	# preloaded: under ASan they are left to the cargo above.
	targets=
	[ -z "$runner" ] || targets="--lib --tests --examples"
	# shellcheck disable=SC2086 # $targets: none, or several words
	RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc \
		CARGO_TARGET_DIR="$b/bindings/rust/target-debian" \
		/usr/bin/cargo test --offline --locked --quiet $targets \
		--manifest-path "$crate/Cargo.toml" >"$b/bindings/rust/debian.out" 2>&1 || {
		tail -n 30 "$b/bindings/rust/debian.out"
		echo "test: cargo test with Debian's $(/usr/bin/rustc --version)" \
			"failed" >&2
		exit 1
	}
	rm -f "$b/bindings/rust/debian.out"
	echo "rust: the tests pass with $(/usr/bin/rustc --version) too"
fi
# The README's example, as written, as an example of a scratch crate.
tmp="$b/bindings/rust/readme"
rm -rf "$tmp"
mkdir -p "$tmp/src"
sed -n '/^## A first program in Rust/,/^## /p' "$s/README.md" |
	sed -n '/^```rust$/,/^```$/p' | sed '1d;$d' >"$tmp/src/main.rs"
if [ ! -s "$tmp/src/main.rs" ]; then
	echo "test: README.md has no Rust example" >&2
	exit 1
fi
crate_abs=$(cd "$crate" && pwd)
cat >"$tmp/Cargo.toml" <<EOT
[package]
name = "readme"
version = "0.0.0"
edition = "2021"
[dependencies]
kvpool = { path = "$crate_abs" }
[workspace]
EOT
# (the crate's rpath covers its own tests and examples, not dependents)
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	"$cargo" run --offline --quiet --manifest-path "$tmp/Cargo.toml" >/dev/null
rm -rf "$tmp"
echo "rust: the README's example ran"
