"""The real cyborg-status command, run as a separate process.

Each check is driven to each of its results: the database on real
servers, placement as the real service (or a closed port, or an HTTP
server playing an old placement), policy files on disk and agents'
heartbeats in the database.
"""
import datetime
import json
import subprocess
import sys

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.cmd import status
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import upstream
from cyborg.db.api import services
from cyborg.tests.fakes import http

SUCCESS, WARNING, FAILURE = 0, 1, 2
CLOSED_PORT_URL = 'http://127.0.0.1:1'
UNREACHABLE_DB = 'mysql+pymysql://root@127.0.0.1:1/nope'


def _status(tmp_path, connection: str, *, placement: str | None = None,
            policy_file: str | None = None, extra: str = '',
            args: tuple[str, ...] = ('upgrade', 'check', '--json'),
            ) -> subprocess.CompletedProcess:
    text = (f'[DEFAULT]\nstate_path = {tmp_path}\n{extra}\n'
            f'[database]\nconnection = {connection}\n')
    if placement:
        text += ('[placement]\nauth_type = admin_token\n'
                 f'endpoint = {placement}\ntoken = admin\n')
    # An explicit path, so that no policy.yaml of the machine is found.
    text += ('[oslo_policy]\npolicy_file = '
             f'{policy_file or tmp_path / "no-policy.yaml"}\n')
    conf = tmp_path / 'cyborg.conf'
    conf.write_text(text)
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.status', '--config-file',
         str(conf), *args], capture_output=True, text=True, timeout=120)


def _checks(result: subprocess.CompletedProcess) -> dict[str, tuple]:
    """{check name: (code, details)}; asserts the exit status matches."""
    assert 'Traceback' not in result.stderr, result.stderr
    output = json.loads(result.stdout)
    checks = {c['check']: (c['result'], c['details'])
              for c in output['checks']}
    assert result.returncode == max(code for code, _ in checks.values())
    return checks


def _sqlite_url(tmp_path) -> str:
    # The database of the sqlite_engine fixture.
    return f'sqlite:///{tmp_path}/cyborg.sqlite'


def _heartbeat(*hosts: str) -> None:
    ctx = cyborg_context.get_admin_context()
    for host in hosts:
        services.heartbeat(ctx, host, 'cyborg-agent', '1.0', host)


def _silence(engine: sa.engine.Engine, host: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.update(models.Service)
                     .where(models.Service.host == host)
                     .values(last_seen_at=datetime.datetime(2020, 1, 2, 3)))


# -- everything in order ------------------------------------------------------

def test_all_checks_pass(tmp_path, sqlite_engine, placement_url):
    _heartbeat('cmp1')
    policy = tmp_path / 'policy.yaml'
    policy.write_text('"accelerator:device:get_all": "role:reader"\n')

    result = _status(tmp_path, _sqlite_url(tmp_path),
                     placement=placement_url, policy_file=str(policy))

    checks = _checks(result)
    assert checks == {'Database schema': (SUCCESS, None),
                      'Placement API': (SUCCESS, None),
                      'Policy file': (SUCCESS, None),
                      'Agents alive': (SUCCESS, None)}
    assert result.returncode == 0


def test_table_output(tmp_path, sqlite_engine):
    result = _status(tmp_path, _sqlite_url(tmp_path),
                     args=('upgrade', 'check'))

    assert result.returncode == WARNING, result.stderr
    assert 'Upgrade Check Results' in result.stdout
    assert 'Check: Database schema' in result.stdout
    assert 'Result: Warning' in result.stdout


# -- database schema ----------------------------------------------------------

def test_empty_database(tmp_path, empty_db_url):
    checks = _checks(_status(tmp_path, empty_db_url))

    code, details = checks['Database schema']
    assert code == FAILURE
    assert 'no cyborg schema' in details
    assert '"cyborg-dbsync upgrade"' in details
    assert checks['Agents alive'] == (
        WARNING, 'Not checked: the database has no schema yet (see the '
                 '"Database schema" check).')


def test_schema_behind(tmp_path, empty_db_url):
    migration.upgrade('0001', url=empty_db_url)

    code, details = _checks(_status(tmp_path, empty_db_url))[
        'Database schema']

    assert code == FAILURE
    assert details == (
        f'The database schema is at revision 0001; this version of cyborg '
        f'needs {migration.head()}. Run "cyborg-dbsync upgrade".')


def test_schema_from_newer_code(tmp_path, sqlite_engine):
    with sqlite_engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version "
                             "SET version_num = '9999'"))

    code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path)))[
        'Database schema']

    assert code == FAILURE
    assert 'revision 9999, which this version of cyborg does not know' in (
        details)


def test_database_unreachable(tmp_path):
    checks = _checks(_status(tmp_path, UNREACHABLE_DB))

    code, details = checks['Database schema']
    assert code == FAILURE
    assert details.startswith(
        f'Cannot reach the database at {UNREACHABLE_DB}: ')
    assert 'Check [database] connection' in details
    assert checks['Agents alive'][0] == WARNING
    assert 'cannot be reached' in checks['Agents alive'][1]


# -- placement ----------------------------------------------------------------

def test_placement_not_configured(tmp_path, sqlite_engine):
    code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path)))[
        'Placement API']

    assert code == WARNING
    assert 'Placement is not configured' in details
    assert 'Nova cannot schedule' in details


def test_placement_unreachable(tmp_path, sqlite_engine):
    code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path),
                                    placement=CLOSED_PORT_URL))[
        'Placement API']

    assert code == FAILURE
    assert details.startswith('Cannot call placement with the [placement] '
                              'options: ')
    assert '127.0.0.1' in details


@pytest.fixture
def old_placement():
    """Answers GET / as placement 1.0 to 1.17 (Queens) did."""
    server = http.FakeHTTPServer()
    server.route('GET', '/', lambda request: http.json_response(
        {'versions': [{'id': 'v1.0', 'min_version': '1.0',
                       'max_version': '1.17', 'status': 'CURRENT',
                       'links': []}]}))
    with server:
        yield server


def test_placement_too_old(tmp_path, sqlite_engine, old_placement):
    code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path),
                                    placement=old_placement.url))[
        'Placement API']

    assert code == FAILURE
    assert details == (
        f'Placement supports microversions up to 1.17; cyborg needs '
        f'{status.PLACEMENT_MIN_VERSION}. Upgrade placement first.')
    assert [r.path for r in old_placement.requests] == ['/']


def test_placement_needs_1_28():
    # Consumer generations, for the allocations of live attaches (1.26:
    # reserved inventory equal to the total, a disabled device).
    assert status.PLACEMENT_MIN_VERSION == '1.28'


def test_not_a_version_document(tmp_path, sqlite_engine):
    with http.FakeHTTPServer() as other:
        other.route('GET', '/', lambda request: http.json_response(
            {'name': 'something else'}))
        url = other.url
        code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path),
                                        placement=url))['Placement API']

    assert code == FAILURE
    assert details.startswith(
        f'{url}/ did not answer with a placement version document.')


def test_not_placement(tmp_path, sqlite_engine):
    with http.FakeHTTPServer() as other:  # answers 404 to everything
        url = other.url
        code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path),
                                        placement=url))['Placement API']

    assert code == FAILURE
    assert f'Placement answered GET {url}/ with 404' in details


# -- policy file --------------------------------------------------------------

def test_json_policy_file(tmp_path, sqlite_engine):
    policy = tmp_path / 'policy.json'
    policy.write_text('{"accelerator:device:get_all": "role:reader"}')

    code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path),
                                    policy_file=str(policy)))['Policy file']

    assert code == WARNING
    assert f'The policy file {policy} is JSON' in details
    assert 'oslopolicy-convert-json-to-yaml' in details


@pytest.mark.parametrize('text,problem', [
    ('"a": [\n  - b\n', 'is neither YAML nor JSON'),
    ('- just\n- a list\n', 'is not a mapping of policy names to rules'),
])
def test_broken_policy_file(tmp_path, sqlite_engine, text, problem):
    policy = tmp_path / 'policy.yaml'
    policy.write_text(text)

    code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path),
                                    policy_file=str(policy)))['Policy file']

    assert code == FAILURE
    assert f'The policy file {policy} {problem}' in details


# -- agents -------------------------------------------------------------------

def test_no_agent(tmp_path, sqlite_engine):
    code, details = _checks(_status(tmp_path, _sqlite_url(tmp_path)))[
        'Agents alive']

    assert code == WARNING
    assert details.startswith('No cyborg-agent has ever sent a heartbeat')


def test_agent_down(tmp_path, db_engine, empty_db_url):
    _heartbeat('cmp1', 'cmp2', 'cmp3')
    _silence(db_engine, 'cmp2')

    code, details = _checks(_status(tmp_path, empty_db_url))['Agents alive']

    assert code == WARNING
    assert details == (
        '1 of 3 agents have sent no heartbeat for [DEFAULT] '
        'service_down_time (60s): cmp2 (last seen 2020-01-02 03:00:00 UTC). '
        'Their devices cannot be bound until they are back.')


def test_service_down_time_is_read(tmp_path, sqlite_engine):
    _heartbeat('cmp1')
    _silence(sqlite_engine, 'cmp1')
    long_down_time = 'service_down_time = 999999999'

    code, _ = _checks(_status(tmp_path, _sqlite_url(tmp_path),
                              extra=long_down_time))['Agents alive']

    assert code == SUCCESS


# -- the command line ---------------------------------------------------------

def test_missing_config_file(tmp_path):
    result = subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.status', '--config-file',
         str(tmp_path / 'nope.conf'), 'upgrade', 'check'],
        capture_output=True, text=True, timeout=120)

    assert result.returncode == 255
    assert result.stderr.splitlines() == [
        f'cyborg-status: Failed to find some config files: '
        f'{tmp_path / "nope.conf"}']


def test_help(tmp_path):
    result = subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.status', 'upgrade', '--help'],
        capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('usage: cyborg-status upgrade')
    assert '--json' in result.stdout


def test_upstream_database_is_told_to_adopt(tmp_path, empty_db_url):
    engine = sa.create_engine(empty_db_url)
    with engine.begin() as conn:
        conn.execute(sa.text('CREATE TABLE alembic_version (version_num '
                             'VARCHAR(32) NOT NULL PRIMARY KEY)'))
        conn.execute(sa.text("INSERT INTO alembic_version VALUES "
                             f"('{upstream.UPSTREAM_HEAD}')"))
        for table in upstream.UPSTREAM_TABLES:
            conn.execute(sa.text(f'CREATE TABLE {table} (id INTEGER)'))
    engine.dispose()
    checks = _checks(_status(tmp_path, empty_db_url))

    code, details = checks['Database schema']
    assert code == FAILURE
    assert 'an OpenStack Cyborg 17.0.0 database' in details
    assert '"cyborg-dbsync adopt"' in details
    assert checks['Agents alive'][0] == WARNING
