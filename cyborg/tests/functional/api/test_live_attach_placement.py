"""Live attach and detach (microversion 2.9) accounted in a real placement:
the instance's allocation gains the device provider's resources when a
request is attached to it, and loses them when it is detached; a device
placement has no room on is a 409 with nothing bound.

The compute node has two fake FPGAs of one accelerator each: each device
provider has a total of 1. The instance's first request is bound as Nova
binds it at boot (no microversion), after an allocation written as
nova-scheduler writes it. The database is each of SQLite, MariaDB and
PostgreSQL; placement's is SQLite.
"""
import concurrent.futures
import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Iterator

import pytest

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.tests import conftest
from cyborg.tests.functional.api import fixtures
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import InProcess
from cyborg.tests.utils import wait_for

ARQS = '/v2/accelerator_requests'
NOVA = user('pa', service_token=True)
OTHER_PROJECT = user('pb', service_token=True)
USER = 'u-pa'


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


class Cloud:
    """A compute node in placement with two one-accelerator FPGAs known
    to cyborg and published to placement, and a profile of one FPGA."""

    def __init__(self, api: fixtures.API,
                 placement: placement_server.Placement,
                 devices: int = 2) -> None:
        self.api, self.app, self.placement = api, api.app, placement
        self.node = placement.create_compute_node()
        api.conf.set_override('accelerators_per_device', 1, 'fake_driver')
        seeded = api.seed('cmp1', count=devices, hostname=self.node['name'])
        assert self.conductor.sync_placement(self.node['name']) == 0
        self.rps = [d['deployables'][0]['rp_uuid'] for d in seeded]
        for rp in self.rps:
            assert placement.inventories(rp)['FPGA']['total'] == 1
        api.dp('one-fpga', [{'resources:FPGA': '1'}])

    @property
    def conductor(self):
        return InProcess(self.api.conductor_parts,
                         self.api.conductor.endpoints)

    def create(self, headers=NOVA) -> str:
        [arq] = self.app.post_json(ARQS, {'device_profile_name': 'one-fpga'},
                                   headers=headers, status=201).json['arqs']
        return arq['uuid']

    def bind(self, arq, instance, rp, microversion='2.9', headers=NOVA,
             status=202):
        if microversion is not None:
            headers = version(microversion, headers)
        return self.app.patch_json(ARQS, {arq: [
            {'path': '/hostname', 'op': 'add', 'value': self.node['name']},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': rp},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance}]},
            headers=headers, status=status)

    def unbind(self, arq, status=202):
        return self.app.patch_json(ARQS, {arq: [
            {'path': f'/{field}', 'op': 'remove'}
            for field in ('hostname', 'device_rp_uuid', 'instance_uuid')]},
            headers=version('2.9', NOVA), status=status)

    def show(self, arq):
        return self.app.get(f'{ARQS}/{arq}', headers=ADMIN).json

    def schedule(self, instance, rp, project='pa', user_id=USER):
        """The allocation nova-scheduler writes for a new instance."""
        response = self.placement.request(
            'PUT', f'/allocations/{instance}', version='1.38', json={
                'allocations': {rp: {'resources': {'FPGA': 1}}},
                'consumer_generation': None, 'consumer_type': 'INSTANCE',
                'project_id': project, 'user_id': user_id})
        return response

    def boot(self, instance, rp) -> str:
        """A request bound as Nova binds it at boot, after scheduling."""
        response = self.schedule(instance, rp)
        assert response.status_code == 204, response.text
        arq = self.create()
        self.bind(arq, instance, rp, microversion=None)
        assert self.show(arq)['state'] == 'Bound'
        return arq

    def allocations(self, instance):
        return self.placement.get(f'/allocations/{instance}',
                                  version='1.38')

    def held(self, instance):
        return {rp: a['resources'] for rp, a in
                self.allocations(instance)['allocations'].items()}

    def usages(self):
        return [self.placement.get(f'/resource_providers/{rp}/usages')[
            'usages'].get('FPGA', 0) for rp in self.rps]

    def bound(self):
        """Requests Bound on each device, as cyborg has them."""
        arqs = self.app.get(ARQS, headers=ADMIN).json['arqs']
        return [sum(1 for a in arqs if a['state'] == 'Bound'
                    and a['device_rp_uuid'] == rp) for rp in self.rps]

    def candidates(self):
        """The device providers placement offers a new boot asking for
        one FPGA on this node."""
        answer = self.placement.get(
            f'/allocation_candidates?resources=FPGA:1'
            f'&in_tree={self.node["uuid"]}', version='1.31')
        return {rp for request in answer['allocation_requests']
                for rp in request['allocations']} & set(self.rps)

    def handle_in_use(self, rp) -> bool:
        handles = self.app.get('/v2/attach_handles',
                               headers=version('latest')).json[
            'attach_handles']
        deployables = {d['uuid']: d for d in self.app.get(
            '/v2/deployables', headers=ADMIN).json['deployables']}
        [mine] = [h for h in handles if deployables.get(
            h['deployable_uuid'], {}).get('rp_uuid') == rp]
        return mine['in_use']


@pytest.fixture
def placed_api(conf, placement_url, db_engine) -> Iterator[fixtures.API]:
    """The API whose conductor writes to a real placement, on SQLite,
    MariaDB and PostgreSQL."""
    placement_server.point_at(conf, placement_url)
    yield from fixtures._api(conf, db_engine)


@pytest.fixture
def cloud(placed_api, placement) -> Cloud:
    return Cloud(placed_api, placement)


def test_a_live_attach_allocates_and_a_detach_gives_back(cloud):
    instance = str(uuid.uuid4())
    first = cloud.boot(instance, cloud.rps[0])
    before = cloud.allocations(instance)
    # Nova's boot-time bind makes no allocation: the scheduler's stands.
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}}

    second = cloud.create()
    cloud.bind(second, instance, cloud.rps[1])
    assert cloud.show(second)['state'] == 'Bound'
    after = cloud.allocations(instance)
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1},
                                    cloud.rps[1]: {'FPGA': 1}}
    # The consumer is still Nova's instance, of its project and user.
    assert (after['project_id'], after['user_id'],
            after['consumer_type']) == ('pa', USER, 'INSTANCE')
    assert after['consumer_generation'] == before['consumer_generation'] + 1
    assert cloud.usages() == cloud.bound() == [1, 1]

    # The same bind sent again changes nothing, in placement either.
    cloud.bind(second, instance, cloud.rps[1])
    assert cloud.allocations(instance) == after

    cloud.unbind(second)
    assert cloud.show(second)['state'] == 'Unbound'
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}}
    assert cloud.usages() == cloud.bound() == [1, 0]
    assert cloud.show(first)['state'] == 'Bound'

    # Attached again, and the boot-time request detached: each takes out
    # its own device's share.
    cloud.bind(second, instance, cloud.rps[1])
    cloud.unbind(first)
    assert cloud.held(instance) == {cloud.rps[1]: {'FPGA': 1}}
    assert cloud.usages() == cloud.bound() == [0, 1]


def test_a_live_attach_takes_the_last_device_from_a_later_boot(cloud):
    """The field's race, one order: the running instance attaches the
    last free device; placement no longer offers it to a boot."""
    instance = str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    assert cloud.candidates() == {cloud.rps[1]}
    cloud.bind(cloud.create(), instance, cloud.rps[1])
    assert cloud.candidates() == set()
    # A scheduler that raced for it is refused by placement, so no boot
    # lands where the bind would fail.
    response = cloud.schedule(str(uuid.uuid4()), cloud.rps[1])
    assert response.status_code == 409, response.text
    assert cloud.usages() == cloud.bound() == [1, 1]


def test_a_boot_that_took_the_last_device_makes_the_live_attach_409(cloud):
    """The other order: a boot's allocation takes the last free device
    first; the live attach is refused, naming the provider, and nothing
    of it is bound."""
    instance, booting = str(uuid.uuid4()), str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    response = cloud.schedule(booting, cloud.rps[1])
    assert response.status_code == 204, response.text
    arq = cloud.create()
    response = cloud.bind(arq, instance, cloud.rps[1], status=409)
    assert _fault(response) == (
        f'Conflict: Cannot attach accelerators to instance {instance}: '
        f'resource provider {cloud.rps[1]} has 0 FPGA free for it, '
        f'accelerator request(s) {arq} need 1. Bind to a device (resource '
        'provider) with room, or free one first.')
    found = cloud.show(arq)
    assert (found['state'], found['instance_uuid']) == ('Initial', None)
    assert not cloud.handle_in_use(cloud.rps[1])
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}}
    assert cloud.held(booting) == {cloud.rps[1]: {'FPGA': 1}}
    # The boot binds the device it was given.
    other = cloud.create()
    cloud.bind(other, booting, cloud.rps[1], microversion=None)
    assert cloud.show(other)['state'] == 'Bound'


def test_a_consumer_generation_conflict_is_read_again_and_retried(cloud):
    instance = str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    client = cloud.conductor.binder.allocations.client
    put = client.put_allocations
    writes = []

    def nova_writes_first(consumer, *args, **kwargs):
        # Nova rewrites the instance's allocation (as a resize confirm
        # does) between cyborg's read and its write: a new generation.
        if not writes:
            body = cloud.allocations(consumer)
            response = cloud.placement.request(
                'PUT', f'/allocations/{consumer}', version='1.38', json={
                    'allocations': {rp: {'resources': a['resources']}
                                    for rp, a in body['allocations'].items()},
                    'consumer_generation': body['consumer_generation'],
                    'consumer_type': 'INSTANCE', 'project_id': 'pa',
                    'user_id': USER})
            assert response.status_code == 204, response.text
        writes.append(consumer)
        return put(consumer, *args, **kwargs)

    client.put_allocations = nova_writes_first
    second = cloud.create()
    cloud.bind(second, instance, cloud.rps[1])
    assert writes == [instance, instance]
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1},
                                    cloud.rps[1]: {'FPGA': 1}}
    assert cloud.show(second)['state'] == 'Bound'


def test_an_allocation_that_keeps_changing_is_a_clear_409(cloud):
    instance = str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    cloud.api.conf.set_override('conflict_retries', 1, 'placement')
    client = cloud.conductor.binder.allocations.client
    put = client.put_allocations

    def always_stale(consumer, allocations, generation, *args):
        return put(consumer, allocations, generation - 1, *args)

    client.put_allocations = always_stale
    arq = cloud.create()
    response = cloud.bind(arq, instance, cloud.rps[1], status=409)
    assert _fault(response) == (
        f'Conflict: The allocation of instance {instance} in placement '
        'changed 2 times while cyborg wrote it; retry later.')
    assert cloud.show(arq)['state'] == 'Initial'
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}}


def test_a_bind_refused_after_the_allocation_takes_it_back(cloud):
    """What placement gave a bind the database then refused (another
    project's instance) or failed (no free handle) is taken back."""
    instance = str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    foreign = cloud.create(OTHER_PROJECT)
    response = cloud.bind(foreign, instance, cloud.rps[1],
                          headers=OTHER_PROJECT, status=409)
    assert 'another project' in _fault(response)
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}}
    assert cloud.usages() == [1, 0]

    # A request bound at boot without a scheduler's allocation holds the
    # second device's handle: placement has room, cyborg has no handle.
    squatter = cloud.create()
    cloud.bind(squatter, str(uuid.uuid4()), cloud.rps[1], microversion=None)
    arq = cloud.create()
    response = cloud.bind(arq, instance, cloud.rps[1], status=409)
    assert 'no free attach handle' in _fault(response)
    assert cloud.show(arq)['state'] == 'Initial'
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}}


def test_a_live_bind_failing_on_its_host_gives_the_allocation_back(cloud):
    """A bind left BindStarted (an FPGA to program) keeps its allocation
    while its host works; failing there, it gives it back."""
    instance = str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    # No image service here: the agent cannot fetch the bitstream.
    cloud.api.dp('programmed', [{'resources:FPGA': '1',
                                 'accel:bitstream_id': str(uuid.uuid4())}])
    [arq] = cloud.app.post_json(
        ARQS, {'device_profile_name': 'programmed'}, headers=NOVA,
        status=201).json['arqs']
    cloud.bind(arq['uuid'], instance, cloud.rps[1])
    # Failed there, the request stays BindStarted, holding nothing, until
    # Nova has its failed event (none answers here); its allocation goes
    # at once.
    wait_for(lambda: cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}},
             'the allocation to be given back', 30, interval=0.1)
    assert cloud.usages() == [1, 0]
    assert cloud.show(arq['uuid'])['state'] in ('BindStarted', 'BindFailed')


def test_without_room_in_the_same_patch_nothing_is_allocated(cloud):
    """Two requests of one PATCH, one of them without room: neither is
    bound nor allocated."""
    instance, booting = str(uuid.uuid4()), str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    assert cloud.schedule(booting, cloud.rps[1]).status_code == 204
    first, second = cloud.create(), cloud.create()
    body = {arq: [
        {'path': '/hostname', 'op': 'add', 'value': cloud.node['name']},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
        for arq, rp in ((first, cloud.rps[0]), (second, cloud.rps[1]))}
    cloud.app.patch_json(ARQS, body, headers=version('2.9', NOVA),
                         status=409)
    assert [cloud.show(a)['state'] for a in (first, second)] == [
        'Initial', 'Initial']
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}}


def test_live_patches_batched_in_one_call_are_each_allocated_alone(
        placed_api, placement):
    """PATCHes an API process sends together (``arq_apply_patches``):
    the one placement has no room for is refused alone, the others bound
    and allocated."""
    cloud = Cloud(placed_api, placement, devices=3)
    instance, booting = str(uuid.uuid4()), str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    assert cloud.schedule(booting, cloud.rps[1]).status_code == 204
    refused, taken = cloud.create(), cloud.create()

    def patch(arq, rp):
        return {'binds': {arq: {'hostname': cloud.node['name'],
                                'device_rp_uuid': rp,
                                'instance_uuid': instance}},
                'unbinds': [], 'live': True, 'request_id': 'req-1'}

    answers = cloud.conductor.arq_apply_patches(
        cyborg_context.get_admin_context(),
        [patch(refused, cloud.rps[1]), patch(taken, cloud.rps[2])])
    assert answers[1] == {}
    assert answers[0]['error']['type'] == 'Conflict'
    assert f'resource provider {cloud.rps[1]} has 0 FPGA free' in \
        answers[0]['error']['message']
    assert [cloud.show(a)['state'] for a in (refused, taken)] == [
        'Initial', 'Bound']
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1},
                                    cloud.rps[2]: {'FPGA': 1}}
    # The boot holds rps[1] in placement, and binds it afterwards.
    assert cloud.bound() == [1, 0, 1]
    assert cloud.usages() == [1, 1, 1]
    assert cloud.held(booting) == {cloud.rps[1]: {'FPGA': 1}}


@pytest.fixture
def concurrent_placement_url(tmp_path) -> Iterator[str]:
    """A placement of its own on PostgreSQL, which takes concurrent
    writes (the shared one's SQLite answers "database is locked")."""
    database = contextlib.contextmanager(conftest.empty_database_url)
    (tmp_path / 'placement').mkdir()
    with database('postgresql', tmp_path / 'placement') as url, \
            placement_server.serve(tmp_path / 'placement', url) as served:
        yield served


@pytest.fixture
def concurrent_api(conf, concurrent_placement_url, db_engine
                   ) -> Iterator[fixtures.API]:
    placement_server.point_at(conf, concurrent_placement_url)
    yield from fixtures._api(conf, db_engine)


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
def test_two_instances_attaching_the_last_device_at_once(
        concurrent_api, concurrent_placement_url):
    """Placement lets one of two concurrent live attaches have the last
    unit; the other is a 409 and binds nothing."""
    cloud = Cloud(concurrent_api, placement_server.Placement(
        concurrent_placement_url))
    instances = [str(uuid.uuid4()), str(uuid.uuid4())]
    cloud.boot(instances[0], cloud.rps[0])
    # The second instance runs with nothing of this node (its first
    # accelerator, attached live).
    requests = [cloud.create(), cloud.create()]
    start = threading.Barrier(2)

    def attach(arq, instance):
        start.wait(10)
        try:
            cloud.conductor.binder.apply_patch(
                cyborg_context.get_admin_context(),
                {arq: {'hostname': cloud.node['name'],
                       'device_rp_uuid': cloud.rps[1],
                       'instance_uuid': instance}}, [], live=True)
        except exception.Conflict as exc:
            return exc
        return None

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(attach, requests, instances))
    [refused] = [a for a in answers if a is not None]
    # Placement refuses the later of two attaches that both read a free
    # handle; one that starts after the other's bind committed is refused
    # by the database first (seen on a loaded two-core host).
    assert (f'resource provider {cloud.rps[1]} has 0 FPGA free'
            in str(refused)
            or 'the deployable has no free attach handle' in str(refused))
    states = [cloud.show(a)['state'] for a in requests]
    assert sorted(states) == ['Bound', 'Initial']
    assert cloud.usages() == cloud.bound() == [1, 1]
    winner = instances[states.index('Bound')]
    assert cloud.held(winner)[cloud.rps[1]] == {'FPGA': 1}


@pytest.fixture
def relay(placement_url) -> Iterator[placement_server.Relay]:
    """Placement behind a relay that can take it away."""
    relay = placement_server.Relay(placement_url)
    relay.open()
    yield relay
    relay.close()


@pytest.fixture
def relayed_api(conf, relay, sqlite_engine) -> Iterator[fixtures.API]:
    """The API whose conductor reaches placement through ``relay``."""
    placement_server.point_at(conf, relay.url)
    yield from fixtures._api(conf, sqlite_engine)


def test_placement_away(relayed_api, relay, placement, caplog):
    """Away at an attach: 503, nothing bound. Away at a detach: the
    detach is done, a warning says so, and the removal is tried again
    until placement is back."""
    cloud = Cloud(relayed_api, placement)
    instance = str(uuid.uuid4())
    cloud.boot(instance, cloud.rps[0])
    arq = cloud.create()
    relay.close()
    response = cloud.bind(arq, instance, cloud.rps[1], status=503)
    assert 'cannot reach placement' in _fault(response)
    assert cloud.show(arq)['state'] == 'Initial'

    relay.open()
    cloud.bind(arq, instance, cloud.rps[1])
    relay.close()
    caplog.set_level(logging.WARNING, 'cyborg.conductor')
    cloud.unbind(arq)
    assert cloud.show(arq)['state'] == 'Unbound'
    assert any('trying again in the background' in r.getMessage()
               for r in caplog.records), caplog.text
    assert cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1},
                                    cloud.rps[1]: {'FPGA': 1}}
    relay.open()
    wait_for(lambda: cloud.held(instance) == {cloud.rps[0]: {'FPGA': 1}},
             'the removal to be retried', 30, interval=0.2)
