"""Keeping placement equal to the database, host by host.

Each deployable is a resource provider under its host's compute node
provider. ``sync_host`` writes only the providers whose desired state
(``providers.Provider.digest``) differs from what was last written, so an
unchanged host costs no placement call. Failures are per provider: one
that fails stays marked unsynced and is retried by the periodic pass, with
a backoff per host, and never blocks the others. ``reconcile`` compares
placement itself with the database, to repair providers changed or
removed behind the conductor's back.
"""
import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import placement_client
from cyborg.db.api import providers

LOG = logging.getLogger(__name__)

# Seconds between two looks for hosts that need placement work; a host
# that failed waits longer (doubling up to [placement] sync_interval).
TICK = 5.0


@dataclasses.dataclass
class SyncResult:
    """What one pass over a host did."""

    written: int = 0
    removed: int = 0
    failed: int = 0
    # Providers still to be written or deleted after this pass.
    pending: int = 0
    compute_node_missing: bool = False

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

    def _host_lock(self, hostname: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks[hostname]

    # Periodic work

    def sync_pending(self) -> None:
        """Finish what earlier passes could not, each host on its own
        backoff; remove deployables that are gone and no longer held."""
        context = cyborg_context.get_admin_context()
        providers.purge_released(context)
        now = self.clock()
        for hostname in providers.pending_hostnames(context):
            if self._retry_at.get(hostname, 0) > now:
                continue
            self._track(hostname, self.sync_host(hostname))

    def reconcile(self) -> None:
        """Compare every host's providers in placement with the database
        and repair the differences."""
        context = cyborg_context.get_admin_context()
        for hostname in providers.all_hostnames(context):
            self._track(hostname, self.sync_host(hostname, verify=True))

    def _track(self, hostname: str, result: SyncResult) -> None:
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
                LOG.warning('Cannot read placement for host %s: %s',
                            hostname, exc)
                result.pending = len(todo) + len(removals)
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
            try:
                generation = self._write(root, provider)
            except exception.PlacementError as exc:
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
                LOG.warning('Provider %s of host %s not removed, will '
                            'retry: %s', uuid, hostname, exc)
                result.failed += 1
                result.pending += 1
                continue
            removed.append(uuid)
            result.removed += 1
        providers.forget_removals(context, removed)

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
