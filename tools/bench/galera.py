"""Benchmark of binding through three conductors on a Galera cluster.

Starts a 3-node MariaDB Galera cluster on 127.0.0.1
(``cyborg.tests.harness.galera``:
Debian's mariadb-server and galera-4, installed if missing), one
``cyborg-conductor`` per node writing through it, seeds fewer TEST_PCI
attach handles than Initial accelerator requests, and has C concurrent
clients bind every request through ``ConductorAPI.arq_apply_patch``, one
per PATCH. Prints binds/s, the latency percentiles of one PATCH, attach
handles bound to two requests (must be 0), the PATCHes refused for want of
a handle (409, their requests left Initial), requests neither ended nor
refused (must be 0) and the transactions the conductors retried after a
certification conflict:

    python tools/bench/galera.py -n 2000 --handles 1600 -c 50

``--json PATH`` also writes these figures as one JSON object.
"""
import argparse
import json
import pathlib
import sys
import tempfile
import time

import api

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import conf as cyborg_conf
from cyborg.tests import utils
from cyborg.tests.harness import galera
from cyborg.tests.harness import galera_binds


def run(args: argparse.Namespace, transport: str) -> dict[str, object]:
    conf = cyborg_conf.CONF
    workdir = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-bench-'))
    print(f'logs in {workdir}')
    started = time.monotonic()
    with galera.running(keep=args.keep) as cluster:
        print(f'cluster of 3 up in {time.monotonic() - started:.1f} s '
              f'({cluster.workdir})')
        with galera_binds.deployment(
                cluster, workdir, transport, conf, args.handles, args.n,
                args.devices) as deployment:
            sessions = deployment.sessions()
            cpu = api.cpu_used(sessions)
            load = deployment.bind(args.clients)
            cpu = api.cpu_used(sessions) - cpu
            # Share of the time since the node started that replication
            # was paused because some node fell behind applying.
            paused = [float(n.status()['wsrep_flow_control_paused'])
                      for n in cluster.nodes]
            outcomes = deployment.outcomes()
            deadlocks = deployment.deadlocks()
    first = outcomes[0]
    refused = [e for e in load.errors if 'BindRefused' in e[1]]
    figures: dict[str, object] = {
        'binds': args.n, 'handles': args.handles, 'clients': args.clients,
        'conductors': len(outcomes), 'devices': args.devices,
        'binds_per_s': round(load.rate, 1),
        **{k: round(v, 1) for k, v in load.percentiles().items()},
        'bound': first.states.get('Bound', 0),
        'bind_failed': first.states.get('BindFailed', 0),
        'handles_used_twice': max(len(o.shared) for o in outcomes),
        'arqs_stuck': max(o.stuck for o in outcomes),
        'nodes_agree': all(o.rows == first.rows for o in outcomes),
        'conflicts_retried': sum(n for (_, outcome), n in deadlocks.items()
                                 if outcome == 'retried'),
        'conflicts_failed': sum(n for (_, outcome), n in deadlocks.items()
                                if outcome == 'failed'),
        # A PATCH past the handles is refused (BindRefused), not failed.
        'refused': len(refused),
        'patch_errors': len(load.errors) - len(refused),
        'flow_control_paused': round(max(paused), 3),
        # The machine's own database and broker serve other clients too.
        'cpu_ms_per_bind': {
            label: round(cpu[label] * 1000 / args.n, 1)
            for label in ('conductors', 'Galera nodes', 'clients')}}
    print(f'N={args.n} binds, {args.handles} handles on {args.devices} '
          f'device(s), {args.clients} clients, 3 conductors on 3 nodes:')
    print(f'  {figures["binds_per_s"]:>8} binds/s   '
          f'p50 {figures["p50_ms"]} ms  p95 {figures["p95_ms"]} ms  '
          f'p99 {figures["p99_ms"]} ms  (per PATCH)')
    for name in ('bound', 'bind_failed', 'refused', 'handles_used_twice',
                 'arqs_stuck', 'nodes_agree', 'conflicts_retried',
                 'conflicts_failed', 'patch_errors', 'flow_control_paused'):
        print(f'  {name.replace("_", " ")}: {figures[name]}')
    print('  CPU ms per bind: ' + ', '.join(
        f'{label} {ms}' for label, ms in figures['cpu_ms_per_bind'].items()))
    print(f'  deadlocks by transaction: {deadlocks}')
    for uuids, error in [e for e in load.errors if e not in refused][:5]:
        print(f'  PATCH of {uuids} failed: {error}')
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, default=2000,
                        help='requests bound, one per PATCH (default: 2000)')
    parser.add_argument('--handles', type=int, default=1600,
                        help='attach handles in all, fewer than the '
                             'requests (default: 1600)')
    parser.add_argument('-c', '--clients', type=int, default=50)
    parser.add_argument('--devices', type=int, default=1,
                        help='devices holding the handles; 1 makes every '
                             'bind contend for one deployable (default: 1)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the cluster\'s directory and logs')
    parser.add_argument('--transport-url',
                        default='rabbit://guest:guest@127.0.0.1:5672/')
    parser.add_argument('--json', metavar='PATH',
                        help='also write the figures there as JSON')
    args = parser.parse_args(argv)
    cyborg_conf.CONF([], project='cyborg', default_config_files=[])
    # A virtual host of its own: another run's conductors would take this
    # run's messages otherwise.
    with utils.virtual_host(args.transport_url, 'cyborg-bench') as url:
        figures = run(args, url)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=2)
                                           + '\n')
    ok = (figures['handles_used_twice'] == 0 and figures['arqs_stuck'] == 0
          and figures['nodes_agree'] and not figures['patch_errors'])
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
