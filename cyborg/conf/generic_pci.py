"""Options of the [generic_pci] group: which PCI functions the driver owns."""
from oslo_config import cfg

from cyborg.conf import groups
from cyborg.conf.lifecycle import FUNCTION_RESET

generic_pci_opts = [
    cfg.MultiStrOpt(
        'device_specs',
        default=[],
        help='One JSON object per occurrence selecting PCI functions, e.g. '
             '{"vendor_id": "0x1af4", "product_id": "0x1041", '
             '"type": "NIC", "resource_class": "CUSTOM_VIRTIO_NIC", '
             '"traits": ["CUSTOM_VIRTIO"]}. Selectors (at least one): '
             '"vendor_id" and "product_id" (hex ids), "class" (a hex '
             'prefix of the class code: "0x02" any network controller, '
             '"0x0200" Ethernet), "address" (a shell-style pattern such as '
             '"0000:3b:*.*"), and "physical_function_only" or '
             '"virtual_function_only" (booleans). What is reported: "type" '
             '(GPU, FPGA, AICHIP, QAT, NIC, SSD or PCI, the default), '
             '"resource_class" (CUSTOM_<NAME>, or one of the standard '
             'classes FPGA, PGPU, PCI_DEVICE, SRIOV_NET_VF; the default '
             'depends on the type: PGPU for GPU, FPGA for FPGA, '
             'CUSTOM_<TYPE> otherwise) and "traits" (a list of '
             'CUSTOM_<NAME>). A function matching several objects is '
             'reported once, as the first one says; select no function '
             'that another enabled driver reports, since the conductor '
             'refuses a report naming one function twice. The agent '
             'refuses to start when an object is invalid.'),
]

GROUP = groups.driver_group(
    'generic_pci',
    title='Generic PCI driver options',
    help='The generic_pci driver reports PCI functions that the operator '
         'selects, whatever their vendor, as whole-function accelerators '
         'passed through to instances, or, under a device layout with an '
         'mdev type and count, as that many mediated devices of the type '
         'when the function (or its virtual functions) offers '
         'mdev_supported_types.',
    family='functions of the generic_pci driver',
    clean_how=FUNCTION_RESET,
    opts=generic_pci_opts,
    mdevs='functions of the generic_pci driver under an mdev layout')

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
