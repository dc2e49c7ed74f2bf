#!/bin/sh
# SPDX-License-Identifier: MIT
# `make check`: the KVP_CONF parser's fuzz target (tests/fuzz_conf.c) over
# its seed corpus and over pseudo-random strings of keys, values and
# separators, built with the configured compiler and sanitizers.
set -e
b=${top_builddir:-.}
s=${top_srcdir:-.}
"$b/tests/fuzz_conf_replay" "$s"/tests/fuzz_conf_corpus/*
"$b/tests/fuzz_conf_replay" --random "${FUZZ_CONF_REPLAY_INPUTS:-20000}" 7
