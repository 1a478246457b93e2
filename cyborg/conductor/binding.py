"""Binding accelerator requests, and telling Nova when a bind ended.

A PATCH is applied in one transaction (``arq_bindings.apply_patch``): instant
binds (PCI, TEST_PCI handles) end there, Bound or BindFailed. Binds that
need the device's host (programming an FPGA, creating a vGPU) are left
BindStarted; a worker thread asks the host's agent, within
``[conductor] bind_timeout``, and ends them Bound or BindFailed. Each PATCH
sends its instant results to Nova in one POST, and its background results
in one more. Binds left BindStarted by a conductor that stopped are failed
by ``fail_stale_binds``.
"""
import collections
import datetime
import logging
import time
from typing import Any

import futurist
from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.common import nova_client
from cyborg.db.api import arq_bindings

LOG = logging.getLogger(__name__)

Job = dict[str, Any]


class Binder:
    """Finishes binds on agents and reports them to Nova."""

    def __init__(self, conf: cfg.ConfigOpts,
                 agent_api: agent_rpcapi.AgentAPI | None = None,
                 nova: nova_client.NovaClient | None = None,
                 glance: glance_client.GlanceClient | None = None) -> None:
        self.conf = conf
        self._agent_api = agent_api
        self.nova = nova or nova_client.NovaClient(conf)
        self.glance = glance or glance_client.GlanceClient(conf)
        self.executor = futurist.ThreadPoolExecutor(
            max_workers=conf.conductor.bind_workers)

    @property
    def agent_api(self) -> agent_rpcapi.AgentAPI:
        # Made on first use: a conductor's RPC transport exists by then.
        if self._agent_api is None:
            self._agent_api = agent_rpcapi.AgentAPI(self.conf)
        return self._agent_api

    def stop(self) -> None:
        self.executor.shutdown(wait=True)

    @property
    def timeout(self) -> float:
        return float(self.conf.conductor.bind_timeout)

    # The PATCH and DELETE of the API

    def apply_patch(self, context: cyborg_context.RequestContext,
                    binds: dict[str, dict[str, Any]], unbinds: list[str]
                    ) -> arq_bindings.BindBatch:
        failed = []
        if unbinds:
            for holder in arq_bindings.device_side_handles(
                    context, uuids=unbinds):
                if not self._remove_device_side(context, holder):
                    failed.append(holder['arq_uuid'])
        batch = arq_bindings.apply_patch(context, binds, unbinds, failed)
        if batch.resolved:
            self.executor.submit(self._notify, batch.resolved,
                                 batch.instances)
        if batch.jobs:
            self.executor.submit(self._finish, batch.jobs)
        return batch

    def delete(self, context: cyborg_context.RequestContext,
               uuids: list[str] | None, instance_uuid: str | None) -> int:
        """Remove what bound ARQs hold on their hosts, then delete them.

        A host that cannot be reached is logged, not fatal: the instance
        is going away and Nova retries deletes it sees fail.
        """
        holders = arq_bindings.device_side_handles(context, uuids=uuids,
                                           instance_uuid=instance_uuid)
        if holders:
            arq_bindings.mark_deleting(
                context, [h['arq_uuid'] for h in holders])
            for holder in holders:
                self._remove_device_side(context, holder)
        return arq_bindings.delete(context, uuids, instance_uuid)

    def _remove_device_side(self, context: cyborg_context.RequestContext,
                            holder: dict[str, Any]) -> bool:
        try:
            self.agent_api.remove_mdev(
                context, holder['host'], holder['driver_name'],
                holder['attach_info'], holder['attach_handle_uuid'],
                timeout=self.timeout)
        except exception.CyborgException as exc:
            LOG.warning('Cannot remove mediated device %s of accelerator '
                        'request %s on host %s: %s',
                        holder['attach_handle_uuid'], holder['arq_uuid'],
                        holder['host'], exc)
            return False
        return True

    # Background work

    def _finish(self, jobs: list[Job]) -> None:
        """Run one PATCH's device-side binds, then end them all."""
        context = cyborg_context.get_admin_context()
        deadline = time.monotonic() + self.timeout
        succeeded: list[str] = []
        failed: list[str] = []
        bitstreams: dict[int, str] = {}
        by_deployable: dict[int, list[Job]] = collections.defaultdict(list)
        for job in jobs:
            by_deployable[job['deployable_id']].append(job)
        for deployable_id, group in by_deployable.items():
            try:
                loaded = self._program(context, group, deadline)
                if loaded:
                    bitstreams[deployable_id] = loaded
            except Exception as exc:
                self._log_failure(group, exc)
                failed.extend(j['arq_uuid'] for j in group)
                continue
            for job in group:
                try:
                    self._create_device_side(context, job, deadline)
                except Exception as exc:
                    self._log_failure([job], exc)
                    failed.append(job['arq_uuid'])
                else:
                    succeeded.append(job['arq_uuid'])
        try:
            ended = arq_bindings.finish_binds(context, succeeded, failed,
                                              bitstreams)
        except Exception:
            LOG.exception('Cannot record the end of binds %s; they will '
                          'fail after [conductor] bind_timeout.',
                          ', '.join(j['arq_uuid'] for j in jobs))
            return
        for uuid, state in ended.items():
            LOG.info('Accelerator request %s is %s.', uuid, state)
        self._notify(ended, {j['arq_uuid']: j['instance_uuid']
                             for j in jobs})

    @staticmethod
    def _remaining(deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise exception.DeviceActionError(
                reason='[conductor] bind_timeout expired')
        return remaining

    def _program(self, context: cyborg_context.RequestContext,
                 group: list[Job], deadline: float) -> str | None:
        """Load the bitstream the group's ARQs ask for, unless it is
        already there; returns the bitstream now loaded, or None."""
        job = next((j for j in group
                    if j['bitstream_id'] or j['function_id']), None)
        if job is None:
            return None
        bitstream = job['bitstream_id']
        if not bitstream:
            bitstream = self.glance.find_by_function(job['function_id']).id
        if bitstream == job['loaded_bitstream_id']:
            return None
        busy = arq_bindings.handles_in_use(context, job['deployable_id'],
                                   [j['attach_handle_uuid'] for j in group])
        if busy:
            raise exception.DeviceActionError(
                reason=f'bitstream {bitstream} cannot be loaded while '
                       f'{busy} other request(s) use the device')
        self.agent_api.program_fpga(
            context, job['host'], job['controlpath_id']['cpid_info'],
            job['deployable_name'], job['driver_name'], bitstream,
            timeout=self._remaining(deadline))
        return bitstream

    def _create_device_side(self, context: cyborg_context.RequestContext,
                            job: Job, deadline: float) -> None:
        if job['attach_type'] != 'MDEV':
            return
        self.agent_api.create_mdev(
            context, job['host'], job['driver_name'], job['attach_info'],
            job['attach_handle_uuid'], timeout=self._remaining(deadline))

    @staticmethod
    def _log_failure(jobs: list[Job], exc: Exception) -> None:
        LOG.error('Binding accelerator request(s) %s on host %s failed: '
                  '%s', ', '.join(j['arq_uuid'] for j in jobs),
                  jobs[0]['host'], exc)

    def _notify(self, states: dict[str, str],
                instances: dict[str, str | None]) -> None:
        events = [nova_client.BindEvent(instance_uuid=instances[uuid],
                                        arq_uuid=uuid, state=state)
                  for uuid, state in sorted(states.items())
                  if instances.get(uuid)]
        if events:
            self.nova.send_bound_events(events)

    def fail_stale_binds(self) -> None:
        """BindStarted for longer than the bind timeout (with a margin for
        the work in flight): its conductor stopped; end it BindFailed."""
        context = cyborg_context.get_admin_context()
        cutoff = timeutils.utcnow() - datetime.timedelta(
            seconds=self.timeout * 1.5 + 30)
        stale = arq_bindings.stale_binds(context, cutoff)
        if not stale:
            return
        ended = arq_bindings.finish_binds(context, [], list(stale))
        LOG.warning('Accelerator request(s) %s were binding for longer '
                    'than [conductor] bind_timeout; they failed.',
                    ', '.join(sorted(ended)))
        self._notify(ended, stale)
