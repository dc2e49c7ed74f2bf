#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The man pages match the headers.

usage: tests/test_manpages.py [SRCDIR]

- every function kvpool.h exports (KVP_API) is in kvpool(3)'s SYNOPSIS,
  and every struct it defines is described (`.B struct kvp_x`); its
  RETURN VALUE names each call whose success is a count, not 0;
- every function kvpool-events.h exports (KVPE_API) is in
  kvpool-events(3)'s SYNOPSIS;
- a man page cites only pages that exist: no kvp_ function with a section
  number (only kvpool(1), kvpool(3) and kvpool-events(3) are installed),
  and every kvp_name() it cites is a function or macro of the headers.
Prints each miss and exits 1 if there is one.
"""
import os
import re
import sys

srcdir = sys.argv[1] if len(sys.argv) > 1 else "."
PAGES = {"kvpool(1)": "doc/kvpool.1", "kvpool(3)": "doc/kvpool.3",
         "kvpool-events(3)": "doc/kvpool-events.3"}


def read(rel):
    with open(os.path.join(srcdir, rel), encoding="utf-8") as f:
        return f.read()


def exported(header, macro):
    """Names of the functions header exports with macro."""
    return re.findall(macro + r"\s+(?:const\s+)?(?:struct\s+)?\w+[\s*]*"
                      r"(kvp_\w+)\s*\(", header)


def synopsis(page):
    m = re.search(r"^\.SH SYNOPSIS\n(.*?)^\.SH ", page, re.S | re.M)
    return m.group(1) if m else ""


def plain(page):
    """The page's text with font escapes and quotes removed."""
    return re.sub(r'\\f[BIRP]|"', "", page)


misses = []
kvpool_h = read("include/kvpool.h")
events_h = read("include/kvpool-events.h")
man3 = read(PAGES["kvpool(3)"])
syn = plain(synopsis(man3))
for fn in exported(kvpool_h, "KVP_API"):
    if not re.search(r"\b%s\s*\(" % fn, syn):
        misses.append("kvpool(3): %s() is not in the SYNOPSIS" % fn)
for st in re.findall(r"^struct (kvp_\w+) \{", kvpool_h, re.M):
    if not re.search(r"^\.B struct %s\s*$" % st, man3, re.M):
        misses.append("kvpool(3): struct %s is not described" % st)
# The calls whose success is a count or a code, not 0 (kvpool.h).
COUNTS = ["kvp_seq_commit", "kvp_seq_commit_retained", "kvp_seq_commit_ex",
          "kvp_hash_blocks", "kvp_hash_blocks_cap", "kvp_admit",
          "kvp_evict_until", "kvp_seq_append_batch", "kvp_export_block_table",
          "kvp_export_csr", "kvp_block_refcount"]
m = re.search(r"^\.SH RETURN VALUE\n(.*?)^\.SH ", man3, re.S | re.M)
ret = plain(m.group(1)) if m else ""
for fn in COUNTS:
    if not re.search(r"\b%s\s*\(" % fn, ret):
        misses.append("kvpool(3): RETURN VALUE does not say what %s() "
                      "returns on success" % fn)
# THREAD SAFETY says what needs the caller's exclusion.
m = re.search(r"^\.SH THREAD SAFETY\n(.*?)^\.SH ", man3, re.S | re.M)
ts = plain(m.group(1)) if m else ""
for fn in ["kvp_manager_set_event_cb", "kvp_manager_destroy",
           "kvp_pool_check", "kvp_manager_check"]:
    if not re.search(r"\b%s\s*\(" % fn, ts):
        misses.append("kvpool(3): THREAD SAFETY does not say when %s() "
                      "may run" % fn)
ev_syn = plain(synopsis(read(PAGES["kvpool-events(3)"])))
for fn in exported(events_h, "KVPE_API"):
    if not re.search(r"\b%s\s*\(" % fn, ev_syn):
        misses.append("kvpool-events(3): %s() is not in the SYNOPSIS" % fn)

names = set(re.findall(r"^\s*#\s*define\s+(KVP\w+)", kvpool_h + events_h,
                       re.M))
names |= set(exported(kvpool_h, "KVP_API"))
names |= set(exported(events_h, "KVPE_API"))
for page, rel in PAGES.items():
    text = plain(read(rel))
    for m in re.finditer(r"\b([\w-]+)\s*\(([1-8])\)", text.replace("\\-",
                                                                   "-")):
        cited = "%s(%s)" % m.groups()
        if m.group(1).startswith("kvp") and cited not in PAGES:
            misses.append("%s cites %s, which is not installed (cite %s() "
                          "and kvpool(3))" % (page, cited, m.group(1)))
    for m in re.finditer(r"\b(kvp_\w+)\s*\(\)", text):
        if m.group(1) not in names:
            misses.append("%s cites %s(), which the headers do not have"
                          % (page, m.group(1)))
for m in misses:
    print("test_manpages: " + m)
if misses:
    sys.exit(1)
print("test_manpages: kvpool(3) lists every function and struct of "
      "kvpool.h, kvpool-events(3) every function of kvpool-events.h, and "
      "the pages cite only what exists")
