"""Guru Meditation Reports of a real cyborg-conductor, cyborg-agent and
cyborg-api under uwsgi.

One conductor and one agent (gate_stack, on PostgreSQL and RabbitMQ) serve
the whole module. The conductor's database URL carries a password
(PostgreSQL's trust authentication ignores it) and its transport URL
RabbitMQ's; the agent watches ``[oslo_reports] file_event_handler`` and
writes under ``[oslo_reports] log_dir``. Each is oslo.service's launcher
parent with one worker, each process reporting on itself. uwsgi, with the
install guide's settings and one worker, serves the API on the same
database and broker.
"""
import contextlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from cyborg import version
from cyborg.db import migration
from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.functional.test_processes import _children
from cyborg.tests.functional.test_stopping import READY
from cyborg.tests.functional.test_stopping import _guide_uwsgi_ini
from cyborg.tests.functional.test_stopping import _Process
from cyborg.tests.functional.test_stopping import _status
from cyborg.tests.harness import gate_stack

# One stack for the module, so one xdist worker (tox runs --dist
# loadgroup).
pytestmark = pytest.mark.xdist_group('guru_meditation')

DB_PASSWORD = 'Gmr-db-Pw-3141'
HEADER = '====' + format('Guru Meditation', '^64') + '===='
# A frame of cyborg's in the stack of a worker's thread: its RPC service,
# which waits to be stopped.
CYBORG_FRAME = '/cyborg/common/rpc_service.py'


def _sections(text: str) -> dict[str, str]:
    """The sections of the first report in ``text``, by title; the last
    one ends with its last ``name = version`` line."""
    parts = re.split(r'(?m)^====\s+(.+?)\s+====$', text[text.index(HEADER):])
    found = {title: body.strip('=\n') for title, body
             in zip(parts[1::2], parts[2::2], strict=True)}
    packages = []
    for line in found['Installed packages'].splitlines():
        if not re.fullmatch(r'\S+ = \S+', line):
            break
        packages.append(line)
    found['Installed packages'] = '\n'.join(packages)
    return found


@pytest.fixture(scope='module')
def stack(tmp_path_factory) -> Iterator[dict[str, Any]]:
    if not utils.port_open(conftest.RABBIT_URL, 5672):
        conftest.unavailable('RabbitMQ',
                             f'nothing listens at {conftest.RABBIT_URL}')
    workdir = tmp_path_factory.mktemp('reports')
    database = contextlib.contextmanager(conftest.empty_database_url)
    with utils.virtual_host(conftest.RABBIT_URL, 'cyborg-test') as rabbit, \
            database('postgresql', workdir) as empty:
        url = sa.engine.make_url(empty)
        if url.password is None:
            url = url.set(password=DB_PASSWORD)
        db_url = url.render_as_string(hide_password=False)
        migration.upgrade('head', url=db_url)
        stack = gate_stack.Stack(workdir, rabbit, db_url,
                                 'http://127.0.0.1:9', 'unused')
        trigger = workdir / 'report-trigger'
        reports = workdir / 'reports'
        reports.mkdir()
        stack.add_conductor('conductor1')
        stack.add_agent('agent1', 'gmr-node', 1, 1, extra={
            'oslo_reports': {'file_event_handler': str(trigger),
                             'log_dir': str(reports)}})
        with stack.running():
            stack.start('conductor1', 'agent1')
            stack.ready('conductor1', 'agent1')
            yield {'stack': stack, 'db_url': db_url, 'rabbit_url': rabbit,
                   'db_password': url.password,
                   'rabbit_password': urllib.parse.urlsplit(rabbit).password,
                   'trigger': trigger, 'reports': reports}


def _pids(process: gate_stack.Process) -> tuple[int, int]:
    """The launcher parent's PID and its one worker's."""
    [worker] = gate_stack.wait_for(lambda: _children(process.pid),
                                   f'the worker of {process.name}')
    return process.pid, worker


def _reported(process: gate_stack.Process, since: int) -> str:
    """The log ``process`` wrote after ``since`` characters, once it holds
    a whole report (written at once)."""
    return gate_stack.wait_for(
        lambda: HEADER in process.log()[since:] and process.log()[since:],
        f'a report in the log of {process.name}', 30)


def _still_serving(stack: dict[str, Any]) -> None:
    """The conductor's heartbeat and the agent's, which the agent sends
    the conductor over RPC, are both recorded again."""
    def seen() -> dict[str, Any]:
        return {row['binary']: row['last_seen_at'] for row in utils.query(
            stack['db_url'], 'SELECT "binary", last_seen_at FROM services')}

    def both() -> dict[str, Any] | None:
        # Both rows exist once the agent's first heartbeat is in.
        found = seen()
        return found if len(found) == 2 else None

    before = gate_stack.wait_for(
        both, 'a heartbeat of the conductor and of the agent', 30)
    gate_stack.wait_for(lambda: all(
        seen()[binary] > last for binary, last in before.items()),
        'new heartbeats of the conductor and the agent', 30)


def test_sigusr2_to_a_worker(stack):
    """Its report on stderr (the process's log here): its threads by name
    with cyborg's frames, the configuration with every password masked,
    cyborg's version and its requirements'. It goes on serving."""
    conductor = stack['stack'].processes['conductor1']
    parent, worker = _pids(conductor)
    since = len(conductor.log())
    os.kill(worker, signal.SIGUSR2)
    text = _reported(conductor, since)
    report = text[text.index(HEADER):]
    sections = _sections(report)

    assert f'version = {version.version_string()}' in sections['Package']
    threads = sections['Threads']
    assert re.search(r'Thread #\d+ \(conductor-heartbeat\)', threads)
    assert CYBORG_FRAME in threads
    assert f'Process {worker} (under {parent})' in sections['Processes']

    configuration = sections['Configuration']
    assert '  connection = ***\n' in configuration
    assert '  transport_url = ***\n' in configuration
    for password in (stack['db_password'], stack['rabbit_password']):
        assert f':{password}@' not in report
    assert stack['db_password'] not in report

    packages = dict(line.split(' = ') for line in
                    sections['Installed packages'].splitlines())
    assert 'oslo.messaging' in packages and 'SQLAlchemy' in packages

    assert _children(parent) == [worker]
    _still_serving(stack)


def test_sigusr2_to_a_launcher_parent(stack):
    """The parent reports on itself, its worker among its processes; no
    signal reaches the worker, which keeps running."""
    conductor = stack['stack'].processes['conductor1']
    parent, worker = _pids(conductor)
    since = len(conductor.log())
    os.kill(parent, signal.SIGUSR2)
    sections = _sections(_reported(conductor, since))
    processes = sections['Processes']
    assert f'Process {parent} ' in processes
    assert f'    Process {worker} (under {parent})' in processes
    assert re.search(r'Thread #\d+ \(MainThread\)', sections['Threads'])
    assert CYBORG_FRAME not in sections['Threads']
    assert _children(parent) == [worker]
    assert conductor.log()[since:].count(HEADER) == 1


def _report_files(directory: pathlib.Path, pid: int, after: float,
                  service: str = 'cyborg-agent') -> list[pathlib.Path]:
    return [path for path in directory.glob(
            f'{service}.{pid}_gurumeditation_*')
            if path.stat().st_mtime >= after]


def test_file_trigger_and_log_dir(stack):
    """Touching the file makes the parent and the worker each write a
    report file under log_dir, nothing on stderr; SIGUSR2 still reports
    too, and the agent goes on serving."""
    agent = stack['stack'].processes['agent1']
    parent, worker = _pids(agent)
    reports = stack['reports']
    since = len(agent.log())
    touched = time.time()
    stack['trigger'].touch()
    [master_file], [worker_file] = gate_stack.wait_for(
        lambda: (_report_files(reports, parent, touched)
                 and _report_files(reports, worker, touched) and (
                     _report_files(reports, parent, touched),
                     _report_files(reports, worker, touched))),
        'a report file of each agent process', 30)
    assert re.fullmatch(r'cyborg-agent\.\d+_gurumeditation_\d{14}',
                        worker_file.name), worker_file.name
    worker_report = _sections(worker_file.read_text())
    assert re.search(r'Thread #\d+ \(agent-heartbeat\)',
                     worker_report['Threads'])
    assert CYBORG_FRAME in worker_report['Threads']
    assert f'Process {parent} ' in _sections(
        master_file.read_text())['Processes']
    assert HEADER not in agent.log()[since:]

    signalled = time.time()
    os.kill(worker, signal.SIGUSR2)
    gate_stack.wait_for(lambda: _report_files(reports, worker, signalled),
                        'a report file after SIGUSR2', 30)
    assert _children(parent) == [worker]
    _still_serving(stack)


def test_uwsgi_reports_on_the_file_alone(stack, tmp_path):
    """A uwsgi worker reports when the file changes; SIGUSR2 stays
    uwsgi's, which logs the worker's C backtrace, and the worker serves
    on."""
    uwsgi = (shutil.which('uwsgi', path=os.path.dirname(sys.executable))
             or shutil.which('uwsgi'))
    conftest.require_command('uwsgi', uwsgi)
    trigger, reports = tmp_path / 'trigger', tmp_path / 'reports'
    reports.mkdir()
    conf_file = gate_stack.write_conf(tmp_path / 'cyborg.conf', {
        'DEFAULT': {'transport_url': stack['rabbit_url'],
                    'control_exchange': stack['stack'].exchange},
        'database': {'connection': stack['db_url']},
        'api': {'auth_strategy': 'noauth'},
        'oslo_reports': {'file_event_handler': str(trigger),
                         'log_dir': str(reports)}})
    port = gate_stack.free_port()
    ini = tmp_path / 'uwsgi.ini'
    ini.write_text(_guide_uwsgi_ini(port, str(conf_file)).replace(
        'processes = 2', 'processes = 1'))
    log = tmp_path / 'uwsgi.log'
    with open(log, 'w') as out:
        process = _Process('uwsgi', subprocess.Popen(
            [uwsgi, '--ini', str(ini)], stdout=out,
            stderr=subprocess.STDOUT), log)
    try:
        gate_stack.wait_for(lambda: READY in process.log,
                            'the worker to load the application', 60)
        [worker] = _children(process.proc.pid)
        touched = time.time()
        trigger.touch()
        [written] = gate_stack.wait_for(
            lambda: _report_files(reports, worker, touched, 'cyborg-api'),
            'a report file of the uwsgi worker', 30)
        assert 'connection = ***' in _sections(
            written.read_text())['Configuration']
        assert _report_files(reports, process.proc.pid, 0,
                             'cyborg-api') == []

        signalled = time.time()
        os.kill(worker, signal.SIGUSR2)
        gate_stack.wait_for(lambda: 'what_i_am_doing' in process.log,
                            'uwsgi\'s backtrace of the worker', 30)
        assert _status(f'http://127.0.0.1:{port}/v2') == 200
        assert _children(process.proc.pid) == [worker]
        assert _report_files(reports, worker, signalled, 'cyborg-api') == []
        process.sigterm()
    finally:
        process.kill()
