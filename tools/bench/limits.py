"""Benchmark of project limits in the transactions they limit.

In one process, on a real database: N creates one after the other, then
N binds by C threads at once, all of one project, each phase with limits
off and then on (``usage.Limits`` as a conductor reads them from
Keystone, far above N: every write locks the project's row and counts),
in R rounds. Prints the CPU (this process) and wall time per write:

    python tools/bench/limits.py --backend mysql postgresql -n 60 -c 8

What the services add around it (RPC, the API) is measured by
``tools/bench/api.py --limits``.
"""
import argparse
import concurrent.futures
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from oslo_config import cfg
from oslo_db.sqlalchemy import engines

import cyborg.cmd  # noqa: F401  (native threads, before oslo.service loads)
from cyborg import conf as cyborg_conf  # noqa: F401  (registers options)
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import arq_batches
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.db.api import usage
from cyborg.tests import conftest

# The most handles the fake driver gives a device.
HANDLES = 248
FAR = 2 ** 31 - 1


def _timed(calls: list[Callable[[], object]], threads: int
           ) -> tuple[float, float]:
    """CPU and wall ms per call, the calls run by ``threads`` threads."""
    cpu, wall = time.process_time(), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()
    return ((time.process_time() - cpu) * 1000 / len(calls),
            (time.perf_counter() - wall) * 1000 / len(calls))


def _round(n: int, clients: int, rp_uuid: str,
           limits: usage.Limits | None, project: str
           ) -> dict[str, tuple[float, float]]:
    ctx = cyborg_context.get_admin_context()
    made: list[str] = []
    created = _timed([lambda: made.extend(
        a['uuid'] for a in arqs.create(ctx, 'one', project, limits=limits))
        for _ in range(n)], 1)

    def bind(arq: str) -> None:
        [result] = arq_batches.apply_patches(
            cyborg_context.get_admin_context(), [arq_batches.Patch({arq: {
                'hostname': 'cmp1', 'device_rp_uuid': rp_uuid,
                'instance_uuid': str(uuid.uuid4())}}, [])], limits=limits)
        assert not isinstance(result, Exception), result

    bound = _timed([lambda a=a: bind(a) for a in made], clients)
    return {'create': created, 'bind': bound}


def run(backend: str, n: int, clients: int, rounds: int) -> None:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-bench-'))
    urls = conftest.empty_database_url(backend, workdir)
    url = next(urls)
    migration.upgrade('head', url=url)
    engine = engines.create_engine(db_api.connection_url(url),
                                   max_pool_size=clients + 2)
    undo = db_api.patch_engine(engine)
    try:
        ctx = cyborg_context.get_admin_context()
        conf = cfg.CONF
        conf.set_override('host', 'cmp1')
        conf.set_override('device_count', 1, 'fake_driver')
        conf.set_override('accelerators_per_device', HANDLES, 'fake_driver')
        inventory.apply_report(ctx, 'cmp1', {'hostname': 'cmp1', 'devices': [
            d.to_dict() for d in fake.FakeDriver(conf).discover()]})
        [device] = inventory.get_host_devices(ctx, 'cmp1')
        rp_uuid = device['deployables'][0]['rp_uuid']
        device_profiles.create(ctx, {'name': 'one',
                                     'groups': [{'resources:FPGA': '1'}]})
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for number in range(rounds):
            for kind in ('off', 'on'):
                project = f'{kind}{number}'
                limits = (usage.Limits(
                    {usage.REQUESTS: FAR, 'class:FPGA': FAR}, {project: {}})
                    if kind == 'on' else None)
                for phase, measured in _round(n, clients, rp_uuid, limits,
                                              project).items():
                    figures.setdefault((phase, kind), []).append(measured)
        for (phase, kind), measured in sorted(figures.items()):
            print(f'{backend:10} {phase:6} limits {kind:3}: CPU ms '
                  f'{statistics.median(c for c, _ in measured):.2f}, wall '
                  f'ms {statistics.median(w for _, w in measured):.2f} per '
                  f'write (median of {len(measured)} rounds)')
    finally:
        undo()
        engine.dispose()
        next(urls, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backend', nargs='+', default=['mysql'],
                        choices=('sqlite', 'mysql', 'postgresql'))
    parser.add_argument('-n', type=int, default=60,
                        help='writes of each phase and round (default: 60)')
    parser.add_argument('-c', '--clients', type=int, default=8,
                        help='threads binding at once (default: 8)')
    parser.add_argument('-r', '--rounds', type=int, default=2)
    args = parser.parse_args()
    if 2 * args.n * args.rounds > HANDLES:
        parser.error(f'2 x n x rounds must be at most {HANDLES} (handles)')
    cfg.CONF([], project='cyborg', default_config_files=[])
    for backend in args.backend:
        run(backend, args.n, args.clients, args.rounds)
    return 0


if __name__ == '__main__':
    sys.exit(main())
