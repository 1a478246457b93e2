"""The host's sysfs as device-half drivers read and change it.

Reading goes through :class:`cyborg.accelerator.pci.PciBus`, the layer the
agent's drivers use; changing is writing a value to a kernel attribute
(``driver_override``, ``drivers_probe``, an mdev type's ``create``), as
the kernel documents, with no tool run. Under a root other than ``/`` the
files are those of a fake tree, so tests see every write.
"""
import logging
import os

from cyborg.accelerator import pci
from cyborg.os_acc import exception

LOG = logging.getLogger(__name__)


class Sysfs(pci.PciBus):
    """sysfs under ``root``; functions are looked up by address only, so
    no udev enumeration is needed."""

    def __init__(self, root: str = '/') -> None:
        super().__init__(root, udev=False)

    def write(self, path: str, value: str) -> None:
        """Write ``value`` to the kernel attribute at ``path`` (a kernel
        path or one inside the tree); DeviceError when the kernel refuses
        it."""
        target = self.path(path)
        LOG.debug('Writing %r to %s', value, target)
        try:
            with open(target, 'w', encoding='utf-8') as f:
                f.write(value)
        except OSError as exc:
            raise exception.DeviceError(
                reason=f'writing {value!r} to {target} failed: '
                       f'{exc.strerror or exc}') from exc

    def exists(self, path: str) -> bool:
        """Whether anything, even a dangling link, is at ``path``."""
        return os.path.lexists(self.path(path))

    def link_name(self, path: str) -> str | None:
        """The last part of the target of the symlink at ``path``."""
        try:
            return os.path.basename(os.readlink(self.path(path)))
        except OSError:
            return None

    def listdir(self, path: str) -> list[str]:
        """The sorted entries of the directory at ``path``, or none."""
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []
