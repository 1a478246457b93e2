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
    the image of its FPGA regions, the vGPU type of an SR-IOV GPU's VFs,
    a GPU's MIG mode and partition, or a NIC's eswitch mode. The agent
    applies it before the command returns, and again after every restart
    of the host; refused while an accelerator request uses the device."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        device_health.device_argument(parser)
        kind = parser.add_mutually_exclusive_group()
        kind.add_argument('--vf-count', type=int, metavar='<count>',
                          help='SR-IOV virtual functions (sriov_numvfs)')
        kind.add_argument('--mdev-type', metavar='<type>',
                          help='Mediated device type (with --mdev-count)')
        kind.add_argument('--region-image', metavar='<image-uuid>',
                          help='Glance image loaded onto the FPGA regions')
        parser.add_argument('--mdev-count', type=int, metavar='<count>',
                            help='Mediated devices of --mdev-type')
        parser.add_argument('--vgpu-type', metavar='<type-id>',
                            help='vGPU type id given to the VFs of an '
                                 'SR-IOV GPU (with --vgpu-count)')
        parser.add_argument('--vgpu-count', type=int, metavar='<count>',
                            help='vGPUs of --vgpu-type')
        parser.add_argument('--mig-mode', choices=('enabled', 'disabled'),
                            help='MIG mode of an NVIDIA GPU')
        parser.add_argument('--mig-partition', metavar='<profiles>',
                            help='MIG GPU instances, comma-separated '
                                 'profiles such as 3g.40gb,3g.40gb; empty '
                                 'for none')
        parser.add_argument('--eswitch-mode',
                            choices=('legacy', 'switchdev'),
                            help='Eswitch mode of a NIC (devlink)')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _shown(plugin.client_of(self.app).set_layout(
            parsed_args.device, _layout(parsed_args)), SHOWN)


def _layout(args: argparse.Namespace) -> dict[str, Any]:
    """The layout the options of ``set`` ask for."""
    for first, second in (('mdev_type', 'mdev_count'),
                          ('vgpu_type', 'vgpu_count')):
        if (getattr(args, first) is None) != (getattr(args, second) is None):
            raise exceptions.CommandError(
                f'--{first.replace("_", "-")} and '
                f'--{second.replace("_", "-")} are given together.')
    layout: dict[str, Any] = {
        key: getattr(args, key)
        for key in ('vf_count', 'mdev_type', 'mdev_count', 'region_image',
                    'vgpu_type', 'vgpu_count', 'mig_mode', 'eswitch_mode')
        if getattr(args, key) is not None}
    if args.mig_partition is not None:
        layout['mig_partition'] = [
            p.strip() for p in args.mig_partition.split(',') if p.strip()]
    if not layout:
        raise exceptions.CommandError(
            'Give at least one of --vf-count, --mdev-type, --region-image, '
            '--vgpu-type, --mig-mode, --mig-partition, --eswitch-mode.')
    return layout


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
