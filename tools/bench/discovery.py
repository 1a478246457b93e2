"""Benchmark of the agent's discovery pass over a realistic host.

Builds a fake sysfs tree of ``--functions`` PCI functions (256 by default)
holding devices for every registered driver — NVIDIA GPUs with vGPU types,
Intel, Xilinx and Inspur FPGAs, Intel E810/X710 NICs with VFs, C62x QAT
endpoints with 16 VFs each, Inspur and other NVMe drives, Ascend NPUs, a
ConnectX NIC for the generic_pci driver — and fills the rest with the
platform functions a two-socket Xeon host shows. It loads every registered
driver through ``load_drivers`` with ``[agent] sysfs_root`` pointing at the
tree, then times discovery passes as the agent runs them (each driver's
``discover``, the devices as report dicts, the report's hash), and prints
the median and 95th percentile per pass and per driver, and the process's
resident memory afterwards. Goals: under 200 ms per pass, under 80 MB.

    python tools/bench/discovery.py [--functions 256] [--passes 50]
        [--scan-per-driver]
"""
import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from oslo_config import cfg

from cyborg import conf as cyborg_conf
from cyborg.accelerator import drivers
from cyborg.accelerator import pci
from cyborg.common import device_report
from cyborg.tests.harness.sysfs import SysfsTree

# Drivers benchmarked when they are registered, in this order.
DRIVERS = ('fake_driver', 'generic_pci', 'nvidia_gpu', 'intel_fpga',
           'xilinx_fpga', 'inspur_fpga', 'intel_nic', 'intel_qat',
           'inspur_nvme_ssd', 'huawei_ascend')
HOST = 'bench-host'
_UUID32 = '9346116d29e2436f9fc79d57d2d9af8b'
# Buses no device above uses, for the platform's functions.
_PLATFORM_BUSES = ('00', '16', '3a', '64', '80', '85', '97', 'ae', 'c9',
                   'e0')


def _slot(domain_bus: str, number: int) -> str:
    """The ``number``-th function of bus ``domain_bus`` (``0000:3d``)."""
    device, function = divmod(number, 8)
    return f'{domain_bus}:{device:02x}.{function}'


def _pf_with_vfs(tree: SysfsTree, pf: str, vendor: int, device: int,
                 vf_device: int, class_code: int, driver: str,
                 vf_driver: str, vfs: int, numa: int) -> None:
    tree.add_function(pf, vendor, device, class_code, driver=driver,
                      numa_node=numa, sriov_totalvfs=max(vfs, 16))
    bus = pf.rsplit(':', 1)[0]
    first = int(pf[-4:-2], 16) * 8 + 8   # VFs from the next slots on
    tree.add_vfs(pf, [_slot(bus, first + n) for n in range(vfs)],
                 vendor, vf_device, driver=vf_driver, numa_node=numa)


def _netdev(tree: SysfsTree, address: str, name: str) -> None:
    tree.add_class_entry('net', name, {'address': '3c:fd:fe:9e:00:01'},
                         device_link=address)


def build_tree(base: str, functions: int) -> SysfsTree:
    """The host's sysfs under ``base``, with exactly ``functions``
    PCI functions."""
    tree = SysfsTree(base)
    # GPUs: two Tesla T4 passed through, two serving vGPUs.
    for n, bus in enumerate(('3b', '5e', 'af', 'd8')):
        gpu = f'0000:{bus}:00.0'
        tree.add_function(gpu, 0x10de, 0x1eb8, 0x030200, driver='nvidia',
                          numa_node=n // 2, subsystem_vendor=0x10de,
                          subsystem_device=0x12a2)
        if n >= 2:
            tree.add_mdev_type(gpu, 'nvidia-222', 'GRID T4-1B', 16)
            tree.add_mdev_type(gpu, 'nvidia-223', 'GRID T4-2B', 8)
    # Intel PAC N3000 (DFL): one with two VFs; OPAE-style ids.
    for bus, vfs in (('1b', 2), ('1c', 0)):
        fpga = f'0000:{bus}:00.0'
        _pf_with_vfs(tree, fpga, 0x8086, 0x0b30, 0x0b31, 0x120000,
                     'dfl-pci', 'vfio-pci', vfs, 0)
        tree.add_class_entry(
            'fpga_region', f'region{bus}',
            {'compat_id': _UUID32, 'dfl-port.0/afu_id': _UUID32},
            device_link=fpga)
    # Two Xilinx Alveo U250: management and user function each.
    for bus in ('86', '87'):
        tree.add_function(f'0000:{bus}:00.0', 0x10ee, 0x5004, 0x120000,
                          driver='xclmgmt', numa_node=1)
        tree.add_function(f'0000:{bus}:00.1', 0x10ee, 0x5005, 0x120000,
                          driver='xocl', numa_node=1)
    # An Inspur F10A FPGA.
    tree.add_function('0000:88:00.0', 0x1bd4, 0xa115, 0x120000, numa_node=1)
    # Intel NICs: E810 port 1 with 32 VFs, port 2 bare; X710 port 1 with
    # 16 VFs, port 2 bare.
    for pf, device, vf_device, driver, vfs, ifname in (
            ('0000:17:00.0', 0x1593, 0x1889, 'ice', 32, 'ens1f0'),
            ('0000:17:00.1', 0x1593, 0x1889, 'ice', 0, 'ens1f1'),
            ('0000:18:00.0', 0x1572, 0x154c, 'i40e', 16, 'ens2f0'),
            ('0000:18:00.1', 0x1572, 0x154c, 'i40e', 0, 'ens2f1')):
        tree.add_function(pf, 0x8086, device, 0x020000, driver=driver,
                          sriov_totalvfs=64)
        if vfs:
            bus = pf.rsplit(':', 1)[0]
            tree.add_vfs(pf, [_slot(bus, 16 + n) for n in range(vfs)],
                         0x8086, vf_device, driver='vfio-pci')
        _netdev(tree, pf, ifname)
    # Mellanox ConnectX-6 Dx with 8 VFs, reported by generic_pci.
    _pf_with_vfs(tree, '0000:5d:00.0', 0x15b3, 0x101d, 0x101e, 0x020000,
                 'mlx5_core', 'vfio-pci', 8, 0)
    # Three C62x QAT endpoints with 16 VFs each.
    for bus in ('3d', '3f', 'da'):
        _pf_with_vfs(tree, f'0000:{bus}:00.0', 0x8086, 0x37c8, 0x37c9,
                     0x0b4000, 'c6xx', 'vfio-pci', 16, 0)
    # NVMe: two Inspur drives, two of another vendor.
    for bus, vendor, device in (
            ('60', 0x1bd4, 0x1001), ('61', 0x1bd4, 0x1001),
            ('62', 0x144d, 0xa824), ('63', 0x144d, 0xa824)):
        tree.add_function(f'0000:{bus}:00.0', vendor, device, 0x010802,
                          driver='nvme')
    # An Atlas 300I: four Ascend 310; and a HiSilicon ZIP engine.
    for bus in ('b1', 'b2', 'b3', 'b4'):
        tree.add_function(f'0000:{bus}:00.0', 0x19e5, 0xd100, 0x120000,
                          driver='devdrv_device_driver', numa_node=1)
    tree.add_function('0000:b5:00.0', 0x19e5, 0xa250, 0x120000,
                      driver='hisi_zip', numa_node=1)
    # The platform: Sky Lake-SP uncore and chipset functions.
    used = len(list(tree.path('sys/bus/pci/devices').iterdir()))
    if used > functions:
        raise SystemExit(f'the devices alone take {used} functions')
    for n in range(functions - used):
        bus = _PLATFORM_BUSES[n // 64]
        tree.add_function(_slot(f'0000:{bus}', n % 64), 0x8086,
                          0x2040 + n % 32, 0x088000, numa_node=n // 128,
                          iommu_group=None)
    return tree


def configure(conf: cfg.ConfigOpts, root: str) -> list[str]:
    """Set the options of every registered driver; the names enabled."""
    names = [n for n in DRIVERS if n in drivers.available_drivers()]
    conf.set_override('host', HOST)
    conf.set_override('enabled_drivers', names, 'agent')
    conf.set_override('sysfs_root', root, 'agent')
    overrides = {
        'generic_pci': [('device_specs', [json.dumps(
            {'vendor_id': '0x15b3', 'virtual_function_only': True,
             'type': 'NIC'})])],
        'intel_nic': [('physical_device_mappings',
                       ['physnet1:ens1f0|ens2f0', 'physnet2:ens1f1']),
                      ('function_device_mappings', ['ipsec:ens2f0'])],
        'nvidia_gpu': [('enabled_vgpu_types', ['nvidia-222']),
                       ('vgpu_type_addresses',
                        ['nvidia-222:0000:af:00.0,0000:d8:00.0'])],
    }
    groups = {'generic_pci': 'generic_pci', 'intel_nic': 'nic_devices',
              'nvidia_gpu': 'gpu_devices'}
    for name, options in overrides.items():
        if name in names:
            for option, value in options:
                conf.set_override(option, value, groups[name])
    return names


def _timed(func: Callable[[], object]) -> float:
    start = time.perf_counter()
    func()
    return (time.perf_counter() - start) * 1000


def _rss_mb(field: str = 'VmRSS') -> float:
    with open('/proc/self/status', encoding='ascii') as status:
        for line in status:
            if line.startswith(field + ':'):
                return int(line.split()[1]) / 1024
    return float('nan')


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method='inclusive')[-1]


def bench(functions: int, passes: int, shared_scan: bool = True) -> None:
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    with tempfile.TemporaryDirectory() as tmp:
        tree = build_tree(tmp, functions)
        names = configure(conf, tree.root)
        loaded = drivers.load_drivers(conf)
        per_driver: dict[str, list[float]] = {n: [] for n in names}
        found: dict[str, int] = {}

        def one_pass() -> None:
            if not shared_scan:
                return _drivers_pass()
            with pci.discovery_pass():
                _drivers_pass()

        def _drivers_pass() -> None:
            devices = []
            for name, driver in zip(names, loaded, strict=True):
                start = time.perf_counter()
                reported = [d.to_dict() for d in driver.discover()]
                per_driver[name].append((time.perf_counter() - start) * 1000)
                found[name] = sum(len(d['deployables']) for d in reported)
                devices.extend(reported)
            device_report.report_hash({'hostname': HOST, 'devices': devices})

        first = _timed(one_pass)
        for times in per_driver.values():
            times.clear()
        totals = [_timed(one_pass) for _ in range(passes)]
    print(f'{functions} PCI functions, {len(names)} drivers, {passes} passes '
          f'after a first one of {first:.1f} ms, '
          f'{"one scan per pass" if shared_scan else "one scan per driver"}')
    print(f'{"driver":<16} {"deployables":>11} {"median ms":>10} '
          f'{"p95 ms":>8}')
    for name in names:
        print(f'{name:<16} {found[name]:>11} '
              f'{statistics.median(per_driver[name]):>10.2f} '
              f'{_p95(per_driver[name]):>8.2f}')
    print(f'{"pass":<16} {sum(found.values()):>11} '
          f'{statistics.median(totals):>10.2f} {_p95(totals):>8.2f}')
    print(f'RSS after the passes: {_rss_mb():.1f} MB '
          f'(peak {_rss_mb("VmHWM"):.1f} MB)')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--functions', type=int, default=256)
    parser.add_argument('--passes', type=int, default=50)
    parser.add_argument('--scan-per-driver', action='store_true',
                        help='let each driver read sysfs itself, as it '
                             'does outside an agent\'s discovery pass')
    args = parser.parse_args()
    # Unmapped NIC ports and the like warn once; keep the table readable.
    logging.basicConfig(level=logging.ERROR)
    bench(args.functions, args.passes, not args.scan_per_driver)
    return 0


if __name__ == '__main__':
    sys.exit(main())
