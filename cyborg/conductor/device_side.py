"""The device-side work of binds and unbinds, done by their hosts' agents.

A bind that needs its device's host (an FPGA to program, an mdev to
create, a vGPU type to give an SR-IOV VF) is finished here, within
``[conductor] bind_timeout``; what an unbind, a delete or a failed bind
leaves on a host (an mdev, a VF's vGPU type) is removed here, and the
handle freed once the agent confirms it gone.
"""
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import futurist
import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.conductor import bind_notices
from cyborg.conductor import cleaning as conductor_cleaning
from cyborg.db.api import attach_handles
from cyborg.db.api import deployables
from cyborg.db.api import services

# The binder's logger: what operators filter on did not move with the
# code.
LOG = logging.getLogger('cyborg.conductor.binding')

Job = bind_notices.Job
# Seconds between two looks at a device being programmed, for binds that
# wait for it: programming takes tens of seconds on real cards.
AWAIT_POLL = 0.25
# What the agent raises before it writes anything to the device.
UNTOUCHED = (exception.NotSupported, exception.BitstreamNotFound,
             exception.BitstreamError)


@dataclasses.dataclass
class Outcome:
    """What the hosts did for one PATCH's binds (see ``DeviceSide.bind``)."""

    succeeded: list[Job] = dataclasses.field(default_factory=list)
    failed: list[Job] = dataclasses.field(default_factory=list)
    # The bitstream each deployable got, and whether it is loaded (None:
    # unknown, the agent did not answer).
    programs: dict[int, tuple[str, bool | None]] = dataclasses.field(
        default_factory=dict)
    # Why each bind that failed failed, for its notification.
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    # The binds of each deployable, in the order they came.
    groups: dict[int, list[Job]] = dataclasses.field(default_factory=dict)

    def fail(self, jobs: list[Job], exc: Exception) -> None:
        LOG.error('Binding accelerator request(s) %s on host %s failed: '
                  '%s', ', '.join(j['arq_uuid'] for j in jobs),
                  jobs[0]['host'], exc)
        self.failed.extend(jobs)
        self.reasons.update((j['arq_uuid'], str(exc)) for j in jobs)


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise exception.DeviceActionError(
            reason='[conductor] bind_timeout expired')
    return remaining


class DeviceSide:
    """Asks the hosts' agents to program devices and to create and remove
    mdevs, and frees the handles whose mdevs are gone."""

    def __init__(self, conf: cfg.ConfigOpts,
                 executor: futurist.ThreadPoolExecutor,
                 agent_api: Callable[[], agent_rpcapi.AgentAPI],
                 cleaner: conductor_cleaning.Cleaner,
                 notices: bind_notices.BindNotices) -> None:
        self.conf = conf
        self.executor = executor
        # Called at each use: the client is made at the first.
        self.agent_api = agent_api
        self.cleaner = cleaner
        self.notices = notices

    # Binds

    def bind(self, context: cyborg_context.RequestContext, jobs: list[Job],
             deadline: float) -> Outcome:
        """Program what one PATCH's binds program, deployable by
        deployable, then create their mdevs; by ``deadline``."""
        done = Outcome()
        for job in jobs:
            done.groups.setdefault(job['deployable_id'], []).append(job)
        for group in done.groups.values():
            try:
                self._program(context, group, deadline, done.programs)
            except Exception as exc:
                done.fail(group, exc)
                continue
            for job in group:
                try:
                    self._create_mdev(context, job, deadline)
                except Exception as exc:
                    done.fail([job], exc)
                else:
                    done.succeeded.append(job)
        return done

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
        self.notices.program_start(context, group)
        try:
            self.agent_api().program_fpga(
                context, job['host'], job['controlpath_id']['cpid_info'],
                job['deployable_name'], job['driver_name'], bitstream,
                timeout=_remaining(deadline))
        except UNTOUCHED:
            programs[job['deployable_id']] = (bitstream, None)
            raise
        programs[job['deployable_id']] = (bitstream, True)

    @staticmethod
    def _await_program(context: cyborg_context.RequestContext,
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

    def _create_mdev(self, context: cyborg_context.RequestContext,
                     job: Job, deadline: float) -> None:
        # An mdev to create, or the vGPU type of an SR-IOV VF to set: the
        # agent's create_mdev does either, as the handle's driver says.
        if attach_handles.instant(job['attach_type'], job['attach_info']):
            return
        self.agent_api().create_mdev(
            context, job['host'], job['driver_name'], job['attach_info'],
            job['attach_handle_uuid'], timeout=_remaining(deadline))

    # Handles given back

    def given_back(self, released: list[dict[str, Any]],
                   cleaning: list[int]) -> None:
        """After the commit of an unbind or delete: publish the placement
        of the handles it gave back (``released`` holders, ``cleaning``
        ids), clean those to clean, and have the released handles' mdevs
        removed in the worker pool (see ``free``). Nothing here waits for
        an agent."""
        held = [h['attach_handle_id'] for h in released] + cleaning
        if held:
            self.cleaner.publish(cyborg_context.get_admin_context(), held)
        # A handle with an mdev cleans once the mdev is gone (``free``).
        if cleaning:
            self.cleaner.start(cleaning)
        if released:
            self.executor.submit(self.free, released)

    def free(self, released: list[dict[str, Any]]) -> int:
        """Remove released handles' mdevs; free the handles of those
        removed. How many were freed.

        A host whose agent's service record says it is down is not asked
        (nothing waits for an RPC timeout): its handles stay released,
        reserved in placement, until the agent, starting again, removes
        what no request holds (``mdevs_removed`` of
        ``endpoints.attach_handles``) or the stale sweep finds the agent
        back."""
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
                and self._remove_mdev(context, h)]
        freed = attach_handles.free_released(context, gone)
        self.cleaner.handles_returned(context, freed)
        return len(freed)

    def _remove_mdev(self, context: cyborg_context.RequestContext,
                     holder: dict[str, Any]) -> bool:
        try:
            self.agent_api().remove_mdev(
                context, holder['host'], holder['driver_name'],
                holder['attach_info'], holder['attach_handle_uuid'],
                timeout=float(self.conf.conductor.bind_timeout))
        except (exception.CyborgException,
                messaging.MessagingException) as exc:
            LOG.warning('Cannot remove mediated device %s%s on host %s: '
                        '%s', holder['attach_handle_uuid'],
                        f' of accelerator request {holder["arq_uuid"]}'
                        if holder.get('arq_uuid') else '',
                        holder['host'], exc)
            return False
        return True
