"""The drivers of one agent host, managed through its agent (RPC 1.9).

The conductor checks what only it can: that the agent is registered and
alive, that the driver is installed there, and that no accelerator request
holds a device of a driver about to be disabled. Only then does it ask the
agent, so a refused request changes nothing anywhere.
"""
import logging
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.db.api import drivers
from cyborg.db.api import services

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext


class HostDrivers:
    """What the conductor does for ``/v2/hosts/{host}/drivers``."""

    def __init__(self, conf: cfg.ConfigOpts,
                 agent_api: Callable[[], agent_rpcapi.AgentAPI]) -> None:
        self.conf = conf
        self._agent_api = agent_api

    @property
    def agent_api(self) -> agent_rpcapi.AgentAPI:
        return self._agent_api()

    @property
    def _timeout(self) -> float:
        return float(self.conf.rpc_response_timeout)

    def _check_alive(self, context: Context, host: str) -> None:
        """AgentNotFound, or AgentUnavailable (a 503: retry once the agent
        is back) when its heartbeats stopped."""
        agent = services.get_agent(context, host, self.conf.service_down_time)
        if not agent['alive']:
            raise exception.AgentUnavailable(
                host=host,
                reason=f'its last heartbeat was at '
                       f'{agent["last_seen_at"].isoformat()}, more than '
                       f'{self.conf.service_down_time} seconds ago; '
                       'nothing was changed')

    def installed(self, context: Context, host: str
                  ) -> list[dict[str, Any]]:
        self._check_alive(context, host)
        return self.agent_api.drivers_list(context, host,
                                           timeout=self._timeout)

    def set_enabled(self, context: Context, host: str, name: str,
                    enabled: bool) -> dict[str, Any]:
        self._check_alive(context, host)
        installed = self.agent_api.drivers_list(context, host,
                                                timeout=self._timeout)
        entry = next((d for d in installed if d['name'] == name), None)
        if entry is None:
            raise exception.UnknownDriver(
                name=name, host=host,
                installed=', '.join(d['name'] for d in installed) or 'none')
        if not enabled:
            held = drivers.holding_arqs(context, host, entry['driver_name'])
            if held:
                raise exception.DriverInUse(name=name, host=host,
                                            arqs=', '.join(held))
        result = self.agent_api.driver_set_enabled(
            context, host, name, enabled, timeout=self._timeout)
        LOG.info('Driver %s %s on host %s.', name,
                 'enabled' if enabled else 'disabled', host)
        return result

    def reload(self, context: Context, host: str) -> list[dict[str, Any]]:
        self._check_alive(context, host)
        found = self.agent_api.drivers_reload(context, host,
                                              timeout=self._timeout)
        LOG.info('Host %s reloaded its drivers: %s.', host,
                 ', '.join(f'{d["name"]} {d["version"]}' for d in found
                           if d['enabled']) or 'none enabled')
        return found
