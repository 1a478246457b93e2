"""Binds, unbinds, deletes and programs racing across two conductors.

Two real ``cyborg-conductor`` processes share one MariaDB or PostgreSQL
database and one RabbitMQ virtual host, which hands the calls made here to
them in turn; the agent runs in this process with the fake driver, whose
programs and mdev creations take ``[fake_driver] action_seconds``, so that
requests land while device-side work runs. Glance is a fake on 127.0.0.1.
"""
import collections
import concurrent.futures
import datetime
import random
import threading
import time
import uuid

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import service as agent_service
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import deployables
from cyborg.db.api import inventory
from cyborg.tests.fakes import fixtures
from cyborg.tests.functional.test_binding_flow import Stack
from cyborg.tests.functional.test_conductor_concurrency import _heartbeating
from cyborg.tests.functional.test_conductor_concurrency import _tails
from cyborg.tests.functional.test_processes import _kill
from cyborg.tests.functional.test_processes import _start
from cyborg.tests.functional.test_processes import _write_conf
from cyborg.tests.harness import gate_stack
from cyborg.tests.utils import wait_for

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable
CONDUCTORS = ('ctl1', 'ctl2')
BIND_TIMEOUT = 20
FPGA_HANDLES = 64
VGPUS = 8


class Races(Stack):
    """Two conductor processes, an agent here, and what tests need."""

    def __init__(self, conf, engine, driver, glance, procs, logs) -> None:
        super().__init__(conf, driver, None, glance, None, engine)
        self.procs = procs
        self.logs = logs

    def new_profile(self, group: dict[str, str]) -> str:
        return self.profile(f'dp-{uuid.uuid4().hex[:8]}', group)

    def create(self, profile: str, count: int = 1) -> list[str]:
        return [a['uuid'] for _ in range(count)
                for a in self.api.arq_create(self.ctx, profile, 'project')]

    def bind_arqs(self, uuids: list[str], rp_uuid: str,
                  instance: str | None = None) -> str:
        instance = instance or str(uuid.uuid4())
        self.api.arq_apply_patch(self.ctx, {u: {
            'hostname': self.hostname, 'device_rp_uuid': rp_uuid,
            'instance_uuid': instance} for u in uuids}, [])
        return instance

    def rows(self, statement) -> list:
        with self.engine.connect() as conn:
            return conn.execute(statement).all()

    def states(self) -> dict[str, str]:
        return dict(self.rows(sa.select(ARQ.uuid, ARQ.state)))

    def settled(self) -> bool:
        return 'BindStarted' not in self.states().values()

    def bound_handles(self) -> set[str]:
        return {row.uuid for row in self.rows(
            sa.select(AH.uuid).join(ARQ, ARQ.attach_handle_id == AH.id)
            .where(ARQ.state == 'Bound'))}

    def handles_in_use(self) -> set[str]:
        return {row.uuid for row in self.rows(
            sa.select(AH.uuid).where(AH.in_use.is_(True)))}

    def context(self) -> str:
        return _tails(self.logs)


# Two conductor processes need a database server: each race runs on one
# of them here, on both under ``tox -e flows``.
SERVERS = ('mysql', 'postgresql')


@pytest.fixture
def backend(request) -> str:
    return request.param


@pytest.fixture
def vgpu_handles() -> str:
    """What the fake GPU's vGPUs are (``[fake_driver] vgpu_handles``); a
    test parametrizes it to run over both."""
    return 'mdev'


# The vGPUs of both kinds: mdevs, and SR-IOV VFs given a vGPU type; both
# have state on the host that a bind makes and a release removes.
BOTH_KINDS = pytest.mark.parametrize('vgpu_handles', ['mdev', 'sriov'])


@pytest.fixture
def races(conf, tmp_path, rabbit_url, db_engine, empty_db_url,
          fake_glance, vgpu_handles):
    conf.set_override('vgpu_handles', vgpu_handles, 'fake_driver')
    conf.set_override('host', 'cmp-races')
    conf.set_override('hostname', 'node-races', 'agent')
    conf.set_override('device_count', 1, 'fake_driver')
    conf.set_override('accelerators_per_device', FPGA_HANDLES,
                      'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('vgpus_per_device', VGPUS, 'fake_driver')
    conf.set_override('bind_timeout', BIND_TIMEOUT, 'conductor')
    conf.set_override('send_events', False, 'nova')
    fixtures.glance_conf(conf, fake_glance)
    exchange = f'cyborg-test-{uuid.uuid4().hex[:8]}'
    logs = {}
    procs = []
    agent = None
    ctx = cyborg_context.get_admin_context()

    def start_conductor(host):
        conf_file = _write_conf(
            tmp_path / f'{host}.conf',
            DEFAULT={'transport_url': rabbit_url,
                     'control_exchange': exchange, 'host': host,
                     'heartbeat_interval': 1, 'debug': 'true'},
            database={'connection': empty_db_url},
            conductor={'bind_timeout': BIND_TIMEOUT},
            glance={'auth_type': 'admin_token',
                    'token': fake_glance.token,
                    'endpoint': fake_glance.endpoint,
                    'endpoint_override': fake_glance.endpoint},
            nova={'send_events': 'false'})
        logs[host] = tmp_path / f'{host}.log'
        procs.append(_start('cyborg.cmd.conductor', conf_file, logs[host]))

    def wait_started(hosts, started):
        wait_for(lambda: set(hosts) <= _heartbeating(ctx)
                 or any(p.poll() is not None for p in started), timeout=40)
        if any(p.poll() is not None for p in started):
            pytest.fail('a conductor did not start' + _tails(logs))

    def start_another(host):
        start_conductor(host)
        wait_started([host], procs[-1:])

    try:
        for host in CONDUCTORS:
            start_conductor(host)
        wait_started(CONDUCTORS, procs)
        rpc.set_defaults(control_exchange=exchange)
        rpc.init(conf, url=rabbit_url)
        # Registered by rpc.init; an agent left without conductors (a
        # test kills them) stops within this.
        conf.set_override('rpc_response_timeout', 10)
        driver = fake.FakeDriver(conf)
        agent = agent_service.build(conf, loaded=[driver])
        agent.start()
        wait_for(lambda: len(inventory.get_host_devices(ctx, conf.host))
                 == 2, timeout=30)
        races = Races(conf, db_engine, driver, fake_glance, procs, logs)
        races.start_conductor = start_another
        yield races
    finally:
        if agent is not None:
            agent.stop()
        # How conductors stop is tested elsewhere; these only go away.
        for proc in procs:
            _kill(proc)
        rpc.cleanup()
        rpc.set_defaults()


def _in_parallel(calls, threads=16):
    """Run the callables at once; their results or exceptions, in order."""
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(call) for call in calls]
        results = []
        for future in futures:
            try:
                results.append(future.result())
            except Exception as exc:
                results.append(exc)
        return results


def _loaded(races) -> str | None:
    """The bitstream the database says the FPGA holds."""
    return deployables.get(races.ctx,
                           races.deployable('FPGA')['uuid'])['bitstream_id']


def _programming(races) -> bool:
    """Whether the agent is programming the device now."""
    return bool(races.driver.busy)


@pytest.mark.parametrize('backend', gate_stack.backends(
    'mysql', SERVERS), indirect=True)
def test_program_and_binds_exclude_each_other(races):
    races.conf.set_override('action_seconds', 2.0, 'fake_driver')
    fpga = races.deployable('FPGA')
    first = races.glance.add_image(b'first')['id']
    other = races.glance.add_image(b'other')['id']
    plain = races.new_profile({'resources:FPGA': '1'})
    wants_other = races.new_profile({'resources:FPGA': '1',
                                     'accel:bitstream_id': other})

    # An operator programs the idle device; it takes two seconds.
    programmed = concurrent.futures.ThreadPoolExecutor(1).submit(
        races.api.deployable_program, races.ctx, fpga['uuid'], first)
    wait_for(lambda: _programming(races))

    # A second program meanwhile is refused, naming the one under way.
    with pytest.raises(exception.DeployableBusy, match=first):
        races.api.deployable_program(races.ctx, fpga['uuid'], other)
    # A bind that wants another bitstream is refused at once, saying why.
    [loser] = races.create(wants_other)
    with pytest.raises(exception.BindRefused,
                       match=f'being programmed with bitstream {first}'):
        races.bind_arqs([loser], fpga['rp_uuid'])
    assert races.states()[loser] == 'Initial'
    # A bind that does not care waits for the programming, then binds.
    [waiter] = races.create(plain)
    races.bind_arqs([waiter], fpga['rp_uuid'])
    assert races.states()[waiter] == 'BindStarted'
    programmed.result(timeout=30)
    wait_for(races.settled, timeout=30)
    assert races.states()[waiter] == 'Bound'
    assert [c['bitstream']['id'] for c in races.driver.program_calls] == [
        first]
    assert _loaded(races) == first

    # While it is bound, programming is a conflict naming its request.
    with pytest.raises(exception.DeployableBusy, match=waiter):
        races.api.deployable_program(races.ctx, fpga['uuid'], other)
    assert len(races.driver.program_calls) == 1


@pytest.mark.parametrize('backend', gate_stack.backends(
    'postgresql', SERVERS), indirect=True)
def test_binds_wanting_different_bitstreams_never_both_program(races):
    races.conf.set_override('action_seconds', 1.0, 'fake_driver')
    fpga = races.deployable('FPGA')
    images = [races.glance.add_image(f'image {n}'.encode())['id']
              for n in range(2)]
    profiles = {image: races.new_profile({'resources:FPGA': '1',
                                          'accel:bitstream_id': image})
                for image in images}
    rng = random.Random()
    wanted = {}
    for _ in range(20):
        image = rng.choice(images)
        [arq] = races.create(profiles[image])
        wanted[arq] = image
    results = _in_parallel([
        (lambda arq=arq: races.bind_arqs([arq], fpga['rp_uuid']))
        for arq in wanted])
    refused = {arq for arq, result in zip(wanted, results, strict=True)
               if isinstance(result, exception.BindRefused)}
    # bind_arqs answers the instance bound.
    assert not [r for r in results if not isinstance(r, str)
                and not isinstance(r, exception.BindRefused)], results
    wait_for(races.settled, timeout=60)
    states = races.states()
    calls = races.driver.program_calls
    # One program, of the image the first bind wanted; the binds that
    # wanted it too share the device, the others were refused.
    assert len(calls) == 1, (calls, races.context())
    loaded = calls[0]['bitstream']['id']
    assert {a for a, s in states.items() if s == 'Bound'} == {
        a for a, image in wanted.items() if image == loaded}
    assert {a for a in wanted if wanted[a] != loaded} == refused
    assert {states[a] for a in refused} == {'Initial'}
    assert _loaded(races) == loaded


@pytest.mark.parametrize('backend', gate_stack.backends(
    'mysql', SERVERS), indirect=True)
def test_concurrent_patches_bind_an_instance_once(races):
    fpga = races.deployable('FPGA')
    profile = races.new_profile({'resources:FPGA': '1'})
    instances = [str(uuid.uuid4()) for _ in range(30)]
    pairs = {instance: races.create(profile, 2) for instance in instances}
    calls = [(lambda arq=arq, instance=instance: races.bind_arqs(
        [arq], fpga['rp_uuid'], instance))
        for instance, pair in pairs.items() for arq in pair]
    results = _in_parallel(calls, threads=24)
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == len(instances), results
    assert all(isinstance(r, exception.Invalid)
               and 'bind all of an instance' in str(r)
               for r in refused), refused
    held = collections.Counter(row.instance_uuid for row in races.rows(
        sa.select(ARQ.instance_uuid).where(ARQ.state == 'Bound')))
    assert held == dict.fromkeys(instances, 1), races.context()


@pytest.mark.parametrize('backend', gate_stack.backends(
    'postgresql', SERVERS), indirect=True)
def test_unbind_racing_delete_by_instance_strands_nothing(races):
    gpu = races.deployable('GPU')
    profile = races.new_profile({'resources:VGPU': '1'})
    rng = random.Random()

    def unbind(arq):
        races.api.arq_apply_patch(races.ctx, {}, [arq])

    def delete(instance, pause):
        time.sleep(pause)
        races.api.arq_delete(races.ctx, instance_uuid=instance)

    # 32 races, 8 at a time: one per vGPU.
    for _ in range(4):
        bound = {arq: races.bind_arqs([arq], gpu['rp_uuid'])
                 for arq in races.create(profile, VGPUS)}
        wait_for(races.settled, timeout=30)
        calls = []
        for arq, instance in bound.items():
            calls.append(lambda arq=arq: unbind(arq))
            calls.append(lambda i=instance, p=rng.uniform(0, 0.04):
                         delete(i, p))
        results = _in_parallel(calls)
        # Each unbind either ran first or found its request gone.
        assert all(isinstance(r, exception.ARQNotFound)
                   for r in results if isinstance(r, Exception)), results
        states = races.states()
        assert set(states.values()) <= {'Unbound'}, states
        wait_for(lambda: not races.handles_in_use() and not
                 races.driver.mdevs, timeout=30)
        # What was unbound binds again, and each instance gets new
        # requests, as after an evacuation.
        for arq in states:
            races.bind_arqs([arq], gpu['rp_uuid'])
        wait_for(races.settled, timeout=30)
        assert set(races.states().values()) <= {'Bound'}
        for arq in states:
            races.api.arq_delete(races.ctx, uuids=[arq])
        instance = next(iter(bound.values()))
        races.bind_arqs(races.create(profile), gpu['rp_uuid'], instance)
        wait_for(races.settled, timeout=30)
        assert set(races.states().values()) == {'Bound'}
        races.api.arq_delete(races.ctx, instance_uuid=instance)


def _travel_past_the_sweep(races):
    """Make every time the stale sweep looks at an hour old, as long as
    it waits for a stopped conductor's work."""
    past = timeutils.utcnow() - datetime.timedelta(hours=1)
    with races.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.state == 'BindStarted')
                     .values(updated_at=past))
        for column in ('released_at', 'action_since'):
            # Where this schema keeps them.
            for model in (AH, Dep):
                if hasattr(model, column):
                    conn.execute(sa.update(model).where(
                        getattr(model, column).is_not(None))
                        .values({column: past}))


def _mdevs_match_binds(races):
    """The agent holds an mdev for every Bound vGPU and nothing else,
    and no handle waits for its mdev's removal."""
    return (set(races.driver.mdevs) == races.bound_handles()
            and races.handles_in_use() == races.bound_handles())


@BOTH_KINDS
@pytest.mark.parametrize('backend', gate_stack.backends(
    'mysql', SERVERS), indirect=True)
def test_unbind_and_delete_meeting_binds_in_flight_leak_no_mdev(races):
    races.conf.set_override('action_seconds', 0.3, 'fake_driver')
    gpu = races.deployable('GPU')
    profile = races.new_profile({'resources:VGPU': '1'})
    rng = random.Random()

    def life(arq, pause, by_instance):
        instance = races.bind_arqs([arq], gpu['rp_uuid'])
        time.sleep(pause)
        if by_instance:
            races.api.arq_delete(races.ctx, instance_uuid=instance)
        else:
            races.api.arq_apply_patch(races.ctx, {}, [arq])

    arqs_ = races.create(profile, VGPUS)
    for _ in range(3):
        results = _in_parallel([
            (lambda a=arq: life(a, rng.uniform(0, 0.5), rng.random() < .5))
            for arq in arqs_], threads=VGPUS)
        assert not [r for r in results if isinstance(r, Exception)], (
            results, races.context())
        wait_for(races.settled, timeout=60)
        wait_for(lambda: _mdevs_match_binds(races), timeout=30)
        arqs_ = [a for a, s in races.states().items() if s == 'Unbound']
        arqs_ += races.create(profile, VGPUS - len(arqs_))
    # Every vGPU binds again: no mdev was left behind to collide with.
    instance = races.bind_arqs(arqs_, gpu['rp_uuid'])
    wait_for(races.settled, timeout=60)
    assert {s for a, s in races.states().items() if a in arqs_} == {
        'Bound'}, races.context()
    assert len(races.driver.mdevs) == VGPUS
    races.api.arq_delete(races.ctx, instance_uuid=instance)
    wait_for(lambda: not races.driver.mdevs and not races.handles_in_use(),
             timeout=30)


@BOTH_KINDS
@pytest.mark.parametrize('backend', gate_stack.backends(
    'postgresql', SERVERS), indirect=True)
def test_a_conductor_killed_mid_bind_leaves_no_mdev_behind(races):
    races.conf.set_override('action_seconds', 1.0, 'fake_driver')
    gpu = races.deployable('GPU')
    profile = races.new_profile({'resources:VGPU': '1'})
    binds = races.create(profile, VGPUS)
    results = _in_parallel([
        (lambda a=arq: races.bind_arqs([a], gpu['rp_uuid'])) for arq in binds])
    assert not [r for r in results if isinstance(r, Exception)], results
    # Both conductors are creating mdevs; one dies without a word.
    time.sleep(0.5)
    _kill(races.procs[0])
    # Half the requests are now deleted; the dead conductor's binds
    # stay BindStarted and some of their mdevs exist.
    gone = binds[:VGPUS // 2]
    races.api.arq_delete(races.ctx, uuids=gone)
    time.sleep(2 * races.conf.fake_driver.action_seconds)
    _travel_past_the_sweep(races)
    sweeper = conductor_manager.ConductorManager(races.conf).binder
    try:
        sweeper.fail_stale_binds()
    finally:
        sweeper.stop()
    wait_for(races.settled, timeout=30)
    assert _mdevs_match_binds(races), (races.driver.mdevs,
                                       races.bound_handles(),
                                       races.handles_in_use(),
                                       races.context())


@BOTH_KINDS
@pytest.mark.parametrize('backend', gate_stack.backends(
    'mysql', SERVERS), indirect=True)
def test_the_agent_removes_on_its_return_what_was_deleted_meanwhile(races):
    gpu = races.deployable('GPU')
    profile = races.new_profile({'resources:VGPU': '1'})
    arqs_ = races.create(profile, 2)
    instance = races.bind_arqs(arqs_, gpu['rp_uuid'])
    wait_for(races.settled, timeout=30)
    assert len(races.driver.mdevs) == 2
    # The host is unreachable: its devices answer to an agent that left.
    moved = sa.update(models.Device).where(models.Device.type == 'GPU')
    with races.engine.begin() as conn:
        conn.execute(moved.values(host='agent-that-left'))
    races.conf.set_override('bind_timeout', 2, 'conductor')
    # Nova deletes the instance's requests: that succeeds at once, and the
    # handles wait for their mdevs to go.
    races.api.arq_delete(races.ctx, instance_uuid=instance)
    assert not arqs.get_all(races.ctx, instance_uuid=instance)[0]
    assert len(races.handles_in_use()) == 2
    assert len(races.driver.mdevs) == 2
    with races.engine.begin() as conn:
        conn.execute(moved.values(host=races.conf.host))
    # The agent starts again: it removes them, and the handles are free.
    restarted = agent_service.build(races.conf, loaded=[races.driver])
    restarted.agent.restore_mdevs()
    assert races.driver.mdevs == {}
    assert not races.handles_in_use()


@pytest.mark.parametrize('backend', gate_stack.backends(
    'postgresql', SERVERS), indirect=True)
def test_a_bind_sent_again_changes_nothing(races):
    races.conf.set_override('action_seconds', 0.5, 'fake_driver')
    fpga = races.deployable('FPGA')
    gpu = races.deployable('GPU')
    [instant] = races.create(races.new_profile({'resources:FPGA': '1'}))
    [vgpu] = races.create(races.new_profile({'resources:VGPU': '1'}))
    first = races.bind_arqs([instant], fpga['rp_uuid'])
    second = races.bind_arqs([vgpu], gpu['rp_uuid'])
    # Nova sends the same PATCH again, as after a 503: while the vGPU is
    # still being made, and after.
    races.bind_arqs([vgpu], gpu['rp_uuid'], second)
    races.bind_arqs([instant], fpga['rp_uuid'], first)
    wait_for(races.settled, timeout=30)
    before = arqs.get_all(races.ctx)[0]
    races.bind_arqs([vgpu], gpu['rp_uuid'], second)
    races.bind_arqs([instant], fpga['rp_uuid'], first)
    assert arqs.get_all(races.ctx)[0] == before
    assert {a['state'] for a in before} == {'Bound'}
    assert len(races.driver.mdevs) == 1
    # The same ARQ for another instance is still a conflict.
    with pytest.raises(exception.ARQBadState):
        races.bind_arqs([instant], fpga['rp_uuid'])


@pytest.mark.parametrize('backend', gate_stack.backends(
    'mysql', SERVERS), indirect=True)
def test_a_program_racing_a_bind_never_reflashes_a_bound_device(races):
    races.conf.set_override('action_seconds', 1.0, 'fake_driver')
    fpga = races.deployable('FPGA')
    image = races.glance.add_image(b'racing')['id']
    profile = races.new_profile({'resources:FPGA': '1'})
    rng = random.Random()
    for _ in range(6):
        [arq] = races.create(profile)
        start = threading.Event()
        programs_before = len(races.driver.program_calls)

        def program(start=start):
            start.wait()
            races.api.deployable_program(races.ctx, fpga['uuid'], image)

        def bind(arq=arq, pause=rng.uniform(0, 0.3), start=start,
                 before=programs_before):
            start.wait()
            time.sleep(pause)
            races.bind_arqs([arq], fpga['rp_uuid'])
            # What the bind answered, and whether a program had finished.
            return (races.states()[arq],
                    len(races.driver.program_calls) - before)

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            programmed = pool.submit(program)
            bound = pool.submit(bind)
            start.set()
            refused = programmed.exception(timeout=30)
            state, programs_done = bound.result(timeout=30)
        wait_for(races.settled, timeout=30)
        assert races.states()[arq] == 'Bound'
        # Either the bind came first and the program was refused, or the
        # program came first and the bind was not Bound before it ended.
        if refused is not None:
            assert isinstance(refused, exception.DeployableBusy), refused
            assert arq in str(refused)
        else:
            assert state == 'BindStarted' or programs_done == 1, (
                state, programs_done)
        races.api.arq_delete(races.ctx, uuids=[arq])


@pytest.mark.parametrize('backend', gate_stack.backends(
    'postgresql', SERVERS), indirect=True)
def test_a_killed_conductor_does_not_leave_a_device_programming(races):
    fpga = races.deployable('FPGA')
    images = [races.glance.add_image(f'image {n}'.encode())['id']
              for n in range(2)]
    first, second = (races.new_profile({'resources:FPGA': '1',
                                        'accel:bitstream_id': image})
                     for image in images)
    [arq] = races.create(first)
    races.bind_arqs([arq], fpga['rp_uuid'])
    wait_for(races.settled, timeout=30)
    races.api.arq_delete(races.ctx, uuids=[arq])
    assert _loaded(races) == images[0]

    [arq] = races.create(second)
    races.conf.set_override('action_seconds', 5.0, 'fake_driver')
    races.bind_arqs([arq], fpga['rp_uuid'])
    # The agent is programming the device when both conductors die.
    wait_for(lambda: _programming(races), timeout=10)
    for proc in races.procs:
        _kill(proc)
    _travel_past_the_sweep(races)
    sweeper = conductor_manager.ConductorManager(races.conf).binder
    try:
        sweeper.fail_stale_binds()
        assert races.states()[arq] == 'BindFailed'
        # What the device holds is unknown now: not what it held before.
        assert _loaded(races) is None
        assert not races.handles_in_use()
    finally:
        sweeper.stop()
    # A conductor is back: the device can be programmed again.
    races.conf.set_override('action_seconds', 0.0, 'fake_driver')
    races.start_conductor('ctl3')
    [again] = races.create(first)
    races.bind_arqs([again], fpga['rp_uuid'])
    wait_for(races.settled, timeout=30)
    assert races.states()[again] == 'Bound', races.context()
    assert _loaded(races) == images[0]
