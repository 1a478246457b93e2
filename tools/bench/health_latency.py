"""Benchmark of how fast a device health change reaches placement.

In one process: a cyborg database (SQLite, or a throw-away one on the
machine's MariaDB or PostgreSQL), a real placement
(``cyborg.tests.harness.placement_server``), a ``ConductorManager``, and
an agent's
``ResourceTracker`` and ``HealthMonitor`` over ``FakeDriver`` devices,
joined by a shim that calls the manager where the agent makes RPC calls.
``fault``/``clear``: a fault for one device written to (then removed from)
``[fake_driver] fault_file``; the health pass's duration and the time
until placement shows the device's inventory reserved (then free).
``unchanged``: passes with nothing changed; database writes, placement and
conductor calls (none expected) and CPU time per pass. Issue 18: a change
in placement under 2 s, counting ``[agent] health_interval`` (the agent
sees a change at its next pass).

    python tools/bench/health_latency.py [--db sqlite|mysql|postgresql]
        [--devices 8] [--repeat 20] [--passes 50] [--unchanged 8 256]
"""
import argparse
import contextlib
import json
import logging
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any
from typing import cast

import api
import run
from oslo_config import cfg
from oslo_db.sqlalchemy import engines

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import health
from cyborg.agent import resource_tracker
from cyborg.common.device_health import DeviceSample
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import inventory
from cyborg.tests.harness import placement_server

SERVERS = {'mysql': 'mysql+pymysql://root@127.0.0.1:3306/',
           'postgresql': 'postgresql+psycopg2://postgres@127.0.0.1:5432/'}


@contextlib.contextmanager
def database(backend: str, tmp: str) -> Iterator[str]:
    """A new empty database's URL, dropped afterwards."""
    if backend == 'sqlite':
        yield f'sqlite:///{tmp}/cyborg.sqlite'
        return
    name, url = api._database(SERVERS[backend])
    try:
        yield url
    finally:
        # Every connection to it is closed by then (engine disposed).
        api._admin(SERVERS[backend], f'DROP DATABASE {name}')


class Conductor:
    """The RPC edge: ConductorAPI's signatures, calling the endpoints of
    the conductor's parts."""

    def __init__(self, manager: conductor_manager.ConductorManager) -> None:
        served = manager.endpoints()
        self.hosts = next(e for e in served if hasattr(e, 'report_data'))
        self.devices = next(e for e in served
                            if hasattr(e, 'device_health_update'))
        self.calls = 0

    def report_data(self, context: Any, host: str,
                    report: dict[str, Any]) -> dict[str, int]:
        self.calls += 1
        return self.hosts.report_data(context, host, report)

    def device_health_update(self, context: Any, host: str,
                             updates: list[dict[str, Any]]) -> int:
        self.calls += 1
        return self.devices.device_health_update(context, host, updates)

    def host_bindings(self, context: Any, host: str) -> list[dict[str, Any]]:
        self.calls += 1
        return self.hosts.host_bindings(context, host)


class Sink:
    """Metrics that keep nothing: the monitor labels samples as an agent
    with ``[agent] metrics_port`` does (one host_bindings a minute)."""

    def update(self, samples: list[DeviceSample]) -> None:
        pass


def host(conf: cfg.ConfigOpts, manager: conductor_manager.ConductorManager,
         nova: placement_server.Placement, count: int
         ) -> tuple[health.HealthMonitor, Conductor]:
    """A compute node of ``count`` fake devices, registered through the
    agent's first report, and its health monitor after a first pass (which
    sends every device's health: the conductor has none yet)."""
    node = nova.create_compute_node()['name']
    conf.set_override('host', f'agent-{node}')
    conf.set_override('hostname', node, 'agent')
    conf.set_override('device_count', count, 'fake_driver')
    shim = Conductor(manager)
    rpc = cast(conductor_rpcapi.ConductorAPI, shim)
    tracker = resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf)], rpc)
    if (tracker.update() or {}).get('placement_pending', -1):
        raise SystemExit('placement did not take the host')
    monitor = health.HealthMonitor(conf, tracker, rpc, metrics=Sink())
    monitor.run()
    return monitor, shim


def _write(path: str, faults: dict[str, Any]) -> None:
    # Replaced whole: the driver reads the file at every pass.
    with open(path + '.tmp', 'w', encoding='utf-8') as f:
        json.dump(faults, f)
    os.replace(path + '.tmp', path)


def _ms(times: list[float]) -> dict[str, float]:
    p95 = (statistics.quantiles(times, n=20, method='inclusive')[18]
           if len(times) > 1 else times[0])
    return {'median': round(statistics.median(times) * 1000, 1),
            'p95': round(p95 * 1000, 1), 'max': round(max(times) * 1000, 1)}


def latency(conf: cfg.ConfigOpts, monitor: health.HealthMonitor,
            nova: placement_server.Placement, repeat: int
            ) -> dict[str, dict[str, dict[str, float]]]:
    ctx = cyborg_context.get_admin_context()
    device = inventory.get_host_devices(ctx, conf.host)[0]
    slot = '{domain}:{bus}:{device}.{function}'.format(
        **device['controlpath_id']['cpid_info'])
    rp = device['deployables'][0]['rp_uuid']
    times: dict[str, tuple[list[float], list[float]]] = {
        'fault': ([], []), 'clear': ([], [])}

    def reserved(full: bool) -> bool:
        return all((inv['reserved'] == inv['total']) == full
                   for inv in nova.inventories(rp).values())

    for _ in range(repeat):
        for case, faults in (('fault', {slot: {
                'state': 'unhealthy', 'reason': 'bench: AER fatal'}}),
                             ('clear', {})):
            _write(conf.fake_driver.fault_file, faults)
            start = time.perf_counter()
            monitor.run()
            ran = time.perf_counter() - start
            while not reserved(case == 'fault'):
                if time.perf_counter() - start > 30:
                    raise SystemExit(f'{case}: placement never followed')
                time.sleep(0.005)
            times[case][0].append(ran)
            times[case][1].append(time.perf_counter() - start)
    return {case: {'run_ms': _ms(run), 'placement_ms': _ms(seen)}
            for case, (run, seen) in times.items()}


def unchanged(monitor: health.HealthMonitor, shim: Conductor,
              manager: conductor_manager.ConductorManager,
              writes: run._Counter, passes: int) -> dict[str, Any]:
    assert manager.placement is not None
    before = (writes.statements, writes.writes,
              manager.placement.client.calls, shim.calls)
    walls = []
    cpu = time.process_time()
    for _ in range(passes):
        start = time.perf_counter()
        monitor.run()
        walls.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    after = (writes.statements, writes.writes,
             manager.placement.client.calls, shim.calls)
    statements, db_writes, calls, rpc = (a - b for a, b in zip(
        after, before, strict=True))
    return {'passes': passes, 'cpu_ms_per_pass': round(cpu / passes * 1000, 2),
            'wall_ms': _ms(walls), 'db_statements': statements,
            'db_writes': db_writes, 'placement_calls': calls,
            'conductor_calls': rpc}


def bench(backend: str, devices: int, repeat: int, passes: int,
          sizes: list[int]) -> dict[str, Any]:
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    with tempfile.TemporaryDirectory(prefix='cyborg-bench-health-') as tmp, \
            placement_server.serve(pathlib.Path(tmp)) as url, \
            database(backend, tmp) as db_url:
        conf.set_override('state_path', tmp)
        conf.set_override('fault_file', f'{tmp}/faults.json', 'fake_driver')
        migration.upgrade('head', url=db_url)
        engine = engines.create_engine(db_api.connection_url(db_url),
                                       sqlite_fk=True)
        undo = db_api.patch_engine(engine)
        try:
            writes = run._Counter(engine)
            placement_server.point_at(conf, url)
            manager = conductor_manager.ConductorManager(conf)
            nova = placement_server.Placement(url)
            monitor, _ = host(conf, manager, nova, devices)
            result: dict[str, Any] = {
                'db': backend, 'devices': devices, 'repeat': repeat,
                'health_interval_s': conf.agent.health_interval,
                'latency': latency(conf, monitor, nova, repeat),
                'unchanged': {}}
            for size in sizes:
                monitor, shim = host(conf, manager, nova, size)
                result['unchanged'][size] = unchanged(
                    monitor, shim, manager, writes, passes)
        finally:
            undo()
            engine.dispose()
    return result


def show(result: dict[str, Any]) -> None:
    print(f"db={result['db']} devices={result['devices']} "
          f"repeat={result['repeat']}  (ms: median / p95 / max)")
    print(f'{"case":<8} {"run() ms":>22} {"placement shows it ms":>24}')
    for case, times in result['latency'].items():
        ran, seen = (' / '.join(f'{v:.1f}' for v in times[k].values())
                     for k in ('run_ms', 'placement_ms'))
        print(f'{case:<8} {ran:>22} {seen:>24}')
    interval = result['health_interval_s']
    worst = result['latency']['fault']['placement_ms']['max']
    # The agent sees a fault only at its next pass.
    print(f'worst case fault->placement = [agent] health_interval '
          f'{interval:g} s + {worst:.0f} ms = '
          f'{interval * 1000 + worst:.0f} ms')
    print(f'{"unchanged":<10} {"passes":>6} {"cpu ms/pass":>11} '
          f'{"wall med ms":>11} {"db writes":>9} {"db stmts":>8} '
          f'{"placement":>9} {"conductor":>9}')
    for size, row in result['unchanged'].items():
        print(f'{size:>4} devs  {row["passes"]:>6} '
              f'{row["cpu_ms_per_pass"]:>11.2f} '
              f'{row["wall_ms"]["median"]:>11.2f} {row["db_writes"]:>9} '
              f'{row["db_statements"]:>8} {row["placement_calls"]:>9} '
              f'{row["conductor_calls"]:>9}')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--db', choices=('sqlite', *SERVERS),
                        default='sqlite')
    parser.add_argument('--devices', type=int, default=8,
                        help='fake devices of the latency host')
    parser.add_argument('--repeat', type=int, default=20)
    parser.add_argument('--passes', type=int, default=50,
                        help='unchanged passes per size')
    parser.add_argument('--unchanged', type=int, nargs='+', default=[8, 256],
                        help='fake devices of the unchanged-pass hosts')
    parser.add_argument('--json', action='store_true')
    args = parser.parse_args(argv)
    # The conductor logs each health change as a warning.
    logging.basicConfig(level=logging.ERROR)
    result = bench(args.db, args.devices, args.repeat, args.passes,
                   args.unchanged)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        show(result)
    return 0


if __name__ == '__main__':
    sys.exit(main())
