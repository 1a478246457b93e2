"""The health probes of a conductor and an agent as processes, and their
logs, while the database and the message broker go away and come back.

One stack for the module: cyborg-conductor and cyborg-agent, each
answering /health and /health/live on a port of its own, reach the
database server and RabbitMQ through TCP relays of the test
(``placement_server.Relay``). Closing a relay is an outage as the
processes see one: its port refuses connections and the connections it
carried are cut; the machine's servers keep running for the other tests.
"""
import contextlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server

HOSTNAME = 'probe-node'
# The processes' lines in their logs, as oslo.log writes them.
WARNED = re.compile(r' WARNING cyborg\.common\.outages .*?The (.+?) '
                    r'cannot be reached')
ENDED = re.compile(r' INFO cyborg\.common\.outages .*?The (.+?) '
                   r'can be reached again')


class Probed:
    """The stack, its relays and the probe ports of its processes."""

    def __init__(self, stack: gate_stack.Stack,
                 database: placement_server.Relay,
                 broker: placement_server.Relay,
                 ports: dict[str, int]) -> None:
        self.stack = stack
        self.database = database
        self.broker = broker
        self.ports = ports

    def probe(self, name: str, live: bool = False
              ) -> tuple[int, dict[str, Any]]:
        """(HTTP status, health document) of process ``name``."""
        path = '/health/live' if live else '/health'
        url = f'http://127.0.0.1:{self.ports[name]}{path}'
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def check(self, name: str, key: str) -> dict[str, Any]:
        """The ``key`` check (e.g. database:connectivity) of ``name``'s
        readiness."""
        [found] = self.probe(name)[1]['checks'][key]
        return found

    def wait_status(self, status: int, *names: str) -> None:
        gate_stack.wait_for(
            lambda: all(self.probe(name)[0] == status for name in names),
            f'/health of {", ".join(names)} to answer {status}', 60,
            interval=0.2)

    def wait_failures(self, name: str, key: str, count: int) -> None:
        """Until ``name`` met the outage of ``key`` ``count`` times: that
        many passes or calls failed on it."""
        gate_stack.wait_for(
            lambda: self.check(name, key).get('observedValue', 0) >= count,
            f'{count} failures of {key} in {name}', 60, interval=0.2)

    def log_since(self, name: str, offset: int) -> str:
        return self.stack.processes[name].log()[offset:]

    def outage_lines(self, name: str, offset: int
                     ) -> tuple[list[str], list[str], str]:
        """The outage lines ``name`` logged since ``offset``, and that
        log, once it has logged an end: the tracker forgets an outage
        before it logs the end, so a probe may answer 200 a moment before
        the line is written (it did once, on a loaded two-core machine)."""
        gate_stack.wait_for(
            lambda: _outage_lines(self.log_since(name, offset))[1],
            f'{name} to log the end of an outage', 30, interval=0.2)
        log = self.log_since(name, offset)
        return (*_outage_lines(log), log)


def _through(relay: placement_server.Relay, url: str) -> str:
    """``url`` with ``relay``'s address in place of its server's."""
    return re.sub(r'@[^/]+/', f'@127.0.0.1:{relay.port}/', url, count=1)


@pytest.fixture(scope='module', params=gate_stack.backends(
    'mysql', among=('mysql', 'postgresql')))
def probed(request, tmp_path_factory) -> Iterator[Probed]:
    workdir = tmp_path_factory.mktemp('probes')
    if not utils.port_open(conftest.RABBIT_URL, 5672):
        conftest.unavailable('RabbitMQ',
                             f'nothing listens at {conftest.RABBIT_URL}')
    with contextlib.ExitStack() as cleanup:
        rabbit_url = cleanup.enter_context(
            utils.virtual_host(conftest.RABBIT_URL, 'cyborg-test'))
        urls = conftest.empty_database_url(request.param, workdir)
        database_url = next(urls)
        cleanup.callback(next, urls, None)
        migration.upgrade('head', url=database_url)
        relays = {}
        for name, url in (('database', database_url),
                          ('broker', rabbit_url)):
            relays[name] = placement_server.Relay(url)
            relays[name].open()
            cleanup.callback(relays[name].close)
        database_via = sa.engine.make_url(database_url).set(
            host='127.0.0.1', port=relays['database'].port).render_as_string(
                hide_password=False)
        stack = gate_stack.Stack(workdir, _through(relays['broker'],
                                                   rabbit_url),
                                 database_via, 'http://127.0.0.1:9', 'none')
        ports = {'conductor1': gate_stack.free_port(),
                 'agent1': gate_stack.free_port()}
        probe = {'health_host': '127.0.0.1'}
        stack.add_conductor('conductor1', extra={
            # No placement: its own outages are not this test's.
            'placement': {'auth_type': '', 'endpoint': '',
                          'endpoint_override': ''},
            'conductor': {**probe, 'health_port': ports['conductor1']}})
        stack.add_agent('agent1', HOSTNAME, 1, 1, extra={
            'agent': {**probe, 'health_port': ports['agent1']}})
        with stack.running():
            stack.start('conductor1', 'agent1')
            stack.ready('conductor1', 'agent1')
            yield Probed(stack, relays['database'], relays['broker'], ports)


def _outage_lines(log: str) -> tuple[list[str], list[str]]:
    return WARNED.findall(log), ENDED.findall(log)


@pytest.mark.flow
def test_a_database_outage_fails_the_conductor_s_readiness(probed):
    probed.wait_status(200, 'conductor1', 'agent1')
    conductor = probed.stack.processes['conductor1']
    start = len(conductor.log())

    probed.database.close()
    try:
        probed.wait_status(503, 'conductor1')
        # Several heartbeat passes (1 s apart) and the agent's heartbeats
        # (RPC handlers) meet the outage.
        probed.wait_failures('conductor1', 'database:connectivity', 5)
        status, document = probed.probe('conductor1')
        assert document['status'] == 'fail'
        assert probed.check('conductor1', 'message_bus:connectivity')[
            'status'] == 'pass'
        # Alive: a restart would not bring the database back.
        assert probed.probe('conductor1', live=True)[0] == 200
        # The agent needs no database.
        assert probed.probe('agent1')[0] == 200
    finally:
        probed.database.open()
    probed.wait_status(200, 'conductor1')

    warned, ended, log = probed.outage_lines('conductor1', start)
    assert (warned, ended) == (['database'], ['database']), log
    assert 'Traceback' not in log, log


@pytest.mark.flow
def test_a_broker_outage_fails_both_readinesses(probed):
    probed.wait_status(200, 'conductor1', 'agent1')
    names = ('conductor1', 'agent1')
    starts = {name: len(probed.stack.processes[name].log())
              for name in names}

    probed.broker.close()
    try:
        probed.wait_status(503, *names)
        for name in names:
            probed.wait_failures(name, 'message_bus:connectivity', 2)
            assert probed.probe(name, live=True)[0] == 200
        assert probed.check('conductor1', 'database:connectivity')[
            'status'] == 'pass'
    finally:
        probed.broker.open()
    probed.wait_status(200, *names)

    for name in names:
        warned, ended, log = probed.outage_lines(name, starts[name])
        assert warned.count('message bus') == 1, log
        assert ended.count('message bus') == 1, log
        assert 'Traceback' not in log, log
