"""Benchmark of a device layout change and of a clean after use.

Starts placement, cyborg-api, a conductor and an agent as processes
(``cyborg.tests.harness.gate_stack``) on a real RabbitMQ and a
database (MariaDB by default), and a fake Nova. The agent runs two
drivers: ``intel_nic`` over a sysfs tree of one E810 whose writes an
emulated kernel follows (``cyborg.tests.harness.sysfs_kernel``, a thread of
this process), and the fake driver with one FPGA of two attach handles. Then,
back to back, through the API at microversion 2.8:

``layout``: ``PUT /v2/devices/{uuid}/layout`` of the E810 to ``--vfs``
VFs, then back to 0, ``--cycles`` times. A PUT returns once the agent
has set the VF count, reported the new functions and the conductor has
written placement.

``unbind``: a bind and an unbind (``PATCH /v2/accelerator_requests``) of
one request whose profile asks for no cleaning: the unbind frees the
handle in its own transaction.

``clean``: the same with a profile of ``accel:clean_after_use=true``:
the unbind leaves the handle ``cleaning``, the conductor has the agent
clean it (agent RPC ``clean_handle``) and frees it. A cycle ends when
the database shows the handle free again.

For each, the latency per operation (median, p95) and the CPU time per
operation of each process, read from ``/proc``, less what it uses idle in
as long (measured first, ``--idle`` seconds); ``services`` is the sum over
cyborg-api, the conductor and the agent:

    python tools/bench/layout.py [--cycles 20] [--vfs 8] [--db mysql]
"""
import argparse
import collections
import logging
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import api
import health_latency
import requests
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.tests import utils
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'bench-layout-node'
E810 = '0000:3b:00.0'
HEADERS = {'X-Auth-Token': 'admin', 'X-Service-Roles': 'service',
           'OpenStack-API-Version': 'accelerator 2.8'}
# The processes whose CPU makes an operation's cost; the others (placement,
# the fake Nova, the database and broker servers, this process with its
# emulated kernel) are shown apart.
SERVICES = ('api', 'conductor', 'agent')
# Seconds between two looks at the database for the cleaned handle.
POLL = 0.005


class Cost:
    """The latencies and CPU seconds of the measured operations of one
    kind, added up."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.elapsed = 0.0
        self.cpu: collections.Counter = collections.Counter()

    def measure(self, func: Callable[[], Any],
                sessions: dict[int, str]) -> None:
        cpu = api.cpu_used(sessions)
        start = time.perf_counter()
        func()
        took = time.perf_counter() - start
        self.add(took, api.cpu_used(sessions) - cpu, took)

    def add(self, latency: float, cpu: collections.Counter,
            elapsed: float) -> None:
        """One operation that took ``latency`` seconds and, over a
        window of ``elapsed`` seconds, ``cpu`` (seconds per label)."""
        self.latencies.append(latency)
        self.cpu.update(cpu)
        self.elapsed += elapsed

    def row(self, name: str, idle: dict[str, float]) -> dict[str, Any]:
        """Milliseconds per operation; the CPU less the idle rate over
        the measured time."""
        ops = len(self.latencies)
        cpu = {label: max(0.0, seconds - idle.get(label, 0.0)
                          * self.elapsed) * 1000 / ops
               for label, seconds in self.cpu.items()}
        p95 = (statistics.quantiles(self.latencies, n=20,
                                    method='inclusive')[18]
               if ops > 1 else self.latencies[0])
        return {'op': name, 'ops': ops,
                'median_ms': statistics.median(self.latencies) * 1000,
                'p95_ms': p95 * 1000,
                'services_ms': sum(cpu.get(s, 0.0) for s in SERVICES),
                'cpu_ms': cpu}


def stack_of(tmp: pathlib.Path, rabbit: str, db_url: str,
             nova: api.FakeNovaProcess, node: str,
             agent: dict[str, dict[str, Any]]) -> gate_stack.Stack:
    """The processes, with the intervals and log levels of a deployment
    rather than the gate's (which polls and logs more); ``agent`` adds
    the agent's options, section by section."""
    stack = gate_stack.Stack(tmp, rabbit, db_url, nova.endpoint, nova.token)
    quiet = {'debug': 'false', 'heartbeat_interval': 10,
             'default_log_levels': ','.join(
                 gate_stack.log.get_default_log_levels())}
    stack.add_placement()
    stack.add_api()
    stack.add_conductor('conductor', extra={
        'DEFAULT': quiet, 'placement': {'sync_interval': 60}})
    stack.add_agent('agent', node, 1, 2, extra={
        **agent, 'DEFAULT': quiet,
        'agent': {'periodic_interval': 60, **agent.get('agent', {})}})
    return stack


def start(stack: gate_stack.Stack, node: str) -> str:
    """Start every process; the compute node's provider uuid."""
    stack.start('placement', 'conductor', 'api')
    gate_stack.wait_for(stack.placement_up, 'placement to answer', 60)
    root = placement_server.Placement(stack.placement_url
                                      ).create_compute_node(node)['uuid']
    stack.ready('conductor')
    stack.start('agent')
    stack.ready('agent')
    gate_stack.wait_for(stack.api_up, 'the API to answer', 60)
    return root


class Client:
    """The API as an administrator (and Nova's service role) sees it."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = requests.Session()
        self.session.headers.update(HEADERS)

    def call(self, method: str, path: str, expect: int = 200,
             **kwargs: Any) -> Any:
        answer = self.session.request(method, self.base + path, timeout=120,
                                      **kwargs)
        if answer.status_code != expect:
            raise SystemExit(f'{method} {path}: {answer.status_code} '
                             f'{answer.text}')
        return answer.json() if answer.content else None

    def device(self, kind: str, node: str = NODE) -> dict[str, Any] | None:
        found = self.call('GET', f'/devices?hostname={node}&type={kind}')
        return found['devices'][0] if found['devices'] else None


def _layout(client: Client, device: str, vfs: int, cycles: int,
            sessions: dict[int, str]) -> tuple[Cost, Cost]:
    up, down = Cost(), Cost()

    def put(count: int) -> Callable[[], Any]:
        return lambda: client.call('PUT', f'/devices/{device}/layout',
                                   json={'vf_count': count})

    for _ in range(cycles):
        up.measure(put(vfs), sessions)
        down.measure(put(0), sessions)
    return up, down


def _bind_cycles(client: Client, engine: sa.engine.Engine, profile: str,
                 rp_uuid: str, deployable: str, cycles: int,
                 sessions: dict[int, str]) -> Cost:
    """Bind and unbind one request ``cycles`` times, each until its
    handle is free again."""
    arq = client.call('POST', '/accelerator_requests', expect=201,
                      json={'device_profile_name': profile}
                      )['arqs'][0]['uuid']
    busy = sa.text(
        'SELECT COUNT(*) FROM attach_handles JOIN deployables '
        'ON attach_handles.deployable_id = deployables.id '
        'WHERE deployables.uuid = :uuid AND (attach_handles.in_use '
        'OR attach_handles.clean_state IS NOT NULL)')

    def cycle() -> None:
        instance = str(uuid.uuid4())
        client.call('PATCH', '/accelerator_requests', expect=202, json={
            arq: [{'op': 'add', 'path': '/hostname', 'value': NODE},
                  {'op': 'add', 'path': '/device_rp_uuid',
                   'value': rp_uuid},
                  {'op': 'add', 'path': '/instance_uuid',
                   'value': instance}]})
        client.call('PATCH', '/accelerator_requests', expect=202, json={
            arq: [{'op': 'remove', 'path': p}
                  for p in ('/hostname', '/device_rp_uuid',
                            '/instance_uuid')]})
        deadline = time.monotonic() + 30
        while True:
            with engine.connect() as conn:
                if not conn.execute(busy, {'uuid': deployable}).scalar():
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f'{profile}: the handle was not freed')
            time.sleep(POLL)

    cost = Cost()
    for _ in range(cycles):
        cost.measure(cycle, sessions)
    client.call('DELETE', f'/accelerator_requests/{arq}', expect=204)
    return cost


def idle_rates(sessions: dict[int, str], seconds: float) -> dict[str, float]:
    """CPU seconds per second of each label with nothing asked."""
    before = api.cpu_used(sessions)
    time.sleep(seconds)
    used = api.cpu_used(sessions) - before
    return {label: used[label] / seconds for label in used}


def bench(backend: str, transport: str, cycles: int, vfs: int,
          warmup: int, idle_seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix='cyborg-bench-layout-') as tmp, \
            health_latency.database(backend, tmp) as db_url:
        workdir = pathlib.Path(tmp)
        tree = SysfsTree(workdir / 'host')
        tree.add_function(E810, 0x8086, 0x1593, 0x020000, driver='ice',
                          sriov_totalvfs=vfs)
        (tree.device_dir(E810) / 'sriov_vf_device').write_text('1889\n')
        nova = api.FakeNovaProcess(str(workdir / 'nova.log'))
        stack = stack_of(workdir, transport, db_url, nova, NODE, {
            'agent': {'enabled_drivers': 'intel_nic,fake_driver',
                      'sysfs_root': tree.root}})
        kernel = sysfs_kernel.Kernel(tree.root,
                                     vf_drivers={'ice': 'iavf'}).start()
        engine = sa.create_engine(db_url)
        try:
            migration.upgrade('head', url=db_url)
            start(stack, NODE)
            client = Client(stack.api_url)
            nic = gate_stack.wait_for(lambda: client.device('NIC'),
                                      'the NIC in the API', 60, interval=0.5)
            fpga = gate_stack.wait_for(lambda: client.device('FPGA'),
                                       'the FPGA in the API', 60,
                                       interval=0.5)
            # The FPGA's deployable and provider; the API shows no link.
            with engine.connect() as conn:
                deployable, rp_uuid = conn.execute(sa.text(
                    'SELECT deployables.uuid, deployables.rp_uuid FROM '
                    'deployables JOIN devices ON deployables.device_id = '
                    'devices.id WHERE devices.uuid = :uuid'),
                    {'uuid': fpga['uuid']}).one()
            for name, groups in (('bench-unbind', {'resources:FPGA': '1'}),
                                 ('bench-clean', {
                                     'resources:FPGA': '1',
                                     'accel:clean_after_use': 'true'})):
                client.call('POST', '/device_profiles', expect=201,
                            json=[{'name': name, 'groups': [groups]}])
            # Each process leads a session of its own.
            sessions = {p.pid: p.kind for p in stack.processes.values()}
            sessions[nova.proc.pid] = 'Nova'

            def cycles_of(count: int) -> dict[str, Cost]:
                up, down = _layout(client, nic['uuid'], vfs, count, sessions)
                return {f'layout 0 -> {vfs} VFs': up,
                        f'layout {vfs} -> 0 VFs': down,
                        'bind + unbind': _bind_cycles(
                            client, engine, 'bench-unbind', rp_uuid,
                            deployable, count, sessions),
                        'bind + unbind + clean': _bind_cycles(
                            client, engine, 'bench-clean', rp_uuid,
                            deployable, count, sessions)}

            # Unmeasured: connection pools, caches, the first messages.
            cycles_of(warmup)
            idle = idle_rates(sessions, idle_seconds)
            measured = cycles_of(cycles)
            return {'db': backend, 'cycles': cycles, 'vfs': vfs,
                    'idle_cpu_ms_per_s': {k: v * 1000
                                          for k, v in idle.items()},
                    'calibration_ms': api.calibration(),
                    'rows': [cost.row(name, idle)
                             for name, cost in measured.items()]}
        except BaseException:
            print(stack.tails(), file=sys.stderr)
            raise
        finally:
            stack.stop_all()
            kernel.stop()
            nova.stop()
            engine.dispose()


def show(result: dict[str, Any]) -> None:
    idle = ', '.join(f'{k} {v:.1f}' for k, v in
                     sorted(result['idle_cpu_ms_per_s'].items()))
    print(f"db={result['db']} cycles={result['cycles']} "
          f"calibration {result['calibration_ms']:.0f} ms; idle CPU ms/s: "
          f'{idle}')
    print(f'{"operation":<24} {"ops":>4} {"median ms":>9} {"p95 ms":>7} '
          f'{"services CPU ms":>15}  CPU ms per op')
    for row in result['rows']:
        others = ', '.join(f'{label} {ms:.1f}' for label, ms in sorted(
            row['cpu_ms'].items(), key=lambda item: -item[1]))
        print(f"{row['op']:<24} {row['ops']:>4} {row['median_ms']:>9.1f} "
              f"{row['p95_ms']:>7.1f} {row['services_ms']:>15.1f}  "
              f'{others}')


def parser_of(description: str, each: str) -> argparse.ArgumentParser:
    """The options every bench of a whole stack's cycles takes; ``each``
    names what the cycles are counted per."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--db', choices=('sqlite', *health_latency.SERVERS),
                        default='mysql')
    parser.add_argument('--cycles', type=int, default=20,
                        help=f'measured cycles of each {each} (default: 20)')
    parser.add_argument('--warmup', type=int, default=3,
                        help='cycles run unmeasured first (default: 3)')
    parser.add_argument('--idle', type=float, default=5.0,
                        help='seconds of idle CPU measured (default: 5)')
    parser.add_argument('--transport-url',
                        default='rabbit://guest:guest@127.0.0.1:5672/')
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = parser_of(__doc__.splitlines()[0], 'operation')
    parser.add_argument('--vfs', type=int, default=8,
                        help='the VF count of a layout change (default: 8)')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    with utils.virtual_host(args.transport_url, 'cyborg-bench') as url:
        show(bench(args.db, url, args.cycles, args.vfs, args.warmup,
                   args.idle))
    return 0


if __name__ == '__main__':
    sys.exit(main())
