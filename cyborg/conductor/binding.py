"""Binding accelerator requests, and telling Nova when a bind ended.

A PATCH is applied in one transaction (``arq_bindings.apply_patch``): instant
binds (PCI, TEST_PCI handles, and MDEV handles whose mdev nova-compute
creates: ``attach_handles.instant``) end there, Bound; a bind that cannot be
made refuses the whole PATCH, nothing written. Binds that need the device's
host (programming an FPGA, creating a vGPU) are left BindStarted; a worker
thread asks the host's agent, within ``[conductor] bind_timeout``, and ends
them Bound, or failed: a failure stays BindStarted until Nova has taken its
event. Every ended bind owes Nova an event, written with its end; each
PATCH sends its instant results in one POST once committed, and its
background results in one more (``nova_outbox``, which joins those ended
at once, and resends what Nova did not take). Binds left BindStarted by a
conductor that stopped are failed by ``fail_stale_binds``.

An unbind or delete never waits for a host: it is committed at once, and
what the requests held there (an mdev) is removed by a worker, or, when
the host's agent is down, by the agent itself as it starts again
(``restore_mdevs``). Until then the handle stays released: taken, and
reserved in placement.
"""
import collections
import datetime
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import futurist
import oslo_messaging as messaging
from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.common import notifications
from cyborg.conductor import live_allocations
from cyborg.conductor import metrics as conductor_metrics
from cyborg.conductor import nova_client
from cyborg.conductor import nova_outbox
from cyborg.db.api import arq_batches
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import attach_handles
from cyborg.db.api import bind_ends
from cyborg.db.api import cleaning
from cyborg.db.api import deployables
from cyborg.db.api import services

LOG = logging.getLogger(__name__)

Job = dict[str, Any]
# Seconds between two looks at a device being programmed, for binds that
# wait for it: programming takes tens of seconds on real cards.
AWAIT_POLL = 0.25
# What the agent raises before it writes anything to the device.
UNTOUCHED = (exception.NotSupported, exception.BitstreamNotFound,
             exception.BitstreamError)
STALE = '[conductor] bind_timeout expired'


def _program_info(group: list[Job]) -> dict[str, Any]:
    """What a program notification says of the binds that program."""
    job = group[0]
    return {'deployable_uuid': job['deployable_uuid'],
            'deployable_name': job['deployable_name'],
            'host': job['host'], 'driver_name': job['driver_name'],
            'image_uuid': job['bitstream_id'],
            'arq_uuids': [j['arq_uuid'] for j in group]}


class Binder:
    """Finishes binds on agents and reports them to Nova."""

    def __init__(self, conf: cfg.ConfigOpts,
                 agent_api: agent_rpcapi.AgentAPI | None = None,
                 nova: nova_client.NovaClient | None = None,
                 glance: glance_client.GlanceClient | None = None,
                 allocations: live_allocations.LiveAllocations | None = None
                 ) -> None:
        self.conf = conf
        # Without placement, live binds make no allocation.
        self.allocations = allocations or live_allocations.LiveAllocations(
            conf, None)
        self._agent_api = agent_api
        self.nova = nova or nova_client.NovaClient(conf)
        self.glance = glance or glance_client.GlanceClient(conf)
        self.executor = futurist.ThreadPoolExecutor(
            max_workers=conf.conductor.bind_workers)
        self.notifier = notifications.get_notifier(conf, 'cyborg-conductor')
        self.bind_durations = conductor_metrics.BindDurations()
        self.outbox = nova_outbox.NovaOutbox(conf, self.nova,
                                             self._failures_ended)
        # Called with the attach handles (ids) a PATCH or delete left
        # cleaning, once committed (see cyborg.conductor.cleaning).
        self.clean: Callable[[list[int]], None] | None = None
        # Called with a hostname whose placement changed, once committed.
        self.sync: Callable[[str], int] | None = None

    @property
    def agent_api(self) -> agent_rpcapi.AgentAPI:
        # Made on first use: a conductor's RPC transport exists by then.
        if self._agent_api is None:
            self._agent_api = agent_rpcapi.AgentAPI(self.conf)
        return self._agent_api

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
        before = self._requests(context, unbinds)
        # One Glance look-up per function the PATCH names, however many
        # of its requests name it, and on a deadlock's retry too.
        find_bitstream = functools.cache(self._find_bitstream)
        [batch] = self.allocations.apply_patches(context, [
            arq_batches.Patch(binds, unbinds, live)], lambda todo: [
                arq_bindings.apply_patch(context, binds, unbinds,
                                         find_bitstream=find_bitstream,
                                         live=live) for _ in todo])
        if isinstance(batch, exception.CyborgException):
            raise batch
        self.bind_durations.observe(batch.resolved, started)
        self._after(batch, started)
        self._announce(context, self.notifier.arq_unbind, before,
                       batch.states)
        self._announce_binds(context, batch.resolved, {})
        return batch

    def apply_patches(self, context: cyborg_context.RequestContext,
                      patches: list[arq_batches.Patch]
                      ) -> list[arq_batches.Result]:
        """``apply_patch`` for several PATCHes at once: one transaction
        (see ``arq_batches.apply_patches``) and one POST to Nova for the
        binds that ended in all of them. One result each, in order."""
        started = time.monotonic()
        before = [self._requests(context, p.unbinds) for p in patches]
        find_bitstream = functools.cache(self._find_bitstream)
        results = self.allocations.apply_patches(
            context, patches, lambda todo: arq_batches.apply_patches(
                context, todo, find_bitstream=find_bitstream))
        whole = self._after_many(context, results, before,
                                 self.notifier.arq_unbind, started)
        self.bind_durations.observe(whole.resolved, started)
        self._announce_binds(context, whole.resolved, {})
        return results

    def delete_many(self, context: cyborg_context.RequestContext,
                    deletes: list[arq_batches.Delete]
                    ) -> list[arq_batches.Result]:
        """``delete`` for several DELETEs at once, in one transaction (see
        ``arq_batches.delete_many``). One result each, in order."""
        before = [self._requests(context, d.uuids, d.instance_uuid)
                  for d in deletes]
        results = arq_batches.delete_many(context, deletes)
        self._after_many(context, results, before,
                         self.notifier.arq_delete)
        return results

    def _after_many(self, context: cyborg_context.RequestContext,
                    results: list[arq_batches.Result],
                    before: list[dict[str, dict[str, Any]]],
                    send: Callable[[cyborg_context.RequestContext,
                                    dict[str, Any]], None],
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
                self._announce(context, send, was, batch.states)
        return whole

    def delete(self, context: cyborg_context.RequestContext,
               uuids: list[str] | None, instance_uuid: str | None) -> int:
        """Delete ARQs; what they held on their hosts is removed in the
        background (see ``_free``)."""
        before = self._requests(context, uuids, instance_uuid)
        batch = arq_bindings.delete(context, uuids, instance_uuid)
        self._after(batch)
        self._announce(context, self.notifier.arq_delete, before,
                       batch.states)
        return len(batch.states)

    def _after(self, batch: arq_bindings.BindBatch,
               started: float | None = None) -> None:
        """What a PATCH or DELETE leaves to do once committed; ``started``
        is when the PATCH arrived. Nothing here waits for an agent: the
        handles given back are reserved in placement before the answer,
        and their hosts are asked to remove what they held in the worker
        pool."""
        held = ([h['attach_handle_id'] for h in batch.released]
                + batch.cleaning)
        if held:
            self._publish(cyborg_context.get_admin_context(), held)
        # A handle with an mdev cleans once the mdev is gone (``_free``).
        if batch.cleaning and self.clean is not None:
            self.clean(batch.cleaning)
        if batch.released:
            self.executor.submit(self._free, batch.released)
        if batch.owed:
            self.executor.submit(self.outbox.deliver, batch.owed)
        if batch.jobs:
            self.executor.submit(self._finish, batch.jobs, started)

    def _find_bitstream(self, function_id: str) -> str:
        return self.glance.find_by_function(function_id).id

    def _remove_device_side(self, context: cyborg_context.RequestContext,
                            holder: dict[str, Any]) -> bool:
        try:
            self.agent_api.remove_mdev(
                context, holder['host'], holder['driver_name'],
                holder['attach_info'], holder['attach_handle_uuid'],
                timeout=self.timeout)
        except (exception.CyborgException,
                messaging.MessagingException) as exc:
            LOG.warning('Cannot remove mediated device %s%s on host %s: '
                        '%s', holder['attach_handle_uuid'],
                        f' of accelerator request {holder["arq_uuid"]}'
                        if holder.get('arq_uuid') else '',
                        holder['host'], exc)
            return False
        return True

    def _free(self, released: list[dict[str, Any]]) -> int:
        """Remove released handles' mdevs; free the handles of those
        removed. How many were freed.

        A host whose agent's service record says it is down is not asked
        (nothing waits for an RPC timeout): its handles stay released,
        reserved in placement, until the agent, starting again, removes
        what no request holds (``ConductorManager.mdevs_removed``) or the
        stale sweep finds the agent back."""
        context = cyborg_context.get_admin_context()
        down = services.down_agents(
            context, sorted({h['host'] for h in released}),
            self.conf.service_down_time)
        if down:
            LOG.info('The agents of host(s) %s are down: attach handle(s) '
                     '%s stay reserved until they are back.',
                     ', '.join(sorted(down)),
                     ', '.join(h['attach_handle_uuid'] for h in released
                               if h['host'] in down))
        gone = [h['attach_handle_id'] for h in released
                if h['host'] not in down
                and self._remove_device_side(context, h)]
        freed = attach_handles.free_released(context, gone)
        self.handles_returned(context, freed)
        return len(freed)

    def handles_returned(self, context: cyborg_context.RequestContext,
                         handle_ids: list[int]) -> None:
        """After the commit that confirmed these released handles'
        device-side state gone: publish that placement no longer reserves
        them, and clean those to clean after use."""
        if not handle_ids:
            return
        self._publish(context, handle_ids)
        if self.clean is not None:
            self.clean(handle_ids)

    def _publish(self, context: cyborg_context.RequestContext,
                 handle_ids: list[int]) -> None:
        """Write the placement of the hosts of these handles."""
        if self.sync is None:
            return
        for hostname in cleaning.hostnames(context, handle_ids):
            self.sync(hostname)

    # Notifications, sent once what they tell of is committed

    def _requests(self, context: cyborg_context.RequestContext,
                  uuids: list[str] | None,
                  instance_uuid: str | None = None
                  ) -> dict[str, dict[str, Any]]:
        """The ARQs named (or the instance's) as they are now, by uuid;
        none are read while notifications are off."""
        if not self.notifier.enabled or not (uuids or instance_uuid):
            return {}
        try:
            if uuids is not None:
                found = arqs.get_by_uuids(context, uuids, missing_ok=True)
            else:
                found, _ = arqs.get_all(context, instance_uuid=instance_uuid)
        except Exception:
            # A notification never fails what it tells of.
            LOG.warning('Cannot read accelerator requests for their '
                        'notifications.', exc_info=True)
            return {}
        return {arq['uuid']: arq for arq in found}

    @staticmethod
    def _announce(context: cyborg_context.RequestContext,
                  send: Callable[[cyborg_context.RequestContext,
                                  dict[str, Any]], None],
                  before: dict[str, dict[str, Any]],
                  states: dict[str, str]) -> None:
        """An unbind's or delete's notifications: each ARQ as it was
        before, in its new state."""
        for uuid, arq in sorted(before.items()):
            if uuid in states:
                send(context, dict(arq, state=states[uuid]))

    def _announce_binds(self, context: cyborg_context.RequestContext,
                        ended: dict[str, str], reasons: dict[str, str]
                        ) -> None:
        """``bind.end`` or ``bind.error`` for each bind that ended."""
        now = self._requests(context, list(ended))
        for uuid, state in sorted(ended.items()):
            if uuid not in now:
                continue  # deleted since
            arq = dict(now[uuid], state=state)
            if state == 'Bound':
                self.notifier.arq_bind_end(context, arq)
            else:
                self.notifier.arq_bind_error(
                    context, arq, reasons.get(uuid, 'unknown'))

    # Background work

    def _finish(self, jobs: list[Job], started: float | None = None
                ) -> None:
        """Run one PATCH's device-side binds, then end them all;
        ``started`` is when the PATCH arrived."""
        context = cyborg_context.get_admin_context()
        deadline = time.monotonic() + self.timeout
        succeeded: list[Job] = []
        failed: list[Job] = []
        # The bitstream each deployable got, and whether it is loaded (None:
        # unknown, the agent did not answer).
        programs: dict[int, tuple[str, bool | None]] = {}
        # Why each bind that failed failed, for its notification.
        reasons: dict[str, str] = {}
        by_deployable: dict[int, list[Job]] = collections.defaultdict(list)
        for job in jobs:
            by_deployable[job['deployable_id']].append(job)
        for group in by_deployable.values():
            try:
                self._program(context, group, deadline, programs)
            except Exception as exc:
                self._log_failure(group, exc)
                failed.extend(group)
                reasons.update((j['arq_uuid'], str(exc)) for j in group)
                continue
            for job in group:
                try:
                    self._create_device_side(context, job, deadline)
                except Exception as exc:
                    self._log_failure([job], exc)
                    failed.append(job)
                    reasons[job['arq_uuid']] = str(exc)
                else:
                    succeeded.append(job)
        try:
            ended, events = bind_ends.finish_binds(
                context, succeeded, failed, programs, reasons=reasons)
        except Exception:
            LOG.exception('Cannot record the end of binds %s; they will '
                          'fail after [conductor] bind_timeout.',
                          ', '.join(j['arq_uuid'] for j in jobs))
            return
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
            self._free(undo)
        self.outbox.deliver(events)
        # Nova first: it waits for these binds, listeners do not.
        for deployable_id, (_, loaded) in programs.items():
            group = by_deployable[deployable_id]
            if loaded:
                self.notifier.program_end(context, _program_info(group))
            else:
                self.notifier.program_error(
                    context, _program_info(group),
                    reasons.get(group[0]['arq_uuid'], 'unknown'))
        self._announce_binds(context, bound, reasons)

    def _failures_ended(self, ended: dict[str, str]) -> None:
        """Announce failed binds ended BindFailed once Nova had their
        event (or ``[conductor] bind_timeout`` from the failure ended;
        see ``nova_outbox``): ARQ uuid -> why each failed."""
        for uuid in sorted(ended):
            LOG.info('Accelerator request %s is BindFailed.', uuid)
        self._announce_binds(cyborg_context.get_admin_context(),
                             dict.fromkeys(ended, 'BindFailed'), ended)

    @staticmethod
    def _remaining(deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise exception.DeviceActionError(
                reason='[conductor] bind_timeout expired')
        return remaining

    def _program(self, context: cyborg_context.RequestContext,
                 group: list[Job], deadline: float,
                 programs: dict[int, tuple[str, bool | None]]) -> None:
        """Load the bitstream the group's ARQs took the device for, or
        wait for the programming they joined to end (``programs`` gets
        what this worker loaded, and whether it did)."""
        job = group[0]
        if job.get('await_program'):
            self._await_program(context, group, deadline)
            return
        if not job.get('program'):
            return
        bitstream = job['bitstream_id']
        # Until the agent has answered, the device's content is unknown.
        programs[job['deployable_id']] = (bitstream, False)
        self.notifier.program_start(context, _program_info(group))
        try:
            self.agent_api.program_fpga(
                context, job['host'], job['controlpath_id']['cpid_info'],
                job['deployable_name'], job['driver_name'], bitstream,
                timeout=self._remaining(deadline))
        except UNTOUCHED:
            programs[job['deployable_id']] = (bitstream, None)
            raise
        programs[job['deployable_id']] = (bitstream, True)

    def _await_program(self, context: cyborg_context.RequestContext,
                       group: list[Job], deadline: float) -> None:
        """Wait until the programming the group's binds arrived during
        ends, then check the device holds what they asked for."""
        job = group[0]
        while True:
            state = deployables.programming_state(context,
                                                  job['deployable_id'])
            if state.action is None:
                break
            if time.monotonic() + AWAIT_POLL > deadline:
                raise exception.DeviceActionError(
                    reason='the device was still being programmed when '
                           '[conductor] bind_timeout expired')
            time.sleep(AWAIT_POLL)
        wanted = {j['bitstream_id'] for j in group} - {None}
        if wanted and wanted != {state.bitstream_id}:
            raise exception.DeviceActionError(
                reason=f'programming the device with bitstream '
                       f'{", ".join(sorted(wanted))} failed')

    def _create_device_side(self, context: cyborg_context.RequestContext,
                            job: Job, deadline: float) -> None:
        if job['attach_type'] != 'MDEV' or attach_handles.instant(
                job['attach_type'], job['attach_info']):
            return
        self.agent_api.create_mdev(
            context, job['host'], job['driver_name'], job['attach_info'],
            job['attach_handle_uuid'], timeout=self._remaining(deadline))

    @staticmethod
    def _log_failure(jobs: list[Job], exc: Exception) -> None:
        LOG.error('Binding accelerator request(s) %s on host %s failed: '
                  '%s', ', '.join(j['arq_uuid'] for j in jobs),
                  jobs[0]['host'], exc)

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
            # Final at once: the conductor that ran these is gone, and
            # Nova has waited longer than its own timeout for most of them.
            ended, events = bind_ends.finish_binds(
                context, [], [{'arq_uuid': uuid,
                               'attach_handle_id': handle}
                              for uuid, (_, handle) in stale.items()],
                owed=False, reasons=dict.fromkeys(stale, STALE))
            LOG.warning('Accelerator request(s) %s were binding for longer '
                        'than [conductor] bind_timeout; they failed.',
                        ', '.join(sorted(ended)))
            self.outbox.deliver(events)
            self._announce_binds(context, ended, dict.fromkeys(ended, STALE))
        for uuid in deployables.end_stale_programming(context, cutoff):
            LOG.warning('Deployable %s was being programmed for longer than '
                        '[conductor] bind_timeout; what it holds is now '
                        'unknown.', uuid)
        # The handles of the binds just failed are released now: this
        # pass removes their mdevs too.
        released = attach_handles.released_handles(
            context, cutoff, [h for _, h in stale.values() if h])
        if released:
            freed = self._free(released)
            LOG.info('Removed the mediated devices of %d released attach '
                     'handle(s); %d freed.', len(released), freed)
