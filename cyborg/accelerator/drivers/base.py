"""The interface every accelerator driver implements."""
import abc
import re
from typing import Any
from typing import ClassVar

from oslo_config import cfg

from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverDevice

_NOT_TRAIT_CHARS = re.compile('[^A-Z0-9_]')


def trait_part(value: str) -> str:
    """``value`` as part of a custom trait name (``^CUSTOM_[A-Z0-9_]+$``):
    upper case, dashes removed, any other character replaced by ``_``."""
    return _NOT_TRAIT_CHARS.sub('_', value.upper().replace('-', ''))


def function_trait(vendor: str, function_id: str) -> str:
    """The trait of a deployable that runs accelerator function
    ``function_id`` (an image's ``accel:function_id``)."""
    return (f'CUSTOM_FPGA_FUNCTION_ID_{trait_part(vendor)}_'
            f'{trait_part(function_id)}')


def bitstream_trait(vendor: str, image_id: str) -> str:
    """The trait of a deployable loaded with a bitstream that names no
    function: the image's id stands for it."""
    return f'CUSTOM_FPGA_BITSTREAM_{trait_part(vendor)}_{trait_part(image_id)}'


class AcceleratorDriver(abc.ABC):
    """A family of devices the agent can discover on its host.

    Drivers are loaded by name from the ``cyborg.accelerator.driver``
    entry-point namespace and constructed with the service configuration.
    ``discover`` must not change the host; it raises on failure rather than
    returning a partial list, because a missing device in a report means
    the device is gone.
    """

    #: The name written into every deployable this driver reports.
    driver_name: ClassVar[str]

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf

    @property
    def host(self) -> str:
        return self.conf.host

    @property
    def hostname(self) -> str:
        """The compute node's name in placement."""
        return self.conf.agent.hostname or self.conf.host

    @abc.abstractmethod
    def discover(self) -> list[DriverDevice]:
        """Return every device of this family on the host."""

    # Monitoring. Both run on the devices of the last ``discover``, every
    # ``[agent] health_interval`` seconds; neither may change the host.

    def health(self, device: DriverDevice) -> Health | None:
        """The health of ``device``; None when this driver cannot tell.

        A driver that fails to read raises; the agent then reports
        ``unknown`` with the error as the reason.
        """
        return None

    def usage(self, device: DriverDevice) -> Usage | None:
        """A usage sample of ``device``; None when this driver has none."""
        return None

    # Device-side actions. A driver implements those its devices support;
    # the others raise NotSupported. Failures raise DeviceActionError.

    def program(self, controlpath_id: dict[str, str], deployable_name: str,
                image_path: str, bitstream: dict[str, Any]) -> None:
        """Load the bitstream at ``image_path`` onto an FPGA.

        ``controlpath_id`` is the device's control path as ``discover``
        reported it, ``deployable_name`` the region (deployable) to
        program, and ``bitstream`` the image's metadata
        (``glance_client.Bitstream.to_dict()``: id, hashes, ``accel:*``
        properties). Returns once the device runs the new bitstream; the
        next ``discover`` reports its function traits.
        """
        raise exception.NotSupported(
            what=f'Programming devices of driver {self.driver_name}')

    def create_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        """Create mediated device ``mdev_uuid`` (e.g. a vGPU) for the MDEV
        attach handle ``attach_info``; Nova uses the attach handle's uuid
        as the mdev uuid."""
        raise exception.NotSupported(
            what=f'Mediated devices of driver {self.driver_name}')

    def remove_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        """Remove mediated device ``mdev_uuid``; removing one that does
        not exist succeeds."""
        raise exception.NotSupported(
            what=f'Mediated devices of driver {self.driver_name}')
