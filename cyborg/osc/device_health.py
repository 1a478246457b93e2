"""``openstack accelerator device health list|set|clear`` and
``openstack accelerator device impact`` (microversion 2.6)."""
import argparse
from collections.abc import Iterable
from typing import Any

from osc_lib.command import command

from cyborg.osc import plugin

# As cyborg.common.device_health has them; the API refuses any other.
STATES = ('healthy', 'degraded', 'unhealthy', 'unknown')

LIST_COLUMNS = ('uuid', 'hostname', 'type', 'vendor', 'status', 'health',
                'health_reason', 'health_source')
LIST_HEADINGS = ('UUID', 'Hostname', 'Type', 'Vendor', 'Status', 'Health',
                 'Reason', 'Source')
# What set and clear show of the device.
SHOWN = ('uuid', 'hostname', 'status', 'health', 'health_reason',
         'health_source', 'health_changed_at')
IMPACT_COLUMNS = ('uuid', 'state', 'instance_uuid', 'project_id',
                  'device_profile_name', 'deployable_uuid')
IMPACT_HEADINGS = ('ARQ UUID', 'State', 'Instance UUID', 'Project ID',
                   'Device Profile', 'Deployable UUID')


def device_argument(parser: argparse.ArgumentParser) -> None:
    """The positional device argument of the device commands."""
    parser.add_argument('device', metavar='<device-uuid>',
                        help='The device (its UUID)')


def _shown(device: dict[str, Any]) -> tuple[tuple[str, ...],
                                            tuple[Any, ...]]:
    return SHOWN, tuple(device[c] for c in SHOWN)


class ListDeviceHealth(command.Lister):
    """List the devices with their health: the state, why, and who set it
    (their agent, or an operator until cleared)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('--health', choices=STATES,
                            help='Only the devices in this state')
        parser.add_argument('--hostname', metavar='<hostname>',
                            help='Only the devices of this compute node')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        found = plugin.client_of(self.app).devices(
            health=parsed_args.health, hostname=parsed_args.hostname)
        return LIST_HEADINGS, [tuple(d[c] for c in LIST_COLUMNS)
                               for d in found]


class SetDeviceHealth(command.ShowOne):
    """Set a device's health; it stands over the agent's readings until
    cleared. ``unhealthy`` takes the device's accelerators out of
    placement (check ``openstack accelerator device impact`` first)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        device_argument(parser)
        parser.add_argument('--state', choices=STATES, required=True,
                            help='The health state')
        parser.add_argument('--reason', metavar='<text>',
                            help='Why (at most 255 characters)')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _shown(plugin.client_of(self.app).set_health(
            parsed_args.device, parsed_args.state, parsed_args.reason))


class ClearDeviceHealth(command.ShowOne):
    """Clear the health an operator set: the agent's last reading counts
    again. Shows the device's health after."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        device_argument(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _shown(plugin.client_of(self.app).clear_health(
            parsed_args.device))


class ShowDeviceImpact(command.Lister):
    """List the accelerator requests on a device, with their instances
    and projects: what disabling it or setting it unhealthy would touch.
    Changes nothing."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        device_argument(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        impact = plugin.client_of(self.app).impact(parsed_args.device)
        return IMPACT_HEADINGS, [tuple(a[c] for c in IMPACT_COLUMNS)
                                 for a in impact['arqs']]
