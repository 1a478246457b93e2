"""Each real process stops on SIGTERM with status 0 and leaves no child:
idle, still starting, or unable to reach its database or broker."""
import contextlib
import logging
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from collections.abc import Iterator

import pytest

import cyborg
from cyborg.tests import conftest
from cyborg.tests.functional.test_processes import _alive
from cyborg.tests.functional.test_processes import _children
from cyborg.tests.functional.test_processes import _start
from cyborg.tests.functional.test_processes import _uwsgi_conf
from cyborg.tests.functional.test_processes import _write_conf
from cyborg.tests.harness import gate_stack
from cyborg.tests.utils import wait_for

LOG = logging.getLogger(__name__)

# What a conductor or an agent logs once its RPC server listens.
LISTENING = 'listening on topic'
GUIDE = (pathlib.Path(cyborg.__file__).parents[1] / 'doc' / 'source' /
         'install' / 'manual.rst')
# What uwsgi logs when a worker has loaded the WSGI application.
READY = "WSGI app 0 (mountpoint='') ready"
# A stop takes about a second; this only tells a hang from a slow machine.
STOP_BOUND = 15
# Long enough for an idle RabbitMQ listener to reach its longest poll.
IDLE = 3
# How long after its fork a uwsgi worker surely imports the application.
IMPORTING = 0.4


class _Process:
    """A process under test, ``command``, with the file it logs to."""

    def __init__(self, command: str, proc: subprocess.Popen,
                 log: pathlib.Path) -> None:
        self.command = command
        self.proc = proc
        self.log_path = log
        self.children: list[int] = []

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def logged(self, text: str) -> bool:
        return text in self.log

    def sigterm(self) -> float:
        """Seconds from SIGTERM to the exit, asserted clean."""
        self.children = _children(self.proc.pid)
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_BOUND)
        except subprocess.TimeoutExpired:
            raise AssertionError(f'{self.command} still runs {STOP_BOUND}s '
                                 f'after SIGTERM:\n{self.log}') from None
        took = time.monotonic() - started
        LOG.info('%s stopped in %.2f s', self.command, took)
        assert code == 0, self.log
        left = [pid for pid in self.children if _alive(pid)]
        assert not left, f'children {left} outlived {self.command}'
        return took

    def kill(self) -> None:
        """Whatever the test did, nothing it started keeps running."""
        pids = self.children or _children(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def _running(tmp_path: pathlib.Path, command: str, transport_url: str,
             db_url: str, workers: int = 1) -> Iterator[tuple[_Process, str]]:
    """``command`` started with a configuration of its own; yields it and
    the URL of the API it would serve."""
    port = gate_stack.free_port()
    conf_file = _write_conf(
        tmp_path / f'{command}.conf',
        DEFAULT={'transport_url': transport_url,
                 'control_exchange': f'cyborg-test-{uuid.uuid4().hex[:8]}',
                 'host': 'stop-host', 'heartbeat_interval': 1,
                 'state_path': str(tmp_path)},
        database={'connection': db_url},
        agent={'hostname': 'stop-host.example', 'periodic_interval': 1},
        api={'auth_strategy': 'noauth', 'port': port, 'workers': workers})
    log = tmp_path / f'{command}.log'
    process = _Process(command, _start(f'cyborg.cmd.{command}', conf_file,
                                       log), log)
    try:
        yield process, f'http://127.0.0.1:{port}/v2'
    finally:
        process.kill()


def _status(url: str) -> int | None:
    """The HTTP status of a GET of ``url`` by an administrator; None when
    nothing answers."""
    request = urllib.request.Request(url, headers={'X-Auth-Token': 'admin'})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def _down_url(scheme: str) -> str:
    """A URL of ``scheme`` at a port on which nothing listens."""
    return f'{scheme}://guest:guest@127.0.0.1:{gate_stack.free_port()}/cyborg'


def _serving(process: _Process, url: str, workers: int) -> Callable[[], bool]:
    return lambda: (_status(url) == 200 and (
        workers == 1 or len(_children(process.proc.pid)) >= workers))


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
@pytest.mark.parametrize('command, workers', [
    ('conductor', 1), ('agent', 1), ('api', 1), ('api', 2)],
    ids=['conductor', 'agent', 'api', 'api-2-workers'])
def test_an_idle_process_stops_at_once(tmp_path, rabbit_url, db_engine,
                                       empty_db_url, command, workers):
    with _running(tmp_path, command, rabbit_url, empty_db_url,
                  workers) as (process, url):
        if command == 'api':
            # Generous: on a machine whose cores are all busy, starting
            # two workers took over a minute.
            wait_for(_serving(process, url, workers), 'the API to answer',
                     timeout=180)
        else:
            wait_for(lambda: process.logged(LISTENING),
                     f'{command} to listen', timeout=180)
        time.sleep(IDLE)
        process.sigterm()
    assert 'Traceback' not in process.log, process.log


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
@pytest.mark.parametrize('command', ['conductor', 'agent', 'api'])
def test_a_starting_process_stops_at_once(tmp_path, rabbit_url, db_engine,
                                          empty_db_url, command):
    """SIGTERM as soon as the launcher has forked its worker, which may
    still be opening its database and broker connections."""
    workers = 2 if command == 'api' else 1
    with _running(tmp_path, command, rabbit_url, empty_db_url,
                  workers) as (process, _):
        wait_for(lambda: _children(process.proc.pid), 'a worker process',
                 timeout=60, interval=0.01)
        process.sigterm()


def test_a_conductor_without_its_database_stops_at_once(tmp_path,
                                                        rabbit_url):
    with _running(tmp_path, 'conductor', rabbit_url,
                  _down_url('mysql+pymysql')) as (process, _):
        wait_for(lambda: process.logged('The database cannot be reached'),
                 'a heartbeat to fail', timeout=60)
        process.sigterm()


@pytest.mark.parametrize('command', ['conductor', 'agent'])
def test_a_process_without_its_broker_stops_at_once(tmp_path, command):
    """The worker still waits for RabbitMQ before its RPC server can
    start."""
    with _running(tmp_path, command, _down_url('rabbit'),
                  'sqlite://') as (process, _):
        wait_for(lambda: process.logged('Connection failed'),
                 'a connection to the broker to fail', timeout=60)
        process.sigterm()
    assert not process.logged(LISTENING)


@pytest.mark.parametrize('workers', [1, 2])
def test_an_api_without_database_or_broker_stops_at_once(tmp_path, workers):
    with _running(tmp_path, 'api', _down_url('rabbit'),
                  _down_url('mysql+pymysql'), workers) as (process, url):
        wait_for(_serving(process, url, workers), 'the API to answer',
                 timeout=60)
        # The database is down: the API answers 503 for a listing.
        assert _status(f'{url}/device_profiles') == 503
        process.sigterm()


def _guide_uwsgi_ini(port: int, conf_file: str) -> str:
    """The install guide's uwsgi configuration, on ``port`` with
    ``conf_file`` and two processes of four threads."""
    text = GUIDE.read_text()
    block = re.search(r'\n( +)\[uwsgi\]\n(?:\1.*\n|\n)*', text).group(0)
    ini = '\n'.join(line.strip() for line in block.splitlines()) + '\n'
    for name, value in (('http11-socket', f'127.0.0.1:{port}'),
                        ('processes', '2'), ('threads', '4'),
                        ('env', f'OS_CYBORG_CONFIG_FILES={conf_file}')):
        ini, found = re.subn(rf'(?m)^{name} = .*$', f'{name} = {value}', ini)
        assert found == 1, f'no {name} in the guide\'s uwsgi settings'
    return ini


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
@pytest.mark.parametrize('loaded', [False, True],
                         ids=['loading', 'serving'])
def test_uwsgi_as_the_guide_sets_it_up_stops_at_once(
        tmp_path, rabbit_url, db_engine, empty_db_url, loaded):
    """Also while its workers still import the application, which each
    does after the fork: without cyborg.wsgi.api's care such a worker took
    uwsgi's SIGINT for a failed import and lived on."""
    uwsgi = (shutil.which('uwsgi', path=os.path.dirname(sys.executable))
             or shutil.which('uwsgi'))
    conftest.require_command('uwsgi', uwsgi)
    port = gate_stack.free_port()
    conf_file = _uwsgi_conf(tmp_path, rabbit_url, empty_db_url)
    ini = tmp_path / 'cyborg-api-uwsgi.ini'
    ini.write_text(_guide_uwsgi_ini(port, conf_file))
    log = tmp_path / 'uwsgi.log'
    with open(log, 'w') as out:
        process = _Process('uwsgi', subprocess.Popen(
            [uwsgi, '--ini', str(ini)], stdout=out,
            stderr=subprocess.STDOUT), log)
    try:
        if loaded:
            wait_for(lambda: process.log.count(READY) == 2,
                     'both workers to load the application', timeout=60)
            assert _status(f'http://127.0.0.1:{port}/v2') == 200
        else:
            wait_for(lambda: len(_children(process.proc.pid)) == 2,
                     'two worker processes', timeout=60, interval=0.01)
            # Into the import, which takes a second or two here.
            time.sleep(IMPORTING)
            LOG.info('%d worker(s) had loaded the application',
                     process.log.count(READY))
        process.sigterm()
    finally:
        process.kill()
    assert 'Traceback' not in process.log, process.log
