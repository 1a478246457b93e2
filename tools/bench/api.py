"""Benchmark of the accelerator-request life cycle through the REST API.

Starts ``cyborg-api`` and ``cyborg-conductor`` as processes on a real
database and message broker (MariaDB and RabbitMQ by default), seeds fake
devices with enough attach handles, then runs N accelerator requests
through the four phases Nova drives — create, bind, list by instance,
delete by instance — with C concurrent clients, and prints ops/s, the
latency percentiles and the CPU time per request (of the API, the
conductors, the database and broker servers and the clients) of each
phase. Binds post their events to a fake Nova in a process of its own:

    python tools/bench/api.py -n 100 1000 10000 -c 8 -w 2 --conductors 2

``--json PATH`` also writes the key figures of every run (per phase: ops/s,
CPU ms per request by process, latency percentiles) to PATH as one JSON
object.

``--trace-key KEY`` signs every request with KEY, as ``openstack
--os-profile KEY`` does (all in one trace): with ``-o profiler.enabled=true
-o profiler.hmac_keys=KEY -o profiler.connection_string=redis://...`` it
measures requests traced through every process (see
``cyborg.common.profiler``).

``--server uwsgi`` serves the API as devstack deploys it, the WSGI module
under uwsgi (a test requirement), instead of the ``cyborg-api`` command.
With N below ``--min-requests`` the cycle runs in rounds of N until each
phase has measured that many requests.

``--limits`` runs a Keystone too (its database on the MariaDB of
CYBORG_TEST_MYSQL_URL) with
registered limits far above N, and the conductors with ``[quota] driver
= unified_limits`` reading them: what project limits cost, compared with
a run without it. Keystone's own CPU is not counted (a conductor asks it
a few times every ``[quota] cache_seconds``).
"""
import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import glob
import http.client
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator

import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import inventory
from cyborg.tests import utils
from cyborg.tests.harness import bind_load
from cyborg.tests.harness import gate_stack
from cyborg.tests.nova_stack import backing
from cyborg.tests.nova_stack import keystone as keystone_lib

HEADERS = {'X-Auth-Token': 'admin', 'X-Service-Roles': 'service',
           'Content-Type': 'application/json'}
HOSTNAME = bind_load.HOSTNAME


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _admin(server_url: str, statement: str) -> None:
    admin = sa.create_engine(server_url, isolation_level='AUTOCOMMIT')
    with admin.connect() as conn:
        conn.execute(sa.text(statement))
    admin.dispose()


def _database(server_url: str) -> tuple[str, str]:
    """A new database on the server: its name and URL."""
    name = f'cyborg_bench_{uuid.uuid4().hex[:8]}'
    _admin(server_url, f'CREATE DATABASE {name}')
    return name, sa.engine.make_url(server_url).set(
        database=name).render_as_string(hide_password=False)


def _seed(url: str, accelerators: int) -> str:
    """Fake devices with ``accelerators`` handles; the rp_uuid to bind to."""
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('host', 'bench-host')
    conf.set_override('hostname', HOSTNAME, 'agent')
    conf.set_override('accelerators_per_device', 248, 'fake_driver')
    conf.set_override('device_count', 1, 'fake_driver')
    migration.upgrade('head', url=url)
    # One deployable holding every handle, so that binds contend for it.
    device = fake.FakeDriver(conf).discover()[0]
    bind_load.widen(device.deployables[0], accelerators)
    ctx = cyborg_context.get_admin_context()
    engine = engines.create_engine(url)
    undo = db_api.patch_engine(engine)
    try:
        inventory.apply_report(ctx, 'bench-host', {
            'hostname': HOSTNAME, 'devices': [device.to_dict()]})
        return inventory.get_host_devices(ctx, 'bench-host')[0][
            'deployables'][0]['rp_uuid']
    finally:
        undo()
        engine.dispose()


# A fake Nova in a process of its own, out of the clients' way: it prints
# its endpoint, then the number of events it took for each line it reads.
_FAKE_NOVA = '''
import sys
from cyborg.tests.fakes import nova
fake = nova.FakeNova()
fake.start()
print(fake.token, fake.endpoint, flush=True)
for _ in sys.stdin:
    print(len(fake.events()), len(fake.errors), flush=True)
fake.stop()
'''


# Shared servers, found by process name.
_SERVERS = {'mariadbd': 'MariaDB', 'mysqld': 'MySQL', 'beam.smp': 'RabbitMQ',
            'postgres': 'PostgreSQL', 'redis-server': 'Redis'}


def listeners(ports: list[int]) -> dict[int, str]:
    """pid -> label of the processes listening on 127.0.0.1 ``ports`` (a
    server's threads are counted with its process; other processes of the
    same name, such as other clusters' nodes on the machine, are not)."""
    wanted = {f'{port:04X}' for port in ports}
    inodes = set()
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == '0A' and fields[1].rsplit(':', 1)[1] in wanted:
                inodes.add(f'socket:[{fields[9]}]')
    found = {}
    for fd_dir in glob.glob('/proc/[0-9]*/fd'):
        pid = int(fd_dir.split('/')[2])
        try:
            with open(f'/proc/{pid}/comm') as f:
                comm = f.read().strip()
            if comm in _SERVERS and any(
                    os.readlink(os.path.join(fd_dir, fd)) in inodes
                    for fd in os.listdir(fd_dir)):
                found[pid] = _SERVERS[comm]
        except OSError:
            continue
    return found


def servers(db_server: str, transport: str) -> dict[int, str]:
    """The database and broker servers of these URLs (see
    ``listeners``)."""
    defaults = {'mysql': 3306, 'postgresql': 5432, 'rabbit': 5672}
    ports = []
    for url in (db_server, transport):
        parsed = urllib.parse.urlsplit(url.split(',')[0])
        ports.append(parsed.port
                     or defaults.get(parsed.scheme.split('+')[0], 0))
    return listeners(ports)


def proc_stats() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the fields of /proc/PID/stat after the name)
    of every process; those that end while read are left out."""
    for stat in glob.glob('/proc/[0-9]*/stat'):
        try:
            with open(stat) as f:
                text = f.read()
        except OSError:
            continue
        yield (int(text.split(' ', 1)[0]),
               text[text.index('(') + 1:text.rindex(')')],
               text[text.rindex(')') + 2:].split())


def cpu_used(sessions: dict[int, str],
             servers: dict[int, str] | None = None) -> collections.Counter:
    """CPU seconds used so far: by this process ('clients'), by the
    processes of each session or process in ``sessions`` (session or
    process id -> label) and by the database and broker servers: those of
    ``servers`` (pid -> label, see ``listeners``), or without it every
    process named as one. Empty where there is no /proc."""
    used: collections.Counter = collections.Counter()
    tick = os.sysconf('SC_CLK_TCK')
    for pid, comm, fields in proc_stats():
        label = ('clients' if pid == os.getpid()
                 else sessions.get(int(fields[3])) or sessions.get(pid)
                 or (_SERVERS.get(comm) if servers is None
                     else servers.get(pid)))
        if label:
            used[label] += (int(fields[11]) + int(fields[12])) / tick
    return used


class FakeNovaProcess:
    """The fake Nova's process."""

    def __init__(self, log: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, '-c', _FAKE_NOVA], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=open(log, 'w'), text=True,
            start_new_session=True)
        self.token, self.endpoint = self.proc.stdout.readline().split()

    def events(self) -> int:
        self.proc.stdin.write('\n')
        self.proc.stdin.flush()
        taken, errors = map(int, self.proc.stdout.readline().split())
        if errors:
            raise SystemExit(f'the fake Nova failed {errors} time(s)')
        return taken

    def wait_events(self, count: int, timeout: float = 30) -> int:
        """The events taken, once there are ``count`` or time is up."""
        deadline = time.monotonic() + timeout
        while (taken := self.events()) < count \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        return taken

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


class _Client:
    """One keep-alive HTTP connection: far less client CPU per request
    than a full HTTP library, which matters when the clients share the
    machine's cores with the service they measure."""

    def __init__(self, base: str) -> None:
        parsed = urllib.parse.urlsplit(base)
        self.prefix = parsed.path
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port)

    def request(self, method: str, path: str, body=None,
                params: dict | None = None, expect: int = 200):
        url = self.prefix + path
        if params:
            url += '?' + urllib.parse.urlencode(params)
        self.conn.request(method, url,
                          body=None if body is None else json.dumps(body),
                          headers=HEADERS)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != expect:
            raise SystemExit(f'{method} {url}: {response.status} {data!r}')
        return json.loads(data) if data else None


def _start(module: str, conf_file: str, log: str) -> subprocess.Popen:
    # A session of its own, so that killing it reaches every worker.
    return subprocess.Popen(
        [sys.executable, '-m', module, '--config-file', conf_file],
        stdout=open(log, 'w'), stderr=subprocess.STDOUT,
        start_new_session=True)


def _start_uwsgi(conf_file: str, port: int, workers: int, threads: int,
                 log: str) -> subprocess.Popen:
    command = utils.uwsgi_command(
        os.path.join(os.path.dirname(conf_file), 'api-uwsgi.ini'),
        conf_file, port, workers, threads)
    if command is None:
        raise SystemExit('--server uwsgi needs uwsgi: pip install uwsgi')
    return subprocess.Popen(command, stdout=open(log, 'w'),
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop(procs: list[subprocess.Popen]) -> None:
    """Stop the services: SIGTERM to all, then SIGKILL to the session of
    any that has not ended within 30 s."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _wait_http(base: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _Client(base).request('GET', '')
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f'{base} did not answer within {timeout}s')


@dataclasses.dataclass
class Measured:
    """What the rounds of one phase took, added up."""

    requests: int = 0
    elapsed: float = 0.0
    latencies: list[float] = dataclasses.field(default_factory=list)
    cpu: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)

    def _quantiles(self) -> list[float]:
        latencies = sorted(self.latencies)
        return (statistics.quantiles(latencies, n=100)
                if len(latencies) > 1 else latencies * 99)

    def figures(self) -> dict:
        """The key figures, as ``--json`` writes them."""
        q = self._quantiles()
        per_op = 1000 / self.requests
        cpu = {label: round(seconds * per_op, 3)
               for label, seconds in self.cpu.items()}
        if cpu:
            cpu['all'] = round(sum(self.cpu.values()) * per_op, 3)
        return {'requests': self.requests,
                'ops_per_s': round(self.requests / self.elapsed, 1),
                'latency_ms': {f'p{p}': round(q[p - 1] * 1000, 2)
                               for p in (50, 95, 99)},
                'cpu_ms_per_op': cpu}

    def print(self, name: str) -> None:
        q = self._quantiles()
        print(f'  {name:<18} {self.requests / self.elapsed:>8.0f} ops/s   '
              f'p50 {q[49] * 1000:6.1f} ms  p95 {q[94] * 1000:6.1f} ms  '
              f'p99 {q[98] * 1000:6.1f} ms')
        if self.cpu:
            per_op = 1000 / self.requests
            print('  ' + ' ' * 18 + ' CPU ms per op: ' + ', '.join(
                f'{label} {seconds * per_op:.1f}'
                for label, seconds in self.cpu.most_common())
                + f' (all {sum(self.cpu.values()) * per_op:.1f})')


def _phase(base: str, func, items, clients: int,
           measured: Measured | None = None,
           sessions: dict[int, str] | None = None,
           server_pids: dict[int, str] | None = None) -> list:
    """``func(client, item)`` for each item, ``clients`` at a time; what it
    took is added to ``measured``."""
    local = threading.local()

    def timed(item):
        session = getattr(local, 'session', None)
        if session is None:
            session = local.session = _Client(base)
        start = time.perf_counter()
        result = func(session, item)
        return time.perf_counter() - start, result

    cpu = cpu_used(sessions or {}, server_pids)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(timed, items))
    elapsed = time.perf_counter() - start
    cpu = cpu_used(sessions or {}, server_pids) - cpu
    if measured is not None:
        measured.requests += len(outcomes)
        measured.elapsed += elapsed
        measured.latencies.extend(t for t, _ in outcomes)
        measured.cpu.update(cpu)
    return [r for _, r in outcomes]


def calibration() -> float:
    """Milliseconds of CPU a fixed piece of pure Python takes here now.

    The machine's speed varies from minute to minute; runs whose
    calibrations differ are not comparable, whatever the code did.
    """
    start = time.process_time()
    total = 0
    for i in range(2_000_000):
        total += i % 7
    return (time.process_time() - start) * 1000


def write_config(path: str, sections: dict[str, dict],
                 options: list[tuple[str, str, str]]) -> None:
    """The services' configuration file: ``sections``, then ``options``
    (group, name, value) over them."""
    for group, name, value in options:
        sections.setdefault(group, {})[name] = value
    with open(path, 'w') as f:
        for group, values in sections.items():
            f.write(f'[{group}]\n' + ''.join(
                f'{name} = {value}\n' for name, value in values.items()))


def run(n: int, clients: int, workers: int, conductors: int, warmup: int,
        db_server: str, transport: str,
        options: list[tuple[str, str, str]], server: str = 'cyborg-api',
        min_requests: int = 1000) -> dict:
    """One benchmark of N requests; its key figures (see ``--json``)."""
    db_name, url = _database(db_server)
    rp_uuid = _seed(url, max(n, warmup))
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix='cyborg-bench-')
    print(f'logs in {tmp}')
    # Binds post their events to a fake Nova, as they would to Nova.
    nova = FakeNovaProcess(os.path.join(tmp, 'nova.log'))
    conf_file = os.path.join(tmp, 'cyborg.conf')
    sections = {
        'DEFAULT': {'transport_url': transport,
                    'control_exchange': f'bench-{uuid.uuid4().hex[:8]}'},
        'database': {'connection': url},
        'api': {'auth_strategy': 'noauth', 'port': port,
                'workers': workers, 'threads': 16},
        'nova': {'auth_type': 'admin_token', 'token': nova.token,
                 'endpoint': nova.endpoint,
                 'endpoint_override': nova.endpoint}}
    write_config(conf_file, sections, options)
    procs = [_start('cyborg.cmd.conductor', conf_file,
                    os.path.join(tmp, f'conductor-{i}.log'))
             for i in range(conductors)]
    api_log = os.path.join(tmp, 'api.log')
    procs.append(_start_uwsgi(conf_file, port, workers,
                              int(sections['api']['threads']), api_log)
                 if server == 'uwsgi'
                 else _start('cyborg.cmd.api', conf_file, api_log))
    sessions = {nova.proc.pid: 'Nova', procs[-1].pid: 'API'}
    sessions.update((proc.pid, 'conductors') for proc in procs[:-1])
    # This run's servers alone: the machine may run others of their names.
    server_pids = servers(db_server, transport)
    # And the Redis server spans are sent to, when tracing is on.
    traced_to = {(g, k): v for g, k, v in options}.get(
        ('profiler', 'connection_string'), '')
    if traced_to.startswith('redis://'):
        server_pids.update(listeners(
            [urllib.parse.urlsplit(traced_to).port or 6379]))
    base = f'http://127.0.0.1:{port}/v2'
    try:
        _wait_http(base)
        _Client(base).request(
            'POST', '/device_profiles', expect=201,
            body=[{'name': 'bench', 'groups': [{'resources:FPGA': '1'}]}])
        time.sleep(1)
        calibrated = calibration()
        print(f'N={n} requests, {clients} clients, {workers} API '
              f'worker process(es) ({server}), {conductors} conductor(s); '
              f'calibration {calibrated:.0f} ms:')

        def create(client, _):
            created = client.request(
                'POST', '/accelerator_requests', expect=201,
                body={'device_profile_name': 'bench'})
            return created['arqs'][0]['uuid']

        def bind(client, arq):
            instance = str(uuid.uuid5(uuid.NAMESPACE_URL, arq))
            ops = [{'op': 'add', 'path': '/hostname',
                    'value': HOSTNAME},
                   {'op': 'add', 'path': '/device_rp_uuid',
                    'value': rp_uuid},
                   {'op': 'add', 'path': '/instance_uuid',
                    'value': instance}]
            client.request('PATCH', '/accelerator_requests',
                           body={arq: ops}, expect=202)
            return instance

        def list_by_instance(client, instance):
            found = client.request('GET', '/accelerator_requests',
                                   params={'instance': instance})
            assert found['arqs'][0]['state'] == 'Bound'
            return instance

        def delete(client, instance):
            client.request('DELETE', '/accelerator_requests',
                           params={'instance': instance}, expect=204)

        phases = {'create': create, 'bind': bind,
                  'list-by-instance': list_by_instance,
                  'delete-by-instance': delete}

        def cycle(count: int, measured: dict[str, Measured] | None
                  ) -> None:
            items = range(count)
            for name, func in phases.items():
                items = _phase(base, func, items, clients,
                               measured and measured[name], sessions,
                               server_pids)

        # Unmeasured: connection pools, caches and the first message
        # exchanges, so that a small N measures the same steady state.
        cycle(warmup, None)
        # A cycle deletes what it creates: rounds of N requests keep the
        # database at N, and a small N is measured over enough requests.
        rounds = max(1, -(-min_requests // n))
        measured = {name: Measured() for name in phases}
        for _ in range(rounds):
            cycle(n, measured)
        if rounds > 1:
            print(f'  ({rounds} rounds of {n} requests)')
        for name, result in measured.items():
            result.print(name)
        total = warmup + n * rounds
        events = nova.wait_events(total)
        if events != total:
            raise SystemExit(f'Nova heard of {events} binds, not {total}')
        return {'n': n, 'clients': clients, 'workers': workers,
                'conductors': conductors, 'server': server,
                'rounds': rounds, 'calibration_ms': round(calibrated, 1),
                'options': [f'{g}.{k}={v}' for g, k, v in options],
                'phases': {name: result.figures()
                           for name, result in measured.items()}}
    finally:
        stop(procs)
        nova.stop()
        _admin(db_server, f'DROP DATABASE {db_name}')


def option(text: str) -> tuple[str, str, str]:
    key, sep, value = text.partition('=')
    group, dot, name = key.partition('.')
    if not (sep and dot and group and name):
        raise argparse.ArgumentTypeError(f'{text!r} is not GROUP.NAME=VALUE')
    return group, name, value


def write_json(path: str, benchmark: str, runs: list[dict]) -> None:
    """``--json``: the runs' key figures as one JSON object."""
    with open(path, 'w') as f:
        json.dump({'benchmark': benchmark,
                   'date': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                   'cores': os.cpu_count(), 'runs': runs}, f, indent=1)
        f.write('\n')


def service_options(parser: argparse.ArgumentParser,
                    transport: bool = True,
                    services: str = 'services\'') -> None:
    """The options of every benchmark that starts cyborg services: the
    database server, the broker (unless ``transport`` is False: the
    benchmark starts its own) and ``-o`` settings of the ``services``."""
    parser.add_argument('--db-server', default='mysql+pymysql://root@'
                                               '127.0.0.1:3306/')
    if transport:
        parser.add_argument('--transport-url',
                            default='rabbit://guest:guest@127.0.0.1:5672/')
    parser.add_argument('-o', '--option', action='append', default=[],
                        type=option, metavar='GROUP.NAME=VALUE',
                        help=f'set in the {services} configuration files; '
                             'repeat for more')


# ``--limits``: every project's limits, far above any run's requests.
REGISTERED_LIMITS = {'accelerator_requests': 2 ** 31 - 1,
                     'class:FPGA': 2 ** 31 - 1}


@contextlib.contextmanager
def keystone_limits() -> Iterator[list[tuple[str, str, str]]]:
    """A Keystone with cyborg's service and REGISTERED_LIMITS; the
    options of conductors reading them."""
    workdir = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-bench-ks-'))
    database = backing.Database(backing.MYSQL_URL, 'keystone_bench')
    database.create()
    stack = keystone_lib.KeystoneStack(workdir, '', '', '', '')
    keystone = keystone_lib.Keystone(stack, database.url)
    try:
        keystone.setup()
        keystone.process().start()
        gate_stack.wait_for(keystone.up, 'keystone', 60)
        keystone.register('http://127.0.0.1:9/v2')
        keystone.register_limits(REGISTERED_LIMITS)
        yield [(group, name, value) for group, values in
               keystone.limits_reader('cyborg').items()
               for name, value in values.items()]
    finally:
        stack.stop_all()
        database.drop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, nargs='+', default=[100, 1000])
    parser.add_argument('-c', '--clients', type=int, default=8)
    parser.add_argument('-w', '--workers', type=int, default=2,
                        help='cyborg-api worker processes (default: 2)')
    parser.add_argument('--server', choices=('cyborg-api', 'uwsgi'),
                        default='cyborg-api',
                        help='what serves the API: the cyborg-api command '
                             '(waitress) or uwsgi, as devstack deploys it '
                             '(default: cyborg-api)')
    parser.add_argument('--conductors', type=int, default=2,
                        help='cyborg-conductor processes (default: 2)')
    parser.add_argument('--warmup', type=int, default=200,
                        help='requests run through every phase, unmeasured, '
                             'before the measured ones (default: 200)')
    parser.add_argument('--min-requests', type=int, default=1000,
                        help='with N below this, the N-request cycle runs '
                             'again until every phase has measured at least '
                             'this many requests (default: 1000)')
    service_options(parser)
    parser.add_argument('--json', metavar='PATH',
                        help='also write the key figures of every run to '
                             'PATH as a JSON object')
    parser.add_argument('--trace-key', metavar='KEY',
                        help='sign every request\'s trace headers with KEY '
                             '(one trace for the whole run)')
    parser.add_argument('--limits', action='store_true',
                        help='conductors enforcing project limits read from '
                             'a Keystone the benchmark runs')
    args = parser.parse_args()
    if args.trace_key:
        from osprofiler import profiler
        from osprofiler import web

        profiler.init(args.trace_key)
        HEADERS.update(web.get_trace_id_headers())
        profiler.clean()
    runs = []
    with contextlib.ExitStack() as limits:
        options = args.option
        if args.limits:
            options = limits.enter_context(keystone_limits()) + options
        for n in args.n:
            # A virtual host of its own: another run's conductors would
            # take this run's messages otherwise.
            with utils.virtual_host(args.transport_url,
                                    'cyborg-bench') as url:
                runs.append(run(n, args.clients, args.workers,
                                args.conductors, args.warmup,
                                args.db_server, url, options, args.server,
                                args.min_requests))
    if args.json:
        write_json(args.json, 'api', runs)
    return 0


if __name__ == '__main__':
    sys.exit(main())
