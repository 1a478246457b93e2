"""Device health in the conductor: stored, reserved in placement, lifted.

On every database with a real placement: an agent's unhealthy reading
reserves the device's inventory and placement stops offering it; a healthy
one lifts that unless an operator disabled the device; an operator's
setting stands over the agent's until cleared; an unchanged reading costs
no database write and no placement call.
"""
import contextlib
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import devices
from cyborg.db.api import inventory
from cyborg.tests.functional.test_placement_sync import _report
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import InProcess


@pytest.fixture
def node(placement):
    return placement.create_compute_node()


@pytest.fixture
def conductor(conf, placement_url, db_engine):
    placement_server.point_at(conf, placement_url)
    return InProcess(conductor_manager.ConductorManager(conf))


@pytest.fixture
def writes(db_engine):
    """The INSERT, UPDATE and DELETE statements run, as they run."""
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, many):
        if statement.lstrip().split(None, 1)[0].upper() in (
                'INSERT', 'UPDATE', 'DELETE'):
            seen.append(statement)

    sa.event.listen(db_engine, 'before_cursor_execute', record)
    yield seen
    sa.event.remove(db_engine, 'before_cursor_execute', record)


@contextlib.contextmanager
def raises(exc_type, match=''):
    """What an RPC server method raises, as its dispatcher sees it."""
    with pytest.raises(messaging.ExpectedException) as caught:
        yield
    error = caught.value.exc_info[1]
    assert isinstance(error, exc_type), error
    assert match in str(error)


def _setup(conf, conductor, node, count=2):
    ctx = cyborg_context.get_admin_context()
    conductor.report_data(ctx, f'agent-{node["name"]}',
                          _report(conf, node['name'], devices=count))
    found = inventory.get_host_devices(ctx, conf.host)
    return ctx, found


def _reading(device, state, reason=''):
    return {'controlpath_id': device['controlpath_id'], 'state': state,
            'reason': reason}


def _offered(placement, node):
    """The providers allocation candidates offer one FPGA from."""
    answer = placement.get(
        '/allocation_candidates?resources=FPGA:1'
        f'&in_tree={node["uuid"]}', version='1.36')
    return {rp for c in answer['allocation_requests']
            for rp in c['allocations']}


def test_unhealthy_reserves_and_healthy_lifts(conf, conductor, placement,
                                              node):
    ctx, found = _setup(conf, conductor, node)
    sick, well = found
    sick_rp = sick['deployables'][0]['rp_uuid']
    well_rp = well['deployables'][0]['rp_uuid']
    assert _offered(placement, node) == {sick_rp, well_rp}
    assert devices.get(ctx, sick['uuid'])['health'] == 'unknown'

    assert conductor.device_health_update(ctx, conf.host, [
        _reading(sick, 'unhealthy', 'AER: 1 fatal error'),
        _reading(well, 'healthy')]) == 2
    stored = devices.get(ctx, sick['uuid'])
    assert (stored['health'], stored['health_reason'],
            stored['health_source']) == ('unhealthy', 'AER: 1 fatal error',
                                         'agent')
    assert stored['health_changed_at'] is not None
    assert devices.get(ctx, well['uuid'])['health'] == 'healthy'
    # Placement followed before the call returned.
    assert placement.inventories(sick_rp)['FPGA']['reserved'] == 4
    assert placement.inventories(well_rp)['FPGA']['reserved'] == 0
    assert _offered(placement, node) == {well_rp}

    assert conductor.device_health_update(
        ctx, conf.host, [_reading(sick, 'healthy')]) == 1
    assert placement.inventories(sick_rp)['FPGA']['reserved'] == 0
    assert _offered(placement, node) == {sick_rp, well_rp}


def test_degraded_keeps_offering(conf, conductor, placement, node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    rp = device['deployables'][0]['rp_uuid']
    conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'degraded', 'link at x8 of x16')])
    assert devices.get(ctx, device['uuid'])['health'] == 'degraded'
    assert _offered(placement, node) == {rp}


def test_unchanged_reading_writes_nothing_and_calls_no_one(
        conf, conductor, placement, node, writes):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'unhealthy', 'gone')])
    writes.clear()
    calls = conductor.placement.client.calls
    assert conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'unhealthy', 'gone')]) == 0
    assert writes == []
    assert conductor.placement.client.calls == calls


def test_healthy_again_stays_reserved_while_disabled(conf, conductor,
                                                     placement, node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    rp = device['deployables'][0]['rp_uuid']
    conductor.device_health_update(ctx, conf.host,
                                   [_reading(device, 'unhealthy', 'hot')])
    conductor.device_set_status(ctx, device['uuid'], 'maintaining')
    conductor.device_health_update(ctx, conf.host,
                                   [_reading(device, 'healthy')])
    assert placement.inventories(rp)['FPGA']['reserved'] == 1 * 4
    conductor.device_set_status(ctx, device['uuid'], 'enabled')
    assert placement.inventories(rp)['FPGA']['reserved'] == 0


def test_operator_setting_stands_until_cleared(conf, conductor, placement,
                                               node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    rp = device['deployables'][0]['rp_uuid']
    conductor.device_health_update(ctx, conf.host,
                                   [_reading(device, 'healthy')])
    shown = conductor.device_set_health(ctx, device['uuid'], 'unhealthy',
                                        'replacing the fan')
    assert (shown['health'], shown['health_reason'],
            shown['health_source']) == ('unhealthy', 'replacing the fan',
                                        'operator')
    assert 'previous_health' not in shown
    assert placement.inventories(rp)['FPGA']['reserved'] == 4
    # The agent's readings are kept but do not count meanwhile.
    assert conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'degraded', 'warm')]) == 0
    assert devices.get(ctx, device['uuid'])['health'] == 'unhealthy'
    shown = conductor.device_set_health(ctx, device['uuid'], None, None)
    assert (shown['health'], shown['health_reason'],
            shown['health_source']) == ('degraded', 'warm', 'agent')
    assert placement.inventories(rp)['FPGA']['reserved'] == 0


def test_operator_errors(conf, conductor, node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    with raises(exception.Invalid, 'healthy, degraded, unhealthy, unknown'):
        conductor.device_set_health(ctx, device['uuid'], 'sick', None)
    with raises(exception.ResourceNotFound):
        conductor.device_set_health(ctx, str(uuid.uuid4()), 'healthy', None)


def test_agent_updates_are_validated_and_scoped(conf, conductor, node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    with raises(exception.InvalidReport, '0/state'):
        conductor.device_health_update(ctx, conf.host,
                                       [_reading(device, 'sick')])
    with raises(exception.InvalidReport):
        conductor.device_health_update(ctx, conf.host, {'not': 'a list'})
    # Another host cannot set this host's devices, and a device the host
    # does not have is skipped.
    assert conductor.device_health_update(
        ctx, 'agent-elsewhere', [_reading(device, 'unhealthy')]) == 0
    other = dict(device, controlpath_id={
        'cpid_type': 'PCI', 'cpid_info': {'domain': '0000', 'bus': 'ff',
                                          'device': '00', 'function': '0'}})
    assert conductor.device_health_update(
        ctx, conf.host, [_reading(other, 'unhealthy')]) == 0
    assert devices.get(ctx, device['uuid'])['health'] == 'unknown'


def test_long_reason_is_cut(conf, conductor, node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'unhealthy', 'x' * 1000)])
    reason = devices.get(ctx, device['uuid'])['health_reason']
    assert len(reason) == 255 and reason.endswith('...')


def test_impact_and_bindings_name_the_holders(conf, conductor, node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    rp = device['deployables'][0]['rp_uuid']
    assert devices.impact(ctx, device['uuid']) == {
        'device_uuid': device['uuid'], 'arqs': [], 'instances': [],
        'projects': []}
    device_profiles.create(ctx, {'name': f'dp-{node["name"]}',
                                 'groups': [{'resources:FPGA': '2'}]})
    instance = str(uuid.uuid4())
    made = arqs.create(ctx, f'dp-{node["name"]}', 'project-a')
    arq_bindings.apply_patch(ctx, {arq['uuid']: {
        'hostname': node['name'], 'device_rp_uuid': rp,
        'instance_uuid': instance} for arq in made}, [])
    found = devices.impact(ctx, device['uuid'])
    assert sorted(a['uuid'] for a in found['arqs']) == sorted(
        a['uuid'] for a in made)
    assert {a['state'] for a in found['arqs']} == {'Bound'}
    assert (found['instances'], found['projects']) == ([instance],
                                                       ['project-a'])
    (held,) = conductor.host_bindings(ctx, conf.host)
    assert held['uuid'] == device['uuid']
    assert held['controlpath_id'] == device['controlpath_id']
    assert (held['instances'], held['projects']) == ([instance],
                                                     ['project-a'])
    with pytest.raises(exception.ResourceNotFound):
        devices.impact(ctx, str(uuid.uuid4()))


def test_answers_carry_the_times_stored(conf, conductor, node):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    shown = conductor.device_set_health(ctx, device['uuid'], 'degraded',
                                        'warm')
    stored = devices.get(ctx, device['uuid'])
    assert shown['updated_at'] == stored['updated_at']
    assert shown['health_changed_at'] == stored['health_changed_at']
    assert stored['updated_at'] is not None
