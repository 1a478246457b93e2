"""Keeping placement equal to the database, host by host.

Each deployable is a resource provider under its host's compute node
provider. ``sync_host`` writes only the providers whose desired state
(``providers.Provider.digest``) differs from what was last written, so an
unchanged host costs no placement call. Failures are per provider: one
that fails stays marked unsynced and is retried by the periodic pass, with
a backoff per host, and never blocks the others. ``reconcile`` compares
placement itself with the database, to repair providers changed or
removed behind the conductor's back; the live conductors share the hosts
for it on a hash ring.

An outage of placement is not a failure of each host: once a call finds
placement away, this conductor stops calling it, queues the hosts it
had to sync, and ``probe`` looks up one compute node every second or two
until placement answers; then it syncs the queued hosts at once.
"""
import collections
import dataclasses
import datetime
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import hash_ring
from cyborg.conductor import placement_client
from cyborg.db.api import providers

LOG = logging.getLogger(__name__)

# Seconds between two looks for hosts that need placement work; a host
# that failed waits longer (doubling up to [placement] sync_interval).
TICK = 5.0

# Seconds the periodic pass leaves a host's new pending rows to the
# request that wrote them (see ``sync_pending``). Such a request syncs at
# once, but while thousands of hosts register placement is the
# bottleneck: at 16 reports in flight and 19 providers/s a host of 8
# devices took ~7 s to sync, and 6 % of the providers were written by
# both conductors. A host whose own sync failed is retried this much
# later at most.
SETTLE = 30.0

# While placement is away, the wait before the next probe doubles from
# PROBE_MIN to PROBE_MAX seconds, each drawn between half and all of it so
# that conductors probing the same placement do not all come back at one
# instant; the probe task looks every PROBE_TICK seconds whether one is due.
PROBE_MIN = 0.5
PROBE_MAX = 2.0
PROBE_TICK = 0.25


@dataclasses.dataclass
class SyncResult:
    """What one pass over a host did."""

    written: int = 0
    removed: int = 0
    failed: int = 0
    # Providers still to be written or deleted after this pass.
    pending: int = 0
    compute_node_missing: bool = False
    # Placement could not be reached; the host waits for it to answer.
    placement_away: bool = False

    @property
    def complete(self) -> bool:
        return not self.pending


class PlacementSync:
    """Publishes deployables to placement as nested resource providers."""

    def __init__(self, conf: cfg.ConfigOpts,
                 client: placement_client.PlacementClient | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conf = conf
        self.client = client or placement_client.PlacementClient(conf)
        self.clock = clock
        self._roots: dict[str, str] = {}
        self._locks: dict[str, threading.Lock] = collections.defaultdict(
            threading.Lock)
        self._locks_lock = threading.Lock()
        self._retry_at: dict[str, float] = {}
        self._delay: dict[str, float] = {}
        # Whether placement is away and which hosts wait for it.
        self._away_lock = threading.Lock()
        self._away_since: float | None = None
        self._probe_delay = PROBE_MIN
        self._probe_at = 0.0
        self._waiting: set[str] = set()

    def _host_lock(self, hostname: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks[hostname]

    # Periodic work

    def sync_pending(self, settle: float = 0.0) -> None:
        """Finish what earlier passes could not, each host on its own
        backoff; remove deployables that are gone and no longer held.

        Hosts whose pending rows were written less than ``settle``
        seconds ago are left to the request that wrote them, which syncs
        them itself (a report, a status change): taking them here too,
        on another conductor, doubles their placement calls and meets
        their writes in conflicts."""
        context = cyborg_context.get_admin_context()
        providers.purge_released(context)
        self.probe()
        if self.placement_away:
            return
        now = self.clock()
        written_before = (timeutils.utcnow()
                          - datetime.timedelta(seconds=settle)
                          if settle else None)
        for hostname in providers.pending_hostnames(context,
                                                    written_before):
            if self._retry_at.get(hostname, 0) > now:
                continue
            if self.placement_away:
                # Lost during this pass; the hosts left keep their turn.
                break
            self._track(hostname, self.sync_host(hostname))

    def reconcile(self) -> None:
        """Compare the providers in placement with the database for the
        hosts of this conductor (``my_hosts``) and repair the
        differences."""
        context = cyborg_context.get_admin_context()
        for hostname in self.my_hosts(context):
            if self.placement_away:
                LOG.debug('Placement is away; reconcile waits for its '
                          'next turn.')
                return
            LOG.debug('Reconciling host %s.', hostname)
            self._track(hostname, self.sync_host(hostname, verify=True))
        LOG.debug('Reconcile pass done.')

    def my_hosts(self, context: cyborg_context.RequestContext
                 ) -> list[str]:
        """The hosts this conductor reconciles: those the ring of the
        live conductors gives it (``hash_ring.live_conductors``), so that
        each host is compared once per pass, not once per conductor."""
        host = self.conf.host
        ring = hash_ring.live_conductors(context, self.conf)
        hostnames = providers.all_hostnames(context)
        mine = [hostname for hostname in hostnames
                if ring.owner(hostname) == host]
        LOG.debug('Reconcile pass over %d of %d host(s); live conductors: '
                  '%s.', len(mine), len(hostnames),
                  ', '.join(ring.members))
        return mine

    @property
    def placement_away(self) -> bool:
        """Whether placement was unreachable when last called."""
        return self._away_since is not None

    def probe(self) -> None:
        """While placement is away, look whether it answers again (at
        most once per probe delay); once it does, sync every host that
        waited for it."""
        with self._away_lock:
            now = self.clock()
            if self._away_since is None or now < self._probe_at:
                return
            if not self._waiting:
                # Nothing to publish: the next sync finds out itself.
                self._away_since = None
                return
            hostname = min(self._waiting)
            self._probe_delay = min(self._probe_delay * 2, PROBE_MAX)
            self._probe_at = now + self._jitter(self._probe_delay)
        try:
            # The first call of any sync, and one that needs placement's
            # database as well as its web server.
            self.client.find_provider(hostname)
        except exception.PlacementError as exc:
            if placement_client.is_away(exc):
                LOG.debug('Placement still does not answer: %s', exc)
                return
        with self._away_lock:
            if self._away_since is None:
                # Another thread's probe got the answer first.
                return
            outage = self.clock() - self._away_since
            self._away_since = None
            hosts, self._waiting = sorted(self._waiting), set()
        self._catch_up(hosts, outage)

    def _catch_up(self, hosts: list[str], outage: float) -> None:
        done = pending = 0
        for index, hostname in enumerate(hosts):
            if self.placement_away:
                with self._away_lock:
                    self._waiting.update(hosts[index:])
                pending += len(hosts) - index
                break
            result = self.sync_host(hostname)
            self._track(hostname, result)
            if result.complete:
                done += 1
            else:
                pending += 1
        LOG.info('Placement answers again after %.0f s; %d host(s) caught '
                 'up%s.', outage, done,
                 f', {pending} still pending' if pending else '')

    @staticmethod
    def _jitter(delay: float) -> float:
        return random.uniform(delay / 2, delay)

    def _lost(self, hostname: str, exc: exception.PlacementError) -> None:
        """Placement did not answer a call for ``hostname``: the host
        waits, and placement is probed until it answers."""
        with self._away_lock:
            self._waiting.add(hostname)
            if self._away_since is not None:
                LOG.debug('Placement is away; host %s waits for it.',
                          hostname)
                return
            self._away_since = self.clock()
            self._probe_delay = PROBE_MIN
            self._probe_at = self._away_since + self._jitter(PROBE_MIN)
        LOG.warning('Placement does not answer while publishing host %s '
                    '(%s). Publishing waits until it does; it is probed '
                    'every %g to %g s.', hostname, exc, PROBE_MIN,
                    PROBE_MAX)

    def _wait_if_away(self, hostname: str) -> bool:
        """Queue ``hostname`` if placement is known to be away."""
        with self._away_lock:
            if self._away_since is None:
                return False
            self._waiting.add(hostname)
            return True

    def _track(self, hostname: str, result: SyncResult) -> None:
        if result.placement_away:
            # Placement's outage, not the host's: its backoff stays.
            return
        if result.complete:
            self._retry_at.pop(hostname, None)
            self._delay.pop(hostname, None)
            return
        delay = min(self._delay.get(hostname, TICK / 2) * 2,
                    float(self.conf.placement.sync_interval))
        self._delay[hostname] = delay
        self._retry_at[hostname] = self.clock() + delay

    # One host

    def sync_host(self, hostname: str, verify: bool = False) -> SyncResult:
        """Bring the providers of ``hostname`` up to date; never raises
        for placement trouble, which is logged and left pending."""
        context = cyborg_context.get_admin_context()
        with self._host_lock(hostname):
            wanted = providers.host_providers(context, hostname)
            removals = providers.removals(context, hostname)
            todo = wanted if verify else [p for p in wanted
                                          if not p.in_sync]
            result = SyncResult()
            if not todo and not removals:
                return result
            if self._wait_if_away(hostname):
                result.placement_away = True
                result.pending = len(todo) + len(removals)
                return result
            try:
                root = self._root(hostname, refresh=verify)
                if verify:
                    todo = self._drifted(context, hostname, root, wanted,
                                         removals)
            except exception.ComputeNodeNotFound:
                LOG.warning('Compute node %s is not in placement yet; %d '
                            'provider(s) wait for it.', hostname,
                            len(todo) + len(removals))
                result.compute_node_missing = True
                result.pending = len(todo) + len(removals)
                return result
            except exception.PlacementError as exc:
                result.pending = len(todo) + len(removals)
                if not self._away(hostname, exc, result):
                    LOG.warning('Cannot read placement for host %s: %s',
                                hostname, exc)
                return result
            self._write_all(context, hostname, root, todo, result)
            self._remove_all(context, hostname, removals, result)
        if result.written or result.removed:
            LOG.info('Placement for %s: %d provider(s) written, %d removed'
                     '%s.', hostname, result.written, result.removed,
                     f', {result.pending} pending' if result.pending
                     else '')
        return result

    def _root(self, hostname: str, refresh: bool) -> str:
        if refresh or hostname not in self._roots:
            node = self.client.find_provider(hostname)
            if node is None:
                self._roots.pop(hostname, None)
                raise exception.ComputeNodeNotFound(hostname=hostname)
            self._roots[hostname] = node['uuid']
        return self._roots[hostname]

    def _drifted(self, context: cyborg_context.RequestContext,
                 hostname: str, root: str, wanted: list[providers.Provider],
                 removals: list[str]) -> list[providers.Provider]:
        """Providers placement does not hold as recorded; strays (ours in
        placement, unknown to the database) are queued for removal."""
        present = {p['uuid']: p for p in self.client.get_tree(
            root, required=providers.OWNER_TRAIT) if p['uuid'] != root}
        known = {p.uuid for p in wanted}
        strays = [uuid for uuid in present
                  if uuid not in known and uuid not in removals]
        if strays:
            LOG.info('Placement has %d provider(s) of host %s that no '
                     'deployable has; removing them.', len(strays),
                     hostname)
            providers.queue_removals(context, dict.fromkeys(strays,
                                                            hostname))
            removals.extend(strays)
        drifted = []
        for provider in wanted:
            found = present.get(provider.uuid)
            if found is None or not provider.in_sync:
                drifted.append(dataclasses.replace(
                    provider, generation=None if found is None
                    else provider.generation))
            elif found['generation'] != provider.generation:
                if self._matches(provider):
                    # Allocations moved the generation; nothing to write.
                    providers.record(context, [(
                        provider.deployable_id, provider.digest(),
                        found['generation'])])
                else:
                    drifted.append(dataclasses.replace(
                        provider, generation=found['generation']))
        return drifted

    def _matches(self, provider: providers.Provider) -> bool:
        _, inventories = self.client.get_inventories(provider.uuid)
        _, traits = self.client.get_traits(provider.uuid)
        wanted = provider.inventories()
        same_inventory = wanted.keys() == inventories.keys() and all(
            inventories[rc].get(k) == v for rc in wanted
            for k, v in wanted[rc].items())
        return same_inventory and traits == set(provider.traits)

    def _write_all(self, context: cyborg_context.RequestContext,
                   hostname: str, root: str,
                   todo: list[providers.Provider], result: SyncResult
                   ) -> None:
        states: list[tuple[int, str | None, int | None]] = []
        for provider in todo:
            if result.placement_away:
                result.pending += 1
                states.append((provider.deployable_id, None, None))
                continue
            try:
                generation = self._write(root, provider)
            except exception.PlacementError as exc:
                if self._away(hostname, exc, result):
                    result.pending += 1
                    states.append((provider.deployable_id, None, None))
                    continue
                LOG.warning('Provider %s (%s) of host %s not written, will '
                            'retry: %s', provider.uuid, provider.name,
                            hostname, exc)
                result.failed += 1
                result.pending += 1
                states.append((provider.deployable_id, None, None))
                self._roots.pop(hostname, None)
                continue
            result.written += 1
            states.append((provider.deployable_id, provider.digest(),
                           generation))
        providers.record(context, states)

    def _write(self, root: str, provider: providers.Provider) -> int:
        """Create the provider if needed and set inventory and traits;
        returns its generation."""
        client = self.client
        if provider.resource_class:
            client.ensure_resource_class(provider.resource_class)
        client.ensure_traits(set(provider.traits))
        generation = provider.generation
        if generation is None:
            created = client.create_provider(provider.uuid, provider.name,
                                             root)
            generation = created['generation']
        try:
            generation = client.set_inventories(
                provider.uuid, provider.inventories(), generation)
        except exception.PlacementError as exc:
            if exc.kwargs.get('status') != 404:
                raise
            # Deleted behind our back since we last wrote it.
            generation = client.create_provider(
                provider.uuid, provider.name, root)['generation']
            generation = client.set_inventories(
                provider.uuid, provider.inventories(), generation)
        try:
            return client.set_traits(provider.uuid, set(provider.traits),
                                     generation)
        except exception.PlacementGenerationConflict:
            raise
        except exception.PlacementError as exc:
            if exc.kwargs.get('status') != 400:
                raise
            # A custom trait we thought existed was deleted by hand.
            client.forget_known()
            client.ensure_traits(set(provider.traits))
            return client.set_traits(provider.uuid, set(provider.traits))

    def _remove_all(self, context: cyborg_context.RequestContext,
                    hostname: str, removals: list[str], result: SyncResult
                    ) -> None:
        removed = []
        for uuid in removals:
            if result.placement_away:
                result.pending += 1
                continue
            try:
                self.client.delete_provider(uuid)
            except exception.PlacementProviderInUse:
                LOG.info('Provider %s of host %s has allocations; it stays, '
                         'fully reserved, until they are gone.', uuid,
                         hostname)
                self._reserve_all(uuid, hostname)
                result.pending += 1
                continue
            except exception.PlacementError as exc:
                if self._away(hostname, exc, result):
                    result.pending += 1
                    continue
                LOG.warning('Provider %s of host %s not removed, will '
                            'retry: %s', uuid, hostname, exc)
                result.failed += 1
                result.pending += 1
                continue
            removed.append(uuid)
            result.removed += 1
        providers.forget_removals(context, removed)

    def _away(self, hostname: str, exc: exception.PlacementError,
              result: SyncResult) -> bool:
        """Whether ``exc`` is placement going away; the rest of the host
        then waits for it without another call."""
        if not placement_client.is_away(exc):
            return False
        result.placement_away = True
        self._lost(hostname, exc)
        return True

    def _reserve_all(self, uuid: str, hostname: str) -> None:
        try:
            generation, inventories = self.client.get_inventories(uuid)
            reserved: dict[str, dict[str, Any]] = {
                rc: dict(inv, reserved=inv['total'])
                for rc, inv in inventories.items()}
            if reserved != inventories:
                self.client.set_inventories(uuid, reserved, generation)
        except exception.PlacementError as exc:
            LOG.warning('Cannot reserve provider %s of host %s: %s', uuid,
                        hostname, exc)
