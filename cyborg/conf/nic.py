"""Options of the [nic_devices] group: what the intel_nic driver's ports
are connected to."""
from oslo_config import cfg

from cyborg.conf import groups
from cyborg.conf.lifecycle import FUNCTION_RESET

nic_opts = [
    cfg.ListOpt(
        'physical_device_mappings',
        default=[],
        help='Physical networks of the NIC ports, as '
             '<physical_network>:<interface>[|<interface>...] entries, '
             'e.g. "physnet1:ens1f0|ens2f0,physnet2:ens1f1". Interfaces '
             'are the kernel network interface names of the physical '
             'functions (the entries of /sys/bus/pci/devices/<address>/net). '
             'Every function of a mapped port, and every virtual function '
             'of it, carries the physical network in its attach handle '
             '(Nova passes it to Neutron for ports backed by an '
             'accelerator request) and the trait CUSTOM_<PHYSICAL_NETWORK> '
             '(upper case, dashes dropped, other characters but letters, '
             'digits and _ made _). A port whose interface is not mapped '
             'is still reported, without a physical network, and a '
             'warning names it: its functions can be requested through '
             'device profiles but cannot back Neutron ports. Physical '
             'network names consist of letters, digits, ".", "_" and "-"; '
             'an interface may be mapped to one physical network only. '
             'The agent refuses to start when an entry is invalid.'),
    cfg.ListOpt(
        'function_device_mappings',
        default=[],
        help='Functions of the NIC ports, as '
             '<function>:<interface>[|<interface>...] entries, e.g. '
             '"ipsec:ens1f0". The functions of a mapped port, and its '
             'virtual functions, carry the trait CUSTOM_<FUNCTION> (upper '
             'case) for device profiles to select. Function names consist '
             'of letters, digits and "_"; an interface may be mapped to '
             'one function only. The agent refuses to start when an entry '
             'is invalid.'),
]

GROUP = groups.driver_group(
    'nic_devices',
    title='NIC driver options',
    help='How the intel_nic driver describes the Intel Ethernet '
         'controllers (700 series: X710, XL710, XXV710; E810) it reports: '
         'which physical network each port is cabled to, and which '
         'functions operators attach to ports.',
    family='Intel NICs of the intel_nic driver',
    clean_how=FUNCTION_RESET,
    opts=nic_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
