"""The scale-out benchmarks, run one after the other, in one table.

``galera.py`` (binds from three conductors through a 3-node Galera
cluster), ``rabbit_cluster.py`` (a RabbitMQ node stopped in the middle of
a burst, quorum queues) and ``hosts.py`` (thousands of simulated hosts
against two conductors and real placement), each with ``--json``; then
one row per figure with its target and whether the run met it:

    python tools/bench/scale.py             # the full sizes (tox -e scale)
    python tools/bench/scale.py --reduced   # the sizes of the test suite
    python tools/bench/scale.py --only galera hosts

A run that fails (its script exits non-zero or writes no figures) shows as
such in the table and makes this script exit 1. The reduced sizes show
that the runs work, not what a host costs: with 50 hosts, the conductors'
own periodic work outweighs the hosts' heartbeats, so the steady-state
figure per 1,000 hosts reads several times too high.
"""
import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).parent

Row = tuple[str, str, str, bool | None]


@dataclasses.dataclass(frozen=True)
class Bench:
    name: str
    script: str
    full: list[str]
    reduced: list[str]
    rows: Callable[[dict[str, Any]], list[Row]]


def _none(figure: str, value: int) -> Row:
    return (figure, '0', str(value), value == 0)


def _galera(f: dict[str, Any]) -> list[Row]:
    cpu = f['cpu_ms_per_bind']
    return [
        ('binds', '', f'{f["bound"]} Bound, {f.get("refused", 0)} refused, '
         f'{f["bind_failed"]} BindFailed, '
         f'{f["binds_per_s"]}/s, p99 {f["p99_ms"]} ms', None),
        _none('handles used twice', f['handles_used_twice']),
        _none('requests stuck', f['arqs_stuck']),
        ('nodes agree', 'yes', 'yes' if f['nodes_agree'] else 'no',
         bool(f['nodes_agree'])),
        ('conflicts retried', 'counted', str(f['conflicts_retried']), None),
        _none('conflicts given up', f['conflicts_failed']),
        ('CPU ms per bind', '', ', '.join(
            f'{label} {ms}' for label, ms in cpu.items()), None)]


def _rabbit(f: dict[str, Any]) -> list[Row]:
    return [
        ('requests', '', f'{f["requests"]} ({f["items"]} items, node '
         f'{f["stopped_node"]} stopped by {f["stopped_by"]})', None),
        _none('lost', f['lost']),
        _none('answered twice', f['duplicated'] + f['run_twice']),
        ('retries per request', '<= 1',
         f'{f["retries"]} in all', f['retries'] <= f['requests']),
        ('recovery', 'reported', f'{f["recovery_s"]} s (longest gap '
         f'{f["longest_gap_s"]} s)', None)]


# The server processes a host's steady state costs: what cyborg runs and
# the database and broker it uses (placement's share is reported apart).
STEADY = ('conductors', 'MariaDB (cyborg)', 'RabbitMQ broker over idle')


def _hosts(f: dict[str, Any]) -> list[Row]:
    steady = f['steady_percent_per_1000_hosts']
    percent = sum(steady.get(label, 0.0) for label in STEADY)
    return [
        ('register and place', '', f'{f["hosts"]} x {f["devices"]} in '
         f'{f["placed_seconds"]} s ({f["providers_per_second"]} '
         'providers/s)', None),
        ('10,000 x 8, at that rate', '< 600 s',
         f'{f["extrapolated_10000x8_seconds"]:.0f} s',
         f['extrapolated_10000x8_seconds'] < 600),
        # Each conductor creates the custom trait once: a trace per device.
        ('placement calls per new device', '<= 3 + 1/host',
         f'{f["placement_calls_per_new_device_beyond_host"]} + 1/host',
         f['placement_calls_per_new_device_beyond_host']
         <= 3 + f['conductors'] / (f['hosts'] * f['devices']) + 0.0005),
        ('steady CPU per 1,000 hosts', '<= 10 % of a core',
         f'{percent:.1f} % (' + ', '.join(
             f'{label} {steady.get(label, 0.0):.1f}' for label in STEADY)
         + f'; placement {steady.get("placement", 0.0):.1f})',
         percent <= 10),
        ('CPU ms per heartbeat', '', f'{f["heartbeat_cpu_ms"]:.2f}', None),
        ('CPU ms per unchanged report', '',
         f'{f["unchanged_report_cpu_ms"]:.2f}', None)]


BENCHES = (
    Bench('galera', 'galera.py',
          ['-n', '2000', '--handles', '1600', '-c', '50'],
          ['-n', '150', '--handles', '120', '-c', '20'], _galera),
    Bench('rabbit', 'rabbit_cluster.py', ['-n', '2000', '-c', '16'],
          ['-n', '120', '-c', '4'], _rabbit),
    Bench('hosts', 'hosts.py', ['-H', '2000', '-d', '8'],
          ['-H', '50', '-d', '8'], _hosts),
)


def _run(bench: Bench, reduced: bool, workdir: pathlib.Path
         ) -> tuple[list[Row], float]:
    out = workdir / f'{bench.name}.json'
    argv = [sys.executable, str(HERE / bench.script),
            *(bench.reduced if reduced else bench.full), '--json', str(out)]
    print(f'== {bench.name}: {" ".join(argv[1:])}', flush=True)
    started = time.monotonic()
    code = subprocess.call(argv, cwd=HERE.parent.parent)
    took = time.monotonic() - started
    if not out.exists():
        return [('run', 'exit 0', f'exit {code}, no figures', False)], took
    rows = bench.rows(json.loads(out.read_text()))
    if code:
        rows.append(('run', 'exit 0', f'exit {code}', False))
    return rows, took


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    return '  '.join(c.ljust(w) for c, w in zip(cells, widths,
                                                strict=True)).rstrip()


def _table(results: list[tuple[str, list[Row], float]]) -> str:
    lines = [('run', 'figure', 'target', 'measured', 'met')]
    for name, rows, took in results:
        lines.append((name, 'wall time', '', f'{took:.0f} s', ''))
        for figure, target, measured, met in rows:
            lines.append((name, figure, target, measured,
                          '' if met is None else 'yes' if met else 'NO'))
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    rule = '  '.join('=' * w for w in widths)
    text = [rule, _line(lines[0], widths), rule]
    text += [_line(line, widths) for line in lines[1:]]
    return '\n'.join([*text, rule])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--reduced', action='store_true',
                        help='the sizes the test suite runs')
    parser.add_argument('--only', nargs='+', metavar='RUN',
                        choices=[b.name for b in BENCHES],
                        help='run only these')
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix='cyborg-scale-') as tmp:
        for bench in BENCHES:
            if args.only and bench.name not in args.only:
                continue
            rows, took = _run(bench, args.reduced, pathlib.Path(tmp))
            results.append((bench.name, rows, took))
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                            cwd=HERE, capture_output=True, text=True
                            ).stdout.strip() or 'unknown'
    print(f'\n{os.cpu_count()} cores, commit {commit}, '
          f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}')
    print(_table(results))
    return 1 if any(met is False for _, rows, _ in results
                    for *_, met in rows) else 0


if __name__ == '__main__':
    sys.exit(main())
