"""Fuzz a running cyborg API against doc/source/reference/openapi.yaml.

Starts a deployment of its own, each service a process: openstack-placement,
cyborg-api (noauth, waitress), a cyborg-conductor and a cyborg-agent with
the fake driver, on a new MariaDB database and a RabbitMQ virtual host;
Nova's events endpoint is a fake on 127.0.0.1. The agent reports its
devices through the conductor; a device profile, an accelerator request
and an attribute are created over the API. Then, at each microversion
asked for, schemathesis sends every operation of the document its
coverage cases and N positive and N negative generated requests, half of
them naming the existing resources, then walks the links between
operations (cyborg/tests/functional/api/fuzzing.py holds the run,
contract.py the checks; the test suite runs the same, smaller).

It prints the requests sent per microversion and every distinct failure,
grouped by operation and kind, each with a curl command that reproduces
it, and exits 1 if there was any. The same arguments send the same
requests (hypothesis's derandomize), unless ``--seed`` picks another
sequence.

    tox -e fuzz [-- --version 2.5 --examples 300 --seed 1]

The database and broker addresses are read from CYBORG_TEST_MYSQL_URL and
CYBORG_TEST_RABBIT_URL, as the test suite does.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import sys
import tempfile
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cyborg.db import migration  # noqa: E402
from cyborg.tests import conftest  # noqa: E402
from cyborg.tests import utils  # noqa: E402
from cyborg.tests.fakes import nova as fake_nova  # noqa: E402
from cyborg.tests.functional.api import contract  # noqa: E402
from cyborg.tests.functional.api import fuzzing  # noqa: E402
from cyborg.tests.harness import gate_stack  # noqa: E402
from cyborg.tests.harness import placement_server  # noqa: E402

MYSQL_URL = os.environ.get('CYBORG_TEST_MYSQL_URL',
                           'mysql+pymysql://root@127.0.0.1:3306/')
RABBIT_URL = os.environ.get('CYBORG_TEST_RABBIT_URL',
                            'rabbit://guest:guest@127.0.0.1:5672/')
VERSIONS = ('2.0', '2.1', '2.2', '2.3', '2.4', '2.5')
HOST = 'fuzz-agent'
NODE = 'fuzz-node'
# A request id, as the body of a 500 names it and the API log shows it.
REQUEST_ID = re.compile(r'req-[0-9a-f-]{36}')
# Up to 330 positive and 330 negative generated requests per operation
# (hypothesis stops earlier where an operation has fewer distinct ones),
# the coverage cases and the stateful phase: some 23,500 requests per
# microversion.
EXAMPLES = 330
STATEFUL_EXAMPLES = 300


def log(message: str) -> None:
    print(f'[fuzz {time.strftime("%H:%M:%S")}] {message}', flush=True)


def start(stack: gate_stack.Stack) -> None:
    """The deployment, up, with the agent's devices reported."""
    stack.add_placement()
    stack.add_api(threads=8)
    stack.add_conductor('fuzz-conductor')
    stack.add_agent(HOST, NODE, devices=2, accelerators=4)
    stack.start('placement')
    gate_stack.wait_for(stack.placement_up, 'placement', 60)
    # nova-compute registers its node before the agent reports.
    placement_server.Placement(stack.placement_url).create_compute_node(
        NODE)
    stack.start('fuzz-conductor', 'api')
    stack.ready('fuzz-conductor')
    stack.start(HOST)
    stack.ready(HOST)
    gate_stack.wait_for(stack.api_up, 'cyborg-api', 60)

    def reported() -> bool:
        response = requests.get(stack.api_url + '/devices',
                                headers=fuzzing.HEADERS, timeout=10)
        return response.status_code == 200 and bool(
            response.json()['devices'])

    gate_stack.wait_for(reported, 'the agent to report its devices', 60)


def fuzz(root: str, version: str, args: argparse.Namespace,
         resources: fuzzing.Resources) -> fuzzing.Fuzz:
    keep = re.compile(args.operations or '')
    checks = contract.CHECKS + ([] if args.no_input_checks
                                else contract.INPUT_CHECKS)
    run = fuzzing.Fuzz(contract.load_schema(), root,
                       None if version == '2.0' else version, resources,
                       seed=args.seed, checks=checks)
    started = time.monotonic()
    run.run(args.examples, args.stateful_examples, args.steps,
            operations=lambda op: bool(keep.search(op.label)),
            progress=(lambda line: log(f'{version} {line}'))
            if args.verbose else (lambda line: None))
    elapsed = time.monotonic() - started
    log(f'{version}: {run.session.sent} requests in {elapsed:.0f}s '
        f'({run.session.sent / elapsed:.0f}/s), '
        f'{sum(f.count for f in run.findings.values())} failures, '
        f'{len(run.findings)} distinct')
    return run


def add_causes(run: fuzzing.Fuzz, api_log: pathlib.Path) -> None:
    """What cyborg-api logged about each server error whose body names
    its request."""
    wanted = {}
    for finding in run.findings.values():
        match = REQUEST_ID.search(finding.message)
        if match and finding.status and finding.status >= 500:
            wanted[match[0]] = finding
    with open(api_log, errors='replace') as f:
        for line in f:
            match = REQUEST_ID.search(line)
            if match and match[0] in wanted and 'error' in line.lower():
                finding = wanted.pop(match[0])
                finding.cause = line.split('] ', 1)[-1].strip()[:500]


def summary(runs: dict[str, fuzzing.Fuzz]) -> str:
    lines = ['', 'Requests sent:']
    for version, run in runs.items():
        shown = version + (' (no version header)' if version == '2.0'
                           else '')
        lines.append(f'  {shown}: {run.session.sent}')
    for version, run in runs.items():
        lines += ['', f'Failures at {version}: {len(run.findings)} distinct'
                  + (':' if run.findings else '')]
        if run.findings:
            lines.append(run.report())
    return '\n'.join(lines)


def deploy_and_fuzz(stack: gate_stack.Stack, args: argparse.Namespace,
                    runs: dict[str, fuzzing.Fuzz]) -> None:
    """Start the deployment, seed it and fuzz it at each version asked
    for, into ``runs``; stop every process, whatever happened."""
    failed = True
    try:
        start(stack)
        root = stack.api_url[:-len('/v2')]
        resources = fuzzing.Resources(root, HOST)
        resources.seed()
        log(f'deployment up at {root}, resources: {resources.ids}')
        for version in args.version:
            runs[version] = fuzz(root, version, args, resources)
            add_causes(runs[version], stack.workdir / 'api.log')
            if args.report:
                write_report(args.report, runs)
        failed = False
    finally:
        # Stopped first: printing may fail too (a closed pipe).
        stopped = stack.stop_all()
        if failed:
            print(stack.tails(40), flush=True)
        log(f'stopped: {stopped}')


def write_report(path: str, runs: dict[str, fuzzing.Fuzz]) -> None:
    with open(path, 'w') as f:
        json.dump({version: {'sent': run.session.sent,
                             'findings': [vars(finding) for finding
                                          in run.findings.values()]}
                   for version, run in runs.items()}, f, indent=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--version', nargs='+', choices=VERSIONS,
                        default=['2.0', '2.5'],
                        help='the microversions to fuzz (default: 2.0, '
                             'sent without a version header, and 2.5)')
    parser.add_argument('--examples', type=int, default=EXAMPLES,
                        help='positive, and as many negative, generated '
                             'requests per operation (default: '
                             f'{EXAMPLES})')
    parser.add_argument('--stateful-examples', type=int,
                        default=STATEFUL_EXAMPLES,
                        help='walks of the stateful phase (default: '
                             f'{STATEFUL_EXAMPLES}; 0 for none)')
    parser.add_argument('--steps', type=int, default=10,
                        help='at most this many requests per walk')
    parser.add_argument('--seed', type=int,
                        help='another sequence of requests (default: the '
                             'same on every run)')
    parser.add_argument('--no-input-checks', action='store_true',
                        help='leave out the checks of what the API does '
                             'with invalid requests (a 4xx, a 405 with '
                             'Allow), as the test suite does')
    parser.add_argument('--operations', metavar='REGEX',
                        help='only the operations whose "METHOD /path" '
                             'matches (the stateful phase walks them all)')
    parser.add_argument('--report', metavar='FILE',
                        help='also write the findings there, as JSON')
    parser.add_argument('--workdir', help='where configuration and logs go '
                        '(default: a new temporary directory)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory afterwards')
    parser.add_argument('-v', '--verbose', action='store_true',
                        help='the requests sent per operation as it goes')
    args = parser.parse_args()
    # SIGTERM ends the run as Ctrl-C does: the services are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(
        prefix='cyborg-fuzz-')).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    log(f'work directory {workdir}')
    runs: dict[str, fuzzing.Fuzz] = {}
    # A MariaDB database and a RabbitMQ virtual host of the run's own.
    database = conftest._ServerDatabase('mysql', MYSQL_URL)
    database.create()
    try:
        migration.upgrade('head', url=database.url)
        with utils.virtual_host(RABBIT_URL, 'cyborg-fuzz') as rabbit_url, \
                fake_nova.FakeNova() as nova:
            stack = gate_stack.Stack(workdir, rabbit_url, database.url,
                                     nova.endpoint, nova.token)
            deploy_and_fuzz(stack, args, runs)
    finally:
        database.drop()
    print(summary(runs), flush=True)
    if args.keep:
        log(f'logs kept in {workdir}')
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(run.findings for run in runs.values()) else 0


if __name__ == '__main__':
    sys.exit(main())
