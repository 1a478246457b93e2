"""What the FPGA drivers share: traits, and programming a device with a
vendor tool."""
import logging
import os
import shutil
import string
from typing import Any

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import privileged
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import exception
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import canonical_json
from cyborg.common.device_report import check_layout

LOG = logging.getLogger(__name__)

# The resource class of every FPGA deployable.
RESOURCE_CLASS = 'FPGA'
PLACEHOLDERS = ('address', 'domain', 'bus', 'device', 'function', 'image')
_PCI_KEYS = ('domain', 'bus', 'device', 'function')


def product_trait(function: pci.PciFunction) -> str:
    """``CUSTOM_FPGA_PRODUCT_ID_<PID>``, e.g. ``CUSTOM_FPGA_PRODUCT_ID_5004``.
    """
    return f'CUSTOM_FPGA_PRODUCT_ID_{trait_part(function.device_id[2:])}'


class ProgramCommand:
    """A programming tool and the template of its arguments, from options
    ``[fpga] <path_option>`` and ``[fpga] <args_option>``."""

    def __init__(self, conf: cfg.ConfigOpts, path_option: str,
                 args_option: str) -> None:
        self.path = getattr(conf.fpga, path_option).strip()
        self.template = list(getattr(conf.fpga, args_option))
        if not self.path:
            raise exception.Invalid(
                reason=f'[fpga] {path_option} is empty')
        used = set()
        for arg in self.template:
            try:
                names = {name for _, name, _, _
                         in string.Formatter().parse(arg)
                         if name is not None}
            except ValueError as exc:
                raise exception.Invalid(
                    reason=f'[fpga] {args_option} argument {arg!r}: {exc}'
                ) from None
            unknown = sorted(n for n in names if n not in PLACEHOLDERS)
            if unknown:
                raise exception.Invalid(
                    reason=f'[fpga] {args_option} argument {arg!r} names '
                           f'unknown placeholder(s) {", ".join(unknown)}; '
                           f'known: {", ".join(PLACEHOLDERS)}')
            used |= names
        if 'image' not in used:
            raise exception.Invalid(
                reason=f'[fpga] {args_option} {",".join(self.template)!r} '
                       'does not pass the image: add {image}')
        if shutil.which(self.path) is None:
            LOG.warning('[fpga] %s %s is not an executable file on this '
                        'host; programming will fail until it is installed.',
                        path_option, self.path)

    def argv(self, function: pci.PciFunction, image_path: str) -> list[str]:
        """The command line programming ``image_path`` onto ``function``.
        """
        values = dict(function.attach_info(), address=function.address,
                      image=image_path)
        return [self.path, *(arg.format(**values) for arg in self.template)]


class FpgaDriver(PciDriver):
    """An FPGA driver whose devices are identified, and programmed, through
    the PCI function of their control path.

    Those that can program set ``program_command`` in their constructor.
    """

    conf_group = 'fpga'
    program_command: ProgramCommand | None = None

    def program(self, controlpath_id: dict[str, str], deployable_name: str,
                image_path: str, bitstream: dict[str, Any]) -> None:
        if self.program_command is None:
            super().program(controlpath_id, deployable_name, image_path,
                            bitstream)
            return
        target = self._program_target(controlpath_id, deployable_name)
        if not os.path.isfile(image_path):
            raise exception.DeviceActionError(
                action='program', device=target.address,
                reason=f'no bitstream file {image_path}')
        argv = self.program_command.argv(target, image_path)
        LOG.info('Programming %s (%s) with %s', deployable_name,
                 target.address, image_path)
        privileged.execute(argv, action='program', device=target.address,
                           root_helper=self.conf.agent.root_helper,
                           timeout=self.conf.fpga.program_timeout)

    # Layouts: the image of the card's regions; cleaning: the golden
    # image of [fpga] golden_images.

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        if self.program_command is None:
            return {}
        return {'region_image': {
            'deployables': [d.name for d in device.deployables]}}

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """Load ``region_image`` into every region of the card.

        The agent resolves the Glance image before it calls this: it adds
        ``image_path`` (the downloaded file) and ``bitstream`` (the
        image's metadata, as ``program`` takes it) to the layout.
        """
        wanted = {k: v for k, v in layout.items()
                  if k not in ('image_path', 'bitstream')}
        check_layout(self.layout_options(device), wanted)
        if 'region_image' not in wanted:
            return
        image_path = layout.get('image_path')
        if not isinstance(image_path, str):
            raise exception.DeviceActionError(
                action='program', device=str(device.controlpath_id),
                reason='the agent passed no downloaded image_path for '
                       f'region_image {wanted["region_image"]}')
        for deployable in device.deployables:
            self.program(device.controlpath_id, deployable.name, image_path,
                         dict(layout.get('bitstream') or {}))

    def clean(self, handle: DriverAttachHandle) -> None:
        """Load the driver's golden image onto the card behind the
        handle, wiping what the last tenant's bitstream left.

        A card this service cannot program (no programming tool, as
        Inspur's) gets the function-level reset of every PCI handle
        instead: the most it can do, and what the next tenant also gets
        through pass-through."""
        if self.program_command is None:
            LOG.info('%s cannot load a golden image: cleaning %s with a '
                     'function-level reset.', self.driver_name,
                     handle.attach_info)
            super().clean(handle)
            return
        golden = self.conf.fpga.golden_images.get(self.driver_name)
        address = handle_address(handle.attach_info)
        if address is None:
            raise exception.DeviceActionError(
                action='clean', device=str(handle.attach_info),
                reason='the attach handle names no PCI function')
        if not golden:
            raise exception.DeviceActionError(
                action='clean', device=address,
                reason=f'[fpga] golden_images has no image for '
                       f'{self.driver_name}; add '
                       f'"{self.driver_name}:<path of the golden image>"')
        device = next((d for d in self.discover()
                       if any(h.attach_info == handle.attach_info
                              for dep in d.deployables
                              for h in dep.attach_handles)), None)
        if device is None:
            raise exception.DeviceActionError(
                action='clean', device=address,
                reason=f'driver {self.driver_name} reports no card with '
                       'this handle')
        for deployable in device.deployables:
            self.program(device.controlpath_id, deployable.name, golden,
                         {'golden_image': golden})

    def _program_target(self, controlpath_id: dict[str, str],
                        deployable_name: str) -> pci.PciFunction:
        """The function to program: the control path of a device this
        driver reports now, which has deployable ``deployable_name``."""
        def fail(reason: str) -> exception.DeviceActionError:
            return exception.DeviceActionError(
                action='program', device=canonical_json(controlpath_id),
                reason=reason)

        try:
            wanted = {k: str(controlpath_id[k]).lower() for k in _PCI_KEYS}
        except (KeyError, TypeError):
            raise fail('the control path is not a PCI address') from None
        device: DriverDevice | None = next(
            (d for d in self.discover() if d.controlpath_id == wanted), None)
        if device is None:
            raise fail(f'driver {self.driver_name} reports no such device')
        if deployable_name not in (d.name for d in device.deployables):
            raise fail(f'the device has no deployable {deployable_name}')
        address = '{domain}:{bus}:{device}.{function}'.format(**wanted)
        function = self.bus.get(address)
        if function is None:
            raise fail(f'PCI function {address} has gone')
        return function

