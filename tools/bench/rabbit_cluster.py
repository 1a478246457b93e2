"""Benchmark of a RabbitMQ node stopped in the middle of a burst.

Starts three clustered RabbitMQ nodes on loopback
(``cyborg.tests.harness.rabbit_cluster``), then ``cyborg-api`` and
``cyborg-conductor`` processes on MariaDB with a transport URL listing
the three and oslo.messaging's quorum queues on, seeds fake TEST_PCI
devices, and has C clients create and bind N accelerator requests through
the REST API (``cyborg.tests.harness.burst``: every request sent once,
and once more after a 5xx). Once ``--stop-at`` of the items are done it
stops the node leading the conductors' queue and keeps going. Prints the
requests, retries, requests lost and done twice (both must be 0), and
the recovery time:

    python tools/bench/rabbit_cluster.py -n 2000 -c 16 --json out.json

``--classic`` runs the same with oslo.messaging's default classic queues,
``--kill`` kills the node (SIGKILL) instead, for comparison.
"""
import argparse
import json
import math
import pathlib
import shutil
import sys
import tempfile
import time

import api
from oslo_db.sqlalchemy import engines

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import conf as cyborg_conf
from cyborg.db import migration
from cyborg.tests.harness import burst
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import rabbit_cluster

QUORUM = {'rabbit_quorum_queue': 'true',
          'rabbit_transient_quorum_queue': 'true'}
# The queue every cyborg-api sends its calls to.
CONDUCTOR_QUEUE = 'cyborg-conductor'


def run(args: argparse.Namespace, workdir: pathlib.Path) -> dict:
    db_name, url = api._database(args.db_server)
    migration.upgrade('head', url=url)
    engine = engines.create_engine(url)
    nova = api.FakeNovaProcess(str(workdir / 'nova.log'))
    try:
        rp_uuids = burst.seed(cyborg_conf.CONF, engine, args.n)
        with rabbit_cluster.running(workdir / 'rabbit') as cluster:
            return _burst(args, workdir, cluster, url, nova, rp_uuids,
                          engine)
    finally:
        nova.stop()
        engine.dispose()
        api._admin(args.db_server, f'DROP DATABASE {db_name}')


def _burst(args: argparse.Namespace, workdir: pathlib.Path,
           cluster: rabbit_cluster.Cluster, url: str,
           nova: api.FakeNovaProcess, rp_uuids: list[str],
           engine) -> dict:
    extra: dict[str, dict[str, str]] = {
        'oslo_messaging_rabbit': {} if args.classic else dict(QUORUM)}
    for group, name, value in args.option:
        extra.setdefault(group, {})[name] = value
    stack = gate_stack.Stack(workdir, cluster.transport_url, url,
                             nova.endpoint, nova.token)
    stack.add_api(threads=16, extra={
        **extra, 'api': {**extra.get('api', {}),
                         'workers': args.workers}})
    conductors = [f'ctl{i}' for i in range(1, args.conductors + 1)]
    for host in conductors:
        stack.add_conductor(host, extra=extra)
    try:
        stack.start(*conductors, 'api')
        stack.ready(*conductors)
        gate_stack.wait_for(stack.api_up, 'the API to answer', 60)
        queue = cluster.queues('/')[CONDUCTOR_QUEUE]
        stopped = next(n.index for n in cluster.nodes
                       if n.name == queue['node'])
        print(f'N={args.n} creates and binds, {args.clients} clients, '
              f'{args.workers} API worker(s), {args.conductors} '
              f'conductor(s), {queue["type"]} queues; stopping node '
              f'{stopped} (leads {CONDUCTOR_QUEUE}) after '
              f'{args.stop_at:.0%} of the items')
        connections: dict[int, int] = {}

        def stop() -> None:
            connections.update(cluster.connections())
            if args.kill:
                cluster.kill_node(stopped)
            else:
                cluster.stop_node(stopped)

        run_ = burst.Burst(stack.api_url, rp_uuids, args.n, args.clients)
        run_.run(math.ceil(args.n * args.stop_at), stop)
        tally = burst.tally(run_, engine)
        events = nova.wait_events(run_.taken)
    finally:
        stack.stop_all()
    run_twice = burst.run_twice(
        [stack.processes[h].log() for h in conductors])
    figures = {'items': args.n, 'clients': args.clients,
               'queues': queue['type'], 'stopped_node': stopped,
               'stopped_by': 'SIGKILL' if args.kill else 'rabbitmqctl stop',
               'connections_lost': connections[stopped],
               'connections': sum(connections.values()),
               'run_twice': run_twice, 'nova_events': events,
               **tally.figures()}
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, default=2000,
                        help='accelerator requests created and bound '
                             '(default: 2000)')
    parser.add_argument('-c', '--clients', type=int, default=16)
    parser.add_argument('-w', '--workers', type=int, default=1,
                        help='cyborg-api worker processes (default: 1)')
    parser.add_argument('--conductors', type=int, default=2,
                        help='cyborg-conductor processes (default: 2)')
    parser.add_argument('--stop-at', type=float, default=0.5,
                        help='share of the items done when the node stops '
                             '(default: 0.5)')
    parser.add_argument('--classic', action='store_true',
                        help='classic queues (oslo.messaging\'s default) '
                             'instead of quorum queues')
    parser.add_argument('--kill', action='store_true',
                        help='SIGKILL the node instead of stopping it with '
                             'rabbitmqctl stop')
    api.service_options(parser, transport=False)
    parser.add_argument('--json', metavar='PATH',
                        help='also write the figures there, as one JSON '
                             'object')
    parser.add_argument('--keep', action='store_true',
                        help='keep the logs\' directory')
    args = parser.parse_args(argv)
    cyborg_conf.CONF([], project='cyborg', default_config_files=[])
    workdir = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-rabbit-'))
    print(f'logs in {workdir}')
    started = time.monotonic()
    try:
        figures = run(args, workdir)
    except rabbit_cluster.ClusterUnavailable as exc:
        raise SystemExit(f'no RabbitMQ cluster: {exc}') from exc
    figures['wall_s'] = round(time.monotonic() - started, 1)
    for key in ('connections_lost', 'connections', 'items', 'requests',
                'retries', 'recovered_by_retry', 'lost', 'duplicated',
                'refused', 'unbound', 'run_twice',
                'recovery_s', 'longest_gap_s', 'action_s', 'elapsed_s',
                'wall_s'):
        print(f'  {key:<20} {figures[key]}')
    for error in figures['errors']:
        print(f'  error: {error}')
    if args.json:
        with open(args.json, 'w') as out:
            json.dump(figures, out, indent=1)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if figures['lost'] or figures['duplicated'] else 0


if __name__ == '__main__':
    sys.exit(main())
