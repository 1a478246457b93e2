"""Placement allocations of live attaches and detaches (microversion 2.9).

Which binds are live: every bind of a PATCH sent at microversion 2.9 or
later that takes a request from Initial or Unbound, whether it joins the
requests an instance's claim holds (``claims.join``) or is the first
accelerator of a running instance. Nova never sends a microversion, so
its boot-time binds, whose allocations nova-scheduler wrote, are never
live; a 2.9 bind comes from a tool acting on an instance that runs, and
nobody else allocates for it.

A live bind adds the resources of its request's device-profile group
(``resources:<RC>=<n>``) on its ``device_rp_uuid`` to the instance's
allocation before the bind is written, so that a provider without room
refuses the PATCH (409, nothing bound). What the bind did not keep (a
refusal, a BindFailed, a bind sent again) is taken back once the
transaction ended. A live unbind of a request Bound or BindStarted takes
its resources out after it committed; a removal placement could not take
is tried again in the background (``Removals``).

The decisions (what to add, what to remove, which provider lacks room)
are pure functions over what placement answered.
"""
import json
import logging
import threading
import typing
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import placement_client
from cyborg.db.api import arq_batches
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs

LOG = logging.getLogger(__name__)

# provider uuid -> resource class -> amount
Resources = dict[str, dict[str, int]]

PREFIX = 'resources:'
# The states a bind starts from (patch_decision.BINDABLE) and those whose
# resources a live bind added and a live unbind takes out.
BINDABLE = ('Initial', 'Unbound')
ALLOCATED = ('Bound', 'BindStarted')
# Placement's own stand-in for a consumer without project or user
# ([placement] incomplete_consumer_project_id and _user_id).
INCOMPLETE = '00000000-0000-0000-0000-000000000000'
# A removal placement could not take is tried again this many times, the
# wait doubling from 1 second up to [placement] sync_interval.
LATER_TRIES = 60


def group_resources(group: dict[str, Any]) -> dict[str, int]:
    """The ``resources:<RC>`` amounts of a device-profile group."""
    return {key[len(PREFIX):]: int(value) for key, value in group.items()
            if key.startswith(PREFIX) and int(value) > 0}


def requested(items: Iterable[tuple[str, dict[str, Any]]]) -> Resources:
    """The resources of (provider uuid, device-profile group) pairs,
    summed by provider and class."""
    total: Resources = {}
    for provider, group in items:
        mine = total.setdefault(provider, {})
        for rc, amount in group_resources(group).items():
            mine[rc] = mine.get(rc, 0) + amount
    return {rp: classes for rp, classes in total.items() if classes}


def held(allocations: dict[str, Any]) -> Resources:
    """The resources a ``GET /allocations/{consumer}`` answer holds."""
    return {rp: dict(body['resources'])
            for rp, body in allocations.get('allocations', {}).items()}


def plus(current: Resources, delta: Resources) -> Resources:
    """``current`` with ``delta`` added."""
    total = {rp: dict(classes) for rp, classes in current.items()}
    for rp, classes in delta.items():
        mine = total.setdefault(rp, {})
        for rc, amount in classes.items():
            mine[rc] = mine.get(rc, 0) + amount
    return total


def minus(current: Resources, delta: Resources) -> Resources:
    """``current`` with ``delta`` taken out, never below nothing: a class
    left at 0 goes, and so does a provider left with none."""
    left: Resources = {}
    for rp, classes in current.items():
        taken = delta.get(rp, {})
        kept = {rc: amount - taken.get(rc, 0)
                for rc, amount in classes.items()
                if amount - taken.get(rc, 0) > 0}
        if kept:
            left[rp] = kept
    return left


class Shortage(typing.NamedTuple):
    """A provider that cannot give a consumer what a bind asks."""

    provider: str
    resource_class: str
    wanted: int
    free: int


def shortages(delta: Resources, current: Resources,
              inventories: dict[str, dict[str, dict[str, Any]]],
              usages: dict[str, dict[str, int]]) -> list[Shortage]:
    """Where ``delta``, added to a consumer holding ``current``, exceeds
    what placement has free (capacity less usage, and the max_unit one
    consumer may hold), from each provider's inventories and usages."""
    found = []
    for rp, classes in sorted(delta.items()):
        for rc, wanted in sorted(classes.items()):
            inventory = inventories.get(rp, {}).get(rc)
            if inventory is None:
                found.append(Shortage(rp, rc, wanted, 0))
                continue
            capacity = int((inventory['total'] - inventory['reserved'])
                           * inventory['allocation_ratio'])
            free = capacity - usages.get(rp, {}).get(rc, 0)
            free = min(free, inventory['max_unit']
                       - current.get(rp, {}).get(rc, 0))
            if wanted > free:
                found.append(Shortage(rp, rc, wanted, max(free, 0)))
    return found


def describe(instance: str, found: list[Shortage],
             arqs_by_provider: dict[str, list[str]]) -> str:
    """The reason of the 409 of a live bind placement had no room for."""
    parts = []
    for short in found:
        names = ', '.join(arqs_by_provider.get(short.provider, ()))
        parts.append(
            f'resource provider {short.provider} has {short.free} '
            f'{short.resource_class} free for it, accelerator request(s) '
            f'{names} need {short.wanted}')
    return (f'Cannot attach accelerators to instance {instance}: '
            + '; '.join(parts) + '. Bind to a device (resource provider) '
            'with room, or free one first.')


class Attached(typing.NamedTuple):
    """What a live bind added to its instance's allocation."""

    instance_uuid: str
    resources: Resources


class LiveAllocations:
    """Adds live binds' resources to their instances' allocations in
    placement, and takes live unbinds' out."""

    def __init__(self, conf: cfg.ConfigOpts,
                 client: placement_client.PlacementClient | None) -> None:
        """Without a client (no placement configured, as cyborg-aio
        --no-placement) PATCHes are applied as they come."""
        self.conf = conf
        self._client = client
        self.later = Removals(self)

    @property
    def client(self) -> placement_client.PlacementClient:
        assert self._client is not None, 'no placement configured'
        return self._client

    def stop(self) -> None:
        self.later.stop()

    # PATCHes, around their transactions

    def apply_patches(
            self, context: cyborg_context.RequestContext,
            patches: list[arq_batches.Patch],
            apply: Callable[[list[arq_batches.Patch]],
                            list[arq_batches.Result]]
    ) -> list[arq_batches.Result]:
        """``apply`` the PATCHes, the live ones' binds allocated before
        (a PATCH placement refuses is answered that refusal and not
        applied) and settled after (see ``settle``). One result each, in
        order, as ``arq_batches.apply_patches`` answers."""
        if self._client is None:
            return apply(patches)
        added: list[dict[str, Attached] | exception.CyborgException] = []
        for patch in patches:
            try:
                added.append(self.attach(context, patch.binds)
                             if patch.live else {})
            except exception.CyborgException as exc:
                added.append(exc)
        todo = [p for p, a in zip(patches, added, strict=True)
                if isinstance(a, dict)]
        try:
            done = iter(apply(todo) if todo else [])
        except Exception:
            # Nothing was bound: nothing stays allocated.
            for mine in added:
                if isinstance(mine, dict):
                    self.take_back(mine)
            raise
        results: list[arq_batches.Result] = []
        for patch, mine in zip(patches, added, strict=True):
            if not isinstance(mine, dict):
                results.append(mine)
                continue
            result = next(done)
            if isinstance(result, exception.CyborgException):
                self.take_back(mine)
            elif patch.live:
                self.settle(mine, result)
            results.append(result)
        return results

    def settle(self, added: dict[str, Attached],
               batch: arq_bindings.BindBatch) -> None:
        """Once a live PATCH committed: take back what its binds that did
        not take a device (BindFailed, or sent again) were given; let the
        jobs of those left BindStarted carry what they hold, for a failure
        on the host to take it back (``failed``); take out what its
        unbinds held."""
        lost = {uuid: mine for uuid, mine in added.items()
                if batch.states.get(uuid) not in ALLOCATED
                or uuid in batch.repeated}
        self.take_back(lost)
        for job in batch.jobs:
            if job['arq_uuid'] in added and job['arq_uuid'] not in lost:
                job['allocated'] = added[job['arq_uuid']]
        self.detach(batch.unbound)

    def detach(self, unbound: dict[str, Any]) -> None:
        """Take out of their instances' allocations the resources of the
        requests unbound (``arq_bindings.Held`` as they were) that held a
        device."""
        held_before = [
            Attached(row.instance_uuid, requested(
                [(row.device_rp_uuid, json.loads(row.device_profile_group))]))
            for row in unbound.values()
            if row.state in ALLOCATED and row.instance_uuid
            and row.device_rp_uuid]
        for instance, delta in _by_instance(held_before).items():
            if delta:
                self.remove(instance, delta)

    def failed(self, jobs: list[dict[str, Any]],
               ended: dict[str, str]) -> None:
        """Take back what live binds that failed on their host were
        given: those ended BindFailed, and those still BindStarted while
        their failure is owed to Nova (see ``nova_outbox``), which hold
        no handle any more."""
        self.take_back({job['arq_uuid']: job['allocated'] for job in jobs
                        if job.get('allocated')
                        and ended.get(job['arq_uuid']) in (
                            'BindFailed', 'BindStarted')})

    # Binds, before their transaction

    def attach(self, context: cyborg_context.RequestContext,
               binds: dict[str, dict[str, Any]]) -> dict[str, Attached]:
        """Add the resources of the binds that take a request from
        Initial or Unbound to their instances' allocations: ARQ uuid ->
        what was added for it. All or nothing: a Conflict (no room, or an
        allocation that kept changing) or ServiceUnavailable leaves
        placement as it was."""
        rows = {a['uuid']: a for a in arqs.get_by_uuids(
            context, list(binds), missing_ok=True)}
        taking = {uuid: binding for uuid, binding in sorted(binds.items())
                  if uuid in rows and rows[uuid]['state'] in BINDABLE}
        added: dict[str, Attached] = {}
        for instance in sorted({b['instance_uuid']
                                for b in taking.values()}):
            mine = {u: b for u, b in taking.items()
                    if b['instance_uuid'] == instance}
            each = {u: Attached(instance, requested(
                [(b['device_rp_uuid'],
                  rows[u]['device_profile_group'])]))
                for u, b in mine.items()}
            delta = requested((b['device_rp_uuid'],
                               rows[u]['device_profile_group'])
                              for u, b in mine.items())
            if not delta:
                continue
            project = (rows[next(iter(mine))]['project_id']
                       or context.project_id or INCOMPLETE)
            by_provider: dict[str, list[str]] = {}
            for u, b in mine.items():
                by_provider.setdefault(b['device_rp_uuid'], []).append(u)
            try:
                self._add(instance, delta, project,
                          context.user_id or INCOMPLETE, by_provider)
            except exception.CyborgException:
                self.take_back(added)
                raise
            added.update(each)
        return added

    def take_back(self, added: dict[str, Attached]) -> None:
        """Remove what ``attach`` added for these binds."""
        for instance, delta in _by_instance(added.values()).items():
            if delta:
                self.remove(instance, delta)

    def _add(self, instance: str, delta: Resources, project_id: str,
             user_id: str, by_provider: dict[str, list[str]]) -> None:
        try:
            self._change(instance, lambda current: plus(current, delta),
                         project_id, user_id)
        except exception.PlacementNoRoom as exc:
            try:
                found = shortages(
                    delta, held(self.client.get_allocations(instance)),
                    {rp: self.client.get_inventories(rp)[1]
                     for rp in delta},
                    {rp: self.client.get_usages(rp) for rp in delta})
            except exception.PlacementError:
                # A provider placement does not know: its own words.
                found = []
            if not found:
                # Freed since: the caller may try again.
                raise exception.Conflict(
                    reason=f'Cannot attach accelerators to instance '
                           f'{instance}: placement refused the allocation '
                           f'({exc.kwargs.get("detail")}).') from exc
            LOG.info('No room in placement for the live attach to '
                     'instance %s: %s', instance, found)
            raise exception.Conflict(
                reason=describe(instance, found, by_provider)) from exc
        except exception.PlacementError as exc:
            status = exc.kwargs.get('status')
            if placement_client.is_away(exc) or not (
                    isinstance(status, int) and status < 500):
                # Placement's own failure, not the caller's request.
                raise exception.ServiceUnavailable(
                    reason='cyborg cannot reach placement to allocate the '
                           'accelerators of a live attach; retry later.'
                ) from exc
            raise exception.Conflict(
                reason=f'Cannot attach accelerators to instance {instance}: '
                       f'placement refused the allocation '
                       f'({exc.kwargs.get("detail")}).') from exc

    # Removals

    def remove(self, instance: str, delta: Resources) -> bool:
        """Take ``delta`` out of the instance's allocation; False when
        placement did not take it, which is then tried again later."""
        try:
            self._change(instance, lambda current: minus(current, delta))
        except (exception.PlacementError, exception.Conflict) as exc:
            LOG.warning('Cannot take %s out of the allocation of instance '
                        '%s in placement (%s); trying again in the '
                        'background.', delta, instance, exc)
            self.later.add(instance, delta)
            return False
        return True

    def _change(self, instance: str,
                change: Callable[[Resources], Resources],
                project_id: str = INCOMPLETE,
                user_id: str = INCOMPLETE) -> None:
        """Write ``change(what the instance holds)`` as its allocation,
        guarded by its consumer generation, read again and retried on a
        conflict up to [placement] conflict_retries times."""
        retries = self.conf.placement.conflict_retries
        for attempt in range(retries + 1):
            body = self.client.get_allocations(instance)
            current = held(body)
            wanted = change(current)
            if wanted == current:
                return
            try:
                self.client.put_allocations(
                    instance, wanted, body.get('consumer_generation'),
                    body.get('project_id') or project_id,
                    body.get('user_id') or user_id)
                return
            except exception.PlacementGenerationConflict:
                LOG.debug('The allocation of instance %s changed under us '
                          '(try %d); reading it again.', instance,
                          attempt + 1)
        raise exception.Conflict(
            reason=f'The allocation of instance {instance} in placement '
                   f'changed {retries + 1} times while cyborg wrote it; '
                   'retry later.')


def _by_instance(items: Iterable[Attached]) -> dict[str, Resources]:
    total: dict[str, Resources] = {}
    for item in items:
        total[item.instance_uuid] = plus(
            total.get(item.instance_uuid, {}), item.resources)
    return total


class Removals:
    """Removals placement did not take, tried again on timers, the wait
    doubling up to [placement] sync_interval, ``LATER_TRIES`` times; a
    conductor that stops meanwhile forgets them (the allocation then
    stays until the instance's is deleted)."""

    def __init__(self, allocations: LiveAllocations) -> None:
        self.allocations = allocations
        self._lock = threading.Lock()
        self._timers: set[threading.Timer] = set()

    def add(self, instance: str, delta: Resources, tries: int = 0) -> None:
        if tries >= LATER_TRIES:
            LOG.warning('Gave up taking %s out of the allocation of '
                        'instance %s in placement; remove it by hand.',
                        delta, instance)
            return
        wait = min(2.0 ** tries,
                   float(self.allocations.conf.placement.sync_interval))
        timer = threading.Timer(wait, self._run, (instance, delta, tries))
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def _run(self, instance: str, delta: Resources, tries: int) -> None:
        with self._lock:
            self._timers = {t for t in self._timers if t.is_alive()
                            and t is not threading.current_thread()}
        try:
            self.allocations._change(instance,
                                     lambda current: minus(current, delta))
        except (exception.PlacementError, exception.Conflict) as exc:
            LOG.debug('Removing %s from instance %s failed again: %s',
                      delta, instance, exc)
            self.add(instance, delta, tries + 1)
            return
        LOG.info('Took %s out of the allocation of instance %s in '
                 'placement.', delta, instance)

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(1 for t in self._timers if t.is_alive())

    def stop(self) -> None:
        with self._lock:
            timers, self._timers = self._timers, set()
        for timer in timers:
            timer.cancel()
