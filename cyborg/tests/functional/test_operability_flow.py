"""What operators run beside the API, end to end: /healthcheck for load
balancers and request ids in every process's log.

cyborg-api, a conductor and an agent (fake driver) run as processes on
RabbitMQ and a database server, MariaDB by default (PostgreSQL too under
CYBORG_TEST_ALL_BACKENDS=1), one stack for the module. The API reaches
the database through a TCP relay (``placement_server.Relay``) that the
test closes and opens again, as a database that goes away and comes
back; the conductor and the agent reach it directly. No placement runs:
nothing here reads it, and a conductor only logs that it cannot reach
it.
"""
import pathlib
import re
import uuid
from collections.abc import Iterator

import pytest
import requests
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server

# One xdist worker runs the whole module (tox's --dist loadgroup), so that
# the stack starts once: 30 s of a worker on two cores.
pytestmark = pytest.mark.xdist_group('operability-flow')

NODE = 'operability-node'
HOST = 'agent1'
# [healthcheck] cache_seconds of the API: short, so that a change of the
# database's state shows within a second.
CACHE_SECONDS = 0.5


class Deployment:
    def __init__(self, stack: gate_stack.Stack, proxy: placement_server.Relay,
                 disable_file: pathlib.Path, dialect: str) -> None:
        self.stack = stack
        self.dialect = dialect
        self.proxy = proxy
        self.disable_file = disable_file
        self.root = stack.api_url[:-len('/v2')]

    def healthcheck(self, **headers: str) -> requests.Response:
        return requests.get(f'{self.root}/healthcheck', headers=headers,
                            timeout=30)


# A database server: SQLite has no port for the proxy to cut.
@pytest.fixture(scope='module', params=gate_stack.backends(
    'mysql', among=('mysql', 'postgresql')))
def deployment(request, tmp_path_factory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp('operability')
    databases = conftest.empty_database_url(request.param, workdir)
    database_url = next(databases)
    try:
        migration.upgrade('head', url=database_url)
        with utils.virtual_host(conftest.RABBIT_URL,
                                'cyborg-test') as rabbit_url:
            yield from _deploy(workdir, database_url, rabbit_url)
    finally:
        databases.close()


def _deploy(workdir: pathlib.Path, database_url: str,
            rabbit_url: str) -> Iterator[Deployment]:
    url = sa.engine.make_url(database_url)
    port = url.port or {'mysql': 3306}.get(url.get_backend_name(), 5432)
    proxy = placement_server.Relay(f'tcp://{url.host or "127.0.0.1"}:{port}')
    proxied = url.set(host='127.0.0.1', port=proxy.port).render_as_string(
        hide_password=False)
    disable_file = workdir / 'disabled'
    # Nothing sends Nova an event here: a port where nothing listens.
    dead = f'http://127.0.0.1:{gate_stack.free_port()}'
    stack = gate_stack.Stack(workdir, rabbit_url, database_url, dead,
                             'unused')
    stack.add_api(extra={
        'database': {'connection': proxied},
        'healthcheck': {
            'backends': 'disable_by_file,cyborg_database,'
                        'cyborg_message_bus',
            'disable_by_file_path': str(disable_file),
            'detailed': 'true', 'cache_seconds': CACHE_SECONDS}})
    stack.add_conductor('conductor1', extra={'DEFAULT': {'debug': 'true'}})
    stack.add_agent(HOST, NODE, 1, 1)
    proxy.open()
    try:
        with stack.running():
            stack.start('conductor1', 'api')
            stack.ready('conductor1')
            stack.start(HOST)
            stack.ready(HOST)
            gate_stack.wait_for(stack.api_up, 'the API to answer', 60)
            gate_stack.wait_for(lambda: _registered(stack),
                                'the agent to register', 30)
            yield Deployment(stack, proxy, disable_file,
                             url.get_backend_name())
    finally:
        proxy.close()


def _registered(stack: gate_stack.Stack) -> bool:
    services = requests.get(f'{stack.api_url}/services',
                            headers=gate_stack.API_HEADERS, timeout=30)
    return any(s['host'] == HOST for s in services.json()['services'])


def _lines(stack: gate_stack.Stack, name: str, text: str) -> list[str]:
    return [line for line in stack.processes[name].log().splitlines()
            if text in line]


# -- /healthcheck -------------------------------------------------------------

def _drivers_as(stack: gate_stack.Stack, given: str) -> str:
    """Reads the agent's drivers through the API (a call to the conductor,
    which calls the agent) with ``given`` as the caller's request id;
    the request id the API gave the request."""
    response = requests.get(f'{stack.api_url}/hosts/{HOST}/drivers',
                            headers={**gate_stack.API_HEADERS,
                                     'X-OpenStack-Request-ID': given},
                            timeout=30)
    assert response.status_code == 200, response.text
    return response.headers['X-OpenStack-Request-ID']


def test_healthcheck_answers_without_a_token(deployment):
    response = deployment.healthcheck()
    assert response.status_code == 200, response.text
    assert response.headers['Content-Type'].startswith('text/plain')
    # One reason per backend: the file, the database, the bus.
    assert response.text.split() == ['OK', 'OK', 'OK']
    head = requests.head(f'{deployment.root}/healthcheck', timeout=30)
    assert (head.status_code, head.content) == (204, b'')
    # As a load balancer asks for JSON: no detail without a token.
    plain = deployment.healthcheck(Accept='application/json').json()
    assert plain == {'detailed': False, 'reasons': ['OK', 'OK', 'OK']}


def test_healthcheck_detail_for_administrators_only(deployment):
    detailed = deployment.healthcheck(
        Accept='application/json', **{'X-Auth-Token': 'admin'}).json()
    assert detailed['detailed'] is True
    details = [r['details'] for r in detailed['reasons']]
    assert details[1].startswith(
        f'database OK: {deployment.dialect}'), details
    assert details[2].startswith('message bus OK: RabbitMQ at '), details
    assert detailed['threads']
    for headers in ({'X-Auth-Token': 'someone', 'X-Roles': 'member'},
                    {'X-Roles': 'admin'}):
        plain = deployment.healthcheck(Accept='application/json',
                                       **headers)
        assert plain.json() == {'detailed': False,
                                'reasons': ['OK', 'OK', 'OK']}, headers


def test_healthcheck_disabled_by_file(deployment):
    deployment.disable_file.touch()
    try:
        response = deployment.healthcheck()
        assert response.status_code == 503
        assert 'DISABLED BY FILE' in response.text
    finally:
        deployment.disable_file.unlink()
    assert deployment.healthcheck().status_code == 200


def test_healthcheck_while_the_database_is_away(deployment):
    deployment.proxy.close()
    try:
        down = gate_stack.wait_for(
            lambda: (r := deployment.healthcheck()).status_code == 503
            and r.text, 'a 503 once the database is away', 15,
            interval=0.1)
        assert down.split() == ['OK', 'DATABASE', 'UNREACHABLE', 'OK'], down
        detailed = deployment.healthcheck(
            Accept='application/json', **{'X-Auth-Token': 'admin'}).json()
        assert detailed['reasons'][1]['details'].startswith(
            'database unreachable: DBConnectionError'), detailed['reasons']
    finally:
        deployment.proxy.open()
    gate_stack.wait_for(
        lambda: deployment.healthcheck().status_code == 200,
        'a 200 once the database is back', 15, interval=0.1)


# -- request ids --------------------------------------------------------------

def test_request_ids_reach_the_conductor_and_the_agent(deployment):
    """``GET /v2/hosts/{host}/drivers`` asks the conductor, which asks
    the agent: each logs the call with the caller's global request id
    and the API's own request id."""
    stack = deployment.stack
    given = f'req-{uuid.uuid4()}'
    own = _drivers_as(stack, given)
    assert own != given and re.fullmatch(r'req-[0-9a-f-]{36}', own)
    # oslo.log's logging_context_format_string: "... [%(global_request_id)s
    # %(request_id)s %(user_identity)s] ...".
    ids = f'[{given} {own} admin admin '
    for name, method in (('conductor1', 'host_drivers_list'),
                         (HOST, 'drivers_list')):
        handled = gate_stack.wait_for(
            lambda name=name, method=method: _lines(
                stack, name, f'RPC call {method} handled'),
            f'{name} to log {method}', 10)
        assert any(ids in line for line in handled), handled


def test_an_invalid_global_request_id_is_ignored(deployment):
    stack = deployment.stack
    given = 'not-a-request-id'
    own = _drivers_as(stack, given)
    line = gate_stack.wait_for(
        lambda: _lines(stack, 'conductor1', own), 'the conductor\'s line',
        10)[0]
    assert f'[None {own} admin admin ' in line, line
    assert not _lines(stack, 'conductor1', given)
