"""A conductor's Prometheus metrics: ARQs by state, bind durations and
the transactions the database aborted for a deadlock.

Every conductor serves the same ARQ counts, those of the whole cloud read
from the database, and a histogram of the binds it ran itself: sum the
histograms over conductors, and take one conductor's counts (``max``).
"""
import logging
import threading
import time
from collections.abc import Iterator

import prometheus_client
from oslo_config import cfg
from oslo_db import exception as db_exc
from prometheus_client import core
from prometheus_client import registry as prom_registry

from cyborg import context as cyborg_context
from cyborg.common import metrics_server
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import deadlocks

LOG = logging.getLogger(__name__)

# An instant bind takes milliseconds; one that programs an FPGA tens of
# seconds, and no bind outlives [conductor] bind_timeout (5 min by
# default, 10 at most in practice).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
           2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
RESULTS = {'Bound': 'bound', 'BindFailed': 'failed'}
# Seconds a count of ARQs by state is served again before the database is
# asked anew: a few Prometheus servers scraping every conductor then cost
# one query a second or two, whatever their intervals.
COUNT_TTL = 2.0


class BindDurations:
    """How long binds took, from the PATCH reaching the conductor to their
    ARQ's end (Bound or BindFailed), by result."""

    def __init__(self) -> None:
        # Not registered anywhere yet: ConductorMetrics registers it in its
        # own registry, and a conductor serving no metrics just counts.
        self.histogram = prometheus_client.Histogram(
            'cyborg_bind_duration_seconds',
            'Seconds from a bind reaching this conductor to its accelerator '
            'request being Bound or BindFailed.',
            ['result'], buckets=BUCKETS, registry=None)
        # Both series exist from the start, so that rate() sees the first
        # failure as an increase from 0.
        for result in RESULTS.values():
            self.histogram.labels(result)

    def observe(self, ended: dict[str, str], started: float) -> None:
        """Observe each bind of ``ended`` (ARQ uuid -> state) as having
        started at ``started`` (``time.monotonic()``)."""
        elapsed = time.monotonic() - started
        for state in ended.values():
            if state in RESULTS:
                self.histogram.labels(RESULTS[state]).observe(elapsed)


class ArqCollector(prom_registry.Collector):
    """ARQ counts by state, from one query at most every ``COUNT_TTL``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._read_at: float | None = None

    def _read(self) -> dict[str, int] | None:
        # One query for concurrent scrapes: the second waits for the
        # first's answer instead of asking too.
        with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= COUNT_TTL:
                try:
                    self._counts = arqs.count_by_state(
                        cyborg_context.get_admin_context())
                except db_exc.DBError as exc:
                    # A gauge with no series rather than an old count, or a
                    # failed scrape that would hide the bind histogram too.
                    LOG.warning('Cannot count accelerator requests for '
                                'the metrics: %s', exc)
                    self._read_at = None
                    return None
                self._read_at = now
            return self._counts

    def collect(self) -> Iterator[core.Metric]:
        counts = self._read()
        if counts is None:
            return
        family = core.GaugeMetricFamily(
            'cyborg_arqs', 'Accelerator requests of every project, by '
            'state (the same figure from every conductor).',
            labels=['state'])
        # Every state, 0 included, so that a series does not vanish when
        # its last ARQ leaves the state.
        for state in models.ARQ_STATES:
            family.add_metric([state], counts.get(state, 0))
        yield family


class DeadlockCollector(prom_registry.Collector):
    """This process's deadlocks by transaction and outcome
    (``deadlocks.counts``)."""

    def collect(self) -> Iterator[core.Metric]:
        family = core.CounterMetricFamily(
            'cyborg_db_deadlocks', 'Transactions of this conductor the '
            'database aborted for a deadlock or a Galera certification '
            'conflict, by whether they were retried or failed.',
            labels=['transaction', 'outcome'])
        for (transaction, outcome), count in sorted(
                deadlocks.counts.snapshot().items()):
            family.add_metric([transaction, outcome], count)
        yield family


class ConductorMetrics:
    """The conductor's metrics, served on ``[conductor] metrics_host`` and
    ``metrics_port`` between ``start()`` and ``stop()``."""

    def __init__(self, conf: cfg.ConfigOpts,
                 bind_durations: BindDurations) -> None:
        # A registry of our own: the default one would also serve the
        # process and platform collectors prometheus_client registers.
        self.registry = prom_registry.CollectorRegistry()
        self.registry.register(ArqCollector())
        self.registry.register(DeadlockCollector())
        self.registry.register(bind_durations.histogram)
        self.server = metrics_server.MetricsServer(
            conf.conductor.metrics_host, conf.conductor.metrics_port,
            self.registry)

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
