"""Benchmark of publishing devices to placement.

Starts a real openstack-placement on 127.0.0.1 (``noauth2``, as the tests
do, but on its own MariaDB database) and a cyborg database migrated to
head, on the same server. For H hosts
of D fake devices each it creates the compute-node providers as Nova does,
applies each host's report, then runs ``PlacementSync.sync_host`` over
every host, with T threads, and prints:

``new``
    placement calls per new device, and the time until every provider is
    in sync (providers/s);
``unchanged``
    the same reports again, applied and synced: calls per report (none
    expected);
``one change``
    one device per host with one accelerator fewer: calls per changed
    device;
``reconcile``
    one ``reconcile()`` pass over every host: calls per host.

Each size gets a new placement and new databases:

    python tools/bench/placement.py --sizes 10x10,50x10,100x20 -t 4
"""
import argparse
import concurrent.futures
import copy
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import api
from oslo_config import cfg
from oslo_db.sqlalchemy import engines

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.tests.harness import placement_server


def _report(conf: cfg.ConfigOpts, hostname: str, devices: int) -> dict:
    conf.set_override('host', _agent(hostname))
    conf.set_override('hostname', hostname, 'agent')
    conf.set_override('device_count', devices, 'fake_driver')
    return {'hostname': hostname,
            'devices': [d.to_dict() for d in fake.FakeDriver(conf).discover()]}


def _agent(hostname: str) -> str:
    return f'agent-{hostname}'


def _one_fewer(report: dict) -> dict:
    """The report with one accelerator less on its first device."""
    changed = copy.deepcopy(report)
    deployable = changed['devices'][0]['deployables'][0]
    deployable['attach_handles'].pop()
    deployable['num_accelerators'] = len(deployable['attach_handles'])
    return changed


def _size(text: str) -> tuple[int, int]:
    hosts, _, devices = text.partition('x')
    return int(hosts), int(devices)


class _Pass:
    """Runs one function per host on T threads; time and placement calls."""

    def __init__(self, sync: placement_sync.PlacementSync,
                 hostnames: list[str], threads: int) -> None:
        self.sync = sync
        self.hostnames = hostnames
        self.threads = threads

    def __call__(self, func: Callable[[str], Any]
                 ) -> tuple[float, int, list]:
        before = self.sync.client.calls
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
            results = list(pool.map(func, self.hostnames))
        return (time.perf_counter() - start,
                self.sync.client.calls - before, results)


def _print(case: str, per: float, unit: str, seconds: float,
           extra: str = '') -> None:
    print(f'  {case:<11} {per:>6.2f} calls/{unit:<7} {seconds:>7.2f} s'
          f'{extra}')


def _check_converged(hostnames: list[str], results: list) -> None:
    pending = sum(r.pending for r in results)
    left = providers.pending_hostnames(cyborg_context.get_admin_context())
    if pending or left:
        raise SystemExit(f'not in sync: {pending} provider(s) pending, '
                         f'hosts {left[:5]}')


def bench(conf: cfg.ConfigOpts, placement_url: str, hosts: int,
          devices: int, threads: int) -> None:
    placement_server.point_at(conf, placement_url)
    nova = placement_server.Placement(placement_url)
    ctx = cyborg_context.get_admin_context()
    hostnames = [f'bench-{i:04d}' for i in range(hosts)]
    for hostname in hostnames:
        nova.create_compute_node(hostname)
    reports = {h: _report(conf, h, devices) for h in hostnames}
    for hostname, report in reports.items():
        inventory.apply_report(ctx, _agent(hostname), report)
    sync = placement_sync.PlacementSync(conf)
    run = _Pass(sync, hostnames, threads)
    total = hosts * devices
    print(f'{hosts} hosts x {devices} devices, {threads} thread(s):')

    seconds, calls, results = run(sync.sync_host)
    _check_converged(hostnames, results)
    written = sum(r.written for r in results)
    if written != total:
        raise SystemExit(f'{written} provider(s) written, {total} expected')
    _print('new', calls / total, 'device', seconds,
           f'   {total / seconds:>6.0f} providers/s')

    def apply(reports_: dict) -> Callable[[str], Any]:
        # A context per call: a transaction belongs to its context.
        return lambda h: inventory.apply_report(
            cyborg_context.get_admin_context(), _agent(h), reports_[h])

    for case, reports_ in (('unchanged', reports),
                           ('one change', {h: _one_fewer(r)
                                           for h, r in reports.items()})):
        applied, _, _ = run(apply(reports_))
        seconds, calls, results = run(sync.sync_host)
        _check_converged(hostnames, results)
        unit = 'report' if case == 'unchanged' else 'device'
        _print(case, calls / hosts, unit, applied + seconds,
               f'   (apply {applied:.2f} s, sync {seconds:.2f} s)')

    before = sync.client.calls
    start = time.perf_counter()
    sync.reconcile()
    seconds = time.perf_counter() - start
    _print('reconcile', (sync.client.calls - before) / hosts, 'host',
           seconds)


def run(sizes: list[tuple[int, int]], threads: int, db_server: str,
        placement_sqlite: bool) -> None:
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    for hosts, devices in sizes:
        databases = [api._database(db_server)]
        if not placement_sqlite:
            databases.append(api._database(db_server))
        try:
            with tempfile.TemporaryDirectory(
                    prefix='cyborg-bench-placement-') as tmp, \
                    placement_server.serve(
                        pathlib.Path(tmp), None if placement_sqlite
                        else databases[1][1]) as placement:
                url = databases[0][1]
                migration.upgrade('head', url=url)
                engine = engines.create_engine(url)
                undo = db_api.patch_engine(engine)
                try:
                    bench(conf, placement, hosts, devices, threads)
                finally:
                    undo()
                    engine.dispose()
        finally:
            for name, _ in databases:
                api._admin(db_server, f'DROP DATABASE {name}')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', type=lambda s: [
        _size(size) for size in s.split(',')], default=[(20, 10)],
        help='HOSTSxDEVICES, comma-separated (default: 20x10)')
    parser.add_argument('-t', '--threads', type=int, default=1,
                        help='hosts synced at once (default: 1)')
    parser.add_argument('--db-server', default='mysql+pymysql://root@'
                                               '127.0.0.1:3306/',
                        help='where cyborg\'s database and placement\'s '
                             'are made (default: MariaDB on 127.0.0.1)')
    parser.add_argument('--placement-sqlite', action='store_true',
                        help='placement on an SQLite file instead, as in '
                             'the tests; it serialises writes, so only '
                             'with one thread')
    args = parser.parse_args(argv)
    if args.placement_sqlite and args.threads > 1:
        parser.error('--placement-sqlite takes one thread only')
    run(args.sizes, args.threads, args.db_server, args.placement_sqlite)
    return 0


if __name__ == '__main__':
    sys.exit(main())
