"""The interface every accelerator driver implements."""
import abc
import logging
import re
from collections.abc import Callable
from typing import Any
from typing import ClassVar
from typing import TypeVar

from oslo_config import cfg

from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDevice

LOG = logging.getLogger(__name__)
T = TypeVar('T')


def act(method: Callable[..., T], action: str, device: str,
        *args: Any) -> T:
    """Call a driver to ``action`` on ``device``; an error that is not
    cyborg's becomes DeviceActionError, so the caller learns what failed
    (cyborg's own, such as Invalid or NotSupported, pass as they are)."""
    try:
        return method(*args)
    except exception.CyborgException:
        raise
    except Exception as exc:
        LOG.exception('Driver failed to %s on %s', action, device)
        raise exception.DeviceActionError(
            action=action, device=device,
            reason=f'{type(exc).__name__}: {exc}') from exc

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
    #: The configuration group holding the driver's options, among them
    #: ``clean_after_use`` and ``vfio_bind`` (cyborg.conf.lifecycle);
    #: None for a driver without them, which never cleans on its own.
    conf_group: ClassVar[str | None] = None

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

    # Device lifecycle. The agent calls these; none runs while
    # a handle of the device is bound (the conductor refuses layouts then,
    # and cleans only the handle that was just released).

    @property
    def cleans_after_use(self) -> bool:
        """Whether every handle of this driver is cleaned after use:
        ``[<conf_group>] clean_after_use``. A device profile may ask for
        a clean on its own."""
        if self.conf_group is None:
            return False
        return bool(self.conf[self.conf_group].clean_after_use)

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        """What the partitioning of ``device`` may be; ``{}`` when it has
        none. Keys are those of a layout, values what each may be:

        * ``{"vf_count": {"min": 0, "max": <sriov_totalvfs>}}`` for an
          SR-IOV physical function;
        * ``{"mdev_type": {"<type>": <instances>, ...},
          "mdev_count": {"min": 0, "max": <most instances of a type>}}``
          for a device offering mediated devices (on its function or its
          VFs): ``mdev_count`` of ``mdev_type`` restricts it to that many
          MDEV attach handles of the type, and ``mdev_count`` 0 gives it
          back whole (its PCI attach handle), which a driver refuses
          while mdevs exist on it;
        * ``{"region_image": {"deployables": [<names>]}}`` for an FPGA
          whose regions are loaded with a Glance image.

        Reads the host; never changes it.
        """
        return {}

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """Make ``device`` partitioned as ``layout`` says (keys as in
        ``layout_options``; a key left out keeps what the device has).

        Idempotent: applying the layout the device already has changes
        nothing, so the agent re-applies every stored layout after a
        reboot. Raises ``Invalid`` naming the allowed values for a value
        outside ``layout_options``, before anything is changed, and
        ``DeviceActionError`` when the host refuses; the next
        ``discover`` reports the device as it now is.

        For ``region_image`` (a Glance image id) the agent downloads the
        image first and adds ``image_path`` (the local file) and
        ``bitstream`` (its metadata, as ``program`` takes it) to the
        layout it passes. Drivers keep what is not on the host itself
        (e.g. how many vGPUs to offer) in memory only: the agent
        re-applies every stored layout when it starts.
        """
        raise exception.NotSupported(
            what=f'Layouts of devices of driver {self.driver_name}')

    def prepare(self, device: DriverDevice) -> None:
        """Ready ``device`` as it becomes enabled (at discovery with
        ``[agent] new_device_state = enabled``, or when an operator
        enables it), e.g. bind its functions to vfio-pci.

        The default does nothing: most devices need nothing beyond their
        host driver, so a driver without a preparation step is ready at
        once. Idempotent; raises ``DeviceActionError`` on failure.
        """
        return None

    def clean(self, handle: DriverAttachHandle) -> None:
        """Wipe what a tenant left on ``handle`` (reset a function, format
        a drive, re-flash an FPGA, recreate an mdev) so the next tenant
        finds it as new. Returns once the handle can be offered again;
        raises ``DeviceActionError`` when it cannot. For an ``MDEV``
        handle the agent adds ``mdev_uuid`` (the handle's uuid, which is
        the mdev's) to the attach info."""
        raise exception.NotSupported(
            what=f'Cleaning devices of driver {self.driver_name}')
