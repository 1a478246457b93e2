"""[agent] new_device_state: new devices wait for an operator, known ones
keep their status; agent -> conductor -> database, on every database."""
import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.db.api import devices as devices_api
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.tests.utils import InProcess

HOST = 'cmp1'
NODE = 'cmp1.example'


@pytest.fixture
def tracker(conf, db_engine):
    """The agent's tracker, reporting straight into a conductor manager
    (its report_data has the RPC client's signature)."""
    conf.set_override('host', HOST)
    conf.set_override('hostname', NODE, 'agent')
    conductor = InProcess(conductor_manager.ConductorManager(conf))
    return resource_tracker.ResourceTracker(conf, [fake.FakeDriver(conf)],
                                            conductor)


def _statuses(ctx):
    return {inventory.control_path_address(
                d['controlpath_id']['cpid_info']): d['status']
            for d in inventory.get_host_devices(ctx, HOST)}


def _reserved(ctx):
    return {p.name: p.reserved == p.total
            for p in providers.host_providers(ctx, NODE)}


def test_new_devices_come_up_disabled(conf, tracker):
    ctx = cyborg_context.get_admin_context()
    assert tracker.update()['devices_added'] == 1
    assert _statuses(ctx) == {'0000:0c:00.0': 'enabled'}

    conf.set_override('new_device_state', 'disabled', 'agent')
    conf.set_override('device_count', 3, 'fake_driver')
    result = tracker.update()
    assert result['devices_added'] == 2
    # The device already known keeps its status.
    assert _statuses(ctx) == {'0000:0c:00.0': 'enabled',
                              '0000:0d:00.0': 'maintaining',
                              '0000:0e:00.0': 'maintaining'}
    # Placement is to reserve all of the new ones.
    assert _reserved(ctx) == {f'{NODE}_0000:0c:00.0': False,
                              f'{NODE}_0000:0d:00.0': True,
                              f'{NODE}_0000:0e:00.0': True}

    # An operator enables one; the next reports leave it enabled.
    [new] = [d for d in inventory.get_host_devices(ctx, HOST)
             if d['controlpath_id']['cpid_info']['bus'] == '0d']
    devices_api.set_status(ctx, new['uuid'], 'enabled')
    conf.set_override('accelerators_per_device', 4, 'fake_driver')
    assert tracker.update(force=True)['devices_updated'] == 3
    assert _statuses(ctx) == {'0000:0c:00.0': 'enabled',
                              '0000:0d:00.0': 'enabled',
                              '0000:0e:00.0': 'maintaining'}

    # Back to enabled: later devices are enabled, the waiting one waits.
    conf.set_override('new_device_state', 'enabled', 'agent')
    conf.set_override('device_count', 4, 'fake_driver')
    tracker.update()
    assert _statuses(ctx)['0000:0f:00.0'] == 'enabled'
    assert _statuses(ctx)['0000:0e:00.0'] == 'maintaining'


def test_a_disabled_first_report_and_a_report_without_the_field(
        conf, tracker):
    ctx = cyborg_context.get_admin_context()
    conf.set_override('new_device_state', 'disabled', 'agent')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    assert tracker.update()['devices_added'] == 2
    assert set(_statuses(ctx).values()) == {'maintaining'}

    # An agent that does not send the field: new devices are enabled.
    conductor = tracker.conductor_api
    report = tracker.collect()
    del report['new_device_status']
    conf.set_override('device_count', 2, 'fake_driver')
    report['devices'] = [d.to_dict()
                         for d in fake.FakeDriver(conf).discover()]
    assert conductor.report_data(ctx, HOST, report)['devices_added'] == 1
    assert sorted(_statuses(ctx).values()) == [
        'enabled', 'maintaining', 'maintaining']


@pytest.mark.parametrize('status', ['disabled', '', None, 1])
def test_a_bad_new_device_status_is_refused(conf, tracker, status):
    ctx = cyborg_context.get_admin_context()
    report = tracker.collect()
    report['new_device_status'] = status
    # The RPC endpoint wraps what it raises for the RPC server.
    with pytest.raises(messaging.ExpectedException) as err:
        tracker.conductor_api.report_data(ctx, HOST, report)
    kind, error, _ = err.value.exc_info
    assert kind is exception.InvalidReport
    assert 'new_device_status' in str(error)
    assert inventory.get_host_devices(ctx, HOST) == []
