#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs kvpool's build and test dependencies from Debian 12 packages
# (clang, libclang-rt-14-dev and valgrind are for `make fuzz` and
# `make check-valgrind` only: a build without them works; libzmq3-dev and
# libmsgpack-dev build libkvpool-events, python3-zmq, python3-msgpack and
# python3-cbor2 run its tests and examples/kv_subscriber.py;
# python3-prometheus-client parses the metrics text in the tests and backs
# the Python package's collector; python3-cffi, python3-numpy and cargo
# are for the Python and Rust bindings' tests, which are skipped without
# them; gnuplot-nox draws `kvpool sim --plot` and `kvpool bench --plot`,
# which fail without it).  Rust: a cargo already on PATH or in
# ~/.cargo/bin (rustup) is used; Debian's cargo is installed otherwise.
# Runs apt-get through sudo unless already root.  Idempotent.
set -e
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
PKGS="build-essential autoconf automake libtool pkg-config autoconf-archive \
check liburcu-dev libjemalloc-dev libxxhash-dev nettle-dev python3 \
clang libclang-rt-14-dev valgrind python3-cffi python3-numpy \
libzmq3-dev libmsgpack-dev python3-zmq python3-msgpack python3-cbor2 \
python3-prometheus-client gnuplot-nox"
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
	PKGS="$PKGS cargo"
fi
# Only ask apt when something is missing: keeps repeated runs fast.
missing=
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing:$missing"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	--no-install-recommends $missing >/dev/null
