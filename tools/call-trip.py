#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""call-trip.py - the trip of one call through libkvpool: every function
entered (a stop), the file it is written in, and how often the trip enters
a room (a set of files) or comes back to a file it had left.

usage: tools/call-trip.py [-o DIR] [--room STEMS] [-v] [REV...]

Each revision (default HEAD) is exported with `git archive` into
DIR/src-<hash> (DIR defaults to /tmp/kvpool-trip) and its lib/libkvpool.la
built there with -finstrument-functions (kept for later runs), then a small
driver (below, linked statically with a tracer) runs on a prefix-cache
manager of an ID-only pool, 8 blocks of 16 tokens a sequence:
  first-create, first-free  a fresh manager's first kvp_seq_create_cached
                            (a miss: the thread's state and a new slab are
                            made) and its kvp_seq_free;
  miss, hit, free           after 1000 rounds of the same calls: a miss, a
                            partial hit (4 of 8 blocks), the hit's free;
  trip                      miss, hit and free as one trip.
Every function of the library is recorded as it is entered, inline
functions included (GCC instruments them where they are expanded), and
mapped to its file with addr2line (a name defined in one file only is
that file's: addr2line names the wrong one for a few out-of-line copies).

Columns: stops (function entries), files (distinct files), returns (stops
in a file F right after a stop in another file, F visited before), room
returns (the same with x.c and x.h as one room, and the --room files as
one), room runs (maximal runs of consecutive stops in the room), calls in
(stops in the room called from outside it) and, of those, the calls to the
room's .c files (the rest are its header's inline functions).  --room is a
comma-separated list of file stems (default lib/seqmem,lib/seqslab: the
memory of sequence structs, before and after it became one file).  -v
prints each trip, indented by call depth.  Needs gcc, addr2line, autoreconf
and the library's dependencies (tools/install-deps.sh).
"""
import os
import re
import subprocess
import sys

DRIVER = r'''
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvpool.h"

#define NOI __attribute__((no_instrument_function))
#define MAXEV (1u << 20)
static struct { char kind; void *fn; } ev[MAXEV];
static unsigned nev;
static _Thread_local int on;
static const char *outdir;

NOI void __cyg_profile_func_enter(void *fn, void *site)
{
	(void)site;
	if (on && nev < MAXEV)
		ev[nev].kind = 'E', ev[nev++].fn = fn;
}

NOI void __cyg_profile_func_exit(void *fn, void *site)
{
	(void)site;
	if (on && nev < MAXEV)
		ev[nev].kind = 'X', ev[nev++].fn = fn;
}

static void start(void)
{
	nev = 0;
	on = 1;
}

static void stop(const char *name, int err)
{
	char path[4096];
	FILE *f;

	on = 0;
	if (err < 0) {
		fprintf(stderr, "trip: %s: %s\n", name, kvp_strerror(err));
		exit(1);
	}
	if (!name)
		return;
	snprintf(path, sizeof(path), "%s/%s", outdir, name);
	if (!(f = fopen(path, "w")))
		exit(1);
	for (unsigned i = 0; i < nev; i++)
		fprintf(f, "%c %p\n", ev[i].kind, ev[i].fn);
	fclose(f);
}

#define BT 16u
#define NB 8u
static void hashes(struct kvp_hash *h, unsigned salt, unsigned shared)
{
	for (unsigned i = 0; i < NB; i++) {
		memset(&h[i], 0, sizeof(h[i]));
		h[i].b[0] = (unsigned char)(i + 1);
		h[i].b[1] = (unsigned char)(i < shared ? 0 : salt);
		h[i].b[2] = (unsigned char)(i < shared ? 0 : salt >> 8);
		h[i].b[3] = 0x5a;
	}
}

static int create(struct kvp_manager *m, uint64_t id, unsigned salt,
		  unsigned shared)
{
	struct kvp_hash h[NB];
	uint32_t cached;

	hashes(h, salt, shared);
	return kvp_seq_create_cached(m, id, h, NB, NB * BT + 1, &cached);
}

static struct kvp_manager *manager(struct kvp_pool *pool)
{
	struct kvp_manager_config mc;
	struct kvp_manager *m;

	memset(&mc, 0, sizeof(mc));
	mc.pool = pool;
	mc.flags = KVP_PREFIX_CACHE;
	stop(NULL, kvp_manager_create(&mc, &m));
	return m;
}

int main(int argc, char **argv)
{
	struct kvp_pool_config pc;
	struct kvp_pool *pool;
	struct kvp_manager *m, *fresh;
	struct kvp_hash prefix[NB];
	uint32_t cached;
	int err;

	outdir = argv[argc - 1];
	memset(&pc, 0, sizeof(pc));
	pc.num_blocks = 4096;
	pc.block_tokens = BT;
	pc.device_id = -1;
	stop(NULL, kvp_pool_create(&pc, &pool));
	m = manager(pool);
	fresh = manager(pool);
	start();
	err = create(fresh, 1, 5, 0);
	stop("first-create", err);
	start();
	err = kvp_seq_free(fresh, 1);
	stop("first-free", err);
	hashes(prefix, 0, NB);
	stop(NULL, kvp_seq_create_cached(m, 1, prefix, NB, NB * BT + 1,
					 &cached));
	stop(NULL, kvp_seq_commit(m, 1, prefix, NB));
	for (unsigned r = 0; r <= 1000; r++) {
		start();
		err = create(m, 10, 1000 + r, 0);
		stop(r == 1000 ? "miss" : NULL, err);
		start();
		err = create(m, 11, 3000 + r, NB / 2);
		stop(r == 1000 ? "hit" : NULL, err);
		start();
		err = kvp_seq_free(m, 11);
		stop(r == 1000 ? "free" : NULL, err);
		stop(NULL, kvp_seq_free(m, 10));
	}
	kvp_manager_destroy(fresh);
	kvp_manager_destroy(m);
	kvp_pool_unref(pool);
	return 0;
}
'''

CALLS = ['first-create', 'first-free', 'miss', 'hit', 'free']
TRIP = ('trip', ['miss', 'hit', 'free'])


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def make_var(makefile, name):
    """A variable of a configured Makefile (its libraries)."""
    for line in open(makefile):
        if line.startswith(name + ' ='):
            return line.split('=', 1)[1].split()
    return []


def build(top, out, rev):
    """Exports and builds rev once; returns (source dir, driver)."""
    h = run(['git', '-C', top, 'rev-parse', '--verify', '-q',
             rev + '^{commit}'], stdout=subprocess.PIPE,
            text=True).stdout.strip()
    src, exe = os.path.join(out, 'src-' + h), os.path.join(out, 'trip-' + h)
    log = open(os.path.join(out, 'build-%s.log' % h), 'w')
    if not os.path.exists(os.path.join(src, '.trip-built')):
        print('call-trip: building %s in %s' % (h[:12], src),
              file=sys.stderr)
        run(['rm', '-rf', src])
        os.makedirs(src)
        tar = subprocess.Popen(['git', '-C', top, 'archive', h],
                               stdout=subprocess.PIPE)
        run(['tar', '-x', '-C', src], stdin=tar.stdout)
        tar.wait()
        for cmd in (['autoreconf', '-fi'],
                    ['./configure', '--disable-events',
                     'CFLAGS=-g -O2 -finstrument-functions'],
                    ['make', '-j2', 'lib/libkvpool.la']):
            run(cmd, cwd=src, stdout=log, stderr=log)
        open(os.path.join(src, '.trip-built'), 'w').close()
    with open(exe + '.c', 'w') as f:
        f.write(DRIVER)
    mk = os.path.join(src, 'Makefile')
    libs = sum((make_var(mk, v) for v in ('URCU_LIBS', 'NETTLE_LIBS',
                                          'XXHASH_LIBS', 'JEMALLOC_LIBS')),
               [])
    run(['gcc', '-std=gnu11', '-O2', '-g', '-no-pie', '-I',
         os.path.join(src, 'include'), '-o', exe, exe + '.c',
         os.path.join(src, 'lib', '.libs', 'libkvpool.a')] + libs +
        ['-lpthread'], stdout=log, stderr=log)
    return src, exe


def definitions(src):
    """Function name -> the files of lib/ that define it."""
    defs = {}
    pat = re.compile(r'^[A-Za-z_][\w \*]*?\b(\w+)\([^;{}]*\)\s*\n\{',
                     re.M)
    for name in os.listdir(os.path.join(src, 'lib')):
        if name.endswith(('.c', '.h')):
            text = open(os.path.join(src, 'lib', name)).read()
            for m in pat.finditer(text):
                defs.setdefault(m.group(1), set()).add('lib/' + name)
    return defs


def resolve(exe, src, addrs):
    """Address -> (function, file relative to the source tree)."""
    out = run(['addr2line', '-f', '-e', exe] + addrs, capture_output=True,
              text=True).stdout.splitlines()
    defs, res = definitions(src), {}
    for i, a in enumerate(addrs):
        fn, path = out[2 * i], out[2 * i + 1].split(':')[0]
        f = os.path.relpath(path, src) if path.startswith(src) else path
        if len(defs.get(fn, ())) == 1 and f not in defs[fn]:
            f = next(iter(defs[fn]))
        res[a] = (fn, f)
    return res


def stops_of(events, names):
    """The stops: (function, file, caller's file or None, depth)."""
    stack, stops = [], []
    for kind, a in events:
        fn, f = names[a]
        if kind == 'E':
            stops.append((fn, f, stack[-1][1] if stack else None,
                          len(stack)))
            stack.append((fn, f))
            continue
        while stack and stack[-1][0] != fn:
            stack.pop()
        if stack:
            stack.pop()
    return stops


def returns(seq):
    """Stops in F right after a stop elsewhere, F visited before."""
    seen, prev, n = set(), None, 0
    for f in seq:
        if prev is not None and f != prev and f in seen:
            n += 1
        seen.add(f)
        prev = f
    return n


def counts(stops, inroom):
    """The columns of one trip."""
    files = [f for _, f, _, _ in stops]
    rooms = ['' if inroom(f) else os.path.splitext(f)[0] for f in files]
    runs = sum(1 for i, f in enumerate(files)
               if inroom(f) and (i == 0 or not inroom(files[i - 1])))
    calls = [f for _, f, c, _ in stops
             if inroom(f) and (c is None or not inroom(c))]
    return (len(stops), len(set(files)), returns(files), returns(rooms),
            runs, len(calls),
            sum(1 for f in calls if f.endswith('.c')))


def report(rev, src, exe, stems, verbose):
    tdir = exe + '.traces'
    os.makedirs(tdir, exist_ok=True)
    run([exe, tdir])
    traces = {}
    for c in CALLS:
        traces[c] = [l.split() for l in open(os.path.join(tdir, c))]
    names = resolve(exe, src, sorted({a for t in traces.values()
                                      for _, a in t}))

    def inroom(f):
        return os.path.splitext(f)[0] in stems

    for c, parts in [(c, [c]) for c in CALLS] + [TRIP]:
        stops = stops_of([e for p in parts for e in traces[p]], names)
        if verbose and c in CALLS:
            print('# %s %s' % (rev, c))
            for fn, f, _, d in stops:
                print('%s%s  %s%s' % ('  ' * d, fn, f,
                                      '  (room)' if inroom(f) else ''))
        print('%-12s %-14s %5d %5d %7d %12d %9d %8d %11d' %
              ((rev[:12], c) + counts(stops, inroom)))


def main(argv):
    out, stems, verbose, revs = '/tmp/kvpool-trip', None, False, []
    while argv:
        a = argv.pop(0)
        if a == '-o' and argv:
            out = argv.pop(0)
        elif a == '--room' and argv:
            stems = argv.pop(0).split(',')
        elif a == '-v':
            verbose = True
        elif a.startswith('-'):
            sys.exit(__doc__.split('\n\n')[1])
        else:
            revs.append(a)
    top = run(['git', 'rev-parse', '--show-toplevel'], capture_output=True,
              text=True).stdout.strip()
    os.makedirs(out, exist_ok=True)
    out = os.path.abspath(out)
    stems = stems or ['lib/seqmem', 'lib/seqslab']
    print('%-12s %-14s %5s %5s %7s %12s %9s %8s %11s' %
          ('revision', 'call', 'stops', 'files', 'returns', 'room returns',
           'room runs', 'calls in', 'calls in .c'))
    for rev in revs or ['HEAD']:
        try:
            src, exe = build(top, out, rev)
            report(rev, src, exe, stems, verbose)
        except subprocess.CalledProcessError as e:
            sys.exit('call-trip: %s: `%s` failed (exit %d); build logs in %s'
                     % (rev, ' '.join(e.cmd)[:100], e.returncode, out))


if __name__ == '__main__':
    main(sys.argv[1:])
