# SPDX-License-Identifier: MIT
"""One scrape of a pool, its manager and its publisher (pub_metrics_driver)
parsed by prometheus_client, in OpenMetrics and in the Prometheus text
format 0.0.4: the two libraries' families side by side, one "# EOF", and
the publisher's counters matching what the driver did (4 blocks stored, 1
cleared: 2 events; nothing dropped).

usage: test_pub_metrics.py DRIVER
"""
import subprocess
import sys

from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as parse_om
from prometheus_client.parser import \
    text_string_to_metric_families as parse_prom

PUB = {"kvpool_events_published", "kvpool_events_dropped",
       "kvpool_events_batches", "kvpool_events_producer_threads",
       "kvpool_events_replays_served", "kvpool_events_replays_cut",
       "kvpool_events_replays_ignored", "kvpool_events_replay_ring_batches",
       "kvpool_events_replay_ring_bytes", "kvpool_events_pub_queued_bytes",
       "kvpool_events_pub_dropped", "kvpool_events_subscriber_overflows",
       "kvpool_events_replay_queued_bytes"}


def run(driver, *args):
    out = subprocess.run([driver, *args], capture_output=True, text=True,
                         timeout=60)
    if out.returncode:
        sys.exit("test_pub_metrics: %s %s failed: %s" %
                 (driver, " ".join(args), out.stderr.strip()))
    return out.stdout


def main():
    driver = sys.argv[1]
    om = run(driver)
    assert om.count("# EOF") == 1 and om.endswith("# EOF\n"), \
        "one # EOF, at the end"
    fams = {f.name: f for f in parse_om(om)}
    assert PUB <= set(fams), "publisher families: missing %s" % \
        sorted(PUB - set(fams))
    assert "kvpool_prefix_cache_events" in fams, "the core's families too"
    val = {s.name: s.value for f in fams.values() for s in f.samples
           if not s.labels}
    core_events = [s.value for s in
                   fams["kvpool_prefix_cache_events"].samples
                   if s.labels == {"manager": "driver"}]
    assert core_events == [2], core_events
    assert val["kvpool_events_published_total"] == 2, val
    assert val["kvpool_events_dropped_total"] == 0, val
    assert val["kvpool_events_pub_dropped_total"] == 0, val
    assert val["kvpool_events_subscriber_overflows_total"] == 0, val
    assert val["kvpool_events_batches_total"] >= 1, val
    prom = run(driver, "--prometheus")
    assert "# EOF" not in prom
    pfams = {f.name: f for f in parse_prom(prom)}
    assert PUB <= set(pfams), sorted(PUB - set(pfams))
    print("test_pub_metrics: the core's and the publisher's families parse "
          "together in both formats; 2 events published, none dropped")


main()
