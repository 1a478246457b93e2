"""``openstack accelerator device layout show|set|clear`` (microversion
2.8): a device's declarative partitioning, applied by its agent."""
import argparse
import json
from typing import Any

from osc_lib import exceptions
from osc_lib.command import command

from cyborg.osc import device_health
from cyborg.osc import plugin

# What set and clear show of the device.
SHOWN = ('uuid', 'hostname', 'status', 'layout', 'layout_state',
         'layout_reason', 'layout_changed_at')
LAYOUT_SHOWN = ('device_uuid', 'layout', 'layout_state', 'layout_reason',
                'options')


def _json(value: Any) -> Any:
    """Maps shown as JSON, as the API has them; None stays empty."""
    return json.dumps(value, sort_keys=True) if isinstance(
        value, dict) else value


def _shown(device: dict[str, Any], columns: tuple[str, ...]
           ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    return columns, tuple(_json(device.get(c)) for c in columns)


class ShowDeviceLayout(command.ShowOne):
    """Show a device's desired layout, how far its agent got applying it,
    and the layouts its driver offers (asked of the agent)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        device_health.device_argument(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _shown(plugin.client_of(self.app).layout(parsed_args.device),
                      LAYOUT_SHOWN)


class SetDeviceLayout(command.ShowOne):
    """Partition a device: its SR-IOV VF count, its mdev type and count,
    or the image of its FPGA regions. The agent applies it before the
    command returns, and again after every restart of the host; refused
    while an accelerator request uses the device."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        device_health.device_argument(parser)
        kind = parser.add_mutually_exclusive_group(required=True)
        kind.add_argument('--vf-count', type=int, metavar='<count>',
                          help='SR-IOV virtual functions (sriov_numvfs)')
        kind.add_argument('--mdev-type', metavar='<type>',
                          help='Mediated device type (with --mdev-count)')
        kind.add_argument('--region-image', metavar='<image-uuid>',
                          help='Glance image loaded onto the FPGA regions')
        parser.add_argument('--mdev-count', type=int, metavar='<count>',
                            help='Mediated devices of --mdev-type')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        layout: dict[str, Any]
        if (parsed_args.mdev_type is None) != (
                parsed_args.mdev_count is None):
            raise exceptions.CommandError(
                '--mdev-type and --mdev-count are given together.')
        if parsed_args.vf_count is not None:
            layout = {'vf_count': parsed_args.vf_count}
        elif parsed_args.mdev_type is not None:
            layout = {'mdev_type': parsed_args.mdev_type,
                      'mdev_count': parsed_args.mdev_count}
        else:
            layout = {'region_image': parsed_args.region_image}
        return _shown(plugin.client_of(self.app).set_layout(
            parsed_args.device, layout), SHOWN)


class ClearDeviceLayout(command.ShowOne):
    """Forget a device's desired layout: the device stays partitioned as
    it is, and its agent no longer applies the layout at restart."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        device_health.device_argument(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _shown(plugin.client_of(self.app).clear_layout(
            parsed_args.device), SHOWN)
