"""Report pieces built from PCI functions, shared by the vendor drivers."""
import logging
import threading
from collections.abc import Iterable
from typing import Any

from cyborg.accelerator import pci
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDeployable
from cyborg.common.device_report import DriverDevice

#: How to hand out a PF that cannot be passed through for its VFs.
REMEDY = 'set its sriov_numvfs to 0 to hand it out'


class WarnOnce:
    """Logs each distinct problem as a WARNING the first time and at
    DEBUG level afterwards, so that a periodic discovery pass does not
    repeat the same warning every minute."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, message: str, *args: object) -> None:
        text = message % args
        with self._lock:
            first = text not in self._seen
            self._seen.add(text)
        self.log.log(logging.WARNING if first else logging.DEBUG, '%s', text)


def passable(function: pci.PciFunction, warn: WarnOnce,
             remedy: str = REMEDY) -> bool:
    """Whether ``function`` can be passed through whole; a PF with SR-IOV
    VFs enabled cannot (its host driver serves them), which ``warn``
    says, with ``remedy``."""
    if not function.vfs_enabled:
        return True
    warn('PCI function %s is not reported: SR-IOV virtual functions are '
         'enabled on it, so it cannot be passed through whole; %s.',
         function.address, remedy)
    return False


def attributes(rc: str, traits: Iterable[str]) -> dict[str, str]:
    """Deployable attributes: the resource class as ``rc`` and the traits,
    without repeats, as ``trait0``, ``trait1``, ..."""
    result = {'rc': rc}
    result.update((f'trait{n}', trait)
                  for n, trait in enumerate(dict.fromkeys(traits)))
    return result


def board_info(function: pci.PciFunction, **extra: Any) -> dict[str, Any]:
    """A device's ``std_board_info``: what sysfs says about its (physical)
    function, plus ``extra``."""
    board: dict[str, Any] = {'product_id': function.device_id,
                             'class_code': function.class_code}
    if function.subsystem_vendor_id is not None:
        board['subsystem_vendor_id'] = function.subsystem_vendor_id
    if function.subsystem_device_id is not None:
        board['subsystem_device_id'] = function.subsystem_device_id
    if function.physfn is not None:
        board['physical_function'] = function.physfn
    if function.numa_node is not None:
        board['numa_node'] = function.numa_node
    if function.driver is not None:
        board['kernel_driver'] = function.driver
    board.update(extra)
    return board


def pci_handle(function: pci.PciFunction, **extra: str) -> DriverAttachHandle:
    """A PCI attach handle passing ``function`` through; ``extra`` goes
    into its attach info (``physical_network``)."""
    return DriverAttachHandle(attach_type='PCI',
                              attach_info=dict(function.attach_info(),
                                               **extra))


def device(device_type: str, function: pci.PciFunction,
           deployables: list[DriverDeployable], **board: Any
           ) -> DriverDevice:
    """A device whose control path is ``function`` (its PF)."""
    return DriverDevice(
        type=device_type, vendor=function.vendor_id,
        model=function.device_id, controlpath_id=function.attach_info(),
        std_board_info=board_info(function, **board),
        deployables=deployables)
