"""A conductor killed before it told Nova: another one tells it.

Two ``cyborg-conductor`` processes share a database and a RabbitMQ
virtual host; Nova's events endpoint (a FakeNova on 127.0.0.1) is down.
Ten binds go to the first conductor, which answers each and is SIGKILLed
while it still tries to POST their events; Nova comes back about 5 s
after it went down, and the second conductor's periodic resend delivers
every event, once, from the rows the binds wrote.
"""
import collections
import os
import signal
import time
import uuid

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.common import rpc
from cyborg.db.api import arqs
from cyborg.db.api import nova_events
from cyborg.db.api import services
from cyborg.tests.functional.test_arq_binding import _seed
from cyborg.tests.functional.test_processes import _kill
from cyborg.tests.functional.test_processes import _start
from cyborg.tests.functional.test_processes import _stop
from cyborg.tests.functional.test_processes import _write_conf
from cyborg.tests.harness import gate_stack
from cyborg.tests.utils import wait_for

BINDS = 10
CONDUCTORS = ('ctl1', 'ctl2')
# Seconds Nova stays unreachable.
OUTAGE = 5
# Short enough for the test to take seconds: a dead conductor's claim
# runs out after CLAIM s, and each conductor looks every RESEND s.
CLAIM = 2
RESEND = 0.2


def _tails(logs):
    return ''.join(f'\n--- {name} ---\n'
                   + '\n'.join(path.read_text().splitlines()[-40:])
                   for name, path in logs.items())


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_events_of_a_killed_conductor_reach_nova(conf, tmp_path, rabbit_url,
                                                 db_engine, empty_db_url,
                                                 fake_nova):
    deployable = _seed(conf, handles=BINDS)
    ctx = cyborg_context.get_admin_context()
    created = [arqs.create(ctx, 'dp', 'p1')[0]['uuid']
               for _ in range(BINDS)]
    port = fake_nova.port
    exchange = f'cyborg-test-{uuid.uuid4().hex[:8]}'
    logs = {host: tmp_path / f'{host}.log' for host in CONDUCTORS}
    procs = {}
    for host in CONDUCTORS:
        conf_file = _write_conf(
            tmp_path / f'{host}.conf',
            DEFAULT={'transport_url': rabbit_url,
                     'control_exchange': exchange, 'host': host,
                     'heartbeat_interval': 1, 'debug': 'true',
                     'state_path': str(tmp_path)},
            database={'connection': empty_db_url},
            nova={'auth_type': 'admin_token',
                  'endpoint': fake_nova.endpoint,
                  'endpoint_override': fake_nova.endpoint,
                  'token': fake_nova.token,
                  'event_resend_interval': RESEND,
                  'event_claim_timeout': CLAIM})
        procs[host] = _start('cyborg.cmd.conductor', conf_file, logs[host])
    rpc.set_defaults(control_exchange=exchange)
    rpc.init(conf, url=rabbit_url)
    try:
        try:
            wait_for(lambda: {s['host'] for s in services.get_all(
                ctx, 'cyborg-conductor')} == set(CONDUCTORS)
                or any(p.poll() is not None for p in procs.values()),
                'both conductors to start')
            assert all(p.poll() is None for p in procs.values())
        except AssertionError:
            pytest.fail('the conductors did not start' + _tails(logs))
        client = rpc.get_client(messaging.Target(
            topic=rpc.CONDUCTOR_TOPIC, server='ctl1', version='1.1'))
        fake_nova.stop()
        down = time.monotonic()
        instances = {}
        for arq in created:
            instances[arq] = str(uuid.uuid4())
            client.call(ctx, 'arq_apply_patch', binds={arq: {
                'hostname': 'node1', 'device_rp_uuid': deployable['rp_uuid'],
                'instance_uuid': instances[arq]}}, unbinds=[])
        # Every bind answered, Bound; the conductor is still in its first
        # POST's retries (keystoneauth tries for 2.5 s).
        os.killpg(procs['ctl1'].pid, signal.SIGKILL)
        procs['ctl1'].wait()
        assert {a['uuid']: a['state'] for a in arqs.get_all(ctx)[0]} == \
            dict.fromkeys(created, 'Bound')
        owed = nova_events.get_all(ctx)
        assert {(e.arq_uuid, e.instance_uuid, e.status) for e in owed} == {
            (arq, instances[arq], 'completed') for arq in created}
        assert fake_nova.requests == []
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - down)))
        fake_nova.start(port)

        def heard():
            return {e['tag'] for e in fake_nova.events()} >= set(created)

        try:
            wait_for(heard, 'every event to reach Nova', timeout=60)
            wait_for(lambda: not nova_events.get_all(ctx),
                     'the outbox to empty')
        except AssertionError:
            pytest.fail('events were lost' + _tails(logs))
        events = fake_nova.events()
        assert collections.Counter(e['tag'] for e in events) == \
            collections.Counter(created)
        assert {(e['tag'], e['server_uuid'], e['status'])
                for e in events} == {
            (arq, instances[arq], 'completed') for arq in created}
        # The survivor sent them.
        assert 'Sending again the Nova events' in logs['ctl2'].read_text()
        assert _stop(procs['ctl2']) == 0, _tails(logs)
    finally:
        for proc in procs.values():
            _kill(proc)
        rpc.cleanup()
        rpc.set_defaults()
