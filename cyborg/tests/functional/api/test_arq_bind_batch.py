"""PATCHes made at the same time share RPC calls, transactions and Nova's
events, and each still succeeds or fails on its own."""
import concurrent.futures
import threading
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import rpc_batching
from cyborg.conductor import rpcapi
from cyborg.db import models
from cyborg.db.api import arq_batches
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.tests.fakes.fixtures import nova_conf
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401
from cyborg.tests.utils import serving


def _wait_until(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'condition not reached'
        time.sleep(0.005)


def _states(engine) -> dict[str, tuple[str, str | None]]:
    arq = models.AcceleratorRequest
    with engine.connect() as conn:
        return {r.uuid: (r.state, r.instance_uuid) for r in conn.execute(
            sa.select(arq.uuid, arq.state, arq.instance_uuid))}


def _binding(node: str, rp_uuid: str, instance: str) -> dict[str, str]:
    return {'hostname': node, 'device_rp_uuid': rp_uuid,
            'instance_uuid': instance}


@pytest.fixture
def seeded(api_all_dbs, fake_nova):
    """The API with a fake device of 8 handles and 6 Initial requests,
    its conductor posting events to ``fake_nova``."""
    api = api_all_dbs
    nova_conf(api.conf, fake_nova)
    api.conf.set_override('accelerators_per_device', 8, 'fake_driver')
    [device] = api.seed(agent=False)
    api.dp('one', [{'resources:FPGA': '1'}])
    ctx = cyborg_context.get_admin_context()
    created = [arqs.create(ctx, 'one', 'p1')[0]['uuid'] for _ in range(6)]
    return api, device['deployables'][0]['rp_uuid'], created


def test_waiting_patches_go_in_one_call(seeded, db_engine, fake_nova,
                                        monkeypatch):
    api, rp_uuid, created = seeded
    endpoint = serving(api.conductor.endpoints, 'arq_apply_patch')
    calls: list[tuple[str, int]] = []
    go = threading.Event()
    single, many = endpoint.arq_apply_patch, endpoint.arq_apply_patches

    def held_single(context, **kwargs):
        calls.append(('arq_apply_patch', 1))
        assert go.wait(10)
        return single(context, **kwargs)

    def counted_many(context, patches):
        calls.append(('arq_apply_patches', len(patches)))
        return many(context, patches)

    monkeypatch.setattr(endpoint, 'arq_apply_patch', held_single)
    monkeypatch.setattr(endpoint, 'arq_apply_patches', counted_many)
    client = rpc_batching.BatchedWrites(rpcapi.ConductorAPI(api.conf),
                                        bind_batch=8)
    first, good1, missing_rp, good2, twice, good3 = created
    taken = str(uuid.uuid4())
    unknown = str(uuid.uuid4())
    node = 'cmp1'
    # Each item: (binds, unbinds); the first two are held alone, one in
    # each of the two slots, the others leave together: a PATCH naming an
    # unknown ARQ and one binding an
    # instance that another PATCH of the batch binds fail alone, and so does
    # a bind to an unknown provider (refused, 409), nothing of it written.
    patches = [
        {first: _binding(node, rp_uuid, str(uuid.uuid4()))},
        {good1: _binding(node, rp_uuid, str(uuid.uuid4()))},
        {unknown: _binding(node, rp_uuid, str(uuid.uuid4()))},
        {missing_rp: _binding(node, str(uuid.uuid4()), str(uuid.uuid4()))},
        {good2: _binding(node, rp_uuid, taken)},
        {twice: _binding(node, rp_uuid, taken)},
        {good3: _binding(node, rp_uuid, str(uuid.uuid4()))},
    ]

    def bind(i: int):
        try:
            return client.arq_apply_patch(
                cyborg_context.RequestContext(request_id=f'req-{i}'),
                patches[i], [])
        except exception.CyborgException as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(len(patches)) as pool:
        futures = []
        for i in range(2):
            futures.append(pool.submit(bind, i))
            _wait_until(lambda n=i: len(calls) == n + 1)
        for i in range(2, len(patches)):
            futures.append(pool.submit(bind, i))
            _wait_until(lambda n=i: len(client._patches._queue) == n - 1)
        go.set()
        results = [f.result(10) for f in futures]

    assert calls == [('arq_apply_patch', 1), ('arq_apply_patch', 1),
                     ('arq_apply_patches', 5)]
    assert results[:2] == [None, None]
    assert isinstance(results[2], exception.ARQNotFound)
    assert results[2].code == 404 and unknown in str(results[2])
    assert isinstance(results[3], exception.BindRefused)
    assert results[3].code == 409
    assert f'{missing_rp}: no deployable has this resource provider' in str(
        results[3])
    assert results[4] is None
    assert isinstance(results[5], exception.Invalid)
    assert results[5].code == 400
    assert f'instance {taken}' in str(results[5])
    assert results[6] is None
    states = _states(db_engine)
    for arq in (first, good1, good3):
        assert states[arq][0] == 'Bound'
    assert states[good2] == ('Bound', taken)
    assert states[missing_rp] == ('Initial', None)
    assert states[twice] == ('Initial', None)
    # One event per bind made; the two binds that ended in the batch in
    # one POST (the held PATCHes' events go in POSTs of their own, or join
    # it: a conductor joins the events its threads send at once).
    _wait_until(lambda: len(fake_nova.events()) == 4)
    events = {e['tag']: e['status'] for p in fake_nova.posts()
              for e in p.body['events']}
    assert events == {first: 'completed', good1: 'completed',
                      good2: 'completed',
                      good3: 'completed'}
    [batch] = [p for p in fake_nova.posts()
               if good3 in {e['tag'] for e in p.body['events']}]
    assert {good2, good3} <= {
        e['tag'] for e in batch.body['events']}


@pytest.fixture
def applied(monkeypatch) -> list[int]:
    """How many PATCHes each batch transaction applied, in order."""
    sizes: list[int] = []
    together = arq_batches._together

    def counted(context, items, one, limits):
        sizes.append(len(items))
        return together(context, items, one, limits)

    monkeypatch.setattr(arq_batches, '_together', counted)
    return sizes


def test_one_transaction_for_the_batch(seeded, applied):
    """Good PATCHes commit together; a refused one costs the others a
    transaction each, and no more."""
    api, rp_uuid, created = seeded
    ctx = cyborg_context.get_admin_context()
    good = [arq_batches.Patch(
        {u: _binding('cmp1', rp_uuid, str(uuid.uuid4()))}, [])
        for u in created[:2]]
    results = arq_batches.apply_patches(ctx, good)
    assert [r.states for r in results] == [
        {created[0]: 'Bound'}, {created[1]: 'Bound'}]
    assert applied == [2]
    # An unbind of one, with a PATCH naming nothing that exists.
    refused = arq_batches.Patch({str(uuid.uuid4()): _binding(
        'cmp1', rp_uuid, str(uuid.uuid4()))}, [])
    results = arq_batches.apply_patches(
        ctx, [arq_batches.Patch({}, [created[0]]), refused])
    assert results[0].states == {created[0]: 'Unbound'}
    assert isinstance(results[1], exception.ARQNotFound)
    # The batch, then each alone.
    assert applied == [2, 2, 1, 1]
    assert arqs.get(ctx, created[0])['state'] == 'Unbound'


def test_a_refused_patch_leaves_its_neighbours_whole(
        seeded, db_engine, applied):
    """A PATCH refused for a bind that cannot be made is refused alone:
    the PATCHes batched with it bind as if it had not come, and nothing
    of it is written, not even the handle its good bind took."""
    api, rp_uuid, created = seeded
    ctx = cyborg_context.get_admin_context()
    api.conf.set_override('accelerators_per_device', 3, 'fake_driver')
    # Three handles: the two neighbours and the refused PATCH's good bind
    # need all of them in the batch's transaction.
    [device] = api.seed('cmp2', agent=False)
    small = device['deployables'][0]['rp_uuid']
    before, mixed, after = created[0], created[1:3], created[3]
    refused = arq_batches.Patch({
        mixed[0]: _binding('cmp2', small, str(uuid.uuid4())),
        mixed[1]: _binding('cmp2', str(uuid.uuid4()), str(uuid.uuid4()))},
        [])
    results = arq_batches.apply_patches(ctx, [
        arq_batches.Patch({before: _binding('cmp2', small, 'i-1')}, []),
        refused,
        arq_batches.Patch({after: _binding('cmp2', small, 'i-2')}, [])])
    assert applied == [3, 1, 1, 1]
    assert results[0].states == {before: 'Bound'}
    assert results[2].states == {after: 'Bound'}
    assert isinstance(results[1], exception.BindRefused)
    assert results[1].code == 409
    assert str(results[1]).endswith(
        f'Accelerator request {mixed[1]}: no deployable has this resource '
        'provider.')
    states = _states(db_engine)
    assert [states[u] for u in (before, *mixed, after)] == [
        ('Bound', 'i-1'), ('Initial', None), ('Initial', None),
        ('Bound', 'i-2')]
    # The handle the refused PATCH's good bind took is free again.
    again = arq_batches.apply_patches(ctx, [arq_batches.Patch(
        {mixed[0]: _binding('cmp2', small, 'i-3')}, [])])
    assert again[0].states == {mixed[0]: 'Bound'}


def test_an_older_conductor_gets_each_patch_alone(seeded, db_engine,
                                                  monkeypatch):
    api, rp_uuid, created = seeded
    endpoint = serving(api.conductor.endpoints, 'arq_apply_patch')

    def refused(context, patches):
        raise AssertionError('not to be called')

    monkeypatch.setattr(endpoint, 'arq_apply_patches', refused)
    api.conf.set_override('conductor', '1.10', 'upgrade_levels')
    client = rpc_batching.BatchedWrites(rpcapi.ConductorAPI(api.conf),
                                        bind_batch=8)
    results = client._send_patches([
        (cyborg_context.get_admin_context(),
         {u: _binding('cmp1', rp_uuid, str(uuid.uuid4()))}, [], False)
        for u in created[:3]])
    assert results == [None, None, None]
    states = _states(db_engine)
    assert [states[u][0] for u in created[:3]] == ['Bound'] * 3


def test_a_failed_batch_call_raises_the_conductors_error(seeded,
                                                         monkeypatch):
    api, rp_uuid, created = seeded
    endpoint = serving(api.conductor.endpoints, 'arq_apply_patch')

    def broken(context, patches):
        raise exception.ServiceUnavailable(reason='database gone')

    monkeypatch.setattr(endpoint, 'arq_apply_patches', broken)
    client = rpc_batching.BatchedWrites(rpcapi.ConductorAPI(api.conf),
                                        bind_batch=8)
    with pytest.raises(exception.ServiceUnavailable, match='database gone'):
        client._send_patches([(cyborg_context.get_admin_context(), {}, [],
                             False)] * 2)


def test_concurrent_patches_through_http(live_api, fake_nova):  # noqa: F811
    api = live_api
    nova_conf(api.conf, fake_nova)
    api.conf.set_override('accelerators_per_device', 16, 'fake_driver')
    [device] = api.seed(agent=False)
    rp_uuid = device['deployables'][0]['rp_uuid']
    api.dp('one', [{'resources:FPGA': '1'}])
    ctx = cyborg_context.get_admin_context()
    created = [arqs.create(ctx, 'one', 'p1')[0]['uuid'] for _ in range(12)]
    unknown = [str(uuid.uuid4()) for _ in range(4)]
    instances = {u: str(uuid.uuid4()) for u in created + unknown}

    def patch(arq: str) -> requests.Response:
        body = {arq: [
            {'op': 'add', 'path': '/hostname', 'value': 'cmp1'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
            {'op': 'add', 'path': '/instance_uuid',
             'value': instances[arq]}]}
        return requests.patch(f'{api.url}/accelerator_requests', json=body,
                              headers=SERVICE, timeout=30)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = dict(zip(created + unknown,
                             pool.map(patch, created + unknown),
                             strict=True))
    for arq, response in responses.items():
        if arq in unknown:
            assert response.status_code == 404, response.text
            assert arq in response.text
        else:
            assert response.status_code == 202, response.text
    for arq in created:
        found = arqs.get(ctx, arq)
        assert (found['state'], found['instance_uuid']) == (
            'Bound', instances[arq])
    _wait_until(lambda: len(fake_nova.events()) == len(created))
    assert sorted(e['tag'] for e in fake_nova.events()) == sorted(created)


def test_waiting_deletes_go_in_one_call(seeded, db_engine, monkeypatch):
    api, rp_uuid, created = seeded
    ctx = cyborg_context.get_admin_context()
    instances = {}
    for arq in created[:4]:
        instances[arq] = str(uuid.uuid4())
        arq_bindings.apply_patch(
            ctx, {arq: _binding('cmp1', rp_uuid, instances[arq])}, [])
    first, mine, theirs, by_uuid = created[:4]
    endpoint = serving(api.conductor.endpoints, 'arq_apply_patch')
    calls: list[tuple[str, int]] = []
    go = threading.Event()
    single, many = endpoint.arq_delete, endpoint.arq_delete_many

    def held_single(context, **kwargs):
        calls.append(('arq_delete', 1))
        assert go.wait(10)
        return single(context, **kwargs)

    def counted_many(context, deletes):
        calls.append(('arq_delete_many', len(deletes)))
        return many(context, deletes)

    monkeypatch.setattr(endpoint, 'arq_delete', held_single)
    monkeypatch.setattr(endpoint, 'arq_delete_many', counted_many)
    client = rpc_batching.BatchedWrites(rpcapi.ConductorAPI(api.conf),
                                        bind_batch=8)
    unknown = str(uuid.uuid4())
    # (uuids, instance, project): by instance of the requests' project, of
    # another project (nothing goes), of nobody, by uuid, a missing uuid.
    deletes = [(None, instances[first], None),
               (None, instances[mine], 'p1'),
               (None, instances[theirs], 'p2'),
               (None, str(uuid.uuid4()), None),
               ([by_uuid], None, None),
               ([unknown], None, None)]

    def delete(i: int):
        try:
            return client.arq_delete(
                cyborg_context.RequestContext(request_id=f'req-{i}'),
                *deletes[i])
        except exception.CyborgException as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(len(deletes)) as pool:
        futures = [pool.submit(delete, 0)]
        _wait_until(lambda: len(calls) == 1)
        for i in range(1, len(deletes)):
            futures.append(pool.submit(delete, i))
            _wait_until(lambda n=i: len(client._deletes._queue) == n)
        go.set()
        results = [f.result(10) for f in futures]

    assert calls == [('arq_delete', 1), ('arq_delete_many', 5)]
    assert results[:5] == [None] * 5
    assert isinstance(results[5], exception.ARQNotFound)
    assert unknown in str(results[5])
    states = _states(db_engine)
    assert set(states) == set(created) - {first, mine, by_uuid}
    assert states[theirs] == ('Bound', instances[theirs])
