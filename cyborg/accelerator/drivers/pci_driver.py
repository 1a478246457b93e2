"""The base of the drivers whose devices are PCI functions of the host."""
import logging
from collections.abc import Collection
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import ClassVar

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator import pci_health
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDeployable
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import check_layout

#: Every PCI function of the host, by address.
Functions = Mapping[str, pci.PciFunction]

#: A device's functions with their readings (None: gone), control path
#: first.
DeviceReadings = list[tuple[str, pci_health.Readings | None]]

# How many functions of a device's attach handles, besides its control
# path, a health pass reads. Errors of SR-IOV VFs are mostly reported by
# their PF, and VFs share its link and sensors, so reading them adds
# little: an E810 port lends up to 256 VFs, and reading them all would
# make one port cost as much as a whole host of other devices (~8 files
# each). Eight catch a VF that has gone or logs errors of its own on the
# devices that have a few (a QAT endpoint has 16), and keep a health
# pass over a 256-function host at ~25 ms (tools/bench/health.py).
HANDLE_FUNCTIONS_READ = 8
_PCI_KEYS = ('domain', 'bus', 'device', 'function')


def handle_address(info: Mapping[str, str]) -> str | None:
    """The PCI address an attach handle's or control path's info names,
    or None when it names none."""
    try:
        address = '{domain}:{bus}:{device}.{function}'.format(
            **{k: info[k] for k in _PCI_KEYS}).lower()
    except (KeyError, TypeError):
        return None
    return address if pci.ADDRESS_RE.match(address) else None


def merge_usage(base: Usage | None, extra: Usage | None) -> Usage | None:
    """``base`` with what ``extra`` (a family's own reading, more exact
    than the PCI layer's) knows in its place."""
    if base is None or extra is None:
        return base or extra

    def pick(mine: float | None, theirs: float | None) -> float | None:
        return theirs if theirs is not None else mine

    return Usage(
        temperature_celsius=pick(base.temperature_celsius,
                                 extra.temperature_celsius),
        power_watts=pick(base.power_watts, extra.power_watts),
        utilization_percent=pick(base.utilization_percent,
                                 extra.utilization_percent),
        memory_used_bytes=(extra.memory_used_bytes
                           if extra.memory_used_bytes is not None
                           else base.memory_used_bytes),
        memory_total_bytes=(extra.memory_total_bytes
                            if extra.memory_total_bytes is not None
                            else base.memory_total_bytes),
        counters={**base.counters, **extra.counters},
        gauges={**base.gauges, **extra.gauges})


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
    #: Whether the devices lower their link speed when idle to save power
    #: (GPUs train down to 2.5 GT/s): only a narrower link than they can
    #: do then means a degraded one.
    link_speed_varies: ClassVar[bool] = False

    #: Whether the devices are SR-IOV PFs whose VF count is a layout
    #: (``vf_count``), set by the drivers of devices that lend VFs.
    sriov_layout: ClassVar[bool] = False

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.bus = pci.PciBus(conf.agent.sysfs_root)
        # The subclass's module logger, so that its messages name it.
        self.log = logging.getLogger(type(self).__module__)
        self.warn = pci_report.WarnOnce(self.log)
        options = conf.agent
        if (options.health_temperature_degraded
                > options.health_temperature_unhealthy):
            raise exception.Invalid(
                reason=f'[agent] health_temperature_degraded '
                       f'({options.health_temperature_degraded:g}) is above '
                       f'[agent] health_temperature_unhealthy '
                       f'({options.health_temperature_unhealthy:g})')

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

    # Lifecycle: SR-IOV layouts, vfio-pci binding, function-level resets.

    def control_function(self, device: DriverDevice, action: str
                         ) -> str:
        """The address of ``device``'s control path function."""
        address = handle_address(device.controlpath_id)
        if address is None:
            raise exception.DeviceActionError(
                action=action, device=str(device.controlpath_id),
                reason='the control path names no PCI function')
        return address

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        if not self.sriov_layout:
            return {}
        pf = self.bus.get(self.control_function(device, 'read layouts'))
        return dict(pci_lifecycle.vf_count_options(pf)) if pf else {}

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """Set the PF's VF count (``vf_count``), then bind the new VFs
        to vfio-pci when ``vfio_bind`` asks for it."""
        options = self.layout_options(device)
        if not options:
            super().apply_layout(device, layout)
        check_layout(options, layout)
        if 'vf_count' in layout:
            address = self.control_function(device, 'set the VF count')
            pci_lifecycle.set_vf_count(self.conf, self.bus, address,
                                       layout['vf_count'])
            if self._vfio_bind:
                pf = self.bus.get(address)
                for vf in pf.virtfns if pf else ():
                    pci_lifecycle.bind_vfio(self.conf, self.bus, vf)

    @property
    def _vfio_bind(self) -> bool:
        return (self.conf_group is not None
                and bool(self.conf[self.conf_group].vfio_bind))

    def prepare(self, device: DriverDevice) -> None:
        """Bind the functions of the device's PCI attach handles to
        vfio-pci when ``[<group>] vfio_bind`` is set; nothing otherwise
        (the host driver the kernel bound serves as it is)."""
        if not self._vfio_bind:
            return
        for deployable in device.deployables:
            for handle in deployable.attach_handles:
                address = handle_address(handle.attach_info)
                if handle.attach_type == 'PCI' and address is not None:
                    pci_lifecycle.bind_vfio(self.conf, self.bus, address)

    def clean(self, handle: DriverAttachHandle) -> None:
        """Function-level reset of a PCI handle's function, which wipes
        its state (queues, keys, device memory the function clears on
        FLR); other handles are the family's to clean."""
        address = handle_address(handle.attach_info)
        if handle.attach_type != 'PCI' or address is None:
            raise exception.DeviceActionError(
                action='clean', device=str(handle.attach_info),
                reason=f'{self.driver_name} cleans PCI attach handles only')
        pci_lifecycle.reset_function(self.conf, self.bus, address)

    # Monitoring: what the kernel says of every PCI function, then what a
    # family reads of its own (``family_health``, ``family_usage``).

    def function_dir(self, address: str) -> str:
        """The sysfs directory of the function at ``address``."""
        return self.bus.path(f'/sys/bus/pci/devices/{address}')

    def health_functions(self, device: DriverDevice) -> list[str]:
        """The addresses a health pass reads: the control path's, then
        up to HANDLE_FUNCTIONS_READ others of its attach handles."""
        control = handle_address(device.controlpath_id)
        if control is None:
            raise ValueError(f'control path {device.controlpath_id} names '
                             'no PCI function')
        others = dict.fromkeys(
            address for deployable in device.deployables
            for handle in deployable.attach_handles
            if (address := handle_address(handle.attach_info)) is not None
            and address != control)
        return [control, *list(others)[:HANDLE_FUNCTIONS_READ]]

    def readings(self, device: DriverDevice) -> DeviceReadings:
        """Each of the device's health functions with its readings (None:
        gone), the control path's first."""
        return [(address, pci_health.read_function(
                    self.function_dir(address), address))
                for address in self.health_functions(device)]

    def health(self, device: DriverDevice) -> Health:
        readings = self.readings(device)
        return Health.combine(self.pci_health(readings)
                              + self.family_health(device))

    def pci_health(self, readings: DeviceReadings) -> list[Health]:
        """What AER counters, links and temperatures say.

        A fatal AER error means the link or the device had to be reset,
        and what ran on it was lost: unhealthy. A non-fatal one means a
        transaction was lost while the link survived: degraded.
        Correctable errors were repaired by the link's own replay; a
        healthy link logs some (a few per day are common on long
        risers), so they only count, in ``aer_correctable``.
        """
        found: list[Health] = []
        options = self.conf.agent
        for n, (address, reading) in enumerate(readings):
            if reading is None:
                # The device is gone with its control path; one attach
                # handle gone leaves the others usable.
                found.append(Health(
                    device_health.UNHEALTHY if n == 0
                    else device_health.DEGRADED,
                    f'PCI function {address} is gone'))
                continue
            if reading.aer is not None and reading.aer.fatal:
                found.append(Health(
                    device_health.UNHEALTHY,
                    f'{reading.aer.fatal} fatal PCIe error(s) (AER) on '
                    f'{address}'))
            if reading.aer is not None and reading.aer.nonfatal:
                found.append(Health(
                    device_health.DEGRADED,
                    f'{reading.aer.nonfatal} non-fatal PCIe error(s) (AER) '
                    f'on {address}'))
            link = (reading.link.degraded(not self.link_speed_varies)
                    if reading.link is not None else None)
            if link is not None:
                found.append(Health(device_health.DEGRADED,
                                    f'{link} on {address}'))
            found += temperature_health(
                reading.sensors.temperature_celsius, address,
                options.health_temperature_degraded,
                options.health_temperature_unhealthy)
        return found

    def family_health(self, device: DriverDevice) -> list[Health]:
        """What the family's own interfaces say of ``device``; nothing
        beyond the PCI layer by default."""
        return []

    def usage(self, device: DriverDevice) -> Usage | None:
        sample = pci_usage(self.readings(device))
        return merge_usage(sample, self.family_usage(device))

    def family_usage(self, device: DriverDevice) -> Usage | None:
        """The family's own usage readings of ``device``, which take the
        place of the PCI layer's; none by default."""
        return None


def temperature_health(celsius: float | None, where: str, degraded: float,
                       unhealthy: float) -> list[Health]:
    """What a temperature reading says against the configured limits."""
    if celsius is None or celsius < degraded:
        return []
    if celsius >= unhealthy:
        return [Health(device_health.UNHEALTHY,
                       f'{where} at {celsius:g} C, at or above [agent] '
                       f'health_temperature_unhealthy ({unhealthy:g} C)')]
    return [Health(device_health.DEGRADED,
                   f'{where} at {celsius:g} C, at or above [agent] '
                   f'health_temperature_degraded ({degraded:g} C)')]


def pci_usage(readings: DeviceReadings) -> Usage | None:
    """The hottest sensor, the power of all, and the AER counters summed
    over the functions read; None when none could be."""
    present = [r for _, r in readings if r is not None]
    if not present:
        return None
    temperatures = [r.sensors.temperature_celsius for r in present
                    if r.sensors.temperature_celsius is not None]
    power = [r.sensors.power_watts for r in present
             if r.sensors.power_watts is not None]
    counters: dict[str, int] = {}
    for reading in present:
        if reading.aer is None:
            continue
        for name, _, _ in pci_health.AER_FILES:
            key = f'aer_{name}'
            counters[key] = counters.get(key, 0) + getattr(reading.aer, name)
    return Usage(temperature_celsius=max(temperatures, default=None),
                 power_watts=sum(power) if power else None,
                 counters=counters)
