"""The state of each enabled driver: agent -> conductor -> database, on
every database, and the report across conductor RPC versions."""
import copy
import datetime
import uuid

import jsonschema
import oslo_messaging as messaging
import pytest
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import resource_tracker
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db.api import drivers
from cyborg.tests.unit.test_resource_tracker import FlakyDriver
from cyborg.tests.utils import InProcess
from cyborg.tests.utils import count_writes

HOST = 'cmp1'
T0 = datetime.datetime(2026, 11, 24, 9, 0, 0)


@pytest.fixture
def clock():
    timeutils.set_time_override(T0)
    yield
    timeutils.clear_time_override()


@pytest.fixture
def agent(conf, db_engine, clock):
    """A tracker with two drivers reporting into a conductor manager."""
    conf.set_override('host', HOST)
    flaky = FlakyDriver(conf)
    tracker = resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf), flaky],
        InProcess(conductor_manager.ConductorManager(conf)))
    return tracker, flaky


def _states():
    return {d['driver_name']: (d['state'], d['error'], d['since'],
                               d['devices'])
            for d in drivers.get_all(cyborg_context.get_admin_context(),
                                     host=HOST)}


def test_states_are_stored_and_kept(agent, db_engine):
    tracker, flaky = agent
    tracker.update()
    assert _states() == {'fake': ('ok', None, T0, 1),
                         'flaky': ('ok', None, T0, 1)}

    # Unchanged: the conductor writes nothing.
    timeutils.advance_time_seconds(60)
    with count_writes(db_engine) as writes:
        tracker.update(force=True)
    assert writes == []

    # Failing: its device stays, the state says since when.
    flaky.failure = OSError('sysfs went away')
    tracker.update()
    failed_at = T0 + datetime.timedelta(seconds=60)
    assert _states() == {
        'fake': ('ok', None, T0, 1),
        'flaky': ('failed', 'OSError: sysfs went away', failed_at, 1)}

    # Still failing, another error: the error changes, not the time.
    timeutils.advance_time_seconds(60)
    flaky.failure = OSError('no such device')
    with count_writes(db_engine) as writes:
        tracker.update()
    assert len(writes) == 1, writes
    assert _states()['flaky'] == ('failed', 'OSError: no such device',
                                  failed_at, 1)

    # Recovered.
    timeutils.advance_time_seconds(60)
    flaky.failure = None
    tracker.update()
    recovered_at = T0 + datetime.timedelta(seconds=180)
    assert _states()['flaky'] == ('ok', None, recovered_at, 1)

    # No devices any more.
    timeutils.advance_time_seconds(60)
    tracker.conf.set_override('device_count', 0, 'fake_driver')
    tracker.update()
    assert _states()['fake'] == ('no devices', None,
                                 recovered_at
                                 + datetime.timedelta(seconds=60), 0)


def test_a_driver_no_longer_enabled_loses_its_state(agent, conf):
    tracker, flaky = agent
    tracker.update()
    alone = resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf)], tracker.conductor_api)
    alone.update()
    assert set(_states()) == {'fake'}


def test_a_report_without_states_leaves_them(agent):
    tracker, flaky = agent
    tracker.update()
    flaky.failure = OSError('gone')
    report = tracker.collect()
    before = _states()
    del report['drivers']
    ctx = cyborg_context.get_admin_context()
    tracker.conductor_api.report_data(ctx, HOST, report)
    assert _states() == before


@pytest.mark.parametrize('drivers_value, problem', [
    ({'fake': {'state': 'broken'}}, 'drivers/fake/state'),
    ({'fake': {'state': 'ok', 'error': 'x'}}, 'drivers/fake'),
    ({'fake': {'state': 'failed'}}, 'drivers/fake'),
    ({'fake': {'state': 'failed',
               'error': 'x' * (device_report.MAX_ERROR_LENGTH + 1)}},
     'drivers/fake/error'),
    ({'': {'state': 'ok'}}, 'drivers'),
    (['fake'], 'drivers'),
])
def test_bad_states_are_refused(agent, drivers_value, problem):
    tracker, flaky = agent
    report = tracker.collect()
    report['drivers'] = drivers_value
    with pytest.raises(messaging.ExpectedException) as err:
        tracker.conductor_api.report_data(
            cyborg_context.get_admin_context(), HOST, report)
    kind, error, _ = err.value.exc_info
    assert kind is exception.InvalidReport
    assert problem in str(error)
    assert _states() == {}


class ConductorEndpoint:
    """A conductor of a given RPC version that takes reports as that
    version's schema allows them."""

    def __init__(self, version, schema):
        self.target = messaging.Target(version=version)
        self.schema = schema
        self.reports = []

    def report_data(self, context, host, report):
        jsonschema.validate(report, self.schema)
        self.reports.append(report)
        return {'writes': 0}


# What conductors of RPC 1.4 accept: the report without driver states.
OLD_SCHEMA = copy.deepcopy(device_report.REPORT_SCHEMA)
del OLD_SCHEMA['properties']['drivers']


@pytest.fixture(params=['fake', 'rabbit'])
def conductor_of(request, conf):
    """Starts a conductor endpoint on oslo.messaging's in-process
    transport, or on RabbitMQ (where a refused version comes back as
    a RemoteError)."""
    url = ('fake://' if request.param == 'fake'
           else request.getfixturevalue('rabbit_url'))
    started = []

    def start(version, schema):
        rpc.set_defaults(
            control_exchange=f'cyborg-test-{uuid.uuid4().hex[:8]}')
        rpc.init(conf, url=url)
        endpoint = ConductorEndpoint(version, schema)
        svc = rpc_service.RPCService(rpc.CONDUCTOR_TOPIC, 'ctl', [endpoint])
        svc.start()
        started.append(svc)
        return endpoint

    yield start
    for svc in started:
        svc.stop()
    rpc.cleanup()
    rpc.set_defaults()


def _tracker(conf):
    conf.set_override('host', HOST)
    return resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf), FlakyDriver(conf, OSError('gone'))],
        conductor_rpcapi.ConductorAPI(conf))


def test_capped_agents_send_what_old_conductors_accept(conf, conductor_of):
    old = conductor_of('1.4', OLD_SCHEMA)
    conf.set_override('conductor', '1.4', 'upgrade_levels')
    tracker = _tracker(conf)
    assert tracker.update() == {'writes': 0}
    [report] = old.reports
    assert 'drivers' not in report
    assert len(report['devices']) == 1
    # What the agent discovered keeps the states, for a later conductor.
    assert 'drivers' in tracker.cache.report


def test_uncapped_agents_send_the_states(conf, conductor_of):
    new = conductor_of('1.5', device_report.REPORT_SCHEMA)
    _tracker(conf).update()
    [report] = new.reports
    assert report['drivers'] == {
        'fake': {'state': 'ok'},
        'flaky': {'state': 'failed', 'error': 'OSError: gone'}}


def test_old_conductors_get_the_report_without_states(conf, conductor_of,
                                                      caplog):
    """An agent upgraded before its conductors, without a cap: the
    report a conductor of 1.4 refuses goes again without the states."""
    old = conductor_of('1.4', OLD_SCHEMA)
    assert _tracker(conf).update() == {'writes': 0}
    [report] = old.reports
    assert 'drivers' not in report
    assert '[upgrade_levels] conductor = 1.4' in caplog.text


# What conductors of RPC 1.5 to 1.8 accept: states without versions, and
# not the state 'disabled'.
STATES_SCHEMA = copy.deepcopy(device_report.REPORT_SCHEMA)
_STATE = STATES_SCHEMA['properties']['drivers']['additionalProperties']
del _STATE['properties']['version']
_STATE['properties']['state'] = {'enum': ['ok', 'no devices', 'failed']}


def _versioned_tracker(conf):
    tracker = _tracker(conf)
    tracker.set_drivers(tracker.drivers, {'gpu_off'},
                        {'fake': '1.2.3', 'gpu_off': '4.5'})
    return tracker


def test_versions_and_disabled_drivers_go_to_1_9(conf, conductor_of):
    new = conductor_of('1.9', device_report.REPORT_SCHEMA)
    _versioned_tracker(conf).update()
    [report] = new.reports
    assert report['drivers'] == {
        'fake': {'state': 'ok', 'version': '1.2.3'},
        'flaky': {'state': 'failed', 'error': 'OSError: gone'},
        'gpu_off': {'state': 'disabled', 'version': '4.5'}}


@pytest.mark.parametrize('cap', [None, '1.8'])
def test_older_conductors_get_states_without_versions(conf, conductor_of,
                                                      cap):
    """Refused at 1.9 (no cap) or capped: the states go as 1.5 has them,
    without versions and without the disabled drivers."""
    old = conductor_of('1.8', STATES_SCHEMA)
    if cap:
        conf.set_override('conductor', cap, 'upgrade_levels')
    _versioned_tracker(conf).update()
    [report] = old.reports
    assert report['drivers'] == {
        'fake': {'state': 'ok'},
        'flaky': {'state': 'failed', 'error': 'OSError: gone'}}
