"""Server side of the agent RPC API, and the agent's periodic work."""
import logging

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg import version
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.conductor import rpcapi as conductor_rpcapi

LOG = logging.getLogger(__name__)


class AgentManager:
    """What the conductor can ask of this host's agent."""

    target = messaging.Target(version='1.0')

    def __init__(self, conf: cfg.ConfigOpts,
                 tracker: resource_tracker.ResourceTracker,
                 conductor_api: conductor_rpcapi.ConductorAPI) -> None:
        self.conf = conf
        self.tracker = tracker
        self.conductor_api = conductor_api

    @messaging.expected_exceptions(exception.DriverError)
    def discover(self, context: cyborg_context.RequestContext
                 ) -> dict[str, int] | None:
        return self.tracker.update(force=True)

    def periodic_report(self) -> None:
        self.tracker.update()

    def heartbeat(self) -> None:
        self.conductor_api.service_heartbeat(
            cyborg_context.get_admin_context(), self.conf.host,
            'cyborg-agent', version.version_string(),
            hostname=self.tracker.hostname)
