"""Device-lifecycle writes to PCI sysfs, shared by the PCI drivers:
SR-IOV VF counts, vfio-pci binding, function-level resets.

Each write is read back. A real kernel answers a refused write with an
errno (EBUSY, EINVAL) and does the work before write() returns, so the
read-back passes at once; the emulated kernel of the tests
(cyborg.tests.harness.sysfs_kernel) cannot fail a write() and works
asynchronously, so the read-back is what tells a refusal from success
there, and it also catches a kernel that accepted a write and did not
follow it (a PF driver that creates fewer VFs than asked).
"""
import functools
import logging
import os
import time
from collections.abc import Callable

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import privileged
from cyborg.common import exception

LOG = logging.getLogger(__name__)

VFIO_DRIVER = 'vfio-pci'
# How long a read-back waits for sysfs to show a write. The kernel is
# done when write() returns; the emulated kernel polls every 20 ms, and a
# busy two-core test host has been seen to take ~1 s for a process to be
# scheduled, so 10 s leaves a margin without hiding a real refusal long.
READBACK_SECONDS = 10.0
_READBACK_STEP = 0.01


def write(conf: cfg.ConfigOpts, path: str, text: str, action: str,
          device: str) -> None:
    """Write ``text`` to the sysfs file ``path``: directly when the agent
    runs as root or has no ``[agent] root_helper``, else with ``tee``
    through the helper. DeviceActionError when the write is refused; its
    ``__cause__`` is the OSError of a direct write."""
    root_helper = conf.agent.root_helper
    if root_helper and os.geteuid() != 0:
        if not os.path.exists(path):
            raise exception.DeviceActionError(
                action=action, device=device,
                reason=f'cannot write {text!r} to {path}: no such file')
        privileged.execute(['tee', path], action=action, device=device,
                           root_helper=root_helper, process_input=text)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise exception.DeviceActionError(
            action=action, device=device,
            reason=f'cannot write {text!r} to {path}: '
                   f'{exc.strerror or exc}') from exc


def wait_for(done: Callable[[], bool], timeout: float | None = None
             ) -> bool:
    """Whether ``done()`` became true within ``timeout`` seconds
    (READBACK_SECONDS by default)."""
    deadline = time.monotonic() + (
        READBACK_SECONDS if timeout is None else timeout)
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_READBACK_STEP)
    return True


def _function(bus: pci.PciBus, address: str, action: str
              ) -> pci.PciFunction:
    function = bus.get(address)
    if function is None:
        raise exception.DeviceActionError(
            action=action, device=address, reason='the function is gone')
    return function


def vf_count_options(function: pci.PciFunction) -> dict[str, object]:
    """The ``vf_count`` layout option of an SR-IOV PF; {} otherwise."""
    if function.sriov_totalvfs is None or function.is_vf:
        return {}
    return {'vf_count': {'min': 0, 'max': function.sriov_totalvfs}}


def set_vf_count(conf: cfg.ConfigOpts, bus: pci.PciBus, address: str,
                 count: int) -> None:
    """Make PF ``address`` have ``count`` VFs (idempotent).

    Between two non-zero counts 0 is written first: the kernel answers
    EBUSY to any other change of a non-zero count. Invalid, naming the
    range, for a count above ``sriov_totalvfs``.
    """
    action = 'set the VF count'
    pf = _function(bus, address, action)
    total = pf.sriov_totalvfs
    if total is None:
        raise exception.Invalid(
            reason=f'{address} is not an SR-IOV physical function')
    if isinstance(count, bool) or not 0 <= count <= total:
        raise exception.Invalid(
            reason=f'vf_count {count!r} of {address} is not an integer '
                   f'from 0 to {total} (its sriov_totalvfs)')
    numvfs = os.path.join(pf.sysfs_path, 'sriov_numvfs')
    if pf.sriov_numvfs == count and len(pf.virtfns) == count:
        return
    steps = ([0] if count and pf.sriov_numvfs else []) + [count]
    for step in steps:
        write(conf, numvfs, str(step), action, address)
        if not wait_for(functools.partial(_has_vfs, bus, address, step)):
            now = bus.get(address)
            raise exception.DeviceActionError(
                action=action, device=address,
                reason=f'asked for {step} VFs, sriov_numvfs reads '
                       f'{now.sriov_numvfs if now else "nothing"} with '
                       f'{len(now.virtfns) if now else 0} virtfn links')
    LOG.info('PCI function %s now has %d VFs.', address, count)


def _has_vfs(bus: pci.PciBus, address: str, count: int) -> bool:
    pf = bus.get(address)
    return (pf is not None and pf.sriov_numvfs == count
            and len(pf.virtfns) == count)


def bind_vfio(conf: cfg.ConfigOpts, bus: pci.PciBus, address: str) -> None:
    """Bind function ``address`` to vfio-pci, as
    Documentation/ABI/testing/sysfs-bus-pci describes: set its
    ``driver_override``, unbind it from its driver, and ask
    ``drivers_probe`` to bind it again, which then binds only the
    override. Idempotent."""
    action = 'bind to vfio-pci'
    function = _function(bus, address, action)
    if function.driver == VFIO_DRIVER:
        return
    write(conf, os.path.join(function.sysfs_path, 'driver_override'),
          VFIO_DRIVER, action, address)
    if function.driver is not None:
        write(conf, bus.path(f'/sys/bus/pci/drivers/{function.driver}/'
                             'unbind'), address, action, address)
        if not wait_for(lambda: _driver(bus, address) is None):
            raise exception.DeviceActionError(
                action=action, device=address,
                reason=f'{function.driver} did not let it go')
    write(conf, bus.path('/sys/bus/pci/drivers_probe'), address, action,
          address)
    if not wait_for(lambda: _driver(bus, address) == VFIO_DRIVER):
        raise exception.DeviceActionError(
            action=action, device=address,
            reason=f'it is bound to {_driver(bus, address) or "no driver"} '
                   'after drivers_probe (is the vfio-pci module loaded?)')
    LOG.info('PCI function %s is bound to vfio-pci.', address)


def _driver(bus: pci.PciBus, address: str) -> str | None:
    function = bus.get(address)
    return function.driver if function is not None else None


def reset_function(conf: cfg.ConfigOpts, bus: pci.PciBus,
                   address: str) -> None:
    """Function-level reset of ``address`` through its sysfs ``reset``:
    the kernel picks FLR, or the next reset method the function has, and
    returns once it is done. DeviceActionError when the function has no
    reset method (no ``reset`` file)."""
    action = 'reset'
    function = _function(bus, address, action)
    path = os.path.join(function.sysfs_path, 'reset')
    if not os.path.exists(path):
        raise exception.DeviceActionError(
            action=action, device=address,
            reason='the function has no reset method (no sysfs reset file)')
    write(conf, path, '1', action, address)
    LOG.info('Reset PCI function %s.', address)
