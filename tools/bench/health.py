"""Benchmark of the agent's health pass over a realistic host.

Builds the discovery benchmark's host (``--functions`` PCI functions, 256
by default, devices of every registered driver) and gives every function
what the kernel shows of its health: AER statistics and link files on
each, hwmon sensors on the GPUs, FPGAs and NVMe drives, interface
statistics on the NIC ports, ``qat/state`` on the QAT endpoints, FME error
registers and sensors on the DFL FPGAs. It loads every registered driver,
runs one discovery pass, then times health passes as the agent runs them
(each driver's ``health`` and ``usage`` of each device it found) and
prints the median and 95th percentile per pass and per driver. Goal:
under 100 ms per pass.

    python tools/bench/health.py [--functions 256] [--passes 50]
"""
import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

import discovery

from cyborg import conf as cyborg_conf
from cyborg.accelerator import drivers
from cyborg.accelerator import pci
from cyborg.tests.harness.sysfs import SysfsTree

# Device directories given hwmon sensors, by vendor and class prefix:
# NVIDIA GPUs, Xilinx and Intel FPGAs, NVMe drives.
_HWMON = (('0x10de', '0x03'), ('0x10ee', '0x12'), ('0x8086', '0x12'),
          ('', '0x010802'))


def add_health_files(tree: SysfsTree) -> None:
    """Every function's health files, as a host's kernel shows them."""
    bus = pci.PciBus(tree.root, udev=False)
    for n, function in enumerate(bus.functions()):
        rel = os.path.relpath(function.sysfs_path, tree.base)
        tree.add_aer(function.address, correctable=n % 3)
        tree.set_link(function.address, '8.0 GT/s PCIe', 16)
        if any(function.vendor_id.startswith(vendor)
               and function.class_code.startswith(prefix)
               for vendor, prefix in _HWMON) and not function.is_vf:
            tree.add_hwmon(rel, 'device', [45000 + n * 10, 47000],
                           power_average=35_000_000)
        if function.driver == 'c6xx':
            tree.set_qat_state(function.address, 'up')
        net = os.path.join(function.sysfs_path, 'net')
        for interface in (os.listdir(net) if os.path.isdir(net) else ()):
            tree.write(f'{rel}/net/{interface}/operstate', 'up')
            tree.write(f'{rel}/net/{interface}/carrier', 1)
            for stat in ('rx_bytes', 'tx_bytes', 'rx_errors', 'tx_errors',
                         'rx_dropped', 'tx_dropped'):
                tree.write(f'{rel}/net/{interface}/statistics/{stat}',
                           1000 * n)
        for region in sorted(tree.path(rel).glob('fpga_region/region*')):
            fme = f'{region.relative_to(tree.base)}/dfl-fme.0'
            tree.add_fme_errors(fme)
            tree.add_hwmon(fme, 'dfl_fme_thermal', [52000])
            tree.add_hwmon(fme, 'dfl_fme_power', power_input=61_500_000)


def bench(functions: int, passes: int) -> None:
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    with tempfile.TemporaryDirectory() as tmp:
        tree = discovery.build_tree(tmp, functions)
        add_health_files(tree)
        names = discovery.configure(conf, tree.root)
        loaded = drivers.load_drivers(conf)
        with pci.discovery_pass():
            found = {name: driver.discover()
                     for name, driver in zip(names, loaded, strict=True)}
        per_driver: dict[str, list[float]] = {n: [] for n in names}
        states: dict[str, int] = {}

        def one_pass() -> None:
            states.clear()
            for name, driver in zip(names, loaded, strict=True):
                start = time.perf_counter()
                for device in found[name]:
                    health = driver.health(device)
                    driver.usage(device)
                    state = health.state if health else 'none'
                    states[state] = states.get(state, 0) + 1
                per_driver[name].append((time.perf_counter() - start)
                                        * 1000)

        first = discovery._timed(one_pass)
        for times in per_driver.values():
            times.clear()
        totals = [discovery._timed(one_pass) for _ in range(passes)]
    print(f'{functions} PCI functions, {len(names)} drivers, {passes} health '
          f'passes after a first one of {first:.1f} ms; states: '
          + ', '.join(f'{k} {v}' for k, v in sorted(states.items())))
    print(f'{"driver":<16} {"devices":>7} {"median ms":>10} {"p95 ms":>8}')
    for name in names:
        print(f'{name:<16} {len(found[name]):>7} '
              f'{statistics.median(per_driver[name]):>10.2f} '
              f'{discovery._p95(per_driver[name]):>8.2f}')
    print(f'{"pass":<16} {sum(len(d) for d in found.values()):>7} '
          f'{statistics.median(totals):>10.2f} '
          f'{discovery._p95(totals):>8.2f}')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--functions', type=int, default=256)
    parser.add_argument('--passes', type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    bench(args.functions, args.passes)
    return 0


if __name__ == '__main__':
    sys.exit(main())
