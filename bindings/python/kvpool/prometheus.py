# SPDX-License-Identifier: MIT
"""kvpool.prometheus: kvpool's metrics in a prometheus_client registry.

    from prometheus_client import REGISTRY
    import kvpool, kvpool.prometheus
    REGISTRY.register(kvpool.prometheus.Collector(pool, [manager]))

Each scrape of the server's existing /metrics endpoint then renders the
pool's and the managers' families (Pool.metrics, kvp_metrics_write) and
hands them to prometheus_client, which re-exposes them in whichever format
the scraper asked for.  Needs prometheus_client (Debian's
python3-prometheus-client); the rest of the package does not.
"""
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families

from ._core import Pool
from ._manager import Manager


class Collector:
    """A prometheus_client collector over one pool and its managers.

    The managers' names (Manager(name=...)) become the `manager` label; two
    managers with one name are refused at the first scrape, as
    kvp_metrics_write refuses them.  Collecting takes no lock that the
    pool's block or sequence operations take, and may run in any thread.
    """

    def __init__(self, pool, managers=()):
        if not isinstance(pool, Pool):
            raise TypeError("Collector: pool must be a kvpool.Pool")
        self._pool = pool
        self._managers = list(managers)
        for m in self._managers:
            if not isinstance(m, Manager):
                raise TypeError("Collector: %r is not a kvpool.Manager"
                                % (m,))

    def collect(self):
        text = self._pool.metrics(self._managers)
        return list(text_string_to_metric_families(text))

    def describe(self):
        # Families are fixed by the library version: a scrape's worth of
        # descriptions lets register() check for clashing names.
        return self.collect()
