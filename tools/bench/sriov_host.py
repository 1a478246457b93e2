"""Benchmark of a discovery and a health pass over an SR-IOV host of this
year: 8 GPUs × 16 vGPU VFs and 2 NICs × 64 VFs.

Builds a fake sysfs tree of 8 H100 SXM5 GPUs on vGPU software 17, each
with 16 VFs carrying the vGPU manager's files
(``cyborg.tests.harness.nvidia_vgpu_host``) and given vGPU type 1008 (8
vGPUs of 10 GB each), and 2 ConnectX-7 ports (15b3:1021 on mlx5_core,
with network interfaces) with 64 VFs each (15b3:101e) — 290 functions
with the root ports. It loads ``nvidia_gpu`` and, when it is registered,
``nvidia_nic``, as the agent does, and times passes as the agent runs
them: each driver's ``discover`` under one shared scan with the report
hashed, then ``health`` and ``usage`` of every device. It prints the
median and 95th percentile of each, and the process's resident memory
(current and peak) afterwards. Goal: under 100 ms and 80 MB.

``--devlink-health-interval`` sets ``[nvidia_nic_devices]
devlink_health_interval``: a tiny value (``1e-9``) runs devlink at every
health and usage call, to compare with the default of one run per 5 s.

    python tools/bench/sriov_host.py [--passes 50]
        [--devlink-health-interval 5]
"""
import argparse
import logging
import statistics
import sys
import tempfile
import time

import discovery

from cyborg import conf as cyborg_conf
from cyborg.accelerator import drivers
from cyborg.accelerator import pci
from cyborg.common import device_report
from cyborg.tests.harness import nvidia_vgpu_host
from cyborg.tests.harness.sysfs import SysfsTree

GPUS = 8
GPU_VFS = 16
NICS = 2
NIC_VFS = 64
VGPU_TYPE = '1008'
HOST = 'bench-sriov-host'
# One GPU per bus on both sockets, as 8-GPU HGX boards place them.
GPU_BUSES = ('18', '2a', '3a', '5d', '9a', 'ab', 'ba', 'db')
NIC_BUSES = ('4b', 'cb')


def build_tree(base: str) -> tuple[SysfsTree, list[str]]:
    """The tree, and the GPUs' addresses."""
    tree = SysfsTree(base)
    gpus = []
    for n, bus in enumerate(GPU_BUSES[:GPUS]):
        gpu = f'0000:{bus}:00.0'
        nvidia_vgpu_host.add_gpu(tree, gpu, vfs=GPU_VFS)
        gpus.append(gpu)
        tree.add_aer(gpu)
        tree.set_link(gpu)
        tree.add_function_hwmon(gpu, 'nvidia', [41000 + n * 1000])
    for n, bus in enumerate(NIC_BUSES[:NICS]):
        pf = f'0000:{bus}:00.0'
        discovery._pf_with_vfs(tree, pf, 0x15b3, 0x1021, 0x101e, 0x020000,
                               'mlx5_core', 'mlx5_core', NIC_VFS, n)
        tree.add_net_interface(pf, f'ens{n + 1}f0np0')
        tree.add_aer(pf)
        tree.set_link(pf)
    return tree, gpus


def configure(gpus: list[str]) -> list[str]:
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    names = [n for n in ('nvidia_gpu', 'nvidia_nic')
             if n in drivers.available_drivers()]
    conf.set_override('host', HOST)
    conf.set_override('enabled_drivers', names, 'agent')
    conf.set_override('enabled_vgpu_types', [VGPU_TYPE], 'gpu_devices')
    conf.set_override('vgpu_type_addresses',
                      [f'{VGPU_TYPE}:{",".join(gpus)}'], 'gpu_devices')
    return names


def bench(passes: int, devlink_interval: float | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree, gpus = build_tree(tmp)
        names = configure(gpus)
        if devlink_interval is not None and 'nvidia_nic' in names:
            cyborg_conf.CONF.set_override('devlink_health_interval',
                                          devlink_interval,
                                          'nvidia_nic_devices')
        cyborg_conf.CONF.set_override('sysfs_root', tree.root, 'agent')
        loaded = drivers.load_drivers(cyborg_conf.CONF)
        found: dict[str, list] = {}

        def discover() -> None:
            devices = []
            with pci.discovery_pass():
                for name, driver in zip(names, loaded, strict=True):
                    found[name] = driver.discover()
                    devices += [d.to_dict() for d in found[name]]
            device_report.report_hash({'hostname': HOST,
                                       'devices': devices})

        def health() -> None:
            for name, driver in zip(names, loaded, strict=True):
                for device in found[name]:
                    driver.health(device)
                    driver.usage(device)

        discover()
        health()
        discoveries = [discovery._timed(discover) for _ in range(passes)]
        healths = [discovery._timed(health) for _ in range(passes)]
        both = [d + h for d, h in zip(discoveries, healths, strict=True)]
        handles = {name: sum(len(dep.attach_handles) for d in devices
                             for dep in d.deployables)
                   for name, devices in found.items()}
    functions = GPUS * (GPU_VFS + 1) + NICS * (NIC_VFS + 1)
    print(f'{functions} PCI functions; drivers: '
          + ', '.join(f'{n} ({len(found[n])} devices, {handles[n]} handles)'
                      for n in names) + f'; {passes} passes')
    print(f'{"pass":<10} {"median ms":>10} {"p95 ms":>8}')
    for label, values in (('discovery', discoveries), ('health', healths),
                          ('both', both)):
        print(f'{label:<10} {statistics.median(values):>10.2f} '
              f'{discovery._p95(values):>8.2f}')
    print(f'RSS after the passes: {discovery._rss_mb():.1f} MB '
          f'(peak {discovery._rss_mb("VmHWM"):.1f} MB)')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--passes', type=int, default=50)
    parser.add_argument('--devlink-health-interval', type=float)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    start = time.perf_counter()
    bench(args.passes, args.devlink_health_interval)
    print(f'(ran {time.perf_counter() - start:.0f} s)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
