"""Fake hosts with FPGA cards as their sysfs shows them, for the FPGA
driver tests."""
import re

from cyborg.common import device_report
from cyborg.tests.harness.sysfs import SysfsTree

HOST = 'cmp1'
PROCESSING_ACCELERATOR = 0x120000
# A PAC N3000 on the DFL drivers, two VFs enabled, behind the card's PCIe
# switch, next to the two XL710 Ethernet controllers on the same card.
N3000 = '0000:5e:00.0'
N3000_VFS = ['0000:5e:00.1', '0000:5e:00.2']
N3000_NICS = ['0000:60:00.0', '0000:60:00.1']
N3000_INTERFACE = '9346116d-a52d-5ca8-b06a-a9a389ef7c8d'
# A PAC Arria 10 GX on OPAE's intel-fpga driver, no VF, an AFU loaded.
ARRIA10 = '0000:3b:00.0'
ARRIA10_INTERFACE = 'ce48969398f05f33946d560708be108a'
NLB0_AFU = 'd8424dc4a4a3c413f89e433683f9040b'
DMA_AFU = '331db30c98294c7d8ea4c6c3e8e6e5b2'
# An Alveo U250: management and user functions of one slot.
U250_MGMT = '0000:af:00.0'
U250_USER = '0000:af:00.1'
# An Inspur F10A.
F10A = '0000:86:00.0'
HOST_BRIDGE = '0000:00:00.0'
TRAIT_RE = re.compile(r'^(CUSTOM_[A-Z0-9_]+|OWNER_CYBORG)$')


def add_n3000(tree):
    tree.add_function(N3000, 0x8086, 0x0b30, PROCESSING_ACCELERATOR,
                      driver='dfl-pci', sriov_totalvfs=8)
    tree.add_vfs(N3000, N3000_VFS, 0x8086, 0x0b31, driver='vfio-pci')
    for nic in N3000_NICS:
        tree.add_function(nic, 0x8086, 0x0d58, 0x020000, driver='i40e')
    # The static region, with the FME and (its port lent to a VF) no
    # port; the FME's partial-reconfiguration region below it.
    region0 = tree.add_class_entry('fpga_region', 'region0',
                                   {'dfl-fme.0/ports_num': 1},
                                   device_link=N3000)
    region1 = (region0 / 'dfl-fme.0' / 'dfl-fme-region.1' / 'fpga_region'
               / 'region1')
    rel = str(region1.relative_to(tree.base))
    tree.write(f'{rel}/compat_id', N3000_INTERFACE.replace('-', ''))
    tree.link('sys/class/fpga_region/region1', rel)


def n3000_fme(tree):
    """The relative path of the N3000's FPGA management engine."""
    fme = tree.device_dir(N3000) / 'fpga_region' / 'region0' / 'dfl-fme.0'
    return str(fme.relative_to(tree.base))


def add_n3000_health(tree, temperature=52000, power=61500000, **errors):
    """The N3000 FME's error registers (``errors`` non-zero ones) and its
    two hwmon devices, as the dfl-fme driver lays them out."""
    fme = n3000_fme(tree)
    tree.add_fme_errors(fme, **errors)
    tree.add_hwmon(fme, 'dfl_fme_thermal', [temperature])
    tree.add_hwmon(fme, 'dfl_fme_power', power_input=power)


def add_arria10(tree):
    tree.add_function(ARRIA10, 0x8086, 0x09c4, PROCESSING_ACCELERATOR,
                      driver='intel-fpga-pci', sriov_totalvfs=1, numa_node=0)
    tree.add_class_entry(
        'fpga', 'intel-fpga-dev.0',
        {'intel-fpga-fme.0/pr/interface_id': ARRIA10_INTERFACE,
         'intel-fpga-port.0/afu_id': NLB0_AFU},
        device_link=ARRIA10)


def add_u250(tree):
    tree.add_function(U250_MGMT, 0x10ee, 0x5004, PROCESSING_ACCELERATOR,
                      driver='xclmgmt', numa_node=1,
                      subsystem_vendor=0x10ee, subsystem_device=0x000e)
    tree.add_function(U250_USER, 0x10ee, 0x5005, PROCESSING_ACCELERATOR,
                      driver='xocl', numa_node=1,
                      subsystem_vendor=0x10ee, subsystem_device=0x000e)


def add_f10a(tree):
    tree.add_function(F10A, 0x1bd4, 0xa115, PROCESSING_ACCELERATOR)


def fpga_host(base):
    """A host with a PAC N3000, a PAC Arria 10, an Alveo U250 and an
    Inspur F10A, next to a host bridge."""
    tree = SysfsTree(base)
    tree.add_function(HOST_BRIDGE, 0x8086, 0x2020, 0x060000)
    add_n3000(tree)
    add_arria10(tree)
    add_u250(tree)
    add_f10a(tree)
    return tree


def configure(conf, root, **fpga):
    conf.set_override('host', HOST)
    conf.set_override('sysfs_root', root, 'agent')
    for name, value in fpga.items():
        conf.set_override(name, value, 'fpga')


def pci(address):
    domain, bus, rest = address.split(':')
    device, function = rest.split('.')
    return {'domain': domain, 'bus': bus, 'device': device,
            'function': function}


def by_address(devices):
    return {d.deployables[0].name.split('_', 1)[1]: d for d in devices}


def check_report(devices):
    for device in devices:
        for deployable in device.deployables:
            traits = [v for k, v in deployable.attributes.items()
                      if k.startswith('trait')]
            assert all(TRAIT_RE.match(t) and len(t) <= 255 for t in traits)
            assert 'OWNER_CYBORG' in traits
    report = {'hostname': HOST, 'devices': [d.to_dict() for d in devices]}
    device_report.validate_report(HOST, report)
