"""Versioned notifications, sent by the real conductor code on SQLite and
consumed from real RabbitMQ, each checked against its documented sample.

The agent is the process edge here: a fake that answers the conductor's
calls. Set CYBORG_WRITE_NOTIFICATION_SAMPLES=1 to rewrite the samples in
``doc/notification_samples`` from what a run sends.
"""
import datetime
import json
import logging
import os
import pathlib
import socket
import threading
import time
import uuid
from typing import Any

import jsonschema
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common import notifications
from cyborg.conductor import manager as conductor_manager
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.tests.fakes import fixtures
from cyborg.tests.utils import InProcess
from cyborg.tests.utils import wait_for

SAMPLES = pathlib.Path(__file__).parents[3] / 'doc' / 'notification_samples'
HOST = 'cmp1'
NODE = 'node1'
# Values that differ from run to run; written to the samples as these.
_STABLE = {'message_id', 'timestamp'}


class FakeAgent:
    """Answers the conductor's agent calls; fails programs when told."""

    def __init__(self) -> None:
        self.fail_program = False

    def program_fpga(self, context: Any, host: str, cpid_info: Any,
                     name: str, driver_name: str, image_uuid: str,
                     timeout: float | None = None) -> dict[str, Any]:
        if self.fail_program:
            raise exception.DeviceActionError(reason='the card is on fire')
        return {'bitstream_id': image_uuid, 'reported': True}

    def create_mdev(self, *args: Any, **kwargs: Any) -> None:
        return None

    def remove_mdev(self, *args: Any, **kwargs: Any) -> None:
        return None


class Collector:
    """A notification listener's endpoint: keeps what it is given."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _keep(self, priority: str, publisher_id: str, event_type: str,
              payload: dict[str, Any]) -> None:
        with self._lock:
            self.received.append({'event_type': event_type,
                                  'payload': payload, 'priority': priority,
                                  'publisher_id': publisher_id})

    def info(self, ctxt: Any, publisher_id: str, event_type: str,
             payload: dict[str, Any], metadata: Any) -> None:
        self._keep('INFO', publisher_id, event_type, payload)

    def error(self, ctxt: Any, publisher_id: str, event_type: str,
              payload: dict[str, Any], metadata: Any) -> None:
        self._keep('ERROR', publisher_id, event_type, payload)

    def of(self, event_type: str) -> list[dict[str, Any]]:
        with self._lock:
            return [n for n in self.received
                    if n['event_type'] == event_type]


@pytest.fixture
def notifying(conf, rabbit_url):
    conf.set_override('host', HOST)
    conf.set_override('device_count', 2, 'fake_driver')
    conf.set_override('accelerators_per_device', 2, 'fake_driver')
    notifications.configured(conf)
    conf.set_override('driver', ['messagingv2'], notifications.GROUP)
    conf.set_override('transport_url', rabbit_url, notifications.GROUP)
    yield conf
    notifications.cleanup()


@pytest.fixture
def listener(notifying):
    transport = messaging.get_notification_transport(notifying)
    collector = Collector()
    server = messaging.get_notification_listener(
        transport, [messaging.Target(topic=t) for t in
                    notifying.oslo_messaging_notifications.topics],
        [collector], executor='threading')
    server.start()
    yield collector
    server.stop()
    server.wait()
    transport.cleanup()


@pytest.fixture
def manager(notifying, sqlite_engine, fake_nova):
    fixtures.nova_conf(notifying, fake_nova)
    made = conductor_manager.ConductorManager(notifying,
                                              agent_api=FakeAgent())
    yield InProcess(made)
    made.binder.stop()


def _report(conf: Any, devices: list[Any] | None = None) -> dict[str, Any]:
    devices = devices if devices is not None else \
        fake.FakeDriver(conf).discover()
    return {'hostname': NODE, 'devices': [d.to_dict() for d in devices]}


def _fpga(ctx: Any) -> dict[str, Any]:
    return next(d for d in inventory.get_host_devices(ctx, HOST)
                if d['type'] == 'FPGA')


def _shape(value: Any) -> Any:
    """The keys and types of ``value``, nulls and empties left open."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return None if value is None else type(value).__name__


def _same_shape(sample: Any, sent: Any, where: str = '') -> None:
    if isinstance(sample, dict):
        assert isinstance(sent, dict), where
        assert sorted(sample) == sorted(sent), where
        for key in sample:
            _same_shape(sample[key], sent[key], f'{where}/{key}')
    elif isinstance(sample, list) and sample and sent:
        _same_shape(sample[0], sent[0], f'{where}/0')
    elif sample is not None and sent is not None and sample != []:
        number = (int, float)
        assert (type(sample) is type(sent) or isinstance(sample, number)
                and isinstance(sent, number)), where


def _data(notification: dict[str, Any]) -> dict[str, Any]:
    return notification['payload']['cyborg_object.data']


def _check(notification: dict[str, Any], sample: str | None = None
           ) -> None:
    """``notification`` against its event's schema and sample (or the
    sample file named ``sample``)."""
    event = notification['event_type']
    payload, priority = notifications.EVENTS[event]
    body = notification['payload']
    assert notification['priority'] == priority
    assert notification['publisher_id'] == f'accelerator.conductor:{HOST}'
    assert body['cyborg_object.name'] == payload.name
    assert body['cyborg_object.version'] == payload.version
    assert body['cyborg_object.namespace'] == 'cyborg'
    jsonschema.validate(body['cyborg_object.data'], payload.schema)
    path = SAMPLES / f'{sample or event}.json'
    if os.environ.get('CYBORG_WRITE_NOTIFICATION_SAMPLES') == '1':
        path.write_text(json.dumps(notification, indent=4, sort_keys=True)
                        + '\n')
    sample = json.loads(path.read_text())
    _same_shape(sample, notification, event)


def test_every_event_is_sent_as_its_sample(manager, listener,
                                           sqlite_engine):
    ctx = cyborg_context.get_admin_context()
    conf = manager.conf
    driver = fake.FakeDriver(conf)

    # Devices: reported, changed, gone.
    manager.report_data(ctx, HOST, _report(conf))
    wait_for(lambda: listener.of('accelerator.device.create'))
    devices = driver.discover()
    devices[0].deployables[0].attributes['trait9'] = 'CUSTOM_CHANGED'
    manager.report_data(ctx, HOST, _report(conf, devices[:-1]))
    fpga = _fpga(ctx)
    manager.device_health_update(ctx, HOST, [{
        'controlpath_id': fpga['controlpath_id'], 'state': 'unhealthy',
        'reason': 'ECC errors'}])
    manager.notifier.device_usage(ctx, HOST, [device_health.DeviceSample(
        controlpath_id=fpga['controlpath_id'], type='FPGA', vendor='0xABCD',
        model='fake', address='0000:0c:00.0', driver_name='fake',
        health=device_health.Health('unhealthy', 'ECC errors'),
        usage=device_health.Usage(temperature_celsius=71.5,
                                  power_watts=40.0, utilization_percent=3.0,
                                  memory_used_bytes=1 << 20,
                                  memory_total_bytes=1 << 30,
                                  counters={'ecc_errors': 4},
                                  gauges={'fan_rpm': 3000.0}),
        device_uuid=fpga['uuid'], product_id='0x1234',
        instances=[str(uuid.uuid4())], projects=['p1'])])
    manager.device_health_update(ctx, HOST, [{
        'controlpath_id': fpga['controlpath_id'], 'state': 'healthy'}])

    # An operator programs the FPGA; then it fails to.
    deployable = fpga['deployables'][0]
    manager.deployable_program(ctx, deployable['uuid'], str(uuid.uuid4()))
    manager.agent_api().fail_program = True
    with pytest.raises(messaging.ExpectedException) as failed:
        manager.deployable_program(ctx, deployable['uuid'],
                                   str(uuid.uuid4()))
    assert isinstance(failed.value.exc_info[1], exception.ProgramFailed)
    manager.agent_api().fail_program = False

    # Requests: created, bound (instantly; by programming), refused with
    # their PATCH (no notification: nothing changed), failed on the host,
    # unbound, deleted.
    device_profiles.create(ctx, {'name': 'dp', 'groups': [
        {'resources:FPGA': '1'}]})
    image = str(uuid.uuid4())
    device_profiles.create(ctx, {'name': 'dp-bits', 'groups': [
        {'resources:FPGA': '1', 'accel:bitstream_id': image}]})
    first = manager.arq_create(ctx, 'dp', 'p1')[0]['uuid']
    [answer] = manager.arq_create_many(ctx, [
        {'profile_name': 'dp', 'project_id': 'p1', 'request_id': 'r'}])
    second = answer['arqs'][0]['uuid']
    instance = str(uuid.uuid4())
    manager.arq_apply_patch(ctx, {first: {
        'hostname': NODE, 'device_rp_uuid': deployable['rp_uuid'],
        'instance_uuid': instance}}, [])
    with pytest.raises(messaging.ExpectedException) as refused:
        manager.arq_apply_patch(ctx, {second: {
            'hostname': NODE, 'device_rp_uuid': str(uuid.uuid4()),
            'instance_uuid': str(uuid.uuid4())}}, [])
    assert isinstance(refused.value.exc_info[1], exception.BindRefused)
    manager.arq_apply_patch(ctx, {}, [first])
    manager.arq_delete(ctx, uuids=[first, second])
    manager.agent_api().fail_program = True
    doomed = manager.arq_create(ctx, 'dp-bits', 'p1')[0]['uuid']
    manager.arq_apply_patch(ctx, {doomed: {
        'hostname': NODE, 'device_rp_uuid': deployable['rp_uuid'],
        'instance_uuid': str(uuid.uuid4())}}, [])
    wait_for(lambda: arqs.get(ctx, doomed)['state'] == 'BindFailed')
    manager.agent_api().fail_program = False
    manager.arq_delete(ctx, uuids=[doomed])
    third = manager.arq_create(ctx, 'dp-bits', 'p1')[0]['uuid']
    manager.arq_apply_patch(ctx, {third: {
        'hostname': NODE, 'device_rp_uuid': deployable['rp_uuid'],
        'instance_uuid': str(uuid.uuid4())}}, [])
    wait_for(lambda: arqs.get(ctx, third)['state'] == 'Bound')
    # A create sent again with its idempotency key announces nothing; a
    # request nothing bound is deleted once it outlived
    # [conductor] unbound_request_ttl.
    [keyed] = manager.arq_create(ctx, 'dp', 'p1', idempotency_key='key-1')
    assert manager.arq_create(ctx, 'dp', 'p1',
                              idempotency_key='key-1') == [keyed]
    with sqlite_engine.begin() as conn:
        conn.execute(sa.update(models.AcceleratorRequest).where(
            models.AcceleratorRequest.uuid == keyed['uuid']).values(
                created_at=timeutils.utcnow() - datetime.timedelta(
                    seconds=conf.conductor.unbound_request_ttl + 1)))
    assert manager.expiry.sweep() == 1

    wait_for(lambda: all(listener.of(e) for e in notifications.EVENTS),
             timeout=15)
    wait_for(lambda: any(_data(n)['uuid'] == keyed['uuid'] for n in
                         listener.of('accelerator.arq.delete')))
    for event in notifications.EVENTS:
        for notification in listener.of(event):
            expired = _data(notification).get('reason') == 'expired'
            _check(notification, f'{event}.expired' if expired else None)
    assert [_data(n)['uuid'] for n in listener.of('accelerator.arq.create')
            ].count(keyed['uuid']) == 1
    [expired] = [_data(n) for n in listener.of('accelerator.arq.delete')
                 if _data(n)['uuid'] == keyed['uuid']]
    assert (expired['state'], expired['reason'], expired['instance_uuid']
            ) == ('Deleted', 'expired', None)
    by_bind = [n['payload']['cyborg_object.data'] for n in
               listener.of('accelerator.deployable.program.end')
               if n['payload']['cyborg_object.data']['arq_uuids']]
    assert by_bind and by_bind[0]['arq_uuids'] == [third]
    assert by_bind[0]['image_uuid'] == image
    [deleted] = [n['payload']['cyborg_object.data'] for n in
                 listener.of('accelerator.arq.delete')
                 if n['payload']['cyborg_object.data']['uuid'] == second]
    assert (deleted['state'], deleted['reason']) == ('Deleted', None)
    [error] = listener.of('accelerator.arq.bind.error')
    assert error['payload']['cyborg_object.data']['uuid'] == doomed
    assert 'the card is on fire' in error['payload']['cyborg_object.data'][
        'reason']
    assert len(listener.of('accelerator.device.delete')) == 1
    health = [n['payload']['cyborg_object.data'] for n in
              listener.of('accelerator.device.health.update')]
    assert [(h['previous_health'], h['health']) for h in health] == [
        ('unknown', 'unhealthy'), ('unhealthy', 'healthy')]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def test_a_broker_that_is_down_fails_nothing(notifying, sqlite_engine,
                                             fake_nova, caplog):
    fixtures.nova_conf(notifying, fake_nova)
    notifying.set_override(
        'transport_url', f'rabbit://guest:guest@127.0.0.1:{_closed_port()}/',
        notifications.GROUP)
    manager = InProcess(conductor_manager.ConductorManager(
        notifying, agent_api=FakeAgent()))
    ctx = cyborg_context.get_admin_context()
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    try:
        result = manager.report_data(ctx, HOST, _report(notifying))
        assert result['devices_added'] > 0
        device_profiles.create(ctx, {'name': 'dp', 'groups': [
            {'resources:FPGA': '1'}]})
        arq = manager.arq_create(ctx, 'dp', 'p1')[0]['uuid']
        rp = _fpga(ctx)['deployables'][0]['rp_uuid']
        manager.arq_apply_patch(ctx, {arq: {
            'hostname': NODE, 'device_rp_uuid': rp,
            'instance_uuid': str(uuid.uuid4())}}, [])
        assert arqs.get(ctx, arq)['state'] == 'Bound'
    finally:
        manager.binder.stop()
    assert time.monotonic() - started < 10
    warnings = [r for r in caplog.records
                if 'Notifications cannot be sent' in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    # oslo.messaging's own log of each failure (with its payload) is kept
    # out of the service's log.
    assert not [r for r in caplog.records
                if r.name.startswith('oslo_messaging.notify')]


def test_noop_sends_nothing(notifying, listener, sqlite_engine):
    notifying.set_override('driver', ['noop'], notifications.GROUP)
    manager = InProcess(conductor_manager.ConductorManager(notifying))
    try:
        assert not manager.notifier.enabled
        ctx = cyborg_context.get_admin_context()
        manager.report_data(ctx, HOST, _report(notifying))
        time.sleep(1)
        assert listener.received == []
    finally:
        manager.binder.stop()
    notifying.clear_override('driver', notifications.GROUP)
    assert not notifications.get_notifier(notifying, 'cyborg-agent').enabled


def test_payload_fields_are_declared_once():
    for event, (payload, priority) in notifications.EVENTS.items():
        assert event.startswith('accelerator.')
        assert priority in ('INFO', 'ERROR')
        jsonschema.Draft202012Validator.check_schema(payload.schema)
        assert (SAMPLES / f'{event}.json').exists(), event
    data = dict.fromkeys(notifications.ARQ.fields, None)
    wrapped = notifications.ARQ.wrap(dict(data, extra='not sent'))
    assert wrapped['cyborg_object.data'] == data
