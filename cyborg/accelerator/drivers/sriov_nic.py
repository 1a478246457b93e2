"""The base of the drivers of SR-IOV Ethernet ports and their VFs.

Each physical function (port) is one device. A port without SR-IOV VFs is
one deployable passing the port through; a port with VFs enabled is one
deployable per VF, and the port itself is then never handed out, so that
each VF is a resource provider of its own and Nova can ask for a VF on a
given physical network. Attach handles carry the port's physical network
(``[<group>] physical_device_mappings``), which Nova needs for ports
backed by an accelerator request. A port's link state and interface
counters are its family health and usage.
"""
import os
import re
from collections.abc import Mapping
from typing import ClassVar

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
# The phys_port_name of a representor netdev (of a PF, VF or SF, "c1"
# first for another controller's), as net/devlink/port.c
# (__devlink_port_phys_port_name_get) writes it. In switchdev mode the
# port's driver registers one per VF under the port's PCI device, beside
# the uplink ("p0"); a representor is no interface of the port itself.
_REPRESENTOR_RE = re.compile(r'^(c\d+)?pf\d+')


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


class SriovNicDriver(PciDriver):
    """Reports the ports of ``products`` and their VFs.

    A subclass names its vendor (``vendor_id``, ``vendor_label`` for
    messages, ``trait_vendor`` for the ``CUSTOM_NIC_<VENDOR>_<PRODUCT>``
    trait), its ports (``products``: PF device id to product name) and
    its option group (``conf_group``, made with ``cyborg.conf.nic``'s
    ``mapping_opts``).
    """

    sriov_layout = True
    physical_only = True
    noun = 'port'
    #: Port device ids (PFs) and their product names.
    products: ClassVar[Mapping[str, str]]
    #: The vendor as messages name it ("Intel").
    vendor_label: ClassVar[str]
    #: The vendor as traits name it ("INTEL").
    trait_vendor: ClassVar[str]

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        group = self.conf_group
        assert group is not None
        options = conf[group]
        self.physnets = parse_mappings(
            f'[{group}] physical_device_mappings',
            options.physical_device_mappings, _PHYSNET_RE,
            'physical_network')
        self.functions = parse_mappings(
            f'[{group}] function_device_mappings',
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
        product = self.products[pf.device_id]
        what = f'{self.vendor_label} {product} port {pf.address}'
        interfaces = self._interfaces(pf)
        physnet = next((self.physnets[i] for i in interfaces
                        if i in self.physnets), None)
        traits = [f'CUSTOM_NIC_{self.trait_vendor}_{trait_part(product)}']
        extra = {}
        if physnet is None:
            self.warn('%s (interfaces: %s) is not in [%s] '
                      'physical_device_mappings; its functions are reported '
                      'without a physical network and cannot back Neutron '
                      'ports.', what, ', '.join(interfaces) or 'none',
                      self.conf_group)
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
            for f in self.lent_functions(pf, functions, what)]
        if not deployables:
            return None
        board = {'product': product, 'interfaces': interfaces}
        if physnet is not None:
            board['physical_network'] = physnet
        return pci_report.device('NIC', pf, deployables, **board)


def _interfaces(function_dir: str) -> list[str]:
    """The network interfaces of the PCI function at ``function_dir``,
    less the representors of its VFs."""
    net = os.path.join(function_dir, 'net')
    try:
        names = sorted(os.listdir(net))
    except OSError:
        # Bound to vfio-pci or to no driver: no network interface.
        return []
    return [name for name in names
            if not _REPRESENTOR_RE.match(_port_name(net, name))]


def _port_name(net: str, name: str) -> str:
    """The interface's phys_port_name; empty when it has none (reading
    it fails with EOPNOTSUPP for a netdev without a devlink port)."""
    try:
        return pci_health.read_text(
            os.path.join(net, name, 'phys_port_name')) or ''
    except OSError:
        return ''
