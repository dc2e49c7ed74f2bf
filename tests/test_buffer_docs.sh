#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpool.h says, for each call whose arrays are sized by another argument,
# which count bounds every read and write of each array: the comment
# before the prototype has a "Buffers:" sentence that names every array
# parameter and the count that bounds it.  A new such call goes in CALLS.
s=${top_srcdir:-.}
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
	if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1; then
		exec "$py" - "$s" <<'PY'
import os
import re
import sys

# call: {array parameter: the count that bounds it}
CALLS = {
    "kvp_prefix_match": {"hashes": "nhashes"},
    "kvp_export_block_table": {"seqs": "nseq", "table": "stride"},
    "kvp_export_csr": {"seqs": "nseq", "indptr": "nseq",
                       "last_page_len": "nseq", "indices": "cap"},
    "kvp_export_slot_mapping": {"slots": "n"},
    "kvp_seq_append_batch": {"seqs": "nseq", "num_tokens": "nseq",
                             "cow": "cow_cap"},
}
hdr = open(os.path.join(sys.argv[1], "include", "kvpool.h")).read()
bad = []
for call, arrays in CALLS.items():
    m = re.search(r"/\*((?:(?!\*/).)*)\*/\s*KVP_API[^;]*?\b%s\(" % call,
                  hdr, re.S)
    text = " ".join(m.group(1).replace("*", " ").split()) if m else ""
    buf = text[text.find("Buffers:"):] if "Buffers:" in text else ""
    if not buf:
        bad.append("%s: no \"Buffers:\" sentence" % call)
        continue
    for arr, count in arrays.items():
        if not re.search(r"\b%s\b" % arr, buf) or \
                not re.search(r"\b%s\b" % count, buf):
            bad.append("%s: \"Buffers:\" does not say that %s bounds %s"
                       % (call, count, arr))
for b in bad:
    print("kvpool.h: " + b)
if bad:
    sys.exit(1)
print("kvpool.h: %d calls say which count bounds each array" % len(CALLS))
PY
	fi
done
echo "SKIP: no python3 to check kvpool.h's buffer sentences"
exit 77
