"""An emulated kernel for the fake sysfs trees of cyborg.tests.harness.sysfs.

The drivers change devices by writing sysfs files; on a fake tree those
writes land in plain files and nothing follows. :class:`Kernel` watches a
:class:`~cyborg.tests.harness.sysfs.SysfsTree` and does what the kernel
does for the writes of the device lifecycle:

* ``sriov_numvfs`` of a PF: creates the VFs (device directories with ids,
  ``physfn``, IOMMU group, the VF driver the PF's driver autoprobes) and
  the PF's ``virtfn<N>`` links, at the addresses ``sriov_offset`` and
  ``sriov_stride`` give; 0 removes them;
* ``mdev_supported_types/<type>/create``: creates the mdev (the parent's
  ``<uuid>`` directory, ``sys/bus/mdev/devices/<uuid>``, the type's
  ``devices/<uuid>``) and lowers ``available_instances``; the mdev's
  ``remove`` undoes it;
* ``nvidia/current_vgpu_type`` of the VFs of an SR-IOV vGPU GPU: gives
  the VF its vGPU type and narrows what its GPU's other VFs can take
  (``cyborg.tests.harness.nvidia_vgpu_host``);
* ``reset``: records a function-level reset;
* ``driver_override``, ``drivers/<driver>/unbind`` and ``bind``,
  ``drivers_probe``: move the function's ``driver`` link.

It refuses what the kernel refuses (more VFs than ``sriov_totalvfs``, a
change between two non-zero counts, any count on a PF whose driver cannot
configure SR-IOV through sysfs, an mdev beyond
``available_instances``), by changing nothing and recording the error. A
real kernel returns the errno to ``write()``; the emulator cannot, since
it sees a write only after it returned, so it restores the file and
records the error, and the drivers read back what a write did (which
catches a kernel that accepted a write and did less, too).

Everything the emulator did is a JSON line in ``<root>/kernel.log``
(:func:`read_log`), written before the change shows in the tree, so that
a test that saw the change finds its entry. It polls every ``interval``
seconds (20 ms), in a thread (``start``/``stop`` or
``with Kernel(root):``) or, for tests whose agents are other processes,
as a process of its own::

    python -m cyborg.tests.harness.sysfs_kernel <root> [--vf-driver ice=iavf]

which exits on SIGTERM (:func:`spawn` starts one and waits until it
polls).
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from cyborg.tests.harness import devlink
from cyborg.tests.harness import nvidia_vgpu_host
from cyborg.tests.harness.sysfs import DEFAULT_VF_OFFSET
from cyborg.tests.harness.sysfs import DEFAULT_VF_STRIDE
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.harness.sysfs import vf_addresses

LOG_NAME = 'kernel.log'
READY_NAME = 'kernel.ready'
# The VF driver the kernel autoprobes for VFs of a PF bound to each
# driver; qat_<family> PFs get qat_<family>vf.
VF_DRIVERS = {'ice': 'iavf', 'i40e': 'iavf', 'nvidia': 'nvidia',
              'mlx5_core': 'mlx5_core',
              # xe binds the VFs of its PFs and runs them in VF mode
              # (drivers/gpu/drm/xe/xe_sriov.c).
              'xe': 'xe'}
# PF drivers whose struct pci_driver has no sriov_configure: the kernel
# answers a write to their sriov_numvfs with ENOENT (sriov_numvfs_store,
# drivers/pci/iov.c). AMD's GIM (gim_shim/gim_drv.c of
# github.com/amd/MxGPU-Virtualization) enables VFs itself at load
# (vf_num), and amdgpu (amdgpu_drv.c) does not lend VFs at all.
NO_SRIOV_CONFIGURE = frozenset({'gim', 'amdgpu'})


def read_log(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """What the emulator of the tree at ``root`` did, oldest first: each
    entry has ``event`` and ``device``, and ``error`` when it refused."""
    try:
        text = (pathlib.Path(root) / LOG_NAME).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]


def _vf_driver(pf_driver: str | None, vf_drivers: dict[str, str]
               ) -> str | None:
    if pf_driver is None:
        return None
    if pf_driver in vf_drivers:
        return vf_drivers[pf_driver]
    return pf_driver + 'vf' if pf_driver.startswith('qat_') else None


class Kernel:
    """Follows the lifecycle writes to the sysfs tree at ``root``."""

    def __init__(self, root: str | os.PathLike[str], interval: float = 0.02,
                 vf_drivers: dict[str, str] | None = None) -> None:
        self.tree = SysfsTree(root)
        self.interval = interval
        self.vf_drivers = dict(VF_DRIVERS, **(vf_drivers or {}))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The driver each function had before it was unbound, which
        # drivers_probe binds again when there is no override.
        self._last_driver: dict[str, str] = {}

    # Running

    def start(self) -> 'Kernel':
        """Prepare the tree and poll it in a thread."""
        self.prime()
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name='sysfs-kernel')
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> 'Kernel':
        return self.start()

    def __exit__(self, kind: type[BaseException] | None,
                 value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def run(self) -> None:
        """Poll until ``stop``; an unexpected error is logged, not fatal,
        so that a test sees it in the log rather than a hung write."""
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:
                self._log('crash', '', error=repr(exc))
            self._stop.wait(self.interval)

    def prime(self) -> None:
        """Add the files the kernel has and the fixture does not write:
        every function's ``driver_override`` and ``reset``, each
        driver's ``bind`` and ``unbind``, and ``drivers_probe``. Drivers
        that appear later (a module loaded) get theirs at the next poll."""
        self.tree.path('sys/bus/pci/drivers').mkdir(parents=True,
                                                    exist_ok=True)
        self._touch(self.tree.path('sys/bus/pci/drivers_probe'))
        for address in self._addresses():
            self._prime_function(address)
        self._prime_drivers()

    def _prime_drivers(self) -> None:
        for driver_dir in self._driver_dirs():
            self._touch(driver_dir / 'unbind')
            self._touch(driver_dir / 'bind')

    def _driver_dirs(self) -> list[pathlib.Path]:
        return [d for d in self.tree.path('sys/bus/pci/drivers').iterdir()
                if d.is_dir()]

    def _prime_function(self, address: str) -> None:
        dev = self.tree.device_dir(address)
        if not (dev / 'driver_override').exists():
            (dev / 'driver_override').write_text('(null)\n')
        self._touch(dev / 'reset')

    @staticmethod
    def _touch(path: pathlib.Path) -> None:
        if not path.exists():
            path.touch()

    def step(self) -> None:
        """Act on every pending write once."""
        for address in self._addresses():
            dev = self.tree.device_dir(address)
            if (dev / 'sriov_numvfs').exists():
                self._numvfs(address, dev)
            self._reset(address, dev)
            for create in dev.glob('mdev_supported_types/*/create'):
                self._create_mdev(address, create)
        for remove in self.tree.path('sys/bus/mdev/devices').glob(
                '*/remove'):
            self._remove_mdev(remove)
        for gpu in nvidia_vgpu_host.gpus(self.tree):
            nvidia_vgpu_host.follow(self.tree, gpu, self._log)
        self._prime_drivers()
        for driver_dir in self._driver_dirs():
            self._unbind(driver_dir)
            self._bind(driver_dir / 'bind', driver_dir.name)
        self._probe()

    # Helpers

    def _addresses(self) -> list[str]:
        devices = self.tree.path('sys/bus/pci/devices')
        return sorted(p.name for p in devices.iterdir()
                      if p.is_symlink() and p.exists())

    def _log(self, event: str, device: str, **details: Any) -> None:
        entry = {'event': event, 'device': device, **details}
        with open(self.tree.path(LOG_NAME), 'a', encoding='utf-8') as log:
            log.write(json.dumps(entry, sort_keys=True) + '\n')

    @staticmethod
    def _take(path: pathlib.Path) -> str:
        """What was written to trigger file ``path``, which is emptied
        again (the kernel keeps no such content)."""
        try:
            text = path.read_text().strip()
        except (FileNotFoundError, UnicodeDecodeError):
            return ''
        if text:
            path.write_text('')
        return text

    # SR-IOV

    def _numvfs(self, address: str, dev: pathlib.Path) -> None:
        text = (dev / 'sriov_numvfs').read_text().strip()
        links = sorted(dev.glob('virtfn*'),
                       key=lambda p: int(p.name[len('virtfn'):]))
        if not text or text == str(len(links)):
            # Empty: a write under way (the writer truncated first).
            return

        def refuse(error: str) -> None:
            self._log('sriov_numvfs', address, asked=text, error=error)
            (dev / 'sriov_numvfs').write_text(f'{len(links)}\n')

        try:
            count = int(text)
        except ValueError:
            refuse('EINVAL: not a number')
            return
        total = int((dev / 'sriov_totalvfs').read_text())
        pf_driver = (os.path.basename(os.readlink(dev / 'driver'))
                     if (dev / 'driver').is_symlink() else None)
        if not 0 <= count <= total:
            refuse(f'ERANGE: {count} is above sriov_totalvfs {total}')
        elif pf_driver in NO_SRIOV_CONFIGURE:
            refuse(f'ENOENT: {pf_driver} does not support SR-IOV '
                   'configuration via sysfs')
        elif count and links:
            refuse(f'EBUSY: {len(links)} VFs already enabled. Disable '
                   f'before enabling {count} VFs')
        elif count == 0:
            self._log('sriov_numvfs', address, count=0)
            # The file first: a driver that reads 0 VFs back writes its
            # next count at once, which a later rewrite of 0 would undo.
            (dev / 'sriov_numvfs').write_text('0\n')
            for link in links:
                vf = os.path.basename(os.readlink(link))
                self.tree.remove_function(vf)
                link.unlink()
            nvidia_vgpu_host.vfs_removed(self.tree, address)
            self._representors(address)
        else:
            self._enable_vfs(address, dev, count)

    def _enable_vfs(self, address: str, dev: pathlib.Path,
                    count: int) -> None:
        offset = _int_file(dev / 'sriov_offset', DEFAULT_VF_OFFSET)
        stride = _int_file(dev / 'sriov_stride', DEFAULT_VF_STRIDE)
        vfs = vf_addresses(address, count, offset, stride)
        vf_device = ((dev / 'sriov_vf_device').read_text().strip()
                     if (dev / 'sriov_vf_device').exists()
                     else (dev / 'device').read_text().strip())
        pf_driver = (os.path.basename(os.readlink(dev / 'driver'))
                     if (dev / 'driver').is_symlink() else None)
        numa = _int_file(dev / 'numa_node', -1)
        self._log('sriov_numvfs', address, count=count, vfs=vfs)
        # Not SysfsTree.add_vfs: each VF is complete (its driver_override
        # and reset, its driver's bind files) before the PF's virtfn link
        # and sriov_numvfs show it, which is what a driver reads back.
        (dev / 'sriov_numvfs').write_text('0\n')
        pf_rel = str(dev.relative_to(self.tree.base))
        for vf in vfs:
            vf_dir = self.tree.add_function(
                vf, (dev / 'vendor').read_text().strip(),
                vf_device if vf_device.startswith('0x') else f'0x{vf_device}',
                (dev / 'class').read_text().strip(),
                driver=_vf_driver(pf_driver, self.vf_drivers),
                numa_node=None if numa < 0 else numa)
            self._prime_function(vf)
            vf_rel = str(vf_dir.relative_to(self.tree.base))
            self.tree.link(f'{vf_rel}/physfn', pf_rel)
        self._prime_drivers()
        nvidia_vgpu_host.vfs_added(self.tree, address, vfs)
        for n, vf in enumerate(vfs):
            vf_rel = str(self.tree.device_dir(vf).relative_to(self.tree.base))
            self.tree.link(f'{pf_rel}/virtfn{n}', vf_rel)
        self._representors(address)
        (dev / 'sriov_numvfs').write_text(f'{count}\n')

    def _representors(self, address: str) -> None:
        """A port of an eswitch in switchdev mode (the emulated devlink's
        state) has a representor netdev per VF: mlx5_core loads them as
        it enables the VFs and unloads them as it disables them."""
        if devlink.eswitch_mode(self.tree.root, address) is not None:
            devlink.set_representors(self.tree, address)

    # Mediated devices

    def _create_mdev(self, address: str, create: pathlib.Path) -> None:
        text = self._take(create)
        if not text:
            return
        type_dir = create.parent
        rel = str(self.tree.device_dir(address).relative_to(self.tree.base))
        type_rel = str(type_dir.relative_to(self.tree.base))
        available = _int_file(type_dir / 'available_instances', 0)
        try:
            mdev_uuid = str(uuid.UUID(text))
        except ValueError:
            self._log('mdev_create', address, asked=text,
                      error='EINVAL: not a UUID')
            return
        if self.tree.path(f'sys/bus/mdev/devices/{mdev_uuid}').exists():
            self._log('mdev_create', address, uuid=mdev_uuid,
                      error='EEXIST: the mdev exists')
            return
        if available <= 0:
            self._log('mdev_create', address, uuid=mdev_uuid,
                      error=f'EDQUOT: no available instances of '
                            f'{type_dir.name}')
            return
        self._log('mdev_create', address, uuid=mdev_uuid,
                  type=type_dir.name)
        self.tree.path(f'{rel}/{mdev_uuid}').mkdir()
        self.tree.link(f'{rel}/{mdev_uuid}/mdev_type', type_rel)
        self.tree.path(f'{rel}/{mdev_uuid}/remove').touch()
        self.tree.link(f'{type_rel}/devices/{mdev_uuid}',
                       f'{rel}/{mdev_uuid}')
        (type_dir / 'available_instances').write_text(f'{available - 1}\n')
        # The bus link last: it is what drivers read back.
        self.tree.link(f'sys/bus/mdev/devices/{mdev_uuid}',
                       f'{rel}/{mdev_uuid}')

    def _remove_mdev(self, remove: pathlib.Path) -> None:
        if self._take(remove) != '1':
            return
        mdev_dir = remove.parent.resolve()
        mdev_uuid = mdev_dir.name
        type_dir = (mdev_dir / 'mdev_type').resolve()
        parent = mdev_dir.parent.name
        self._log('mdev_remove', parent, uuid=mdev_uuid,
                  type=type_dir.name)
        (type_dir / 'devices' / mdev_uuid).unlink(missing_ok=True)
        available = _int_file(type_dir / 'available_instances', 0)
        (type_dir / 'available_instances').write_text(f'{available + 1}\n')
        self.tree.remove(str(mdev_dir.relative_to(
            self.tree.base.resolve())))
        self.tree.remove(f'sys/bus/mdev/devices/{mdev_uuid}')

    # Resets and drivers

    def _reset(self, address: str, dev: pathlib.Path) -> None:
        if self._take(dev / 'reset') == '1':
            self._log('reset', address)

    def _unbind(self, driver_dir: pathlib.Path) -> None:
        address = self._take(driver_dir / 'unbind')
        if not address:
            return
        if not (driver_dir / address).is_symlink():
            self._log('unbind', address, driver=driver_dir.name,
                      error=f'ENODEV: not bound to {driver_dir.name}')
            return
        self._log('unbind', address, driver=driver_dir.name)
        self._last_driver[address] = driver_dir.name
        self.tree.bind(address, None)

    def _bind(self, trigger: pathlib.Path, driver: str) -> None:
        address = self._take(trigger)
        if address:
            self._attach(address, driver)

    def _attach(self, address: str, driver: str) -> None:
        dev = self.tree.device_dir(address)
        if not dev.is_dir():
            self._log('bind', address, driver=driver,
                      error='ENODEV: no such function')
        elif (dev / 'driver').is_symlink():
            self._log('bind', address, driver=driver,
                      error='EBUSY: bound to another driver')
        elif not self.tree.path(f'sys/bus/pci/drivers/{driver}').is_dir():
            self._log('bind', address, driver=driver,
                      error=f'ENODEV: driver {driver} is not loaded')
        else:
            self._log('bind', address, driver=driver)
            self.tree.bind(address, driver)

    def _probe(self) -> None:
        address = self._take(self.tree.path('sys/bus/pci/drivers_probe'))
        if not address:
            return
        dev = self.tree.device_dir(address)
        if (dev / 'driver').is_symlink():
            return
        override = ''
        if (dev / 'driver_override').exists():
            override = (dev / 'driver_override').read_text().strip()
        if override and override != '(null)':
            self._attach(address, override)
        elif address in self._last_driver:
            self._attach(address, self._last_driver[address])


def _int_file(path: pathlib.Path, default: int) -> int:
    try:
        return int(path.read_text().strip(), 0)
    except (FileNotFoundError, ValueError):
        return default


def spawn(root: str | os.PathLike[str], timeout: float = 30.0,
          vf_drivers: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the emulator as a process for the tree at ``root``; returns
    once it polls. Stop it with ``terminate()`` (SIGTERM)."""
    ready = pathlib.Path(root) / READY_NAME
    ready.unlink(missing_ok=True)
    argv = [sys.executable, '-m', 'cyborg.tests.harness.sysfs_kernel',
            str(root)]
    for pf_driver, vf_driver in (vf_drivers or {}).items():
        argv += ['--vf-driver', f'{pf_driver}={vf_driver}']
    process = subprocess.Popen(argv)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f'the sysfs kernel emulator for {root} did '
                               'not start')
        time.sleep(0.02)
    return process


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('root', help='the directory that contains sys')
    parser.add_argument('--interval', type=float, default=0.02)
    parser.add_argument('--vf-driver', action='append', default=[],
                        metavar='PF_DRIVER=VF_DRIVER')
    args = parser.parse_args(argv)
    kernel = Kernel(args.root, args.interval,
                    dict(item.split('=', 1) for item in args.vf_driver))
    signal.signal(signal.SIGTERM, lambda *_: kernel._stop.set())
    kernel.prime()
    (pathlib.Path(args.root) / READY_NAME).touch()
    kernel.run()
    return 0


if __name__ == '__main__':
    sys.exit(main())
