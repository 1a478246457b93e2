"""A fake kernel over a SysfsTree, and accelerator requests, for os-acc
tests.

:class:`FakeKernel` is the sysfs that os-acc's drivers write to: it
answers writes to ``drivers_probe``, ``unbind``, an mdev type's ``create``
and an mdev's ``remove`` by changing the tree as the kernel would, records
every write, and can refuse chosen ones.
"""
import errno
import os
import uuid as uuid_lib
from typing import Any

from cyborg.os_acc import exception
from cyborg.os_acc import sysfs
from cyborg.tests.harness.sysfs import SysfsTree

INSTANCE = '8c6b1f1e-58a4-4c57-9a0f-5b8d1b8f0a11'


class FakeKernel(sysfs.Sysfs):
    """sysfs over ``tree``; ``writes`` holds (kernel path, value) of every
    write, oldest first; ``refuse[kernel path] = errno`` makes the next
    write there fail."""

    def __init__(self, tree: SysfsTree) -> None:
        super().__init__(tree.root)
        self.tree = tree
        self.writes: list[tuple[str, str]] = []
        self.refuse: dict[str, int] = {}

    def kernel_path(self, path: str) -> str:
        """``path`` in the tree as the kernel names it, its directory
        resolved: ``/sys/bus/pci/drivers/ixgbevf/unbind``."""
        target = self.path(path)
        directory = os.path.realpath(os.path.dirname(target))
        return '/' + os.path.relpath(
            os.path.join(directory, os.path.basename(target)), self.root)

    def write(self, path: str, value: str) -> None:
        where = self.kernel_path(path)
        self.writes.append((where, value))
        try:
            if where in self.refuse:
                code = self.refuse.pop(where)
                raise OSError(code, os.strerror(code))
            self._apply(where, path, value)
        except OSError as exc:
            # What Sysfs.write makes of the kernel's refusal.
            raise exception.DeviceError(
                reason=f'writing {value!r} to {where} failed: '
                       f'{exc.strerror}') from exc

    def _apply(self, where: str, path: str, value: str) -> None:
        name = os.path.basename(where)
        if where == '/sys/bus/pci/drivers_probe':
            self._probe(value.strip())
        elif name == 'unbind':
            self.tree.bind(value.strip(), None)
        elif name == 'create' and '/mdev_supported_types/' in where:
            self._create_mdev(os.path.dirname(where), value.strip())
        elif name == 'remove' and self.tree.path(
                f'{os.path.dirname(where)}/mdev_type').is_symlink():
            self._remove_mdev(os.path.dirname(where))
        else:
            super().write(path, value)

    def _probe(self, address: str) -> None:
        override = self.tree.device_dir(address) / 'driver_override'
        wanted = override.read_text().strip() if override.exists() else ''
        if wanted and self.tree.path(f'sys/bus/pci/drivers/{wanted}').is_dir():
            self.tree.bind(address, wanted)

    def _create_mdev(self, type_dir: str, mdev_uuid: str) -> None:
        type_rel = type_dir.lstrip('/')
        dev_rel = os.path.dirname(os.path.dirname(type_rel))
        available = self.tree.path(f'{type_rel}/available_instances')
        count = int(available.read_text())
        if count < 1 or self.tree.path(f'{dev_rel}/{mdev_uuid}').exists():
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        self.tree.path(f'{dev_rel}/{mdev_uuid}').mkdir()
        self.tree.link(f'{dev_rel}/{mdev_uuid}/mdev_type', type_rel)
        self.tree.path(f'{dev_rel}/{mdev_uuid}/remove').touch()
        self.tree.link(f'{type_rel}/devices/{mdev_uuid}',
                       f'{dev_rel}/{mdev_uuid}')
        self.tree.link(f'sys/bus/mdev/devices/{mdev_uuid}',
                       f'{dev_rel}/{mdev_uuid}')
        available.write_text(f'{count - 1}\n')

    def _remove_mdev(self, mdev_dir: str) -> None:
        mdev_rel = mdev_dir.lstrip('/')
        mdev_uuid = os.path.basename(mdev_rel)
        type_path = os.path.realpath(self.tree.path(f'{mdev_rel}/mdev_type'))
        type_rel = os.path.relpath(type_path, self.root)
        self.tree.remove(f'{type_rel}/devices/{mdev_uuid}')
        self.tree.remove(f'sys/bus/mdev/devices/{mdev_uuid}')
        self.tree.remove(mdev_rel)
        available = self.tree.path(f'{type_rel}/available_instances')
        available.write_text(f'{int(available.read_text()) + 1}\n')

    def load_driver(self, name: str) -> None:
        """Make kernel driver ``name`` (``vfio-pci``) available."""
        self.tree.path(f'sys/bus/pci/drivers/{name}').mkdir(
            parents=True, exist_ok=True)


def arq(handle_type: str = 'PCI', info: dict[str, Any] | None = None,
        address: str = '0000:0c:00.1', uuid: str | None = None,
        **fields: Any) -> dict[str, Any]:
    """A Bound request of INSTANCE as the API returns it, for PCI function
    ``address`` unless ``info`` is given."""
    if info is None:
        domain, bus, rest = address.split(':')
        device, function = rest.split('.')
        info = {'domain': domain, 'bus': bus, 'device': device,
                'function': function}
    return dict({'uuid': uuid or str(uuid_lib.uuid4()), 'state': 'Bound',
                 'device_profile_name': 'dp1', 'device_profile_group_id': 0,
                 'hostname': 'node1', 'instance_uuid': INSTANCE,
                 'attach_handle_type': handle_type,
                 'attach_handle_uuid': str(uuid_lib.uuid4()),
                 'attach_handle_info': info}, **fields)
