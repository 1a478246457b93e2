"""Benchmarks of the conductor's report handling, and the entry to the others.

Measures, for a host with N fake devices, how long the conductor takes to
apply the first report (every row is new), an unchanged report (no write
expected) and a report where one device changed, and how many SQL
statements each one sends. Run it with ``tox -e bench`` or directly:

    python tools/bench/run.py --devices 10 100 1000 --db-url sqlite://...

A first argument naming one of ``OTHERS`` runs that module of this
directory with the arguments that follow, e.g. ``tox -e bench --
discovery --passes 20``.
"""
import argparse
import copy
import importlib
import os
import statistics
import sys
import tempfile
import time

import sqlalchemy as sa
from oslo_config import cfg
from oslo_db.sqlalchemy import engines

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import inventory

# The other benchmarks of this directory, each a module with a main().
OTHERS = ('api', 'bind', 'discovery', 'expiry', 'health', 'health_latency',
          'hosts', 'layout', 'limits', 'placement', 'rabbit_cluster',
          'serialize', 'vgpu')


def _report(conf: cfg.ConfigOpts, count: int, host: str) -> dict:
    conf.set_override('host', host)
    conf.set_override('device_count', count, 'fake_driver')
    return {'hostname': host,
            'devices': [d.to_dict() for d in fake.FakeDriver(conf).discover()]}


class _Counter:
    def __init__(self, engine: sa.engine.Engine) -> None:
        self.statements = 0
        self.writes = 0
        sa.event.listen(engine, 'before_cursor_execute', self._count)

    def _count(self, conn, cursor, statement, *args) -> None:
        self.statements += 1
        if statement.lstrip()[:6].upper() in ('INSERT', 'UPDATE', 'DELETE'):
            self.writes += 1

    def reset(self) -> None:
        self.statements = self.writes = 0


def _timed(func, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return times


def _print(count: int, name: str, times: list[float],
           counter: _Counter) -> None:
    runs = len(times)
    print(f'{count:>8} {name:<10} {statistics.median(times) * 1000:>10.1f} '
          f'{counter.statements // runs:>11} {counter.writes // runs:>7}')


def bench(url: str, counts: list[int], repeat: int) -> None:
    cyborg_conf.CONF([], project='cyborg', default_config_files=[])
    ctx = cyborg_context.get_admin_context()
    print(f'database: {sa.engine.make_url(url).get_backend_name()}, '
          f'{repeat} run(s) each, 16 attach handles per device')
    print(f'{"devices":>8} {"case":<10} {"median ms":>10} {"statements":>11}'
          f' {"writes":>7}')
    for count in counts:
        migration.upgrade('head', url=url)
        engine = engines.create_engine(url, sqlite_fk=True)
        undo = db_api.patch_engine(engine)
        counter = _Counter(engine)
        host = f'bench-{count}'
        report = _report(cyborg_conf.CONF, count, host)
        changed = copy.deepcopy(report)
        changed['devices'][0]['model'] = 'changed'
        runs = iter(range(repeat))

        def first(count=count, runs=runs):
            # A new host each run, so that every row is new each time.
            name = f'bench-{count}-{next(runs)}'
            inventory.apply_report(
                ctx, name, _report(cyborg_conf.CONF, count, name))

        counter.reset()
        _print(count, 'first', _timed(first, repeat), counter)
        inventory.apply_report(ctx, host, report)
        for name, payload, runs_ in (('unchanged', report, repeat),
                                     ('one-change', changed, 1),
                                     ('unchanged', changed, repeat)):
            counter.reset()
            _print(count, name, _timed(
                lambda p=payload, h=host: inventory.apply_report(ctx, h, p),
                runs_), counter)
        inventory.apply_report(ctx, host, {'hostname': host, 'devices': []})
        undo()
        engine.dispose()


def main() -> int:
    if sys.argv[1:2] and sys.argv[1] in OTHERS:
        name = sys.argv.pop(1)
        # Its own usage and errors then read "run.py <name>".
        sys.argv[0] = f'{sys.argv[0]} {name}'
        return importlib.import_module(name).main()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--devices', type=int, nargs='+',
                        default=[10, 100, 1000])
    parser.add_argument('--db-url', help='database URL (default: a '
                                         'temporary SQLite file)')
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db_url or f'sqlite:///{os.path.join(tmp, "bench.db")}'
        bench(url, args.devices, args.repeat)
    return 0


if __name__ == '__main__':
    sys.exit(main())
