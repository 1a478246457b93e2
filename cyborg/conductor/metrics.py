"""A conductor's Prometheus metrics: ARQs by state, bind durations, the
transactions the database aborted for a deadlock, which agents beat and
whether placement answers.

Every conductor serves the same ARQ counts, those of the whole cloud read
from the database, and a histogram of the binds it ran itself: sum the
histograms over conductors, and take one conductor's counts (``max``).
An agent's heartbeats go to any one conductor: whether it is up is the
``max`` over conductors.
"""
import datetime
import logging
import threading
import time
from collections.abc import Iterator

import prometheus_client
from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_utils import timeutils
from prometheus_client import core
from prometheus_client import registry as prom_registry

from cyborg import context as cyborg_context
from cyborg.common import metrics_server
from cyborg.common import probes
from cyborg.conductor import heartbeats
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import deadlocks
from cyborg.db.api import services

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
    (``deadlocks.counts``), 0 for every transaction that has none."""

    def collect(self) -> Iterator[core.Metric]:
        family = core.CounterMetricFamily(
            'cyborg_db_deadlocks', 'Transactions of this conductor the '
            'database aborted for a deadlock or a Galera certification '
            'conflict, by whether they were retried or failed.',
            labels=['transaction', 'outcome'])
        counted = deadlocks.counts.snapshot()
        every = {*counted, *((transaction, outcome)
                             for transaction in deadlocks.transactions
                             for outcome in deadlocks.OUTCOMES)}
        for transaction, outcome in sorted(every):
            family.add_metric([transaction, outcome],
                              counted.get((transaction, outcome), 0))
        yield family


class AgentCollector(prom_registry.Collector):
    """Whether each agent's last heartbeat is at most ``[DEFAULT]
    service_down_time`` old, as this conductor knows it.

    The heartbeats come from ``heartbeats.HeartbeatBatch.last_seen``, in
    memory. An agent that stopped before this conductor started never
    beats here: the agents' services rows are read once, at the first
    scrape that can, so that it is served down instead of not at all.
    """

    AGENT = 'cyborg-agent'

    def __init__(self, beats: heartbeats.HeartbeatBatch,
                 down_time: int) -> None:
        self.beats = beats
        self.down_time = down_time
        self._lock = threading.Lock()
        self._known: dict[str, datetime.datetime] | None = None

    def _recorded(self) -> dict[str, datetime.datetime]:
        with self._lock:
            if self._known is None:
                try:
                    rows = services.get_all(
                        cyborg_context.get_admin_context(), self.AGENT)
                except db_exc.DBError as exc:
                    LOG.warning('Cannot read the agents\' services for '
                                'the metrics: %s', exc)
                    return {}
                self._known = {}
                for row in rows:
                    name = row['hostname'] or row['host']
                    seen = self._known.get(name, row['last_seen_at'])
                    self._known[name] = max(seen, row['last_seen_at'])
            return self._known

    def collect(self) -> Iterator[core.Metric]:
        seen = dict(self._recorded())
        for name, at in self.beats.last_seen(self.AGENT).items():
            seen[name] = max(at, seen.get(name, at))
        down_after = timeutils.utcnow() - datetime.timedelta(
            seconds=self.down_time)
        family = core.GaugeMetricFamily(
            'cyborg_agent_up', 'Whether the agent\'s last heartbeat this '
            'conductor knows of is at most service_down_time old (1) or '
            'not (0).', labels=['host'])
        for name, at in sorted(seen.items()):
            family.add_metric([name], float(at >= down_after))
        yield family


class PlacementCollector(prom_registry.Collector):
    """Whether this conductor found placement away when it last called
    it (``placement_sync.PlacementSync.placement_away``, a flag)."""

    def __init__(self, placement: placement_sync.PlacementSync) -> None:
        self.placement = placement

    def collect(self) -> Iterator[core.Metric]:
        family = core.GaugeMetricFamily(
            'cyborg_placement_away', '1 while placement did not answer '
            'this conductor\'s last call and has not answered since, '
            'else 0.')
        family.add_metric([], float(self.placement.placement_away))
        yield family


class ConductorMetrics:
    """The conductor's metrics, served on ``[conductor] metrics_host`` and
    ``metrics_port`` between ``start()`` and ``stop()``. Agents' liveness
    is served with ``beats``, placement's with ``placement`` (a conductor
    with no placement configured serves none), and ``health`` at
    ``probes.PATHS``."""

    def __init__(self, conf: cfg.ConfigOpts,
                 bind_durations: BindDurations,
                 beats: heartbeats.HeartbeatBatch | None = None,
                 placement: placement_sync.PlacementSync | None = None,
                 health: probes.Health | None = None) -> None:
        # A registry of our own: the default one would also serve the
        # process and platform collectors prometheus_client registers.
        self.registry = prom_registry.CollectorRegistry()
        self.registry.register(ArqCollector())
        self.registry.register(DeadlockCollector())
        self.registry.register(bind_durations.histogram)
        if beats is not None:
            self.registry.register(
                AgentCollector(beats, conf.service_down_time))
        if placement is not None:
            self.registry.register(PlacementCollector(placement))
        self.server = metrics_server.MetricsServer(
            conf.conductor.metrics_host, conf.conductor.metrics_port,
            self.registry, health)

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
