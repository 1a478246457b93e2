"""Assembling a conductor: RPC endpoints and its own heartbeat."""
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg import version
from cyborg.common import rpc
from cyborg.common import service
from cyborg.conductor import manager
from cyborg.db.api import services


def build(conf: cfg.ConfigOpts) -> service.Service:
    """A conductor service for ``conf.host``; rpc.init() must have run."""

    def heartbeat() -> None:
        services.heartbeat(cyborg_context.get_admin_context(), conf.host,
                           'cyborg-conductor', version.version_string())

    return service.Service(
        rpc.CONDUCTOR_TOPIC, conf.host, [manager.ConductorManager(conf)],
        [service.PeriodicTask('conductor-heartbeat', heartbeat,
                              conf.heartbeat_interval)])
