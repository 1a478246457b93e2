"""A driver for Intel Ethernet controllers of the 700 and E810 series.

Each physical function (port) is one device, reported as
``sriov_nic.SriovNicDriver`` describes: the port whole while it has no
VFs, one deployable per VF otherwise, with the port's physical network
(``[nic_devices] physical_device_mappings``) in every attach handle.
"""
from cyborg.accelerator.drivers.sriov_nic import SriovNicDriver

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


class IntelNicDriver(SriovNicDriver):
    """Reports Intel X710, XL710, XXV710 and E810 ports and their VFs."""

    driver_name = 'intel_nic'
    conf_group = 'nic_devices'
    vendor_id = '0x8086'
    device_ids = PRODUCTS
    products = PRODUCTS
    vendor_label = 'Intel'
    trait_vendor = 'INTEL'
