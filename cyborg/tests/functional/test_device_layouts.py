"""Device layouts and preparation in the conductor.

On every database with a real placement. The agent is the real
``AgentManager`` over the fake driver, reached without a message bus:
``EdgeAgent`` stands at the RPC edge (the client the conductor calls) and
can be ``down``. A layout change is refused while a handle is in use
(409 naming the requests), checked against what the driver offers (400
listing it), refused with nothing written when the agent is down (503),
and placement holds the device back from the moment the change is taken
until the new inventory is there.
"""
import contextlib
import datetime
import json
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import cache as agent_cache
from cyborg.agent import manager as agent_manager
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import devices
from cyborg.db.api import inventory
from cyborg.db.api import layouts as db_layouts
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import InProcess


class DirectConductor:
    """The agent's conductor client, calling the conductor in process."""

    def __init__(self) -> None:
        self.conductor: InProcess | None = None

    def report_data(self, context, host, report):
        assert self.conductor is not None
        return self.conductor.report_data(context, host, report)


class EdgeAgent:
    """The agent RPC client: the real agent manager, or down."""

    def __init__(self, manager: InProcess) -> None:
        self.manager = manager
        self.down = False
        self.calls: list[str] = []
        # Called inside apply_layout, after the agent applied and reported.
        self.during_apply = None

    def _check(self, method: str, host: str) -> None:
        self.calls.append(method)
        if self.down:
            raise exception.AgentUnavailable(host=host,
                                             reason='nothing listens')

    @staticmethod
    def _unwrap(call):
        # expected_exceptions wraps what a method raises, as the
        # dispatcher would before sending it back.
        try:
            return call()
        except messaging.ExpectedException as exc:
            raise exc.exc_info[1] from None

    def layout_options(self, context, host, controlpath_id, driver_name,
                       timeout):
        self._check('layout_options', host)
        return self._unwrap(lambda: self.manager.layout_options(
            context, controlpath_id, driver_name))

    def apply_layout(self, context, host, controlpath_id, driver_name,
                     layout, timeout):
        self._check('apply_layout', host)
        answer = self._unwrap(lambda: self.manager.apply_layout(
            context, controlpath_id, driver_name, layout))
        if self.during_apply is not None:
            self.during_apply()
        return answer

    def prepare_device(self, context, host, controlpath_id, driver_name,
                       layout, timeout):
        self._check('prepare_device', host)
        self.prepared_with = layout
        return self._unwrap(lambda: self.manager.prepare_device(
            context, controlpath_id, driver_name, layout))


@pytest.fixture
def node(placement):
    return placement.create_compute_node()


@pytest.fixture
def stack(conf, placement_url, db_engine, node, tmp_path):
    """A conductor, and the agent of ``node`` with one FPGA card and one
    GPU offering 4 vGPUs; the agent has reported."""
    placement_server.point_at(conf, placement_url)
    conf.set_override('host', f'agent-{node["name"]}')
    conf.set_override('hostname', node['name'], 'agent')
    conf.set_override('device_count', 1, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('vgpus_per_device', 4, 'fake_driver')
    direct = DirectConductor()
    driver = fake.FakeDriver(conf)
    tracker = resource_tracker.ResourceTracker(
        conf, [driver], direct,
        cache=agent_cache.AgentCache(str(tmp_path / 'cache.json')))
    agent = EdgeAgent(
        InProcess(agent_manager.AgentManager(conf, tracker, direct)))
    conductor = InProcess(conductor_manager.ConductorManager(
        conf, agent_api=agent))
    direct.conductor = conductor
    tracker.update(force=True)
    ctx = cyborg_context.get_admin_context()
    found = {d['type']: d for d in inventory.get_host_devices(ctx,
                                                              conf.host)}
    yield ctx, conductor, agent, driver, found
    conductor.binder.executor.shutdown(wait=True)


@contextlib.contextmanager
def raises(exc_type, *matches):
    with pytest.raises(messaging.ExpectedException) as caught:
        yield
    error = caught.value.exc_info[1]
    assert isinstance(error, exc_type), error
    for match in matches:
        assert match in str(error), str(error)


def _gpu_rp(ctx, gpu_uuid):
    device = next(d for d in inventory.get_host_devices(
        ctx, devices.get(ctx, gpu_uuid)['host']) if d['uuid'] == gpu_uuid)
    return device['deployables'][0]['rp_uuid']


def _inventory(placement, rp):
    return placement.inventories(rp).get('PGPU') or next(
        iter(placement.inventories(rp).values()))


def test_mdev_count_applied_with_placement_in_one_step(stack, placement,
                                                       tmp_path):
    ctx, conductor, agent, driver, found = stack
    gpu = found['GPU']
    rp = _gpu_rp(ctx, gpu['uuid'])
    assert _inventory(placement, rp)['total'] == 4
    seen = []

    def during():
        # The agent has applied and reported: the new inventory is in
        # placement already, and all of it is still reserved.
        seen.append(dict(_inventory(placement, rp)))
        seen.append(devices.get(ctx, gpu['uuid'])['layout_state'])

    agent.during_apply = during
    after = conductor.device_set_layout(
        ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2})
    assert seen == [{**seen[0], 'total': 2, 'reserved': 2}, 'applying']
    assert (after['layout'], after['layout_state'], after['layout_reason']
            ) == ({'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2},
                  'applied', None)
    assert (_inventory(placement, rp)['total'],
            _inventory(placement, rp)['reserved']) == (2, 0)
    # The agent kept it, to apply it again after a reboot.
    kept = json.load(open(tmp_path / 'cache.json'))['layouts']
    assert [e['layout'] for e in kept.values()] == [
        {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2}]

    # Clearing forgets the desired layout; the device stays as it is.
    cleared = conductor.device_set_layout(ctx, gpu['uuid'], None)
    assert (cleared['layout'], cleared['layout_state']) == (None, None)
    assert json.load(open(tmp_path / 'cache.json'))['layouts'] == {}
    assert _inventory(placement, rp)['total'] == 2
    assert _inventory(placement, rp)['reserved'] == 0


def test_values_the_device_does_not_offer_are_400_listing_them(stack):
    ctx, conductor, agent, _, found = stack
    gpu, card = found['GPU'], found['FPGA']
    with raises(exception.Invalid, 'mdev_type', fake.VGPU_TYPE):
        conductor.device_set_layout(
            ctx, gpu['uuid'], {'mdev_type': 'nvidia-999',
                               'mdev_count': 2})
    with raises(exception.Invalid, 'from 0 to 4'):
        conductor.device_set_layout(
            ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE,
                               'mdev_count': 9})
    with raises(exception.Invalid, "'vf_count' is not one of",
                'region_image'):
        conductor.device_set_layout(ctx, card['uuid'], {'vf_count': 4})
    with raises(exception.Invalid, 'vf_count (int)'):
        conductor.device_set_layout(ctx, card['uuid'], {'vf_count': 'x'})
    assert 'apply_layout' not in agent.calls
    stored = devices.get(ctx, gpu['uuid'])
    assert (stored['layout'], stored['layout_state']) == (None, None)


def test_agent_down_is_503_and_nothing_is_written(stack, placement):
    ctx, conductor, agent, _, found = stack
    gpu = found['GPU']
    rp = _gpu_rp(ctx, gpu['uuid'])
    before = devices.get(ctx, gpu['uuid'])
    agent.down = True
    with raises(exception.AgentUnavailable, 'nothing listens'):
        conductor.device_set_layout(
            ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE,
                               'mdev_count': 2})
    with raises(exception.AgentUnavailable):
        conductor.device_set_layout(ctx, gpu['uuid'], None)
    assert devices.get(ctx, gpu['uuid']) == before
    assert _inventory(placement, rp)['reserved'] == 0


def test_device_in_use_is_409_naming_the_requests(stack, placement):
    ctx, conductor, agent, _, found = stack
    gpu = found['GPU']
    device_profiles.create(ctx, {'name': 'vgpu', 'groups': [
        {'resources:PGPU': '1'}]})
    arq = arqs.create(ctx, 'vgpu', None)[0]
    _hold(ctx, arq['uuid'], gpu['deployables'][0]['rp_uuid'])
    with raises(exception.DeviceBusy, arq['uuid'], 'unbind'):
        conductor.device_set_layout(
            ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE,
                               'mdev_count': 2})
    assert devices.get(ctx, gpu['uuid'])['layout_state'] is None
    assert 'layout_options' in agent.calls
    assert 'apply_layout' not in agent.calls


def _hold(ctx, arq_uuid, rp_uuid):
    """Mark a handle of the deployable in use by the request, as a bind
    leaves it."""
    engine = db_api.get_engine()
    AH = models.AttachHandle
    with engine.begin() as conn:
        deployable_id = conn.scalar(sa.select(models.Deployable.id).where(
            models.Deployable.rp_uuid == rp_uuid))
        handle_id = conn.scalar(sa.select(AH.id).where(
            AH.deployable_id == deployable_id).order_by(AH.id).limit(1))
        conn.execute(sa.update(AH).where(AH.id == handle_id)
                     .values(in_use=True))
        conn.execute(sa.update(models.AcceleratorRequest)
                     .where(models.AcceleratorRequest.uuid == arq_uuid)
                     .values(attach_handle_id=handle_id,
                             deployable_id=deployable_id, state='Bound'))


def test_a_failed_layout_stays_held_back_until_cleared(
        stack, placement, conf):
    ctx, conductor, agent, _, found = stack
    gpu = found['GPU']
    rp = _gpu_rp(ctx, gpu['uuid'])
    conf.set_override('layout_fail', True, 'fake_driver')
    with raises(exception.LayoutFailed, 'layout_fail'):
        conductor.device_set_layout(
            ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE,
                               'mdev_count': 2})
    stored = devices.get(ctx, gpu['uuid'])
    assert stored['layout_state'] == 'failed'
    assert 'layout_fail' in stored['layout_reason']
    inv = _inventory(placement, rp)
    assert inv['reserved'] == inv['total']
    conf.set_override('layout_fail', False, 'fake_driver')
    conductor.device_set_layout(ctx, gpu['uuid'], None)
    assert _inventory(placement, rp)['reserved'] == 0


def test_agent_gone_mid_change_is_redriven(stack, placement):
    ctx, conductor, agent, _, found = stack
    gpu = found['GPU']
    rp = _gpu_rp(ctx, gpu['uuid'])

    def vanish():
        agent.down = True
    # The options are read; the agent goes away before apply_layout.
    real = agent.layout_options

    def options_then_vanish(*args, **kwargs):
        answer = real(*args, **kwargs)
        vanish()
        return answer

    agent.layout_options = options_then_vanish
    with raises(exception.AgentUnavailable):
        conductor.device_set_layout(
            ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE,
                               'mdev_count': 3})
    stored = devices.get(ctx, gpu['uuid'])
    assert stored['layout_state'] == 'applying'
    assert 'did not answer' in stored['layout_reason']
    inv = _inventory(placement, rp)
    assert inv['reserved'] == inv['total'] == 4
    # Not yet stale: the pass leaves it.
    agent.down = False
    conductor.layouts.redrive()
    assert devices.get(ctx, gpu['uuid'])['layout_state'] == 'applying'
    # Past the bind timeout the pass asks the agent again.
    with db_api.get_engine().begin() as conn:
        conn.execute(sa.update(models.Device)
                     .where(models.Device.uuid == gpu['uuid'])
                     .values(layout_changed_at=timeutils.utcnow()
                             - datetime.timedelta(hours=1)))
    conductor.layouts.redrive()
    assert devices.get(ctx, gpu['uuid'])['layout_state'] == 'applied'
    assert (_inventory(placement, rp)['total'],
            _inventory(placement, rp)['reserved']) == (3, 0)


def test_enable_prepares_then_enables(stack, placement, conf):
    ctx, conductor, agent, driver, found = stack
    card = found['FPGA']
    conductor.device_set_status(ctx, card['uuid'], 'maintaining')
    # Discovery prepared both devices; enabling prepares the card again.
    before = len(driver.lifecycle_calls)
    conductor.device_enable(ctx, card['uuid'])
    assert devices.get(ctx, card['uuid'])['status'] == 'enabled'
    assert [c['action'] for c in driver.lifecycle_calls[before:]] == [
        'prepare']
    # Enabled already: nothing to prepare.
    conductor.device_enable(ctx, card['uuid'])
    assert agent.calls.count('prepare_device') == 1

    conductor.device_set_status(ctx, card['uuid'], 'maintaining')
    conf.set_override('prepare_fail', True, 'fake_driver')
    with raises(exception.PrepareFailed, 'prepare_fail'):
        conductor.device_enable(ctx, card['uuid'])
    stored = devices.get(ctx, card['uuid'])
    assert stored['status'] == 'error'
    assert 'prepare_fail' in stored['status_reason']
    rp = card['deployables'][0]['rp_uuid']
    inv = placement.inventories(rp)['FPGA']
    assert inv['reserved'] == inv['total']

    conf.set_override('prepare_fail', False, 'fake_driver')
    agent.down = True
    with raises(exception.AgentUnavailable):
        conductor.device_enable(ctx, card['uuid'])
    assert devices.get(ctx, card['uuid'])['status'] == 'error'
    agent.down = False
    conductor.device_enable(ctx, card['uuid'])
    stored = devices.get(ctx, card['uuid'])
    assert (stored['status'], stored['status_reason']) == ('enabled', None)
    assert placement.inventories(rp)['FPGA']['reserved'] == 0


def test_agent_reapplies_kept_layouts_at_start(stack, conf, tmp_path):
    ctx, conductor, agent, driver, found = stack
    gpu = found['GPU']
    conductor.device_set_layout(
        ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2})
    # A reboot: a new driver offers the default again; the cache stays.
    rebooted = fake.FakeDriver(conf)
    assert len(rebooted.discover()[-1].deployables[0].attach_handles) == 4
    cache = agent_cache.AgentCache.load(str(tmp_path / 'cache.json'))
    tracker = resource_tracker.ResourceTracker(conf, [rebooted], None,
                                               cache=cache)
    manager = agent_manager.AgentManager(conf, tracker, None)
    assert manager.reapply_layouts() == 1
    assert rebooted.mdev_counts == {
        next(iter(driver.mdev_counts)): 2}


def test_discovery_prepares_new_devices_once(stack, conf, tmp_path,
                                             placement):
    ctx, conductor, agent, driver, found = stack
    # The stack's agent prepared both devices at its first report.
    prepared = [c for c in driver.lifecycle_calls if c['action'] == 'prepare']
    assert len(prepared) == 2
    agent.manager.tracker.update(force=True)
    assert len([c for c in driver.lifecycle_calls
                if c['action'] == 'prepare']) == 2

    # A second host whose preparation fails: its devices come in error.
    second = placement.create_compute_node()
    conf.set_override('host', 'agent-second')
    conf.set_override('hostname', second['name'], 'agent')
    conf.set_override('prepare_fail', True, 'fake_driver')
    failing = fake.FakeDriver(conf)
    tracker = resource_tracker.ResourceTracker(
        conf, [failing], DirectConductor(),
        cache=agent_cache.AgentCache(str(tmp_path / 'second.json')))
    tracker.conductor_api.conductor = conductor
    tracker.update(force=True)
    stored = inventory.get_host_devices(ctx, 'agent-second')
    assert stored
    for device in stored:
        shown = devices.get(ctx, device['uuid'])
        assert shown['status'] == 'error'
        assert 'prepare_fail' in shown['status_reason']
        for dep in device['deployables']:
            for inv in placement.inventories(dep['rp_uuid']).values():
                assert inv['reserved'] == inv['total']


def test_a_bind_is_refused_while_the_layout_is_applied(stack, placement):
    ctx, conductor, agent, _, found = stack
    gpu = found['GPU']
    device_profiles.create(ctx, {'name': 'pgpu', 'groups': [
        {'resources:PGPU': '1'}]})
    arq = arqs.create(ctx, 'pgpu', None)[0]['uuid']
    rp = gpu['deployables'][0]['rp_uuid']
    outcomes = []

    def bind_meanwhile():
        try:
            arq_bindings.apply_patch(ctx, {arq: {
                'hostname': devices.get(ctx, gpu['uuid'])['hostname'],
                'device_rp_uuid': rp,
                'instance_uuid': str(uuid.uuid4())}}, [])
        except exception.BindRefused as exc:
            outcomes.append(exc)

    agent.during_apply = bind_meanwhile
    conductor.device_set_layout(
        ctx, gpu['uuid'], {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2})
    assert f'{arq}: the device\'s layout is being changed' in str(
        outcomes[0])
    assert arqs.get(ctx, arq)['state'] == 'Initial'
    assert devices.get(ctx, gpu['uuid'])['layout_state'] == 'applied'


def test_a_layout_set_while_not_enabled_is_applied_as_it_is_enabled(
        stack, placement, conf, tmp_path):
    ctx, conductor, agent, driver, found = stack
    gpu = found['GPU']
    rp = _gpu_rp(ctx, gpu['uuid'])
    wanted = {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2}
    conductor.device_set_status(ctx, gpu['uuid'], 'maintaining')
    kept = conductor.device_set_layout(ctx, gpu['uuid'], wanted)
    # Checked with the agent, kept, not applied: the device is as it was.
    assert (kept['layout'], kept['layout_state']) == (wanted, 'pending')
    assert 'layout_options' in agent.calls
    assert 'apply_layout' not in agent.calls
    inv = _inventory(placement, rp)
    assert (inv['total'], inv['reserved']) == (4, 4)
    # A second desired layout replaces the first, still pending.
    wanted = {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 3}
    conductor.device_set_layout(ctx, gpu['uuid'], wanted)

    # Its agent down: enabling changes nothing.
    agent.down = True
    with raises(exception.AgentUnavailable):
        conductor.device_enable(ctx, gpu['uuid'])
    stored = devices.get(ctx, gpu['uuid'])
    assert (stored['status'], stored['layout_state']) == (
        'maintaining', 'pending')
    agent.down = False

    # Its layout fails: the device is in error, the layout failed.
    conf.set_override('layout_fail', True, 'fake_driver')
    with raises(exception.PrepareFailed, 'layout_fail'):
        conductor.device_enable(ctx, gpu['uuid'])
    stored = devices.get(ctx, gpu['uuid'])
    assert (stored['status'], stored['layout_state']) == ('error', 'failed')
    assert 'layout_fail' in stored['status_reason']
    assert 'layout_fail' in stored['layout_reason']
    inv = _inventory(placement, rp)
    assert inv['reserved'] == inv['total']

    # Enabling again tries it again: prepared, applied, offered.
    conf.set_override('layout_fail', False, 'fake_driver')
    conductor.device_enable(ctx, gpu['uuid'])
    assert agent.prepared_with == wanted
    stored = devices.get(ctx, gpu['uuid'])
    assert (stored['status'], stored['layout'], stored['layout_state'],
            stored['layout_reason']) == ('enabled', wanted, 'applied', None)
    inv = _inventory(placement, rp)
    assert (inv['total'], inv['reserved']) == (3, 0)
    # The agent kept it for its next start.
    kept = json.load(open(tmp_path / 'cache.json'))['layouts']
    assert [e['layout'] for e in kept.values()] == [wanted]
    # Enabled with its layout applied: the next enable applies nothing.
    conductor.device_set_status(ctx, gpu['uuid'], 'maintaining')
    conductor.device_enable(ctx, gpu['uuid'])
    assert agent.prepared_with is None


def _stopped_mid_enable(ctx, conductor, gpu_uuid, wanted):
    """What a conductor leaves when it stops after taking the device
    for its preparation, before the agent answered."""
    conductor.device_set_status(ctx, gpu_uuid, 'maintaining')
    conductor.device_set_layout(ctx, gpu_uuid, wanted)
    assert db_layouts.begin_prepare(ctx, gpu_uuid) is not None
    with raises(exception.DeviceBusy, 'being prepared'):
        conductor.device_enable(ctx, gpu_uuid)
    # Dated by the preparation's own write...
    soon = timeutils.utcnow() + datetime.timedelta(seconds=1)
    assert db_layouts.stale_preparations(ctx, soon) == [gpu_uuid]
    # ...and not yet stale: the pass leaves it to the conductor that
    # began it.
    conductor.layouts.redrive()
    assert devices.get(ctx, gpu_uuid)['status'] == 'preparing'
    # Past the bind timeout (that conductor's call to the agent has
    # timed out by then).
    past = timeutils.utcnow() - datetime.timedelta(hours=1)
    with db_api.get_engine().begin() as conn:
        conn.execute(sa.update(models.Device)
                     .where(models.Device.uuid == gpu_uuid)
                     .values(updated_at=past, layout_changed_at=past))


def test_a_preparation_its_conductor_left_is_swept(stack, placement):
    ctx, conductor, agent, _, found = stack
    gpu = found['GPU']
    rp = _gpu_rp(ctx, gpu['uuid'])
    wanted = {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 3}
    _stopped_mid_enable(ctx, conductor, gpu['uuid'], wanted)

    conductor.layouts.redrive()
    stored = devices.get(ctx, gpu['uuid'])
    assert (stored['status'], stored['layout_state']) == ('enabled',
                                                          'applied')
    assert agent.prepared_with == wanted
    assert 'apply_layout' not in agent.calls
    inv = _inventory(placement, rp)
    assert (inv['total'], inv['reserved']) == (3, 0)


def test_a_left_preparation_whose_agent_is_down_ends_in_error(
        stack, placement):
    ctx, conductor, agent, _, found = stack
    gpu = found['GPU']
    rp = _gpu_rp(ctx, gpu['uuid'])
    wanted = {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2}
    _stopped_mid_enable(ctx, conductor, gpu['uuid'], wanted)

    agent.down = True
    conductor.layouts.redrive()
    stored = devices.get(ctx, gpu['uuid'])
    assert (stored['status'], stored['layout_state']) == ('error', 'failed')
    assert 'enable it again' in stored['status_reason']
    inv = _inventory(placement, rp)
    assert inv['reserved'] == inv['total']
    # No longer refused: enabling it again prepares it.
    agent.down = False
    conductor.device_enable(ctx, gpu['uuid'])
    stored = devices.get(ctx, gpu['uuid'])
    assert (stored['status'], stored['layout_state']) == ('enabled',
                                                          'applied')
    assert (_inventory(placement, rp)['total'],
            _inventory(placement, rp)['reserved']) == (2, 0)
