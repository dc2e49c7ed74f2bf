#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""cited-names.py - every name() a comment of lib/ or include/ cites exists.

usage: tools/cited-names.py [SRCDIR [ALLOWFILE]]   (SRCDIR defaults to .)

Collects the identifiers written as `name()` inside the C comments of
lib/*.c, lib/*.h and include/*.h, and checks that each is defined or
declared in those files' code (comments and strings stripped): a
function declared or defined at file scope, a macro, or a function
pointer (a struct's hook, a callback parameter).  Names of other
libraries that comments may cite are listed in EXTERNAL below.

Prints `file:line: name() is cited but defined nowhere in lib/ or
include/` for each miss and exits 1 if there is one.  ALLOWFILE (default
SRCDIR/tests/cited_names.allow) lists temporary exceptions, one per line:
a file (every miss in it), or a file and a name; `#` starts a comment.
Allowed misses are printed with `(allowed)` and do not fail; an entry
that matches no miss is reported so that it can be deleted.
"""
import glob
import os
import re
import sys

# Functions of libc, liburcu, jemalloc and Linux that comments cite.
EXTERNAL = {
    "call_rcu", "synchronize_rcu", "rcu_barrier",            # liburcu
    "malloc", "free", "mallocx", "sdallocx",                 # allocators
    "dlopen", "dlsym", "getrandom", "sched_yield", "mmap", "munmap",
    "madvise", "membarrier", "futex", "clock_gettime",       # libc, Linux
}
EXTERNAL_PREFIXES = ("pthread_",)

srcdir = sys.argv[1] if len(sys.argv) > 1 else "."
allowfile = (sys.argv[2] if len(sys.argv) > 2 else
             os.path.join(srcdir, "tests", "cited_names.allow"))

TOKEN = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'
                   r"'(?:\\.|[^'\\\n])*'", re.S)


def split(text):
    """Returns (code, comments): code with comments and literals blanked
    (newlines kept), and [(offset, comment text)]."""
    code, comments, last = [], [], 0
    for m in TOKEN.finditer(text):
        code.append(text[last:m.start()])
        tok = m.group(0)
        if tok.startswith("/"):
            comments.append((m.start(), tok))
        code.append(re.sub(r"[^\n]", " ", tok))
        last = m.end()
    code.append(text[last:])
    return "".join(code), comments


def declared(code):
    names = set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", code, re.M))
    names |= set(re.findall(r"\(\s*\*\s*(\w+)\s*\)\s*\(", code))
    # File scope: outside every brace, and outside preprocessor lines.
    code = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", code, flags=re.M)
    code = re.sub(r"extern\s*\{", "", code)  # extern "C" {, strings blanked
    depth, top = 0, []
    for ch in code:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
        elif depth == 0:
            top.append(ch)
    names |= set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", "".join(top)))
    return names


files = sorted(glob.glob(os.path.join(srcdir, "lib", "*.[ch]")) +
               glob.glob(os.path.join(srcdir, "include", "*.h")))
if not files:
    sys.exit("cited-names: no sources under %s" % srcdir)

defined, cited = set(), []
for path in files:
    text = open(path, encoding="utf-8").read()
    code, comments = split(text)
    defined |= declared(code)
    rel = os.path.relpath(path, srcdir)
    for off, com in comments:
        for m in re.finditer(r"\b([A-Za-z_]\w*)\(\)", com):
            line = text.count("\n", 0, off + m.start()) + 1
            cited.append((rel, line, m.group(1)))

allow = []
if os.path.exists(allowfile):
    for raw in open(allowfile, encoding="utf-8"):
        f = raw.split("#", 1)[0].split()
        if f:
            allow.append((f[0], f[1] if len(f) > 1 else None))
used = set()

failed = allowed = 0
for rel, line, name in cited:
    if (name in defined or name in EXTERNAL or
            name.startswith(EXTERNAL_PREFIXES)):
        continue
    hit = next((a for a in allow if a[0] == rel and a[1] in (None, name)),
               None)
    msg = "%s:%d: %s() is cited but defined nowhere in lib/ or include/" % (
        rel, line, name)
    if hit:
        used.add(hit)
        allowed += 1
        print(msg + " (allowed)")
    else:
        print(msg)
        failed += 1
for a in allow:
    if a not in used:
        print("%s: allow entry '%s' matches no miss: delete it" % (
            os.path.relpath(allowfile, srcdir), " ".join(x for x in a if x)))

print("cited-names: %d citations of %d names, %d missing, %d allowed" % (
    len(cited), len({n for _, _, n in cited}), failed, allowed))
sys.exit(1 if failed else 0)
