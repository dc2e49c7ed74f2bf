#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lib-callgraph.py - the call graph between the files of lib/ (or of
tools/), and its cycles.

usage: tools/lib-callgraph.py [SRCDIR [OBJDIR [PREFIX]]]   (after `make`)
       SRCDIR defaults to lib; OBJDIR (the build tree's directory, for a
       VPATH build) to SRCDIR; PREFIX (what automake puts before each
       object's name) to libkvpool_la-.  tests/test_layers.sh runs it on
       lib, and on tools with kvpool- (the `kvpool` command's objects).

Edges come from two sources: each object file's undefined symbols,
resolved to the object that defines them (`nm`), and calls to the static
inline functions of each header, found in the sources (a header's inline
functions belong to the .c file of the same name, or to the header itself
for stack.h, compiler.h, tsan.h, sim_run.h).  Prints one line per edge,
then the cycles (none for a layered lib/ or tools/); exits 1 if there is
a cycle.
"""
import glob
import os
import re
import subprocess
import sys

libdir = sys.argv[1] if len(sys.argv) > 1 else "lib"
objdir = sys.argv[2] if len(sys.argv) > 2 else libdir
prefix = sys.argv[3] if len(sys.argv) > 3 else "libkvpool_la-"
objs = glob.glob(os.path.join(objdir, ".libs", prefix + "*.o")) or glob.glob(
    os.path.join(objdir, prefix + "*.o"))
if not objs:
    sys.exit("lib-callgraph: no object files under %s: run make first" % objdir)


def unit(path):
    return os.path.basename(path)[len(prefix):-2] + ".c"


defined, undefined = {}, {}
for o in objs:
    out = subprocess.run(["nm", o], capture_output=True, text=True,
                         check=True).stdout
    u = unit(o)
    undefined[u] = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtDdBbRr":
            defined.setdefault(parts[2], u)
        elif len(parts) == 2 and parts[0] == "U":
            undefined[u].add(parts[1])

edges = set()
for u, syms in undefined.items():
    for s in syms:
        d = defined.get(s)
        if d and d != u:
            edges.add((u, d))

# static inline functions of headers
inline_owner = {}
for h in glob.glob(os.path.join(libdir, "*.h")):
    base = os.path.basename(h)
    owner = base[:-2] + ".c"
    if not os.path.exists(os.path.join(libdir, owner)):
        owner = base
    for m in re.finditer(r"static inline[^;{(]*?\b(\w+)\s*\(",
                         open(h).read()):
        inline_owner[m.group(1)] = owner
for c in glob.glob(os.path.join(libdir, "*.c")):
    u = os.path.basename(c)
    text = open(c).read()
    for fn, owner in inline_owner.items():
        if owner != u and owner.endswith(".c") and re.search(
                r"\b%s\s*\(" % re.escape(fn), text):
            edges.add((u, owner))

for a, b in sorted(edges):
    print("%s -> %s" % (a, b))

graph = {}
for a, b in edges:
    graph.setdefault(a, set()).add(b)
cycles, state = [], {}


def visit(n, path):
    state[n] = 1
    for m in sorted(graph.get(n, ())):
        if state.get(m) == 1:
            cycles.append(path[path.index(m):] + [m])
        elif not state.get(m):
            visit(m, path + [m])
    state[n] = 2


for n in sorted(graph):
    if not state.get(n):
        visit(n, [n])
for c in cycles:
    print("cycle: " + " -> ".join(c))
print("%d edges, %d cycles" % (len(edges), len(cycles)))
sys.exit(1 if cycles else 0)
