"""Client side of the conductor RPC API."""
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import rpc


class ConductorAPI:
    """Calls into any running conductor (topic ``cyborg-conductor``).

    API version history:

    * 1.0 - Initial version: ``report_data`` (an agent's inventory) and
      ``service_heartbeat``.
    """

    RPC_API_VERSION = '1.0'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        target = messaging.Target(topic=rpc.CONDUCTOR_TOPIC,
                                  version=self.RPC_API_VERSION)
        self.client = rpc.get_client(
            target, version_cap=conf.upgrade_levels.conductor)

    def report_data(self, context: cyborg_context.RequestContext, host: str,
                    report: dict[str, Any]) -> dict[str, int]:
        """Make the database equal to ``report`` for ``host``; wait for it.

        Returns what changed (see ``ReportResult.to_dict``).
        """
        # at_least_once: when no conductor has its queue bound yet the call
        # fails at once instead of waiting for the RPC timeout.
        cctxt = self.client.prepare(
            version='1.0',
            transport_options=messaging.TransportOptions(at_least_once=True))
        return cctxt.call(context, 'report_data', host=host, report=report)

    def service_heartbeat(self, context: cyborg_context.RequestContext,
                          host: str, binary: str, version: str,
                          hostname: str | None = None) -> None:
        """Record that a service is alive; fire and forget."""
        cctxt = self.client.prepare(version='1.0')
        cctxt.cast(context, 'service_heartbeat', host=host, binary=binary,
                   version=version, hostname=hostname)
