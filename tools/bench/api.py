"""Benchmark of the accelerator-request life cycle through the REST API.

Starts ``cyborg-api`` and ``cyborg-conductor`` as processes on a real
database and message broker (MariaDB and RabbitMQ by default), seeds fake
devices with enough attach handles, then runs N accelerator requests
through the four phases Nova drives — create, bind, list by instance,
delete by instance — with C concurrent clients, and prints ops/s and the
latency percentiles of each phase:

    python tools/bench/api.py -n 100 1000 -c 8
"""
import argparse
import concurrent.futures
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import requests
import sqlalchemy as sa

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import inventory

HEADERS = {'X-Auth-Token': 'admin', 'X-Service-Roles': 'service',
           'Content-Type': 'application/json'}
HOSTNAME = 'bench-node'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _database(server_url: str) -> str:
    name = f'cyborg_bench_{uuid.uuid4().hex[:8]}'
    admin = sa.create_engine(server_url, isolation_level='AUTOCOMMIT')
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE {name}'))
    admin.dispose()
    return sa.engine.make_url(server_url).set(database=name).render_as_string(
        hide_password=False)


def _seed(url: str, accelerators: int) -> str:
    """Fake devices with ``accelerators`` handles; the rp_uuid to bind to."""
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('host', 'bench-host')
    conf.set_override('hostname', HOSTNAME, 'agent')
    conf.set_override('accelerators_per_device', 248, 'fake_driver')
    conf.set_override('device_count', 1, 'fake_driver')
    migration.upgrade('head', url=url)
    conf.set_override('connection', url, 'database')
    db_api.configure(conf)
    # One deployable holding every handle, so that binds contend for it.
    device = fake.FakeDriver(conf).discover()[0]
    dep = device.deployables[0]
    template = dep.attach_handles[0]
    dep.attach_handles = [
        type(template)(attach_type='TEST_PCI',
                       attach_info={'index': str(i)})
        for i in range(accelerators)]
    dep.num_accelerators = accelerators
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, 'bench-host', {'hostname': HOSTNAME,
                                               'devices': [device.to_dict()]})
    return inventory.get_host_devices(ctx, 'bench-host')[0][
        'deployables'][0]['rp_uuid']


def _start(module: str, conf_file: str, log: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, '-m', module, '--config-file', conf_file],
        stdout=open(log, 'w'), stderr=subprocess.STDOUT)


def _wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=1).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit(f'{url} did not answer within {timeout}s')


def _phase(name: str, func, items: list, clients: int) -> list:
    local = threading.local()

    def timed(item):
        session = getattr(local, 'session', None)
        if session is None:
            session = local.session = requests.Session()
        start = time.perf_counter()
        result = func(session, item)
        return time.perf_counter() - start, result

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(timed, items))
    elapsed = time.perf_counter() - start
    latencies = sorted(t for t, _ in outcomes)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else (
        latencies * 99)
    print(f'  {name:<18} {len(items) / elapsed:>8.0f} ops/s   '
          f'p50 {q[49] * 1000:6.1f} ms  p95 {q[94] * 1000:6.1f} ms  '
          f'p99 {q[98] * 1000:6.1f} ms')
    return [r for _, r in outcomes]


def run(n: int, clients: int, db_server: str, transport: str) -> None:
    url = _database(db_server)
    rp_uuid = _seed(url, n)
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix='cyborg-bench-')
    print(f'logs in {tmp}')
    if True:
        conf_file = os.path.join(tmp, 'cyborg.conf')
        with open(conf_file, 'w') as f:
            f.write(f'[DEFAULT]\ntransport_url = {transport}\n'
                    f'control_exchange = bench-{uuid.uuid4().hex[:8]}\n'
                    f'[database]\nconnection = {url}\n'
                    f'[api]\nauth_strategy = noauth\nport = {port}\n'
                    'threads = 16\n')
        procs = [_start('cyborg.cmd.conductor', conf_file,
                        os.path.join(tmp, 'conductor.log')),
                 _start('cyborg.cmd.api', conf_file,
                        os.path.join(tmp, 'api.log'))]
        base = f'http://127.0.0.1:{port}/v2'
        try:
            _wait_http(base)
            requests.post(f'{base}/device_profiles', headers=HEADERS,
                          json=[{'name': 'bench', 'groups': [
                              {'resources:FPGA': '1'}]}]).raise_for_status()
            time.sleep(1)
            print(f'N={n} requests, {clients} clients:')

            def create(s, _):
                r = s.post(f'{base}/accelerator_requests', headers=HEADERS,
                           json={'device_profile_name': 'bench'})
                r.raise_for_status()
                return r.json()['arqs'][0]['uuid']

            def bind(s, arq):
                instance = str(uuid.uuid5(uuid.NAMESPACE_URL, arq))
                ops = [{'op': 'add', 'path': '/hostname',
                        'value': HOSTNAME},
                       {'op': 'add', 'path': '/device_rp_uuid',
                        'value': rp_uuid},
                       {'op': 'add', 'path': '/instance_uuid',
                        'value': instance}]
                s.patch(f'{base}/accelerator_requests', headers=HEADERS,
                        json={arq: ops}).raise_for_status()
                return instance

            def list_by_instance(s, instance):
                r = s.get(f'{base}/accelerator_requests',
                          params={'instance': instance}, headers=HEADERS)
                r.raise_for_status()
                assert r.json()['arqs'][0]['state'] == 'Bound'
                return instance

            def delete(s, instance):
                s.delete(f'{base}/accelerator_requests',
                         params={'instance': instance},
                         headers=HEADERS).raise_for_status()

            arqs = _phase('create', create, range(n), clients)
            instances = _phase('bind', bind, arqs, clients)
            _phase('list-by-instance', list_by_instance, instances, clients)
            _phase('delete-by-instance', delete, instances, clients)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, nargs='+', default=[100, 1000])
    parser.add_argument('-c', '--clients', type=int, default=8)
    parser.add_argument('--db-server', default='mysql+pymysql://root@'
                                               '127.0.0.1:3306/')
    parser.add_argument('--transport-url',
                        default='rabbit://guest:guest@127.0.0.1:5672/')
    args = parser.parse_args()
    for n in args.n:
        run(n, args.clients, args.db_server, args.transport_url)
    return 0


if __name__ == '__main__':
    sys.exit(main())
