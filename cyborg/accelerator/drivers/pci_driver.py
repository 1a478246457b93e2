"""The base of the drivers whose devices are PCI functions of the host."""
import logging
from collections.abc import Collection
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import ClassVar

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDeployable
from cyborg.common.device_report import DriverDevice

#: Every PCI function of the host, by address.
Functions = Mapping[str, pci.PciFunction]


class PciDriver(AcceleratorDriver):
    """A driver reporting PCI functions of ``[agent] sysfs_root``.

    A subclass declares the functions it reports (``vendor_id``,
    ``device_ids``, ``class_prefixes``, ``physical_only``, or its own
    ``matches``) and turns each into a device in ``device``; one whose
    devices span several functions, or that reads more of sysfs once per
    pass, overrides ``devices`` instead. ``discover`` runs the filter and
    the loop over one read of the bus.
    """

    #: The vendor id of every function reported; None: any vendor.
    vendor_id: ClassVar[str | None] = None
    #: Device ids reported; None: any.
    device_ids: ClassVar[Collection[str] | None] = None
    #: Class-code prefixes one of which the class code starts with; empty:
    #: any class.
    class_prefixes: ClassVar[Sequence[str]] = ()
    #: Whether SR-IOV virtual functions are left out (they are reached
    #: through their PF).
    physical_only: ClassVar[bool] = False
    #: What one device is called in the log of a discovery pass.
    noun: ClassVar[str] = 'device'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.bus = pci.PciBus(conf.agent.sysfs_root)
        # The subclass's module logger, so that its messages name it.
        self.log = logging.getLogger(type(self).__module__)
        self.warn = pci_report.WarnOnce(self.log)

    def of_family(self, function: pci.PciFunction) -> bool:
        """Whether ``function``'s vendor, device and class ids are those
        this driver reports, be it a PF or a VF."""
        return ((self.vendor_id is None
                 or function.vendor_id == self.vendor_id)
                and (self.device_ids is None
                     or function.device_id in self.device_ids)
                and (not self.class_prefixes
                     or any(function.matches_class(prefix)
                            for prefix in self.class_prefixes)))

    def matches(self, function: pci.PciFunction) -> bool:
        """Whether ``function`` is one this driver reports."""
        return (self.of_family(function)
                and not (self.physical_only and function.is_vf))

    def discover(self) -> list[DriverDevice]:
        functions = {f.address: f for f in self.bus.functions()}
        found = self.devices(
            [f for f in functions.values() if self.matches(f)], functions)
        devices = [device for device in found if device is not None]
        self.log.debug('%s found %d %s(s).', self.driver_name, len(devices),
                       self.noun)
        return devices

    def devices(self, matching: list[pci.PciFunction], functions: Functions
                ) -> list[DriverDevice | None]:
        """The devices of the ``matching`` functions, in address order;
        None for one that cannot be reported now (said in a warning)."""
        return [self.device(function, functions) for function in matching]

    def device(self, function: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        """The device of one matching ``function``; ``functions`` holds
        its VFs, among every other function."""
        raise NotImplementedError(
            f'{type(self).__name__} implements neither device nor devices')

    # Report pieces, named after this driver and its host.

    def deployable(self, function: pci.PciFunction, resource_class: str,
                   traits: Sequence[str],
                   handles: list[DriverAttachHandle] | None = None
                   ) -> DriverDeployable:
        """A deployable named after ``function``, with one accelerator per
        attach handle; by default the function itself is the only one."""
        if handles is None:
            handles = [pci_report.pci_handle(function)]
        return DriverDeployable(
            name=function.deployable_name(self.hostname),
            num_accelerators=len(handles), driver_name=self.driver_name,
            attributes=pci_report.attributes(resource_class, traits),
            attach_handles=handles)

    def whole_device(self, device_type: str, function: pci.PciFunction,
                     resource_class: str, traits: Sequence[str],
                     remedy: str = pci_report.REMEDY, **board: Any
                     ) -> DriverDevice | None:
        """``function`` as a device of one deployable that passes it
        through whole; None, with a warning naming ``remedy``, while
        SR-IOV virtual functions are enabled on it."""
        if not pci_report.passable(function, self.warn, remedy):
            return None
        return pci_report.device(
            device_type, function,
            [self.deployable(function, resource_class, traits)], **board)

    def lent_functions(self, pf: pci.PciFunction, functions: Functions,
                       what: str) -> list[pci.PciFunction]:
        """What ``pf`` lends out: its VFs that can be read, or itself when
        it has none enabled. Empty, with a warning, when its VFs are
        enabled but none can be read: its host driver then owns it, so it
        cannot be lent in their place. ``what`` names it in warnings."""
        vfs = []
        for address in pf.virtfns:
            vf = functions.get(address)
            if vf is None:
                # The PCI layer has said why it could not read the VF.
                self.warn('%s: skipping VF %s, whose sysfs entry cannot be '
                          'read.', what, address)
            else:
                vfs.append(vf)
        if vfs or not pf.vfs_enabled:
            return vfs or [pf]
        self.warn('Skipping %s: its VFs are enabled but none can be read.',
                  what)
        return []
