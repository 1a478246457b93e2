"""A driver for Intel Ethernet controllers of the 700 and E810 series.

Each physical function (port) is one device. A port without SR-IOV VFs is
one deployable passing the port through; a port with VFs enabled is one
deployable per VF, and the port itself is then never handed out, so that
each VF is a resource provider of its own and Nova can ask for a VF on a
given physical network. Attach handles carry the port's
physical network (``[nic_devices] physical_device_mappings``), which Nova
needs for ports backed by an accelerator request.
"""
import os
import re

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator import pci_health
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverDevice

RESOURCE_CLASS = 'CUSTOM_NIC'
# Physical functions by device id; their VFs (0x154c on the 700 series,
# 0x1889 "adaptive" VFs on both) are found through the PF's virtfn links.
PRODUCTS = {
    '0x1572': 'X710', '0x1581': 'X710', '0x1585': 'X710',
    '0x1586': 'X710', '0x1589': 'X710', '0x15ff': 'X710',
    '0x1583': 'XL710', '0x1584': 'XL710',
    '0x158a': 'XXV710', '0x158b': 'XXV710',
    '0x1591': 'E810', '0x1592': 'E810', '0x1593': 'E810',
    '0x1599': 'E810', '0x159b': 'E810',
}
_PHYSNET_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')
_FUNCTION_RE = re.compile(r'^[A-Za-z0-9_]{1,200}$')
# What the kernel accepts in an interface name (IFNAMSIZ - 1 characters,
# no '/' or white space), less ':' and '|', the separators here.
_IFNAME_RE = re.compile(r'^[^\s/:|]{1,15}$')
# net/<if>/statistics files read into usage counters of the same names,
# summed over the port's interfaces.
STATISTICS = ('rx_bytes', 'tx_bytes', 'rx_errors', 'tx_errors',
              'rx_dropped', 'tx_dropped')
# operstate values (RFC 2863, as the kernel writes them) of a link that
# cannot carry traffic.
_LINK_DOWN = ('down', 'lowerlayerdown', 'notpresent')


def parse_mappings(option: str, values: list[str], name_re: re.Pattern[str],
                   what: str) -> dict[str, str]:
    """``<name>:<if>[|<if>...]`` entries as {interface: name}; Invalid
    naming ``option`` and the entry when one is wrong."""
    by_interface: dict[str, str] = {}
    for entry in values:
        def invalid(problem: str, entry: str = entry) -> exception.Invalid:
            return exception.Invalid(
                reason=f'{option} entry {entry!r}: {problem}')

        name, sep, interfaces = entry.strip().partition(':')
        if not sep or not name_re.match(name):
            raise invalid(f'expected <{what}>:<interface>[|<interface>...] '
                          f'with a {what} name of {name_re.pattern}')
        for interface in interfaces.split('|'):
            if not _IFNAME_RE.match(interface):
                raise invalid(f'{interface!r} is not a network interface '
                              'name')
            if by_interface.get(interface, name) != name:
                raise invalid(f'interface {interface} is already mapped to '
                              f'{by_interface[interface]}')
            by_interface[interface] = name
    return by_interface


class IntelNicDriver(PciDriver):
    """Reports Intel X710, XL710, XXV710 and E810 ports and their VFs."""

    driver_name = 'intel_nic'
    conf_group = 'nic_devices'
    sriov_layout = True
    vendor_id = '0x8086'
    device_ids = PRODUCTS
    physical_only = True
    noun = 'port'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        options = conf.nic_devices
        self.physnets = parse_mappings(
            '[nic_devices] physical_device_mappings',
            options.physical_device_mappings, _PHYSNET_RE,
            'physical_network')
        self.functions = parse_mappings(
            '[nic_devices] function_device_mappings',
            options.function_device_mappings, _FUNCTION_RE, 'function')

    def _interfaces(self, pf: pci.PciFunction) -> list[str]:
        return _interfaces(pf.sysfs_path)

    # Monitoring: the port's network interfaces (none when the port is
    # bound to vfio-pci), besides the PCI layer's readings.

    def _net_dirs(self, device: DriverDevice) -> list[tuple[str, str]]:
        address = handle_address(device.controlpath_id)
        if address is None:
            return []
        directory = self.function_dir(address)
        return [(name, os.path.join(directory, 'net', name))
                for name in _interfaces(directory)]

    def family_health(self, device: DriverDevice) -> list[Health]:
        """A port whose link is down carries no traffic for its VFs:
        degraded (the operator may have unplugged it on purpose, and the
        port is still there to be handed out)."""
        found = []
        for name, directory in self._net_dirs(device):
            state = pci_health.read_text(os.path.join(directory,
                                                      'operstate'))
            # carrier cannot be read (EINVAL) while the interface is
            # administratively down; operstate then says "down".
            try:
                carrier = pci_health.read_text(
                    os.path.join(directory, 'carrier'))
            except OSError:
                carrier = None
            if state in _LINK_DOWN or carrier == '0':
                found.append(Health(
                    device_health.DEGRADED,
                    f'interface {name} link is down (operstate '
                    f'{state or "unknown"}, carrier {carrier or "unknown"})'))
        return found

    def family_usage(self, device: DriverDevice) -> Usage | None:
        counters: dict[str, int] = {}
        for _, directory in self._net_dirs(device):
            for name in STATISTICS:
                value = pci_health.read_int(
                    os.path.join(directory, 'statistics', name))
                if value is not None:
                    counters[name] = counters.get(name, 0) + value
        return Usage(counters=counters) if counters else None

    def device(self, pf: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        product = PRODUCTS[pf.device_id]
        interfaces = self._interfaces(pf)
        physnet = next((self.physnets[i] for i in interfaces
                        if i in self.physnets), None)
        traits = [f'CUSTOM_NIC_INTEL_{product}']
        extra = {}
        if physnet is None:
            self.warn('Intel %s port %s (interfaces: %s) is not in '
                      '[nic_devices] physical_device_mappings; its '
                      'functions are reported without a physical network '
                      'and cannot back Neutron ports.', product, pf.address,
                      ', '.join(interfaces) or 'none')
        else:
            traits.append(f'CUSTOM_{trait_part(physnet)}')
            extra['physical_network'] = physnet
        traits += sorted({f'CUSTOM_{self.functions[i].upper()}'
                          for i in interfaces if i in self.functions})
        # One deployable per function lent out. The port serves its VFs
        # and is never passed through beside them.
        deployables = [
            self.deployable(
                f, RESOURCE_CLASS,
                ['OWNER_CYBORG', 'CUSTOM_VF' if f.is_vf else 'CUSTOM_PF',
                 *traits],
                [pci_report.pci_handle(f, **extra)])
            for f in self.lent_functions(
                pf, functions, f'Intel {product} port {pf.address}')]
        if not deployables:
            return None
        board = {'product': product, 'interfaces': interfaces}
        if physnet is not None:
            board['physical_network'] = physnet
        return pci_report.device('NIC', pf, deployables, **board)


def _interfaces(function_dir: str) -> list[str]:
    """The network interfaces of the PCI function at ``function_dir``."""
    try:
        return sorted(os.listdir(os.path.join(function_dir, 'net')))
    except OSError:
        # Bound to vfio-pci or to no driver: no network interface.
        return []
