"""A device fault, end to end, with every service a process.

Placement, cyborg-api, a conductor and an agent run as processes on real
RabbitMQ and on each database. The fake driver is told of a fault through
its fault file; within seconds the device is ``unhealthy`` in the API,
placement's allocation candidates leave it out, an
``accelerator.device.health.update`` notification is on the bus and the
agent's ``/metrics`` says so. Clearing the fault restores all four.
"""
import json
import threading
import urllib.request

import oslo_messaging as messaging
import pytest
import requests
import sqlalchemy as sa
from oslo_config import cfg
from prometheus_client.parser import text_string_to_metric_families

from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server

NODE = 'health-node'
SICK = '0000:0d:00.0'
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.6'}


class Events:
    """Notifications taken from the bus, by event type."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, dict]] = []

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        with self.lock:
            self.seen.append((event_type, payload))

    warn = error = info

    def health_updates(self, device_uuid: str) -> list[dict]:
        with self.lock:
            return [p['cyborg_object.data'] for t, p in self.seen
                    if t == 'accelerator.device.health.update'
                    and p['cyborg_object.data']['uuid'] == device_uuid]


def _listener(stack, events):
    listen_conf = cfg.ConfigOpts()
    listen_conf([], project='cyborg-test', default_config_files=[])
    transport = messaging.get_notification_transport(
        listen_conf, url=stack.rabbit_url)
    target = messaging.Target(topic='versioned_notifications',
                              exchange=stack.exchange)
    listener = messaging.get_notification_listener(
        transport, [target], [events], executor='threading')
    listener.start()
    return listener, transport


def _offered(placement, root):
    answer = placement.get(
        f'/allocation_candidates?resources=FPGA:1&in_tree={root}',
        version='1.36')
    return {rp for c in answer['allocation_requests']
            for rp in c['allocations']}


def _health_metric(port, address):
    with urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics',
                                timeout=5) as answer:
        text = answer.read().decode()
    states = {}
    for family in text_string_to_metric_families(text):
        if family.name == 'cyborg_device_health':
            for sample in family.samples:
                if sample.labels['address'] == address:
                    states[sample.labels['state']] = sample.value
    return states


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_fault_turns_a_device_unhealthy_everywhere(
        tmp_path, rabbit_url, db_engine, empty_db_url, fake_nova):
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    faults = tmp_path / 'faults.json'
    metrics_port = gate_stack.free_port()
    notify = {'oslo_messaging_notifications': {'driver': 'messagingv2'}}
    stack.add_placement()
    stack.add_api()
    stack.add_conductor('conductor1', extra=notify)
    stack.add_agent('agent1', NODE, 2, 4, extra={
        **notify,
        'agent': {'health_interval': 1, 'metrics_port': metrics_port,
                  'metrics_host': '127.0.0.1'},
        'fake_driver': {'fault_file': str(faults)}})
    placement = placement_server.Placement(stack.placement_url)
    events = Events()
    listener = transport = None
    try:
        stack.start('placement', 'conductor1', 'api')
        gate_stack.wait_for(stack.placement_up, 'placement to answer', 60)
        root = placement.create_compute_node(NODE)['uuid']
        listener, transport = _listener(stack, events)
        stack.ready('conductor1')
        stack.start('agent1')
        gate_stack.wait_for(stack.api_up, 'the API to answer', 60)

        def devices():
            found = requests.get(
                f'{stack.api_url}/devices?hostname={NODE}',
                headers=HEADERS, timeout=10).json()['devices']
            return found if len(found) == 2 else []

        gate_stack.wait_for(
            lambda: devices() and all(d['health'] == 'healthy'
                                      for d in devices()),
            'both devices healthy in the API', 60, interval=0.5)
        # Each device's provider, and which device is at SICK (its
        # deployable is named after its slot); the API shows no link.
        with db_engine.connect() as connection:
            rows = connection.execute(sa.text(
                'SELECT devices.uuid, deployables.rp_uuid, deployables.name '
                'FROM devices JOIN deployables '
                'ON deployables.device_id = devices.id')).all()
        rps = {row.uuid: row.rp_uuid for row in rows}
        sick_uuid = next((row.uuid for row in rows
                          if row.name.endswith(SICK)), None)
        assert sick_uuid is not None
        well_rp = next(rp for d, rp in rps.items() if d != sick_uuid)
        gate_stack.wait_for(lambda: _offered(placement, root) == set(
            rps.values()), 'both providers offered', 60, interval=0.5)

        # The fault: within a few health passes, everywhere.
        faults.write_text(json.dumps({SICK: {
            'state': 'unhealthy', 'reason': 'AER: 1 fatal error'}}))
        shown = gate_stack.wait_for(
            lambda: next((d for d in devices()
                          if d['health'] == 'unhealthy'), None),
            'the device unhealthy in the API', 30, interval=0.2)
        assert shown['uuid'] == sick_uuid
        assert shown['health_reason'] == 'AER: 1 fatal error'
        assert shown['health_source'] == 'agent'
        assert [d['health'] for d in devices()
                if d['uuid'] != sick_uuid] == ['healthy']
        # The conductor publishes to placement right after the database
        # change the API reads is committed.
        gate_stack.wait_for(
            lambda: _offered(placement, root) == {well_rp},
            'placement to stop offering the device', 10, interval=0.1)
        update = gate_stack.wait_for(
            lambda: [u for u in events.health_updates(sick_uuid)
                     if u['health'] == 'unhealthy'],
            'the health notification', 30)[0]
        assert update['previous_health'] == 'healthy'
        assert update['health_reason'] == 'AER: 1 fatal error'
        assert update['host'] == 'agent1'
        gate_stack.wait_for(
            lambda: _health_metric(metrics_port, SICK).get('unhealthy')
            == 1.0, 'the unhealthy metric', 30)

        # Cleared: all four again.
        faults.write_text('{}')
        gate_stack.wait_for(
            lambda: all(d['health'] == 'healthy' for d in devices()),
            'the device healthy again in the API', 30, interval=0.2)
        gate_stack.wait_for(
            lambda: _offered(placement, root) == set(rps.values()),
            'placement to offer the device again', 10, interval=0.1)
        gate_stack.wait_for(
            lambda: [u for u in events.health_updates(sick_uuid)
                     if u['health'] == 'healthy'
                     and u['previous_health'] == 'unhealthy'],
            'the notification of recovery', 30)
        gate_stack.wait_for(
            lambda: _health_metric(metrics_port, SICK).get('healthy')
            == 1.0, 'the healthy metric', 30)
        assert _health_metric(metrics_port, SICK)['unhealthy'] == 0.0
    except BaseException:
        print(stack.tails())
        raise
    finally:
        if listener is not None:
            listener.stop()
            listener.wait()
            transport.cleanup()
        codes = stack.stop_all()
    assert codes.pop('placement') in (0, -15), stack.tails()
    assert codes == dict.fromkeys(codes, 0), (codes, stack.tails())
