"""Client side of the agent RPC API."""
import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import rpc


class AgentAPI:
    """Calls into the agent of one host (topic ``cyborg-agent``).

    API version history:

    * 1.0 - Initial version: ``discover``.
    """

    RPC_API_VERSION = '1.0'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        target = messaging.Target(topic=rpc.AGENT_TOPIC,
                                  version=self.RPC_API_VERSION)
        self.client = rpc.get_client(target,
                                     version_cap=conf.upgrade_levels.agent)

    def discover(self, context: cyborg_context.RequestContext, host: str
                 ) -> dict[str, int] | None:
        """Make the agent on ``host`` discover and report now; wait for it.

        Returns what the conductor changed, as ``ConductorAPI.report_data``.
        """
        cctxt = self.client.prepare(
            server=host, version='1.0',
            transport_options=messaging.TransportOptions(at_least_once=True))
        return cctxt.call(context, 'discover')
