"""Writes during a message-broker outage: answered 503 within the RPC
timeout, and never carried out later.

cyborg-api and cyborg-conductor run as processes on a RabbitMQ virtual
host of their own, each through a TCP relay of its own in front of the
real broker. Closing both relays is an outage as the services see one: the
port refuses connections and the open ones are cut. Freezing the
conductor's relay is a stalled link: the broker delivers the calls, and
they reach the conductor only when the link heals, after the API has
given up on them.
"""
import concurrent.futures
import json
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.common import rpc_deadline
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.tests.functional.test_processes import _start
from cyborg.tests.functional.test_processes import _stop
from cyborg.tests.functional.test_processes import _write_conf
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import wait_for

# Seconds the API waits for a conductor's answer.
RPC_TIMEOUT = 4
# Seconds the test's client waits for an answer. Before calls had a
# bounded retry, a write waited for the broker as long as it was away:
# here, for ever, so the client gave up.
CLIENT_TIMEOUT = 5 * RPC_TIMEOUT
HOST = 'outage-host'
HOSTNAME = 'outage-node'
PROFILE = 'outage'
UNREACHABLE = ('Service unavailable: no cyborg-conductor answered: the '
               'message broker cannot be reached, {} was not sent; retry '
               'later.')
NO_ANSWER = ('Service unavailable: no cyborg-conductor answered: no answer '
             f'to {{}} within {RPC_TIMEOUT}s; retry later.')


class Services:
    """The two processes, their relays, and requests to the API."""

    def __init__(self, api_url: str, api_relay: placement_server.Relay,
                 conductor_relay: placement_server.Relay,
                 conductor_log: Any, rp_uuid: str) -> None:
        self.api_url = api_url
        self.api_relay = api_relay
        self.conductor_relay = conductor_relay
        self.conductor_log = conductor_log
        self.rp_uuid = rp_uuid

    def send(self, method: str, path: str, body: Any = None
             ) -> tuple[int | None, str, dict[str, Any]]:
        """(status, request id, JSON body); a status of None when the
        client gave up after CLIENT_TIMEOUT."""
        request = urllib.request.Request(
            self.api_url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={'X-Auth-Token': 'admin',
                     'Content-Type': 'application/json'})
        try:
            with urllib.request.urlopen(request,
                                        timeout=CLIENT_TIMEOUT) as answer:
                status, headers, text = (answer.status, answer.headers,
                                         answer.read())
        except urllib.error.HTTPError as error:
            status, headers, text = error.code, error.headers, error.read()
        except OSError:
            return None, '', {}
        return (status, headers['X-OpenStack-Request-Id'],
                json.loads(text) if text else {})

    def create(self) -> tuple[int | None, str, dict[str, Any]]:
        return self.send('POST', '/accelerator_requests',
                         {'device_profile_name': PROFILE})

    def bind(self, arq_uuid: str) -> tuple[int | None, str, dict[str, Any]]:
        return self.send('PATCH', '/accelerator_requests', {arq_uuid: [
            {'path': '/hostname', 'op': 'add', 'value': HOSTNAME},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': self.rp_uuid},
            {'path': '/instance_uuid', 'op': 'add',
             'value': str(uuid.uuid4())}]})

    def arqs(self) -> dict[str, str]:
        """uuid -> state of every accelerator request."""
        status, _, body = self.send('GET', '/accelerator_requests')
        assert status == 200, body
        return {a['uuid']: a['state'] for a in body['arqs']}

    def conductor_answers(self) -> bool:
        """Whether a write through the conductor succeeds (it is
        connected again); a new device profile each time."""
        status, _, _ = self.send('POST', '/device_profiles', [{
            'name': f'probe-{uuid.uuid4().hex[:8]}',
            'groups': [{'resources:FPGA': '1'}]}])
        return status == 201

    def dropped(self) -> list[str]:
        """The calls of accelerator requests the conductor dropped, as it
        logged them (a probe of ``conductor_answers`` may be dropped too,
        when it waited for the conductor to come back)."""
        return re.findall(r'WARNING .*(Dropped RPC call arq_.*)',
                          self.conductor_log.read_text())


def _fault(body: dict[str, Any]) -> str:
    return json.loads(body['error_message'])['faultstring']


@pytest.fixture
def services(conf, tmp_path, rabbit_url, sqlite_engine) -> Iterator[Services]:
    # A fake device with a handle to bind, and a profile asking for it.
    conf.set_override('host', HOST)
    conf.set_override('hostname', HOSTNAME, 'agent')
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, {
        'hostname': HOSTNAME,
        'devices': [d.to_dict() for d in fake.FakeDriver(conf).discover()]})
    device_profiles.create(ctx, {'name': PROFILE,
                                 'groups': [{'resources:FPGA': '1'}]})
    [device] = inventory.get_host_devices(ctx, HOST)

    relays = {name: placement_server.Relay(rabbit_url)
              for name in ('api', 'conductor')}
    port = gate_stack.free_port()
    exchange = f'cyborg-test-{uuid.uuid4().hex[:8]}'
    procs = []
    for name, relay in relays.items():
        relay.open()
        url = re.sub(r'@[^/]+/', f'@127.0.0.1:{relay.port}/', rabbit_url)
        conf_file = _write_conf(
            tmp_path / f'{name}.conf',
            DEFAULT={'transport_url': url, 'control_exchange': exchange,
                     'host': f'{name}-host', 'state_path': str(tmp_path),
                     'rpc_response_timeout': RPC_TIMEOUT},
            database={'connection': str(sqlite_engine.url)},
            api={'auth_strategy': 'noauth', 'port': port, 'workers': 1,
                 'require_service_token': 'false'})
        procs.append(_start(f'cyborg.cmd.{name}', conf_file,
                            tmp_path / f'{name}.log'))
    running = Services(f'http://127.0.0.1:{port}/v2', relays['api'],
                       relays['conductor'], tmp_path / 'conductor.log',
                       device['deployables'][0]['rp_uuid'])
    try:
        wait_for(running.conductor_answers, 'the conductor to answer', 60)
        yield running
    finally:
        for relay in relays.values():
            relay.thaw()
        codes = [_stop(proc) for proc in procs]
        for relay in relays.values():
            relay.close()
        logs = {name: (tmp_path / f'{name}.log').read_text()
                for name in relays}
    assert codes == [0, 0], logs


@pytest.mark.flow
def test_writes_in_a_broker_outage_are_refused_and_never_done(services):
    status, _, body = services.create()
    assert status == 201, body
    [arq] = body['arqs']
    before = {arq['uuid']: 'Initial'}
    assert services.arqs() == before

    # The broker goes away: the API sends nothing, and answers at once.
    services.api_relay.close()
    services.conductor_relay.close()
    for (status, _, body), method in ((services.create(), 'arq_create'),
                                      (services.bind(arq['uuid']),
                                       'arq_apply_patch')):
        assert status == 503, f'{method}: {status} {body}'
        assert _fault(body) == UNREACHABLE.format(method)
    services.api_relay.open()
    services.conductor_relay.open()
    wait_for(services.conductor_answers, 'the conductor to answer again',
             60, interval=0.5)
    assert services.arqs() == before

    # The conductor's link stalls: the calls reach it after the API gave
    # up on them, and it drops them.
    services.conductor_relay.freeze()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        created = pool.submit(services.create)
        bound = pool.submit(services.bind, arq['uuid'])
        answers = {'arq_create': created.result(),
                   'arq_apply_patch': bound.result()}
    for method, (status, _, body) in answers.items():
        assert status == 503, f'{method}: {status} {body}'
        assert _fault(body) == NO_ANSWER.format(method)
    # Past the deadlines, which are the moments the API stopped waiting,
    # however far apart the services' clocks may be.
    time.sleep(rpc_deadline.CLOCK_SKEW)
    services.conductor_relay.thaw()
    wait_for(lambda: len(services.dropped()) >= 2
             or services.arqs() != before, 'the conductor to take the calls',
             30, interval=0.5)
    assert services.arqs() == before
    dropped = sorted(services.dropped())
    assert [re.sub(r'arrived [\d.]+ s', 'arrived _ s', line)
            for line in dropped] == sorted(
        f'Dropped RPC call {method} of request {request_id}: it arrived _ '
        's after its deadline; nothing was done.'
        for method, (_, request_id, _) in answers.items())
