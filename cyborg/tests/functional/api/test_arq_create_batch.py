"""Creates made at the same time share RPC calls, and each still succeeds
or fails on its own."""
import concurrent.futures
import threading
import time

import pytest
import requests
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import rpc_batching
from cyborg.conductor import rpcapi
from cyborg.db import models
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401
from cyborg.tests.utils import serving


def _wait_until(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'condition not reached'
        time.sleep(0.005)


def _arq_rows(engine):
    arq = models.AcceleratorRequest
    with engine.connect() as conn:
        return {r.uuid: r for r in conn.execute(
            sa.select(arq.uuid, arq.project_id, arq.device_profile_name,
                      arq.device_profile_group_id, arq.state))}


def test_waiting_creates_go_in_one_call(api_all_dbs, db_engine,
                                        monkeypatch):
    api = api_all_dbs
    api.dp('one')
    api.dp('three', [{'resources:FPGA': '2'}, {'resources:FPGA': '1'}])
    endpoint = serving(api.conductor.endpoints, 'arq_create')
    calls: list[tuple[str, int]] = []
    go = threading.Event()
    single, many = endpoint.arq_create, endpoint.arq_create_many

    def held_single(context, **kwargs):
        calls.append(('arq_create', 1))
        assert go.wait(10)
        return single(context, **kwargs)

    def counted_many(context, requests):
        calls.append(('arq_create_many', len(requests)))
        return many(context, requests)

    monkeypatch.setattr(endpoint, 'arq_create', held_single)
    monkeypatch.setattr(endpoint, 'arq_create_many', counted_many)
    client = rpc_batching.BatchedWrites(rpcapi.ConductorAPI(api.conf),
                                        create_batch=4)
    asked = ['one', 'three', 'nope', 'one', 'three', 'one', 'nope', 'three']
    contexts = [cyborg_context.RequestContext(project_id=f'p{i}')
                for i in range(len(asked))]

    def create(i: int):
        try:
            return client.arq_create(contexts[i], asked[i], f'p{i}')
        except exception.CyborgException as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(len(asked)) as pool:
        # One slot: the first leaves alone and is held; the rest wait for
        # the slot, in the order they came.
        futures = [pool.submit(create, 0)]
        _wait_until(lambda: len(calls) == 1)
        for i in range(1, len(asked)):
            futures.append(pool.submit(create, i))
            _wait_until(lambda n=i: len(client._creates._queue) == n)
        go.set()
        results = [f.result(10) for f in futures]

    assert calls == [('arq_create', 1), ('arq_create_many', 4),
                     ('arq_create_many', 3)]
    rows = _arq_rows(db_engine)
    for i, (name, result) in enumerate(zip(asked, results, strict=True)):
        if name == 'nope':
            assert isinstance(result, exception.DeviceProfileNotFound)
            assert result.code == 404
            assert 'Device profile nope could not be found' in str(result)
            continue
        assert [a['device_profile_group_id'] for a in result] == (
            [0] if name == 'one' else [0, 0, 1])
        for arq in result:
            row = rows.pop(arq['uuid'])
            assert (row.project_id, row.device_profile_name, row.state) == (
                f'p{i}', name, 'Initial')
            assert arq['project_id'] == f'p{i}'
    assert rows == {}, 'ARQs that no caller was given'


def test_a_failed_batch_call_raises_the_conductors_error(api, monkeypatch):
    """What fails the whole call reaches the Coalescer, which gives it to
    every caller of the batch."""
    api.dp('one')
    endpoint = serving(api.conductor.endpoints, 'arq_create')

    def broken(context, requests):
        raise exception.ServiceUnavailable(reason='database gone')

    monkeypatch.setattr(endpoint, 'arq_create_many', broken)
    client = rpc_batching.BatchedWrites(rpcapi.ConductorAPI(api.conf),
                                        create_batch=4)
    with pytest.raises(exception.ServiceUnavailable, match='database gone'):
        client._send_creates(
            [(cyborg_context.get_admin_context(), 'one', 'p1', False, None)]
            * 3)


def test_concurrent_posts_through_http(live_api):  # noqa: F811
    api = live_api
    api.dp('one')
    api.dp('three', [{'resources:FPGA': '2'}, {'resources:FPGA': '1'}])
    names = ['one', 'three', 'nope'] * 8

    def post(name: str) -> requests.Response:
        return requests.post(f'{api.url}/accelerator_requests',
                             json={'device_profile_name': name},
                             headers=ADMIN, timeout=30)

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(post, names))
    created = []
    for name, response in zip(names, responses, strict=True):
        if name == 'nope':
            assert response.status_code == 404, response.text
            assert 'Device profile nope' in response.text
            continue
        assert response.status_code == 201, response.text
        arqs = response.json()['arqs']
        assert {a['device_profile_name'] for a in arqs} == {name}
        assert len(arqs) == (1 if name == 'one' else 3)
        created += [a['uuid'] for a in arqs]
    listed = api.app.get('/v2/accelerator_requests', headers=ADMIN).json
    assert sorted(a['uuid'] for a in listed['arqs']) == sorted(created)
