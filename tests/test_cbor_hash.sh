#!/bin/sh
# SPDX-License-Identifier: MIT
# KVP_HASH_SHA256_CBOR against vLLM's sha256_cbor, recomputed in Python
# with cbor2 and hashlib (tests/test_cbor_hash.py): 12,000 random cases.
# The C side is tests/cbor_hash_driver (instrumented in sanitizer builds);
# Python only feeds it and compares.
b=${top_builddir:-.}
s=${top_srcdir:-.}
. "$s/tests/python_with.sh"
PY=$(python_with cbor2)
exec "$PY" "$s/tests/test_cbor_hash.py" \
	"$b/tests/cbor_hash_driver" 12000
