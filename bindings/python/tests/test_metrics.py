# SPDX-License-Identifier: MIT
"""kvp_metrics_write (through Pool.metrics) read by prometheus_client.

- Both formats parse with prometheus_client's own parsers (OpenMetrics 1.0
  and the Prometheus text format 0.0.4), and name the same families.
- Golden: the families, their types, units and label names are exactly
  GOLDEN below; a manager's name is escaped and parsed back unchanged.
- The values agree with Manager.stats() and Pool.stats() at quiescence,
  and the block states sum to the pool's size.
- Bad arguments raise, changing nothing.
- Four threads churn while the main thread scrapes: every counter series
  never decreases from one scrape to the next.
- kvpool.prometheus.Collector registers in a CollectorRegistry and its
  exposition parses again.
"""
import random
import sys
import threading

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import \
    generate_latest as om_generate_latest
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as parse_om
from prometheus_client.parser import \
    text_string_to_metric_families as parse_prom

import kvpool
import kvpool.prometheus

# family: (type, unit, label names)
POOL = ()
MGR = ("manager",)
GOLDEN = {
    "kvpool_pool_blocks": ("gauge", "blocks", ("state",)),
    "kvpool_pool_capacity_blocks": ("gauge", "blocks", POOL),
    "kvpool_kv_cache_usage_ratio": ("gauge", "ratio", POOL),
    "kvpool_pool_peak_used_blocks": ("gauge", "blocks", POOL),
    "kvpool_pool_thread_caches": ("gauge", "", POOL),
    "kvpool_pool_cache_evictions": ("counter", "", POOL),
    "kvpool_sequences_running": ("gauge", "", MGR),
    "kvpool_sequence_tokens": ("gauge", "tokens", MGR),
    "kvpool_prefix_cache_queries": ("counter", "", MGR),
    "kvpool_prefix_cache_hits": ("counter", "", MGR),
    "kvpool_prefix_cache_blocks": ("gauge", "blocks", MGR),
    "kvpool_prefix_cache_pinned_blocks": ("gauge", "blocks", MGR),
    "kvpool_prefix_cache_commits": ("counter", "", MGR),
    "kvpool_prefix_cache_commits_uncached": ("counter", "", MGR),
    "kvpool_prefix_cache_evictions": ("counter", "", MGR),
    "kvpool_num_preemptions": ("counter", "", MGR),
    "kvpool_sequence_creates": ("counter", "", MGR),
    "kvpool_sequence_frees": ("counter", "", MGR),
    "kvpool_sequence_appends": ("counter", "", MGR),
    "kvpool_sequence_forks": ("counter", "", MGR),
    "kvpool_cow_copies": ("counter", "", MGR),
    "kvpool_manager_blocks_allocated": ("counter", "", MGR),
    "kvpool_manager_blocks_released": ("counter", "", MGR),
    "kvpool_prefix_cache_events": ("counter", "", MGR),
}
# Manager families and the Stats field each reports.
FIELDS = {
    "kvpool_sequences_running": "sequences",
    "kvpool_sequence_tokens": "tokens",
    "kvpool_prefix_cache_queries": "prefix_queries",
    "kvpool_prefix_cache_hits": "prefix_hits",
    "kvpool_prefix_cache_blocks": "prefix_cached_blocks",
    "kvpool_prefix_cache_pinned_blocks": "prefix_pinned",
    "kvpool_prefix_cache_commits": "prefix_commits",
    "kvpool_prefix_cache_commits_uncached": "prefix_uncached",
    "kvpool_prefix_cache_evictions": "prefix_evictions",
    "kvpool_num_preemptions": "evictions",
    "kvpool_sequence_creates": "seq_creates",
    "kvpool_sequence_frees": "seq_frees",
    "kvpool_sequence_appends": "appends",
    "kvpool_sequence_forks": "forks",
    "kvpool_cow_copies": "cow_copies",
    "kvpool_manager_blocks_allocated": "blocks_allocated",
    "kvpool_manager_blocks_released": "blocks_released",
    "kvpool_prefix_cache_events": "events",
}
NAME = 'llama "8b"\\v1'  # a quote and a backslash to escape

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def families(text, om=True):
    return {f.name: f for f in (parse_om if om else parse_prom)(text)}


def values(fams):
    """{(sample name, labels as a sorted tuple): value}"""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in fams.values() for s in f.samples}


def workload(pool, m, m2):
    """Commits, hits, a duplicate commit, a fork with COW, a preemption."""
    toks = list(range(64))
    h = kvpool.hash_blocks(toks, 16)
    m.create(1, 64)
    check(m.commit(1, h) == 4, "4 blocks committed")
    s = m.create_cached(2, h, 70)
    check(s.cached_tokens == 64, "a hit of 64 tokens, got %d" %
          s.cached_tokens)
    m.create(3, 64)
    m.commit(3, h)  # h is cached by seq 1's blocks: left uncached
    m.fork(2, 4)
    m.append(4, 1)  # the shared last block: a copy-on-write
    m.free(1)
    m.free(3)
    m.evict()
    m2.create(7, 33)


def test_golden_and_values(pool, m, m2):
    om_text = pool.metrics([m, m2])
    check(om_text.endswith("# EOF\n"), "OpenMetrics text ends with # EOF")
    fams = families(om_text)
    got = {n: (f.type, f.unit, tuple(sorted({k for s in f.samples
                                             for k in s.labels})))
           for n, f in fams.items()}
    check(got == GOLDEN, "families as GOLDEN: extra %s, missing %s, "
          "differing %s" % (sorted(set(got) - set(GOLDEN)),
                            sorted(set(GOLDEN) - set(got)),
                            sorted(n for n in got if n in GOLDEN and
                                   got[n] != GOLDEN[n])))
    prom = families(pool.metrics([m, m2], prometheus=True), om=False)
    check("# EOF" not in pool.metrics([m, m2], prometheus=True),
          "Prometheus 0.0.4 text has no # EOF")
    # 0.0.4's parser names counters with _total; samples are the same.
    check(values(prom) == values(fams), "both formats carry the same "
          "samples")
    check(not pool.metrics([m], eof=False).endswith("# EOF\n"),
          "eof=False leaves out # EOF")
    v = values(fams)
    for mgr in (m, m2):
        st = mgr.stats()
        for fam, field in FIELDS.items():
            sname = fam + "_total" if GOLDEN[fam][0] == "counter" else fam
            key = (sname, (("manager", mgr.name),))
            check(key in v and v[key] == getattr(st, field),
                  "%s{manager=%r} = %s, stats say %s" %
                  (sname, mgr.name, v.get(key), getattr(st, field)))
    check(m.name == NAME, "the name round-trips: %r" % m.name)
    check(m2.name == str(m2.id), "an unnamed manager is named by its id")
    st = m.stats()
    check(st.prefix_uncached == 4 and st.cow_copies == 1 and
          st.evictions == 1 and st.prefix_hits == 64,
          "the workload's counters: %s" % (st,))
    ps = pool.stats()
    blocks = {dict(k[1])["state"]: val for k, val in v.items()
              if k[0] == "kvpool_pool_blocks"}
    check(sum(blocks.values()) == ps.total, "block states %s sum to %d" %
          (blocks, ps.total))
    check(blocks["used"] == ps.used and blocks["evictable"] == ps.evictable
          and blocks["thread_cache"] == ps.in_thread_caches,
          "block states agree with Pool.stats(): %s %s" % (blocks, ps))
    check(v[("kvpool_kv_cache_usage_ratio", ())] ==
          ps.used / ps.total, "usage ratio is used / total")


def test_errors(pool, m):
    other = kvpool.Pool(num_blocks=16)
    om = kvpool.Manager(other)
    for bad in ([m, m], [om], ["x"]):
        try:
            pool.metrics(bad)
            check(False, "metrics(%r) raises" % (bad,))
        except (kvpool.InvalidArgument, TypeError):
            pass
    twin = kvpool.Manager(pool, name=NAME)  # a second one with m's name
    try:
        pool.metrics([m, twin])
        check(False, "two managers with one name are refused")
    except kvpool.InvalidArgument:
        pass
    for bad in ("", "a\nb", "x" * 64):
        try:
            kvpool.Manager(pool, name=bad)
            check(False, "name %r is refused" % bad)
        except kvpool.InvalidArgument:
            pass
    twin.close()
    om.close()
    other.close()


def churn(m, tid, stop, errors):
    rng = random.Random(tid)
    base = (tid + 1) << 40
    n = 0
    prompts = [kvpool.hash_blocks(list(range(i, i + 48)), 16)
               for i in range(4)]
    try:
        while not stop.is_set():
            sid = base + n
            n += 1
            try:
                h = prompts[rng.randrange(4)]
                m.create_cached(sid, h, 50)
                m.commit(sid, h)
                m.append(sid, rng.randrange(1, 20))
                if rng.random() < 0.3:
                    m.fork(sid, sid | (1 << 39))
                    m.free(sid | (1 << 39))
                m.free(sid)
            except kvpool.NoSpace:
                m.evict()
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(e)


def test_monotonic(pool, m, m2):
    stop = threading.Event()
    errors = []
    threads = [threading.Thread(target=churn, args=(m, t, stop, errors))
               for t in range(4)]
    for t in threads:
        t.start()
    last = {}
    scrapes = 0
    try:
        for _ in range(60):
            fams = families(pool.metrics([m, m2]))
            scrapes += 1
            for f in fams.values():
                if f.type != "counter":
                    continue
                for s in f.samples:
                    key = (s.name, tuple(sorted(s.labels.items())))
                    check(s.value >= last.get(key, 0),
                          "%s went down: %s -> %s" %
                          (key, last.get(key), s.value))
                    last[key] = s.value
    finally:
        stop.set()
        for t in threads:
            t.join()
    check(not errors, "churn threads raised: %r" % errors[:3])
    check(last[("kvpool_sequence_creates_total",
                (("manager", NAME),))] > 0, "the churn ran")
    kvpool.thread_flush()
    m.check()
    print("metrics: %d scrapes during the churn, counters never decreased"
          % scrapes)


def test_collector(pool, m, m2):
    reg = CollectorRegistry()
    reg.register(kvpool.prometheus.Collector(pool, [m, m2]))
    text = generate_latest(reg).decode()
    fams = families(text, om=False)
    check("kvpool_prefix_cache_hits" in fams and
          "kvpool_pool_blocks" in fams, "the collector's families reach "
          "generate_latest")
    om_text = om_generate_latest(reg).decode()
    check(set(families(om_text)) == set(GOLDEN), "and its OpenMetrics "
          "exposition")
    try:
        kvpool.prometheus.Collector(pool, ["not a manager"])
        check(False, "Collector refuses a non-Manager")
    except TypeError:
        pass


def main():
    with kvpool.Pool(num_blocks=64, block_tokens=16) as pool, \
            kvpool.Manager(pool, prefix_cache=True, name=NAME) as m, \
            kvpool.Manager(pool) as m2:
        workload(pool, m, m2)
        test_golden_and_values(pool, m, m2)
        test_errors(pool, m)
        test_collector(pool, m, m2)
        test_monotonic(pool, m, m2)
    if failures:
        print("metrics: %d checks failed" % len(failures), file=sys.stderr)
        sys.exit(1)
    print("metrics: both formats parse, the golden families match, the "
          "values agree with the stats, the collector registers")


main()
