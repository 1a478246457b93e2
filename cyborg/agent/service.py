"""Assembling an agent: drivers, cache, tracker, RPC, tasks, hot-plug,
health passes and metrics."""
from collections.abc import Iterable

from oslo_config import cfg

from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import cache as agent_cache
from cyborg.agent import driver_control
from cyborg.agent import health
from cyborg.agent import hotplug
from cyborg.agent import manager
from cyborg.agent import metrics as agent_metrics
from cyborg.agent import resource_tracker
from cyborg.common import metrics_server
from cyborg.common import notifications
from cyborg.common import outages
from cyborg.common import probes
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import rpcapi as conductor_rpcapi


class AgentService(rpc_service.RPCService):
    """The agent's RPC server and periodic tasks, started once the mdevs of
    the cache exist again, with the hot-plug monitor alongside, and the
    servers of its metrics and health probe when configured."""

    def __init__(self, agent: manager.AgentManager,
                 tasks: list[rpc_service.PeriodicTask],
                 monitor: hotplug.HotplugMonitor | None,
                 metrics: agent_metrics.AgentMetrics | None = None,
                 probe: metrics_server.MetricsServer | None = None
                 ) -> None:
        super().__init__(rpc.AGENT_TOPIC, agent.conf.host, agent.endpoints(),
                         tasks)
        self.agent = agent
        self.monitor = monitor
        self.metrics = metrics
        self.probe = probe

    def start(self) -> None:
        # Before any RPC call or report: an unbind that arrives now must
        # find the mdev it removes, and the report the host as it will be.
        self.agent.restore_mdevs()
        # A reboot reset the VFs and mdev partitions, and an agent that
        # died mid-change finishes it, before the report shows the device.
        self.agent.reapply_layouts()
        if self.metrics is not None:
            self.metrics.start()
        if self.probe is not None:
            self.probe.start()
        if self.monitor is not None:
            self.monitor.start()
        super().start()

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        super().stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.probe is not None:
            self.probe.stop()


def build(conf: cfg.ConfigOpts,
          loaded: list[AcceleratorDriver] | None = None,
          hotplug_events: Iterable[hotplug.Event] | None = None
          ) -> AgentService:
    """An agent service for ``conf.host``; rpc.init() must have run.

    ``loaded`` are the drivers to use; by default those named in
    ``[agent] enabled_drivers`` as the operator's choices of drivers kept
    in the cache change them (DriverNotFound if a name is unknown; see
    ``driver_control``). ``hotplug_events`` replaces udev as the source of
    hot-plug events.
    """
    conductor_api = conductor_rpcapi.ConductorAPI(conf)
    cache = agent_cache.AgentCache.load(agent_cache.cache_path(conf))
    tracker = resource_tracker.ResourceTracker(conf, loaded or [],
                                               conductor_api, cache=cache)
    if loaded is None:
        control = driver_control.DriverControl.start(conf, tracker)
    else:
        control = driver_control.DriverControl.adopt(conf, tracker)
    agent = manager.AgentManager(conf, tracker, conductor_api,
                                 drivers=control)
    report = rpc_service.PeriodicTask('agent-report',
                                      agent.periodic_report,
                                      conf.agent.periodic_interval,
                                      next_delay=agent.report_retry_delay)
    monitor = None
    if conf.agent.hotplug:
        monitor = hotplug.HotplugMonitor(report.trigger,
                                         conf.agent.hotplug_debounce,
                                         events=hotplug_events)
    tasks = [report,
             rpc_service.PeriodicTask('agent-heartbeat', agent.heartbeat,
                                      conf.heartbeat_interval),
             rpc_service.bus_probe(rpc.AGENT_TOPIC, conf.host,
                                   conf.heartbeat_interval)]
    # A conductor that answers no call leaves the agent able to do its own
    # work (devices, unbinds asked before): a warning, not a failure.
    probe = probes.Health('cyborg-agent', tasks, needs=(outages.BUS,),
                          wants=(outages.PEER,))
    metrics = (agent_metrics.AgentMetrics(conf, probe)
               if conf.agent.metrics_port else None)
    if conf.agent.health_interval > 0:
        monitor_health = health.HealthMonitor(
            conf, tracker, conductor_api, metrics=metrics,
            notifier=notifications.get_notifier(conf, 'cyborg-agent'))
        tasks.append(rpc_service.PeriodicTask(
            'agent-health', monitor_health.run, conf.agent.health_interval))
    return AgentService(agent, tasks, monitor, metrics,
                        metrics_server.health_server(conf.agent, probe))
