"""Benchmark of many compute hosts against conductors and real placement.

One process speaks the agent's RPC as H hosts of D fake devices each
(``cyborg.tests.harness.simulated_hosts``) against ``--conductors``
cyborg-conductor
processes on MariaDB, a RabbitMQ virtual host of its own and a real
openstack-placement (``--placement-workers`` waitress processes, on one
MariaDB database, each conductor calling one of them). It creates each
host's compute-node provider as Nova does, then:

``register``
    every host's first report, ``-c`` at a time; the time until all are
    taken and until every provider is in placement (the deployables'
    sync state), and the placement calls per new device (counted by the
    placement server);
``idle``
    nothing sent for ``--idle-seconds``: what the servers burn anyway
    (and, for MariaDB and RabbitMQ, what other users of them burn);
``heartbeats``, ``reports``
    only heartbeats (every ``--heartbeat-interval``), then only unchanged
    full reports (every host once in the window, after 2N - 1 unmeasured
    windows of the same for N conductors): server CPU per heartbeat and
    per unchanged report, over the idle window;
``steady``
    both at their intervals for ``--steady-seconds``: server CPU in % of
    one core, per 1,000 hosts.

CPU is read from /proc for every server process: the conductors,
placement, MariaDB and RabbitMQ. MariaDB's is also split by connection
(its threads, one per connection, found by ``information_schema.
PROCESSLIST.TID``): ``MariaDB (cyborg)`` and ``MariaDB (placement)`` are
the threads serving this run's databases, so other users of the shared
server do not count there. RabbitMQ cannot be split: its figure
(``RabbitMQ broker``, the server process alone) is over the idle
window's. The machine's other users (tests, other benchmarks) disturb
MariaDB's total and RabbitMQ's figures.

    python tools/bench/hosts.py -H 2000 -d 8 --json hosts.json
"""
import argparse
import collections
import contextlib
import glob
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

import api
import sqlalchemy as sa

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import conf as cyborg_conf
from cyborg.common import rpc
from cyborg.conductor import rpcapi
from cyborg.db import migration
from cyborg.tests import utils
from cyborg.tests.harness import placement_server
from cyborg.tests.harness import simulated_hosts

# The label of the RabbitMQ server; other beam.smp processes (rabbitmqctl
# runs of other users of the machine) are 'RabbitMQ'.
BROKER = 'RabbitMQ broker'


def _oldest(*names: str) -> int | None:
    """The pid of the longest-running process with one of ``names``: the
    server, not a CLI tool of the same executable (rabbitmqctl runs
    beam.smp too)."""
    found = [(int(fields[19]), pid)
             for pid, comm, fields in api.proc_stats() if comm in names]
    return min(found)[1] if found else None


def _children(marker: str) -> list[int]:
    """The pids of this process's children whose command line holds
    ``marker``."""
    found = []
    for path in glob.glob('/proc/[0-9]*/stat'):
        try:
            with open(path) as f:
                fields = f.read().rsplit(')', 1)[1].split()
            pid = int(path.split('/')[2])
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                cmdline = f.read()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and marker.encode() in cmdline:
            found.append(pid)
    return found


class _Placements:
    """``count`` placement processes on one database; calls summed."""

    def __init__(self, workdir: pathlib.Path, database_url: str,
                 count: int) -> None:
        self.stack = contextlib.ExitStack()
        self.urls = []
        for i in range(count):
            path = workdir / f'placement-{i}'
            path.mkdir()
            # One after the other: each syncs the schema at its start.
            self.urls.append(self.stack.enter_context(
                placement_server.serve(path, database_url)))
        self.clients = [placement_server.Placement(u) for u in self.urls]

    def calls(self) -> int:
        return sum(client.calls() for client in self.clients)

    def close(self) -> None:
        self.stack.close()


class MariaDBThreads:
    """CPU seconds of the MariaDB threads serving some databases."""

    def __init__(self, server_url: str, databases: dict[str, str]) -> None:
        self.engine = sa.create_engine(server_url)
        self.databases = databases
        self.pid = _oldest('mariadbd', 'mysqld')

    def sample(self) -> tuple[dict[int, float], dict[int, str]]:
        """CPU seconds so far of every MariaDB thread, and the label of
        each thread serving one of the databases."""
        if self.pid is None:
            return {}, {}
        with self.engine.connect() as conn:
            rows = conn.execute(sa.text(
                'SELECT TID, DB FROM information_schema.PROCESSLIST')).all()
        tick = os.sysconf('SC_CLK_TCK')
        used = {}
        for path in glob.glob(f'/proc/{self.pid}/task/[0-9]*/stat'):
            try:
                with open(path) as f:
                    fields = f.read().rsplit(')', 1)[1].split()
            except OSError:
                continue
            used[int(path.split('/')[4])] = (
                int(fields[11]) + int(fields[12])) / tick
        return used, {tid: self.databases[db] for tid, db in rows
                      if db in self.databases}

    @staticmethod
    def delta(before: tuple[dict[int, float], dict[int, str]],
              after: tuple[dict[int, float], dict[int, str]]
              ) -> collections.Counter:
        """CPU per label between two samples, of the threads serving the
        databases at the end. MariaDB hands a new connection a cached
        thread, with the CPU of its earlier connections: a thread counts
        from its first sample, and one that came in between from zero.
        A connection that went in between is lost (connections live in
        pools, so few come and go)."""
        used: collections.Counter = collections.Counter()
        for tid, label in after[1].items():
            if tid in after[0]:
                used[label] += after[0][tid] - before[0].get(tid, 0.0)
        return used


class Meter:
    """Server CPU over a window, by process."""

    def __init__(self, sessions: dict[int, str],
                 threads: MariaDBThreads) -> None:
        self.sessions = sessions
        self.threads = threads

    def __enter__(self) -> 'Meter':
        self._cpu = api.cpu_used(self.sessions)
        self._threads = self.threads.sample()
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.monotonic() - self._start
        self.cpu = api.cpu_used(self.sessions) - self._cpu
        self.cpu.update(self.threads.delta(self._threads,
                                           self.threads.sample()))

    def servers(self) -> dict[str, float]:
        """CPU seconds of each server process label (and each MariaDB
        database's threads)."""
        return {label: seconds for label, seconds in self.cpu.items()
                if label != 'clients'}


# What this run's servers burn: RabbitMQ serves other users too and is
# counted over its idle rate; the others are this run's alone.
OURS = ('conductors', 'placement', 'MariaDB (cyborg)', 'MariaDB (placement)')


def _attributable(window: Meter, idle: Meter, over_idle: bool = False
                  ) -> float:
    """Server CPU seconds of ``window`` that this run caused: conductors,
    placement and this run's MariaDB threads as measured (``over_idle``:
    less what they burn idle, for the cost of what was sent), RabbitMQ
    over the idle window's rate."""
    cpu, quiet = window.servers(), idle.servers()
    scale = window.seconds / idle.seconds
    used = max(0.0, cpu.get(BROKER, 0.0) - quiet.get(BROKER, 0.0) * scale)
    for label in OURS:
        used += cpu.get(label, 0.0) - (
            quiet.get(label, 0.0) * scale if over_idle else 0.0)
    return used


def _per_op(window: Meter, idle: Meter, count: int) -> dict[str, float]:
    """CPU ms per item sent in ``window``, by server, over idle."""
    cpu, quiet = window.servers(), idle.servers()
    scale = window.seconds / idle.seconds
    return {label: round(max(0.0, cpu.get(label, 0.0) - quiet.get(
        label, 0.0) * scale) * 1000 / max(1, count), 3)
        for label in (*OURS, BROKER)}


def _percent(window: Meter, idle: Meter | None, hosts: int
             ) -> dict[str, float]:
    """% of one core per 1,000 hosts, by server; RabbitMQ over idle."""
    per = 100 / window.seconds * 1000 / hosts
    cpu = window.servers()
    result = {label: seconds * per for label, seconds in sorted(cpu.items())}
    if idle is not None:
        result[f'{BROKER} over idle'] = max(0.0, (
            cpu.get(BROKER, 0.0) - idle.servers().get(BROKER, 0.0)
            * window.seconds / idle.seconds) * per)
        result['attributable'] = _attributable(window, idle) * per
    return result


def _in_placement(engine: sa.engine.Engine) -> tuple[int, int]:
    """Deployables with a provider, and those of them in sync."""
    with engine.connect() as conn:
        return tuple(conn.execute(sa.text(
            'SELECT COUNT(*), COUNT(rp_synced) FROM deployables '
            'WHERE rp_uuid IS NOT NULL')).one())


def _wait_placed(engine: sa.engine.Engine, total: int,
                 timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with_rp, synced = _in_placement(engine)
        if with_rp == total and synced == total:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f'{synced} of {total} providers in placement '
                             f'after {timeout:.0f} s')
        time.sleep(0.2)


def _wait_conductors(engine: sa.engine.Engine, count: int,
                     timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            up = conn.execute(sa.text(
                "SELECT COUNT(*) FROM services WHERE `binary` = "
                "'cyborg-conductor'")).scalar()
        if up >= count:
            return
        time.sleep(0.2)
    raise SystemExit(f'{count} conductor(s) did not start in {timeout} s')


def _heartbeats_recorded(engine: sa.engine.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT COUNT(*) FROM services WHERE `binary` = "
            "'cyborg-agent'")).scalar()


def _print_cpu(name: str, meter: Meter, hosts: int,
               idle: Meter | None) -> None:
    shares = _percent(meter, idle, hosts)
    print(f'  {name:<11} {meter.seconds:6.1f} s   % of a core per 1,000 '
          'hosts: ' + ', '.join(f'{label} {value:.1f}'
                                for label, value in shares.items()))


def run(args: argparse.Namespace, transport: str) -> dict[str, Any]:
    hosts, devices = args.hosts, args.devices
    databases = {}
    cyborg_db, cyborg_url = api._database(args.db_server)
    databases[cyborg_db] = 'MariaDB (cyborg)'
    placement_db, placement_url = api._database(args.db_server)
    databases[placement_db] = 'MariaDB (placement)'
    migration.upgrade('head', url=cyborg_url)
    engine = sa.create_engine(cyborg_url)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-bench-hosts-'))
    print(f'logs in {tmp}')
    procs = []
    try:
        placements = _Placements(tmp, placement_url, args.placement_workers)
        try:
            nova = placements.clients[0]
            hostnames = [f'sim-{i:05d}' for i in range(hosts)]
            start = time.perf_counter()
            for hostname in hostnames:
                nova.create_compute_node(hostname)
            print(f'{hosts} compute nodes made in '
                  f'{time.perf_counter() - start:.1f} s')
            exchange = f'bench-hosts-{os.getpid()}'
            conf_file = str(tmp / 'cyborg.conf')
            sections: dict[str, dict] = {
                'DEFAULT': {'transport_url': transport,
                            'control_exchange': exchange},
                'database': {'connection': cyborg_url}}
            for i in range(args.conductors):
                # Several placement processes: each conductor its own.
                url = placements.urls[i % len(placements.urls)]
                sections['DEFAULT']['host'] = f'conductor-{i}'
                sections['placement'] = {
                    'auth_type': 'admin_token', 'endpoint': url,
                    'endpoint_override': url, 'token': 'admin'}
                api.write_config(conf_file + f'.{i}', sections,
                                 args.option)
                procs.append(api._start('cyborg.cmd.conductor',
                                        conf_file + f'.{i}',
                                        str(tmp / f'conductor-{i}.log')))
            sessions = {proc.pid: 'conductors' for proc in procs}
            for pid in _children(placement_server.CALLS_PATH):
                sessions[pid] = 'placement'
            broker = _oldest('beam.smp')
            if broker is not None:
                sessions[broker] = BROKER
            meter = MariaDBThreads(args.db_server, databases)
            _wait_conductors(engine, args.conductors)

            conf = cyborg_conf.CONF
            conf([], project='cyborg', default_config_files=[])
            rpc.set_defaults(exchange)
            rpc.init(conf, transport)
            sim = simulated_hosts.SimulatedHosts(
                conf, rpcapi.ConductorAPI(conf), hostnames, devices)
            print(f'{hosts} hosts x {devices} devices, {args.conductors} '
                  f'conductor(s), {args.concurrency} report(s) at once; '
                  f'calibration {api.calibration():.0f} ms:')
            calls = placements.calls()
            with Meter(sessions, meter) as registering:
                results = sim.register(args.concurrency)
                registered = time.monotonic() - registering._start
                _wait_placed(engine, hosts * devices, args.place_timeout)
            placement_calls = placements.calls() - calls
            added = sum(r['devices_added'] for r in results)
            if added != hosts * devices:
                raise SystemExit(f'{added} devices added, '
                                 f'{hosts * devices} expected')
            total = hosts * devices
            per_device = (placement_calls - hosts) / total
            server_cpu = sum(registering.servers().get(label, 0.0)
                             for label in ('conductors', 'placement',
                                           'MariaDB (cyborg)',
                                           'MariaDB (placement)'))
            print(f'  register    {registered:6.1f} s, all placed '
                  f'{registering.seconds:6.1f} s: '
                  f'{total / registering.seconds:.0f} providers/s, '
                  f'{placement_calls / total:.2f} placement calls per '
                  f'device ({per_device:.2f} + 1 per host)')
            busy = {label: seconds / registering.seconds
                    for label, seconds in registering.servers().items()}
            print('              CPU ms per provider (% of a core): '
                  + ', '.join(f'{label} {seconds * 1000 / total:.1f} '
                              f'({busy[label] * 100:.0f} %)'
                              for label, seconds in
                              sorted(registering.servers().items())))
            print(f'              10,000 x 8 at this rate: '
                  f'{10000 * 8 / (total / registering.seconds) / 60:.0f} '
                  f'min; busiest: {max(busy, key=busy.get)}')

            with Meter(sessions, meter) as idle:
                time.sleep(args.idle_seconds)
            _print_cpu('idle', idle, hosts, None)
            with Meter(sessions, meter) as beating:
                sent_hb = sim.steady(args.unit_seconds,
                                     args.heartbeat_interval, None)
            _print_cpu('heartbeats', beating, hosts, idle)
            # Unmeasured: each conductor learns that a host is unchanged
            # from a full report of it (see cyborg.conductor.reports), and
            # a host's reports go to any conductor: after 2N - 1 passes
            # most hosts have met each of N conductors.
            for _ in range(2 * args.conductors - 1):
                sim.steady(args.unit_seconds, None, args.unit_seconds,
                           args.concurrency)
            calls = placements.calls()
            with Meter(sessions, meter) as reporting:
                sent_rep = sim.steady(args.unit_seconds, None,
                                      args.unit_seconds, args.concurrency)
            report_calls = placements.calls() - calls
            _print_cpu('reports', reporting, hosts, idle)
            with Meter(sessions, meter) as steady:
                sent = sim.steady(args.steady_seconds,
                                  args.heartbeat_interval,
                                  args.report_interval)
            _print_cpu('steady', steady, hosts, idle)
            recorded = _heartbeats_recorded(engine)
            hb_ms = _attributable(beating, idle, True) * 1000 / max(
                1, sent_hb.heartbeats)
            rep_ms = _attributable(reporting, idle, True) * 1000 / max(
                1, sent_rep.reports)
            print(f'  per heartbeat {hb_ms:.2f} CPU ms '
                  f'({sent_hb.heartbeats} sent, lag '
                  f'{sent_hb.max_lag:.2f} s); per unchanged report '
                  f'{rep_ms:.2f} CPU ms ({sent_rep.reports} sent, '
                  f'{report_calls} placement calls); {recorded} agents '
                  f'recorded; steady sent {sent.heartbeats} heartbeats, '
                  f'{sent.reports} reports, {sent.failures} failed')
            for what, window, count in (
                    ('heartbeat', beating, sent_hb.heartbeats),
                    ('unchanged report', reporting, sent_rep.reports)):
                print(f'  CPU ms per {what}: ' + ', '.join(
                    f'{label} {ms:.2f}' for label, ms in
                    _per_op(window, idle, count).items()))
            rate = total / registering.seconds
            result = {
                'hosts': hosts, 'devices': devices,
                'conductors': args.conductors,
                'calibration_ms': round(api.calibration()),
                'register_seconds': round(registered, 2),
                'placed_seconds': round(registering.seconds, 2),
                'providers_per_second': round(rate, 1),
                'placement_calls_per_device': round(
                    placement_calls / total, 3),
                'placement_calls_per_new_device_beyond_host': round(
                    per_device, 3),
                'register_server_cpu_ms_per_host': round(
                    server_cpu * 1000 / hosts, 1),
                'register_cpu_seconds': {
                    k: round(v, 2)
                    for k, v in registering.servers().items()},
                'extrapolated_10000x8_seconds': round(
                    10000 * 8 / rate, 0),
                'register_cpu_ms_per_provider': {
                    label: round(seconds * 1000 / total, 2)
                    for label, seconds in registering.servers().items()},
                'heartbeat_cpu_ms': round(hb_ms, 3),
                'heartbeat_cpu_ms_by_process': _per_op(
                    beating, idle, sent_hb.heartbeats),
                'unchanged_report_cpu_ms': round(rep_ms, 3),
                'unchanged_report_cpu_ms_by_process': _per_op(
                    reporting, idle, sent_rep.reports),
                'unchanged_report_placement_calls': report_calls,
                'idle_percent_per_1000_hosts': _percent(idle, None, hosts),
                'steady_percent_per_1000_hosts': _percent(steady, idle,
                                                          hosts),
                'steady_sent': {'heartbeats': sent.heartbeats,
                                'reports': sent.reports,
                                'failures': sent.failures},
                'agents_recorded': recorded,
            }
            rpc.cleanup()
            return result
        finally:
            api.stop(procs)
            placements.close()
    finally:
        engine.dispose()
        for name in databases:
            api._admin(args.db_server, f'DROP DATABASE {name}')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-H', '--hosts', type=int, default=200)
    parser.add_argument('-d', '--devices', type=int, default=8,
                        help='fake devices per host (default: 8)')
    parser.add_argument('-c', '--concurrency', type=int, default=16,
                        help='reports in flight at once (default: 16)')
    parser.add_argument('--conductors', type=int, default=2)
    parser.add_argument('--placement-workers', type=int, default=1,
                        help='placement processes on its database, the '
                             'conductors spread over them (default: 1)')
    parser.add_argument('--heartbeat-interval', type=float, default=10)
    parser.add_argument('--report-interval', type=float, default=600,
                        help='seconds between two unchanged full reports '
                             'of a host in the steady window (default: '
                             '600, [agent] full_report_interval)')
    parser.add_argument('--steady-seconds', type=float, default=60)
    parser.add_argument('--unit-seconds', type=float, default=30,
                        help='length of the heartbeat-only and the '
                             'report-only windows (default: 30)')
    parser.add_argument('--idle-seconds', type=float, default=20)
    parser.add_argument('--place-timeout', type=float, default=1800)
    api.service_options(parser, services='conductors\'')
    parser.add_argument('--json', help='write the results to this file')
    args = parser.parse_args(argv)
    with utils.virtual_host(args.transport_url, 'cyborg-bench') as url:
        result = run(args, url)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
