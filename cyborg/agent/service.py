"""Assembling an agent: drivers, tracker, RPC endpoints, periodic tasks."""
from oslo_config import cfg

from cyborg.accelerator import drivers
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import manager
from cyborg.agent import resource_tracker
from cyborg.common import rpc
from cyborg.common import service
from cyborg.conductor import rpcapi as conductor_rpcapi


def build(conf: cfg.ConfigOpts,
          loaded: list[AcceleratorDriver] | None = None) -> service.Service:
    """An agent service for ``conf.host``; rpc.init() must have run.

    ``loaded`` are the drivers to use; by default those named in
    ``[agent] enabled_drivers`` (DriverNotFound if a name is unknown).
    """
    if loaded is None:
        loaded = drivers.load_drivers(conf)
    conductor_api = conductor_rpcapi.ConductorAPI(conf)
    tracker = resource_tracker.ResourceTracker(conf, loaded, conductor_api)
    agent = manager.AgentManager(conf, tracker, conductor_api)
    return service.Service(
        rpc.AGENT_TOPIC, conf.host, [agent],
        [service.PeriodicTask('agent-report', agent.periodic_report,
                              conf.agent.periodic_interval),
         service.PeriodicTask('agent-heartbeat', agent.heartbeat,
                              conf.heartbeat_interval)])
