"""The conductor's parts, and the RPC endpoints that serve them."""
import functools
import logging
from collections.abc import Callable

from oslo_config import cfg

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import notifications
from cyborg.conductor import bind_notices
from cyborg.conductor import binding
from cyborg.conductor import cleaning
from cyborg.conductor import device_side
from cyborg.conductor import heartbeats
from cyborg.conductor import host_drivers
from cyborg.conductor import layouts
from cyborg.conductor import limits
from cyborg.conductor import live_allocations
from cyborg.conductor import placement_sync
from cyborg.conductor import reports
from cyborg.conductor import unbound_expiry
from cyborg.conductor import workers
from cyborg.conductor.endpoints import arqs
from cyborg.conductor.endpoints import attach_handles
from cyborg.conductor.endpoints import attributes
from cyborg.conductor.endpoints import deployables
from cyborg.conductor.endpoints import device_profiles
from cyborg.conductor.endpoints import devices
from cyborg.conductor.endpoints import host_drivers as host_driver_endpoint
from cyborg.conductor.endpoints import hosts

LOG = logging.getLogger(__name__)


def placement_configured(conf: cfg.ConfigOpts) -> bool:
    """Whether [placement] names a way to reach placement at all."""
    return bool(conf.placement.auth_type or conf.placement.endpoint_override)


class ConductorManager:
    """A conductor's parts, made once per process: what its RPC endpoints
    (``endpoints``) and its periodic tasks (``service.build``) work
    with. Every part is made here, and nowhere else."""

    def __init__(self, conf: cfg.ConfigOpts,
                 placement: placement_sync.PlacementSync | None = None,
                 agent_api: agent_rpcapi.AgentAPI | None = None) -> None:
        self.conf = conf
        if placement is None and placement_configured(conf):
            placement = placement_sync.PlacementSync(conf)
        self.placement = placement
        # Made on first use: a conductor's RPC transport exists by then.
        self.agent_api: Callable[[], agent_rpcapi.AgentAPI] = (
            functools.cache(functools.partial(agent_rpcapi.AgentAPI, conf))
            if agent_api is None else lambda: agent_api)
        # Keystone's project limits, when [quota] switches them on.
        self.limits = limits.from_conf(conf)
        # What binds, unbinds and deletes leave to do once committed.
        pool = workers.Workers(max_workers=conf.conductor.bind_workers)
        self.cleaner = cleaning.Cleaner(conf, pool, self.agent_api,
                                        self.sync_placement)
        # One sender of the notifications of binds, for both halves.
        notices = bind_notices.BindNotices(conf)
        self.binder = binding.Binder(
            conf, pool, device_side.DeviceSide(
                conf, pool, self.agent_api, self.cleaner, notices),
            notices,
            allocations=None if placement is None else
            live_allocations.LiveAllocations(conf, placement.client),
            limits=self.limits)
        self.layouts = layouts.DeviceLayouts(conf, self.agent_api,
                                             self.sync_placement)
        self.notifier = notifications.get_notifier(conf, 'cyborg-conductor')
        self.expiry = unbound_expiry.UnboundExpiry(conf, self.notifier)
        self.heartbeats = heartbeats.HeartbeatBatch()
        self.reports = reports.UnchangedReports()
        self.host_drivers = host_drivers.HostDrivers(conf, self.agent_api)

    def stop(self) -> None:
        """Write the heartbeats taken and end their thread, which would
        otherwise go on for ever; after the RPC server stopped, when no
        heartbeat comes in any more.

        Binds under way are not waited for: one may be retrying a
        database that is away, and the process exits without it (the
        events still owed to Nova are in the database)."""
        self.heartbeats.stop()

    def sync_placement(self, hostname: str) -> int:
        """Publish the host's changes; the providers still pending."""
        if self.placement is None:
            return 0
        try:
            return self.placement.sync_host(hostname).pending
        except Exception:
            # The database is right; the periodic pass tries again.
            LOG.exception('Placement sync of host %s failed', hostname)
            return -1

    def endpoints(self) -> list[object]:
        """The RPC endpoints, one per noun, over these parts."""
        # The dispatcher tries them in turn: the busiest first (agents'
        # heartbeats and reports, then the API's binds and creates).
        return [
            hosts.HostEndpoint(self.conf, self.reports, self.heartbeats,
                               self.notifier, self.sync_placement,
                               self.agent_api),
            arqs.ArqEndpoint(self.binder, self.notifier, self.limits),
            devices.DeviceEndpoint(self.layouts, self.notifier,
                                   self.sync_placement),
            attach_handles.AttachHandleEndpoint(self.cleaner),
            device_profiles.DeviceProfileEndpoint(),
            host_driver_endpoint.HostDriverEndpoint(self.host_drivers),
            attributes.AttributeEndpoint(),
            deployables.DeployableEndpoint(self.conf, self.agent_api,
                                           self.notifier),
        ]
