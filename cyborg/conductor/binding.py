"""Binding accelerator requests, and telling Nova when a bind ended.

A PATCH is applied in one transaction (``arq_bindings.apply_patch``): instant
binds (PCI, TEST_PCI handles, and MDEV handles whose mdev nova-compute
creates: ``attach_handles.instant``) end there, Bound; a bind that cannot be
made refuses the whole PATCH, nothing written. Binds that need the device's
host (programming an FPGA, creating a vGPU) are left BindStarted; a worker
thread asks the host's agent (``device_side``), within ``[conductor]
bind_timeout``, and ends them Bound, or failed: a failure stays
BindStarted until Nova has taken its event. Every ended bind owes Nova an
event, written with its end; each PATCH sends its instant results in one
POST once committed, and its background results in one more
(``nova_outbox``, which joins those ended at once, and resends what Nova
did not take). Binds left BindStarted by a conductor that stopped are
failed by ``fail_stale_binds``.

An unbind or delete never waits for a host: it is committed at once, and
what the requests held there (an mdev) is removed by a worker
(``DeviceSide.free``), or, when the host's agent is down, by the agent
itself as it starts again (``restore_mdevs``). Until then the handle stays
released: taken, and reserved in placement.
"""
import datetime
import functools
import logging
import time
from typing import Any

import futurist
from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.conductor import bind_notices
from cyborg.conductor import device_side
from cyborg.conductor import limits as conductor_limits
from cyborg.conductor import live_allocations
from cyborg.conductor import metrics as conductor_metrics
from cyborg.conductor import nova_client
from cyborg.conductor import nova_outbox
from cyborg.db.api import arq_batches
from cyborg.db.api import arq_bindings
from cyborg.db.api import attach_handles
from cyborg.db.api import bind_ends
from cyborg.db.api import deployables
from cyborg.db.api import nova_events

LOG = logging.getLogger(__name__)

Job = device_side.Job
STALE = '[conductor] bind_timeout expired'


def _projects(binds: list[dict[str, dict[str, Any]]]) -> set[str | None]:
    """The projects binds name (``project_id``, 2.1). Those of the
    requests they bind are known once read in the transaction: one whose
    limits were not read before rolls it back, to be read and tried
    again (``KeystoneLimits.write``); a project's next writes find its
    limits kept."""
    return {b.get('project_id') for patch in binds for b in patch.values()}


class Binder:
    """Applies PATCHes and DELETEs, ends the binds their hosts finish
    (``device_side``) and reports them to Nova."""

    def __init__(self, conf: cfg.ConfigOpts,
                 executor: futurist.ThreadPoolExecutor,
                 hosts: device_side.DeviceSide,
                 notices: bind_notices.BindNotices,
                 nova: nova_client.NovaClient | None = None,
                 glance: glance_client.GlanceClient | None = None,
                 allocations: live_allocations.LiveAllocations | None = None,
                 limits: conductor_limits.KeystoneLimits | None = None
                 ) -> None:
        """``executor`` runs what a PATCH or DELETE leaves to do once
        committed; ``stop`` shuts it down. ``limits``: the projects'
        limits binds are held to (None: none)."""
        self.conf = conf
        self.limits = limits
        # Without placement, live binds make no allocation.
        self.allocations = allocations or live_allocations.LiveAllocations(
            conf, None)
        self.hosts = hosts
        self.nova = nova or nova_client.NovaClient(conf)
        self.glance = glance or glance_client.GlanceClient(conf)
        self.executor = executor
        self.notices = notices
        self.bind_durations = conductor_metrics.BindDurations()
        self.outbox = nova_outbox.NovaOutbox(conf, self.nova,
                                             self._failures_ended)

    def stop(self) -> None:
        # Events still owed to Nova are in the database, for any conductor.
        self.executor.shutdown(wait=True)
        self.allocations.stop()

    @property
    def timeout(self) -> float:
        return float(self.conf.conductor.bind_timeout)

    # The PATCH and DELETE of the API

    def apply_patch(self, context: cyborg_context.RequestContext,
                    binds: dict[str, dict[str, Any]], unbinds: list[str],
                    live: bool = False) -> arq_bindings.BindBatch:
        started = time.monotonic()
        before = self.notices.requests(context, unbinds)
        # One Glance look-up per function the PATCH names, however many
        # of its requests name it, and on a deadlock's retry too.
        find_bitstream = functools.cache(self._find_bitstream)
        [batch] = self.allocations.apply_patches(context, [
            arq_batches.Patch(binds, unbinds, live)], lambda todo: [
                conductor_limits.within(
                    self.limits, lambda: _projects([binds]),
                    lambda limits: arq_bindings.apply_patch(
                        context, binds, unbinds,
                        find_bitstream=find_bitstream, live=live,
                        limits=limits)) for _ in todo])
        if isinstance(batch, exception.CyborgException):
            raise batch
        self.bind_durations.observe(batch.resolved, started)
        self._after(batch, started)
        self.notices.announce(context, self.notices.notifier.arq_unbind,
                              before, batch.states)
        self.notices.binds_ended(context, batch.resolved, {})
        return batch

    def apply_patches(self, context: cyborg_context.RequestContext,
                      patches: list[arq_batches.Patch]
                      ) -> list[arq_batches.Result]:
        """``apply_patch`` for several PATCHes at once: one transaction
        (see ``arq_batches.apply_patches``) and one POST to Nova for the
        binds that ended in all of them. One result each, in order."""
        started = time.monotonic()
        before = [self.notices.requests(context, p.unbinds) for p in patches]
        find_bitstream = functools.cache(self._find_bitstream)
        results = self.allocations.apply_patches(
            context, patches, lambda todo: conductor_limits.within(
                self.limits,
                lambda: _projects([p.binds for p in todo]),
                lambda limits: arq_batches.apply_patches(
                    context, todo, find_bitstream=find_bitstream,
                    limits=limits)))
        whole = self._after_many(context, results, before,
                                 self.notices.notifier.arq_unbind, started)
        self.bind_durations.observe(whole.resolved, started)
        self.notices.binds_ended(context, whole.resolved, {})
        return results

    def delete_many(self, context: cyborg_context.RequestContext,
                    deletes: list[arq_batches.Delete]
                    ) -> list[arq_batches.Result]:
        """``delete`` for several DELETEs at once, in one transaction (see
        ``arq_batches.delete_many``). One result each, in order."""
        before = [self.notices.requests(context, d.uuids, d.instance_uuid)
                  for d in deletes]
        results = arq_batches.delete_many(context, deletes)
        self._after_many(context, results, before,
                         self.notices.notifier.arq_delete)
        return results

    def _after_many(self, context: cyborg_context.RequestContext,
                    results: list[arq_batches.Result],
                    before: list[dict[str, dict[str, Any]]],
                    send: bind_notices.Send,
                    started: float | None = None
                    ) -> arq_bindings.BindBatch:
        """``_after`` the batches of several requests at once, and their
        notifications; what they did, merged."""
        done = [r for r in results if isinstance(r, arq_bindings.BindBatch)]
        whole = arq_bindings.BindBatch.merged(done)
        self._after(whole, started)
        for batch, was in zip(results, before, strict=True):
            if isinstance(batch, arq_bindings.BindBatch):
                if batch.jobs:
                    # One PATCH's binds finish together (see _finish).
                    self.executor.submit(self._finish, batch.jobs, started)
                self.notices.announce(context, send, was, batch.states)
        return whole

    def delete(self, context: cyborg_context.RequestContext,
               uuids: list[str] | None, instance_uuid: str | None) -> int:
        """Delete ARQs; what they held on their hosts is removed in the
        background (see ``DeviceSide.free``)."""
        before = self.notices.requests(context, uuids, instance_uuid)
        batch = arq_bindings.delete(context, uuids, instance_uuid)
        self._after(batch)
        self.notices.announce(context, self.notices.notifier.arq_delete,
                              before, batch.states)
        return len(batch.states)

    def _after(self, batch: arq_bindings.BindBatch,
               started: float | None = None) -> None:
        """What a PATCH or DELETE leaves to do once committed; ``started``
        is when the PATCH arrived. Nothing here waits for an agent (see
        ``DeviceSide.given_back``)."""
        self.hosts.given_back(batch.released, batch.cleaning)
        if batch.owed:
            self.executor.submit(self.outbox.deliver, batch.owed)
        if batch.jobs:
            self.executor.submit(self._finish, batch.jobs, started)

    def _find_bitstream(self, function_id: str) -> str:
        return self.glance.find_by_function(function_id).id

    # Background work

    def _finish(self, jobs: list[Job], started: float | None = None
                ) -> None:
        """Run one PATCH's device-side binds, then end them all;
        ``started`` is when the PATCH arrived."""
        context = cyborg_context.get_admin_context()
        done = self.hosts.bind(context, jobs,
                               time.monotonic() + self.timeout)
        try:
            ended, events = bind_ends.finish_binds(
                context, done.succeeded, done.failed, done.programs,
                reasons=done.reasons)
        except Exception:
            LOG.exception('Cannot record the end of binds %s; they will '
                          'fail after [conductor] bind_timeout.',
                          ', '.join(j['arq_uuid'] for j in jobs))
            return
        self._ended(context, jobs, done, ended, events, started)

    def _ended(self, context: cyborg_context.RequestContext,
               jobs: list[Job], done: device_side.Outcome,
               ended: dict[str, str], events: list[nova_events.Owed],
               started: float | None) -> None:
        """After the commit that ended one PATCH's device-side binds:
        undo what failed ones made, tell Nova, then listeners."""
        bound = {u: s for u, s in ended.items() if s == 'Bound'}
        for uuid in bound:
            LOG.info('Accelerator request %s is Bound.', uuid)
        self.allocations.failed(jobs, ended)
        if started is not None:
            # A failure is timed to when it failed here, though it reads
            # BindFailed only once Nova has its event (nova_outbox).
            self.bind_durations.observe(
                {u: 'BindFailed' if s == 'BindStarted' else s
                 for u, s in ended.items()}, started)
        # What was made for a bind that failed, or whose ARQ was unbound
        # or deleted meanwhile, goes: its handle waits for that.
        undo = [j for j in jobs
                if not attach_handles.instant(j['attach_type'],
                                              j['attach_info'])
                and ended.get(j['arq_uuid']) != 'Bound']
        if undo:
            self.hosts.free(undo)
        self.outbox.deliver(events)
        # Nova first: it waits for these binds, listeners do not.
        self.notices.programs_ended(context, done.programs, done.groups,
                                    done.reasons)
        self.notices.binds_ended(context, bound, done.reasons)

    def _failures_ended(self, ended: dict[str, str]) -> None:
        """Announce failed binds ended BindFailed once Nova had their
        event (or ``[conductor] bind_timeout`` from the failure ended;
        see ``nova_outbox``): ARQ uuid -> why each failed."""
        for uuid in sorted(ended):
            LOG.info('Accelerator request %s is BindFailed.', uuid)
        self.notices.binds_ended(cyborg_context.get_admin_context(),
                                 dict.fromkeys(ended, 'BindFailed'), ended)

    def fail_stale_binds(self) -> None:
        """Finish what a stopped conductor left: binds BindStarted for
        longer than the bind timeout (with a margin for the work in
        flight) end BindFailed, programming that long is ended (the
        device's content unknown), and handles released that long have
        their mdevs removed and are freed."""
        context = cyborg_context.get_admin_context()
        cutoff = timeutils.utcnow() - datetime.timedelta(
            seconds=self.timeout * 1.5 + 30)
        stale = bind_ends.stale_binds(context, cutoff)
        if stale:
            self._fail_stale(context, stale)
        for uuid in deployables.end_stale_programming(context, cutoff):
            LOG.warning('Deployable %s was being programmed for longer than '
                        '[conductor] bind_timeout; what it holds is now '
                        'unknown.', uuid)
        # The handles of the binds just failed are released now: this
        # pass removes their mdevs too.
        released = attach_handles.released_handles(
            context, cutoff, [h for _, h in stale.values() if h])
        if released:
            freed = self.hosts.free(released)
            LOG.info('Removed the mediated devices of %d released attach '
                     'handle(s); %d freed.', len(released), freed)

    def _fail_stale(self, context: cyborg_context.RequestContext,
                    stale: dict[str, tuple[str | None, int | None]]
                    ) -> None:
        """End BindFailed the binds a stopped conductor left."""
        # Final at once: the conductor that ran these is gone, and Nova
        # has waited longer than its own timeout for most of them.
        ended, events = bind_ends.finish_binds(
            context, [], [{'arq_uuid': uuid, 'attach_handle_id': handle}
                          for uuid, (_, handle) in stale.items()],
            owed=False, reasons=dict.fromkeys(stale, STALE))
        LOG.warning('Accelerator request(s) %s were binding for longer '
                    'than [conductor] bind_timeout; they failed.',
                    ', '.join(sorted(ended)))
        self.outbox.deliver(events)
        self.notices.binds_ended(context, ended, dict.fromkeys(ended, STALE))
