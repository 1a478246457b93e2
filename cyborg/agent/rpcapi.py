"""Client side of the agent RPC API."""
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc

Context = cyborg_context.RequestContext


class AgentAPI:
    """Calls into the agent of one host (topic ``cyborg-agent``).

    Every call is addressed to one host; when no agent listens there, or
    it does not answer in time, the call raises AgentUnavailable.

    API version history:

    * 1.0 - Initial version: ``discover``.
    * 1.1 - Device-side work for binds: ``program_fpga``, ``create_mdev``,
      ``remove_mdev``.
    * 1.2 - The device lifecycle: drivers managed at runtime, cleaning of
      attach handles, device layouts and preparation (see each method's
      docstring).
    """

    RPC_API_VERSION = '1.2'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        target = messaging.Target(topic=rpc.AGENT_TOPIC,
                                  version=self.RPC_API_VERSION)
        self.client = rpc.get_client(target,
                                     version_cap=conf.upgrade_levels.agent)

    def _call(self, context: Context, host: str, version: str, method: str,
              timeout: float | None = None, **kwargs: Any) -> Any:
        if not self.client.can_send_version(version):
            raise exception.NotSupported(
                what=f'Agent RPC {method} (version {version}) with '
                     f'[upgrade_levels] agent={self.client.version_cap}')
        return rpc.call(
            self.client, context, version, method,
            lambda reason: exception.AgentUnavailable(host=host,
                                                      reason=reason),
            server=host, timeout=timeout, **kwargs)

    def discover(self, context: Context, host: str,
                 timeout: float | None = None) -> dict[str, int] | None:
        """Make the agent on ``host`` discover and report now; wait for it
        (up to ``timeout`` seconds, by default the RPC timeout).

        Returns what the conductor changed, as ``ConductorAPI.report_data``.
        Raises AgentUnavailable when no agent answers.
        """
        return self._call(context, host, '1.0', 'discover', timeout=timeout)

    def program_fpga(self, context: Context, host: str,
                     controlpath_id: dict[str, str], deployable_name: str,
                     driver_name: str, bitstream_id: str,
                     timeout: float) -> dict[str, Any]:
        """Program deployable ``deployable_name`` of the device at
        ``controlpath_id`` with Glance image ``bitstream_id``; wait up to
        ``timeout`` seconds.

        The agent reports its inventory before it answers, so the
        deployable's new function trait is known when this returns.
        Returns ``{'bitstream_id': str, 'reported': bool}``. Raises
        DeviceActionError, BitstreamNotFound, BitstreamError, NotSupported
        or Invalid from the agent, and AgentUnavailable.
        """
        return self._call(context, host, '1.1', 'program_fpga',
                          timeout=timeout, controlpath_id=controlpath_id,
                          deployable_name=deployable_name,
                          driver_name=driver_name,
                          bitstream_id=bitstream_id)

    def create_mdev(self, context: Context, host: str, driver_name: str,
                    attach_info: dict[str, str], mdev_uuid: str,
                    timeout: float) -> None:
        """Create mediated device ``mdev_uuid`` for the MDEV attach handle
        ``attach_info``; the attach handle's uuid is the mdev's."""
        self._call(context, host, '1.1', 'create_mdev', timeout=timeout,
                   driver_name=driver_name, attach_info=attach_info,
                   mdev_uuid=mdev_uuid)

    def remove_mdev(self, context: Context, host: str, driver_name: str,
                    attach_info: dict[str, str], mdev_uuid: str,
                    timeout: float) -> None:
        """Remove mediated device ``mdev_uuid``; succeeds if it is gone."""
        self._call(context, host, '1.1', 'remove_mdev', timeout=timeout,
                   driver_name=driver_name, attach_info=attach_info,
                   mdev_uuid=mdev_uuid)

    def clean_handle(self, context: Context, host: str, driver_name: str,
                     attach_type: str, attach_info: dict[str, str],
                     handle_uuid: str, timeout: float) -> None:
        """Clean attach handle ``handle_uuid`` after use with its driver's
        ``clean`` (a function-level reset, an NVMe format, an FPGA's
        golden image, an mdev made anew); wait up to ``timeout`` seconds.
        Raises DeviceActionError, NotSupported or Invalid from the agent,
        and AgentUnavailable."""
        self._call(context, host, '1.2', 'clean_handle', timeout=timeout,
                   driver_name=driver_name, attach_type=attach_type,
                   attach_info=attach_info, handle_uuid=handle_uuid)

    # Layouts and preparation (1.2).

    def layout_options(self, context: Context, host: str,
                       controlpath_id: dict[str, str],
                       driver_name: str | None,
                       timeout: float) -> dict[str, Any]:
        """What the device at ``controlpath_id`` may be partitioned into
        (``AcceleratorDriver.layout_options``; ``{}``: nothing)."""
        return self._call(context, host, '1.2', 'layout_options',
                          timeout=timeout, controlpath_id=controlpath_id,
                          driver_name=driver_name)

    def apply_layout(self, context: Context, host: str,
                     controlpath_id: dict[str, str],
                     driver_name: str | None,
                     layout: dict[str, Any] | None,
                     timeout: float) -> dict[str, Any]:
        """Keep and apply ``layout`` on the device (None: forget the kept
        layout); the agent reports before it answers. Raises Invalid
        (a value the device does not offer), DeviceActionError,
        NotSupported, and AgentUnavailable."""
        return self._call(context, host, '1.2', 'apply_layout',
                          timeout=timeout, controlpath_id=controlpath_id,
                          driver_name=driver_name, layout=layout)

    def prepare_device(self, context: Context, host: str,
                       controlpath_id: dict[str, str],
                       driver_name: str | None,
                       layout: dict[str, Any] | None,
                       timeout: float) -> dict[str, Any]:
        """Run the driver's ``prepare`` on the device being enabled, then
        keep and apply its desired ``layout`` (None: none waits); the
        agent reports before it answers when it applied one. Raises as
        ``apply_layout``."""
        return self._call(context, host, '1.2', 'prepare_device',
                          timeout=timeout, controlpath_id=controlpath_id,
                          driver_name=driver_name, layout=layout)

    # Drivers managed at runtime (1.2).

    def drivers_list(self, context: Context, host: str,
                     timeout: float | None = None) -> list[dict[str, Any]]:
        """Every driver installed on ``host``: ``{name, driver_name,
        version, enabled, state, error}``."""
        return self._call(context, host, '1.2', 'drivers_list',
                          timeout=timeout)

    def driver_set_enabled(self, context: Context, host: str, name: str,
                           enabled: bool, timeout: float | None = None
                           ) -> dict[str, Any]:
        """Load or unload driver ``name`` on ``host``; the agent keeps the
        choice and reports before it answers. Raises UnknownDriver,
        DriverLoadFailed, and AgentUnavailable."""
        return self._call(context, host, '1.2', 'driver_set_enabled',
                          timeout=timeout, name=name, enabled=enabled)

    def drivers_reload(self, context: Context, host: str,
                       timeout: float | None = None) -> list[dict[str, Any]]:
        """Reload the drivers of ``host`` from their installed packages;
        the new ``drivers_list``."""
        return self._call(context, host, '1.2', 'drivers_reload',
                          timeout=timeout)
