"""Benchmark of binding accelerator requests.

Starts ``cyborg-conductor`` processes on a real database and message
broker (MariaDB and RabbitMQ by default) with [nova] pointing at a fake
Nova that answers the bound events, seeds fake devices whose attach
handles are TEST_PCI (a bind ends in the PATCH's own transaction) and one
Initial accelerator request per bind, then has C concurrent clients bind
them through ``BatchedWrites.arq_apply_patch``, one request per PATCH or
``--batch`` of them; the client coalesces concurrent PATCHes as a
cyborg-api process does (``[api] bind_batch_size``). Prints binds/s and
the latency percentiles of one PATCH; ``--http`` also starts
``cyborg-api`` and binds through ``PATCH /v2/accelerator_requests``.
``--json PATH`` also writes the key figures (binds/s, latency percentiles
and CPU ms per bind of each path) to PATH as one JSON object:

    python tools/bench/bind.py -n 2000 -c 50 --conductors 2 --devices 10
"""
import argparse
import concurrent.futures
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

import api
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.common import rpc
from cyborg.conductor import rpc_batching
from cyborg.conductor import rpcapi
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import models
from cyborg.tests import utils
from cyborg.tests.harness import bind_load

HOSTNAME = bind_load.HOSTNAME


def _states(engine: sa.engine.Engine) -> dict[str, int]:
    arq = models.AcceleratorRequest
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(arq.state, sa.func.count())
                                 .group_by(arq.state)).all())


def _phase(name: str, func: Callable[[list[str]], None],
           batches: list[list[str]], clients: int,
           report: bool = True, sessions: dict[int, str] | None = None,
           server_pids: dict[int, str] | None = None) -> dict | None:
    """Run the binds; their key figures (see ``--json``) if ``report``."""
    def timed(batch: list[str]) -> float:
        start = time.perf_counter()
        func(batch)
        return time.perf_counter() - start

    cpu = api.cpu_used(sessions or {}, server_pids)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        latencies = sorted(pool.map(timed, batches))
    elapsed = time.perf_counter() - start
    cpu = api.cpu_used(sessions or {}, server_pids) - cpu
    if not report:
        return None
    binds = sum(len(b) for b in batches)
    q = statistics.quantiles(latencies, n=100)
    print(f'  {name:<6} {binds / elapsed:>8.0f} binds/s   '
          f'p50 {q[49] * 1000:6.1f} ms  p95 {q[94] * 1000:6.1f} ms  '
          f'p99 {q[98] * 1000:6.1f} ms  (per PATCH)')
    if cpu:
        print('         CPU ms per bind: ' + ', '.join(
            f'{label} {seconds * 1000 / binds:.1f}'
            for label, seconds in cpu.most_common())
            + f' (all {sum(cpu.values()) * 1000 / binds:.1f})')
    per_bind = {label: round(seconds * 1000 / binds, 3)
                for label, seconds in cpu.items()}
    if per_bind:
        per_bind['all'] = round(sum(cpu.values()) * 1000 / binds, 3)
    return {'binds': binds, 'binds_per_s': round(binds / elapsed, 1),
            'latency_ms': {f'p{p}': round(q[p - 1] * 1000, 2)
                           for p in (50, 95, 99)},
            'cpu_ms_per_bind': per_bind}


def run(n: int, clients: int, batch: int, conductors: int, devices: int,
        warmup: int, http: bool, workers: int, db_server: str,
        transport: str, options: list[tuple[str, str, str]]) -> dict:
    """One benchmark of N binds; its key figures (see ``--json``)."""
    paths = ('rpc', 'http') if http else ('rpc',)
    per_path = n + warmup
    total = per_path * len(paths)
    conf = cyborg_conf.CONF
    db_name, url = api._database(db_server)
    tmp = tempfile.mkdtemp(prefix='cyborg-bench-')
    print(f'logs in {tmp}')
    procs: list[subprocess.Popen] = []
    nova = api.FakeNovaProcess(os.path.join(tmp, 'nova.log'))
    engine = engines.create_engine(url)
    try:
        migration.upgrade('head', url=url)
        undo = db_api.patch_engine(engine)
        try:
            rp_uuids, uuids = bind_load.seed(
                conf, devices, math.ceil(total / devices), total)
        finally:
            undo()
        exchange = f'bench-{uuid.uuid4().hex[:8]}'
        port = api._free_port()
        conf_file = os.path.join(tmp, 'cyborg.conf')
        sections = {
            'DEFAULT': {'transport_url': transport,
                        'control_exchange': exchange},
            'database': {'connection': url},
            'api': {'auth_strategy': 'noauth', 'port': port,
                    'workers': workers,
                    'threads': math.ceil(clients / workers)},
            'nova': {'auth_type': 'admin_token', 'token': nova.token,
                     'endpoint': nova.endpoint,
                     'endpoint_override': nova.endpoint}}
        api.write_config(conf_file, sections, options)
        procs = [api._start('cyborg.cmd.conductor', conf_file,
                            os.path.join(tmp, f'conductor-{i}.log'))
                 for i in range(conductors)]
        sessions = {nova.proc.pid: 'Nova'}
        sessions.update((proc.pid, 'conductors') for proc in procs)
        if http:
            procs.append(api._start('cyborg.cmd.api', conf_file,
                                    os.path.join(tmp, 'api.log')))
            sessions[procs[-1].pid] = 'API'
            base = f'http://127.0.0.1:{port}/v2'
            api._wait_http(base)
        rpc.set_defaults(exchange)
        rpc.init(conf, transport)
        # Concurrent PATCHes leave together, as in a cyborg-api process
        # (``-o api.bind_batch_size=1``: each alone; so also with commits
        # before the option, for back-to-back comparisons).
        bind_batch = int(dict(((g, k), v) for g, k, v in options).get(
            ('api', 'bind_batch_size'),
            getattr(conf.api, 'bind_batch_size', 1)))
        conductor = rpc_batching.BatchedWrites(rpcapi.ConductorAPI(conf),
                                               bind_batch=bind_batch)
        rp_of = {arq: rp_uuids[i % len(rp_uuids)]
                 for i, arq in enumerate(uuids)}

        def binds(batch_: list[str]) -> tuple[str, dict]:
            # One instance per PATCH, as Nova binds an instance's requests.
            instance = str(uuid.uuid4())
            return instance, {arq: {'hostname': HOSTNAME,
                                    'device_rp_uuid': rp_of[arq],
                                    'instance_uuid': instance}
                              for arq in batch_}

        def rpc_bind(batch_: list[str]) -> None:
            _, patch = binds(batch_)
            conductor.arq_apply_patch(cyborg_context.get_admin_context(),
                                      patch, [])

        local = threading.local()

        def http_bind(batch_: list[str]) -> None:
            if not hasattr(local, 'client'):
                local.client = api._Client(base)
            _, patch = binds(batch_)
            local.client.request(
                'PATCH', '/accelerator_requests', expect=202, body={
                    arq: [{'op': 'add', 'path': f'/{key}', 'value': value}
                          for key, value in values.items()]
                    for arq, values in patch.items()})

        _wait_conductors(conductor)
        calibrated = api.calibration()
        print(f'N={n} binds, {clients} clients, {batch} request(s) per '
              f'PATCH, {conductors} conductor(s), {devices} device(s)'
              + (f', {workers} API worker process(es)' if http else '')
              + f'; calibration {calibrated:.0f} ms:')
        figures = {}
        for index, path in enumerate(paths):
            mine = uuids[index * per_path:(index + 1) * per_path]
            batches = [mine[i:i + batch] for i in range(0, len(mine), batch)]
            cut = math.ceil(warmup / batch)
            func = rpc_bind if path == 'rpc' else http_bind
            # Unmeasured: connection pools, caches and the first message
            # exchanges.
            _phase(path, func, batches[:cut], clients, report=False)
            figures[path] = _phase(path, func, batches[cut:], clients,
                                   sessions=sessions,
                                   server_pids=api.servers(db_server,
                                                           transport))
        states = _states(engine)
        events = nova.wait_events(total)
        print(f'  ARQs: {states}; events taken by Nova: {events}')
        if states != {'Bound': total} or events != total:
            raise SystemExit('some binds did not end Bound, or Nova did '
                             'not hear of every one')
        return {'n': n, 'clients': clients, 'batch': batch,
                'conductors': conductors, 'devices': devices,
                'workers': workers if http else None,
                'calibration_ms': round(calibrated, 1),
                'options': [f'{g}.{k}={v}' for g, k, v in options],
                'paths': figures}
    finally:
        rpc.cleanup()
        api.stop(procs)
        nova.stop()
        engine.dispose()
        api._admin(db_server, f'DROP DATABASE {db_name}')


def _wait_conductors(conductor: rpc_batching.BatchedWrites,
                     timeout: float = 60) -> None:
    """Until a conductor answers: a PATCH of nothing."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conductor.arq_apply_patch(cyborg_context.get_admin_context(),
                                      {}, [])
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, nargs='+', default=[2000],
                        help='binds measured (default: 2000)')
    parser.add_argument('-c', '--clients', type=int, default=50)
    parser.add_argument('--batch', type=int, default=1,
                        help='requests bound by one PATCH (default: 1)')
    parser.add_argument('--conductors', type=int, default=2,
                        help='cyborg-conductor processes (default: 2)')
    parser.add_argument('--devices', type=int, default=10,
                        help='devices the binds go to, in turn; 1 makes '
                             'every bind contend for one deployable '
                             '(default: 10)')
    parser.add_argument('--warmup', type=int, default=200,
                        help='binds run unmeasured first (default: 200)')
    parser.add_argument('--http', action='store_true',
                        help='also bind through cyborg-api')
    parser.add_argument('-w', '--workers', type=int, default=2,
                        help='cyborg-api worker processes (default: 2)')
    api.service_options(parser)
    parser.add_argument('--json', metavar='PATH',
                        help='also write the key figures of every run to '
                             'PATH as a JSON object')
    args = parser.parse_args(argv)
    cyborg_conf.CONF([], project='cyborg', default_config_files=[])
    runs = []
    for n in args.n:
        # A virtual host of its own: another run's conductors would take
        # this run's messages otherwise.
        with utils.virtual_host(args.transport_url, 'cyborg-bench') as url:
            runs.append(run(n, args.clients, args.batch, args.conductors,
                            args.devices, args.warmup, args.http,
                            args.workers, args.db_server, url, args.option))
    if args.json:
        api.write_json(args.json, 'bind', runs)
    return 0


if __name__ == '__main__':
    sys.exit(main())
