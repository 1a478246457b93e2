"""Outages of what the API depends on: a 503 that says to retry, one log
line, and service again as soon as the dependency is back.

A database server "goes down" through a TCP relay in front of the real
MariaDB or PostgreSQL: the relay stops listening and cuts the connections
it carries, as a server that stops does. SQLite's database goes away with
its directory ("unable to open database file").
"""
import json
import logging
import re
import time
import urllib.error
import urllib.request
import uuid

import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.tests import conftest
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.test_processes import _start
from cyborg.tests.functional.test_processes import _write_conf
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import wait_for

DB_DOWN = ('Service unavailable: cyborg cannot reach its database; retry '
           'later.')
PROFILE = {'groups': [{'resources:FPGA': '1'}]}


class _Relay(placement_server.Relay):
    """The relay, open, in front of the database server of ``url``;
    ``url`` is the database's through it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = sa.engine.make_url(url).set(
            host='127.0.0.1', port=self.port).render_as_string(
                hide_password=False)
        self.open()

    up = placement_server.Relay.open
    down = placement_server.Relay.close


class _SqliteDirectory:
    """An SQLite database whose directory can be taken away and back."""

    def __init__(self, tmp_path) -> None:
        self._dir = tmp_path / 'db'
        self._away = tmp_path / 'db-away'
        self.url = f'sqlite:///{self._dir}/cyborg.sqlite'

    def up(self) -> None:
        if self._away.exists():
            self._away.rename(self._dir)

    def down(self) -> None:
        self._dir.rename(self._away)


@pytest.fixture
def database(backend, tmp_path):
    """An empty database at ``url``, with ``down()`` and ``up()``."""
    if backend == 'sqlite':
        database = _SqliteDirectory(tmp_path)
        yield database
        database.up()
        return
    urls = conftest.empty_database_url(backend, tmp_path)
    database = _Relay(next(urls))
    try:
        yield database
    finally:
        database.down()
        next(urls, None)


@pytest.fixture
def db_engine(database):
    """The database of api_all_dbs, through ``database``."""
    yield from conftest.migrated_engine(database.url)


def _fault(response_body: bytes | str) -> dict:
    return json.loads(json.loads(response_body)['error_message'])


def _server_errors(caplog) -> list[logging.LogRecord]:
    """What the API process logged as a bug (ERROR, or a traceback)."""
    return [r for r in caplog.records
            if r.name.startswith(('cyborg.api', 'wsme', 'pecan'))
            and (r.levelno >= logging.ERROR or r.exc_info)]


def _assert_outage(response) -> None:
    assert response.status_int == 503
    assert response.headers['Retry-After'] == '5'
    assert response.content_type == 'application/json'
    fault = _fault(response.body)
    assert fault['faultstring'] == DB_DOWN
    assert fault['faultcode'] == 'Server'


def test_database_outage(api_all_dbs, database, caplog):
    """A read (in the API) and a write (in the conductor) while the
    database is down; connections pooled before it went down."""
    caplog.set_level(logging.WARNING)
    app = api_all_dbs.app
    app.get('/v2/device_profiles', headers=ADMIN, status=200)
    app.post_json('/v2/device_profiles', [dict(PROFILE, name='before')],
                  headers=ADMIN, status=201)

    database.down()
    _assert_outage(app.get('/v2/device_profiles', headers=ADMIN,
                           status=503))
    _assert_outage(app.post_json('/v2/device_profiles',
                                 [dict(PROFILE, name='during')],
                                 headers=ADMIN, status=503))
    assert not _server_errors(caplog), caplog.text
    warnings = [r.getMessage() for r in caplog.records
                if r.name == 'cyborg.api.expose']
    assert len(warnings) == 2
    assert all(re.match(r'Request req-\S+ answered 503; cause: \(', w)
               for w in warnings), warnings

    database.up()
    app.post_json('/v2/device_profiles', [dict(PROFILE, name='after')],
                  headers=ADMIN, status=201)
    names = {p['name'] for p in app.get(
        '/v2/device_profiles', headers=ADMIN).json['device_profiles']}
    assert names == {'before', 'after'}


def test_no_conductor_is_one_warning(api, caplog):
    caplog.set_level(logging.WARNING)
    api.conf.set_override('rpc_response_timeout', 1)
    api.stop_conductor()
    response = api.app.post_json('/v2/device_profiles',
                                 [dict(PROFILE, name='x')],
                                 headers=ADMIN, status=503)
    assert response.headers['Retry-After'] == '5'
    assert 'no cyborg-conductor answered' in _fault(
        response.body)['faultstring']
    assert not _server_errors(caplog), caplog.text
    [line] = [r.getMessage() for r in caplog.records
              if r.name == 'cyborg.api.expose']
    request_id = response.headers['X-OpenStack-Request-Id']
    assert line.startswith(f'Request {request_id} answered 503; cause: '
                           'No reply on topic cyborg-conductor'), line


def _call(url, method='GET', body=None):
    """(status, headers, body) of a request, errors included."""
    request = urllib.request.Request(
        url, method=method, data=json.dumps(body).encode() if body else None,
        headers={'X-Auth-Token': 'admin',
                 'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()
    except OSError:
        return None, {}, b''


def _stop_all(procs):
    """Stop the processes together; their exit codes."""
    for proc in procs:
        proc.terminate()
    try:
        return [proc.wait(30) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize('backend', ['mysql', 'postgresql'], indirect=True)
def test_services_start_with_the_database_down(tmp_path, rabbit_url,
                                               database):
    """cyborg-api and cyborg-conductor as they run, their engines made
    while the database is down; then it comes back, and goes again."""
    migration.upgrade('head', url=database.url)
    database.down()
    port = gate_stack.free_port()
    conf_file = _write_conf(
        tmp_path / 'cyborg.conf',
        DEFAULT={'transport_url': rabbit_url,
                 'control_exchange': f'cyborg-test-{uuid.uuid4().hex[:8]}',
                 'state_path': str(tmp_path)},
        database={'connection': database.url},
        api={'auth_strategy': 'noauth', 'port': port})
    procs = [_start(f'cyborg.cmd.{name}', conf_file, tmp_path / f'{name}.log')
             for name in ('conductor', 'api')]
    base = f'http://127.0.0.1:{port}/v2'
    profiles = f'{base}/device_profiles'
    try:
        wait_for(lambda: _call(base)[0] == 200, 'the API to answer')
        started = time.monotonic()
        status, headers, body = _call(profiles)
        assert (status, headers['Retry-After']) == (503, '5'), body
        assert _fault(body)['faultstring'] == DB_DOWN
        assert time.monotonic() - started < 5

        # Once the conductor listens, its own outage comes back as such.
        def write(name):
            status, _, body = _call(profiles, 'POST',
                                    [dict(PROFILE, name=name)])
            failed = status is not None and status >= 400
            return status, failed and _fault(body)['faultstring']

        wait_for(lambda: write('during') == (503, DB_DOWN),
                 'the conductor to answer')

        database.up()
        assert write('up')[0] == 201
        assert _call(profiles)[0] == 200

        # Both processes now hold pooled connections, which go stale.
        database.down()
        assert write('down') == (503, DB_DOWN)
        assert _call(profiles)[0] == 503

        database.up()
        assert write('again')[0] == 201
        status, _, body = _call(profiles)
        assert status == 200
        assert {p['name'] for p in json.loads(body)['device_profiles']} == {
            'up', 'again'}
    finally:
        codes = _stop_all(procs)
    log = (tmp_path / 'api.log').read_text()
    assert codes == [0, 0], log
    assert 'Traceback' not in log, log
    # One line each, which oslo.log ends with the client's message.
    assert log.count('answered 503; cause: ') >= 3, log
    assert log.count(f'DatabaseUnavailable: {DB_DOWN}') >= 3, log
