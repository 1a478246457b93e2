"""Assembling a conductor: RPC endpoints, its heartbeat and periodic work."""
import functools

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg import version
from cyborg.common import metrics_server
from cyborg.common import outages
from cyborg.common import probes
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import layouts
from cyborg.conductor import manager
from cyborg.conductor import metrics as conductor_metrics
from cyborg.conductor import placement_sync
from cyborg.conductor import unbound_expiry
from cyborg.db.api import services

# Seconds between two looks for binds whose conductor stopped.
STALE_BIND_INTERVAL = 60
# Seconds between two looks for handles left cleaning (an agent that was
# down): a quarter of cleaning.RETRY_AFTER, so a handle is retried at most
# 15 s after its wait is over.
STALE_CLEAN_INTERVAL = 15


class ConductorService(rpc_service.RPCService):
    """The conductor's RPC server and periodic tasks, with its metrics
    server when ``[conductor] metrics_port`` is set and its health probe's
    when ``[conductor] health_port`` is another."""

    def __init__(self, conductor: manager.ConductorManager,
                 tasks: list[rpc_service.PeriodicTask],
                 metrics: conductor_metrics.ConductorMetrics | None,
                 probe: metrics_server.MetricsServer | None = None
                 ) -> None:
        super().__init__(rpc.CONDUCTOR_TOPIC, conductor.conf.host,
                         conductor.endpoints(), tasks)
        self.conductor = conductor
        self.metrics = metrics
        self.probe = probe

    def start(self) -> None:
        # First: a port already taken stops the conductor before it takes
        # any message.
        if self.metrics is not None:
            self.metrics.start()
        if self.probe is not None:
            self.probe.start()
        super().start()

    def stop(self) -> None:
        super().stop()
        # After the RPC server: no heartbeat comes in any more.
        self.conductor.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.probe is not None:
            self.probe.stop()


def build(conf: cfg.ConfigOpts) -> ConductorService:
    """A conductor service for ``conf.host``; rpc.init() must have run."""

    def heartbeat() -> None:
        services.heartbeat(cyborg_context.get_admin_context(), conf.host,
                           'cyborg-conductor', version.version_string())

    conductor = manager.ConductorManager(conf)
    # The heartbeat writes a row each pass: its success is what ends an
    # outage of the database, whoever met it (a task, an RPC handler).
    tasks = [rpc_service.PeriodicTask('conductor-heartbeat', heartbeat,
                                      conf.heartbeat_interval,
                                      restores=(outages.DATABASE,)),
             rpc_service.bus_probe(rpc.CONDUCTOR_TOPIC, conf.host,
                                   conf.heartbeat_interval),
             rpc_service.PeriodicTask('conductor-stale-binds',
                                      conductor.binder.fail_stale_binds,
                                      STALE_BIND_INTERVAL),
             # Any conductor sends what another could not (nova_outbox).
             rpc_service.PeriodicTask('conductor-nova-events',
                                      conductor.binder.outbox.resend,
                                      conf.nova.event_resend_interval),
             rpc_service.PeriodicTask('conductor-stale-cleans',
                                      conductor.cleaner.retry_stale,
                                      STALE_CLEAN_INTERVAL),
             rpc_service.PeriodicTask('conductor-layouts',
                                      conductor.layouts.redrive,
                                      layouts.REDRIVE_INTERVAL)]
    if conf.conductor.unbound_request_ttl:
        # Every conductor runs it; the one the ring gives it deletes.
        tasks.append(rpc_service.PeriodicTask(
            'conductor-unbound-expiry', conductor.expiry.sweep,
            unbound_expiry.INTERVAL))
    if conductor.placement is not None:
        tasks.append(rpc_service.PeriodicTask(
            'placement-sync', functools.partial(
                conductor.placement.sync_pending, placement_sync.SETTLE),
            min(placement_sync.TICK, conf.placement.sync_interval)))
        # Cheap while placement answers: it then only reads a flag.
        tasks.append(rpc_service.PeriodicTask(
            'placement-probe', conductor.placement.probe,
            placement_sync.PROBE_TICK))
        if conf.placement.reconcile_interval:
            tasks.append(rpc_service.PeriodicTask(
                'placement-reconcile', conductor.placement.reconcile,
                conf.placement.reconcile_interval))
    # Keystone down, creates and binds are refused (503) while the rest
    # works: a warning, not a failure that would take the conductor out.
    health = probes.Health('cyborg-conductor', tasks,
                           needs=(outages.DATABASE, outages.BUS),
                           wants=(outages.PEER,) + (
                               (outages.KEYSTONE,) if conductor.limits
                               else ()))
    metrics = (conductor_metrics.ConductorMetrics(
        conf, conductor.binder.bind_durations, conductor.heartbeats,
        conductor.placement, health)
        if conf.conductor.metrics_port else None)
    return ConductorService(conductor, tasks, metrics,
                            metrics_server.health_server(conf.conductor,
                                                         health))
