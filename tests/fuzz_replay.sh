#!/bin/sh
# SPDX-License-Identifier: MIT
# `make check`: the fuzz harness (tests/fuzz_api.c) over its seed corpus
# and over pseudo-random inputs, built with the configured compiler and
# sanitizers; library and model must agree on every call.
set -e
b=${top_builddir:-.}
s=${top_srcdir:-.}
"$b/tests/fuzz_replay" "$s"/tests/fuzz_corpus/*
"$b/tests/fuzz_replay" --random "${FUZZ_REPLAY_INPUTS:-3000}" 7
