"""BatchedWrites: which conductor call each batch of writes becomes."""
from typing import Any

import pytest

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import rpc_batching
from cyborg.conductor import rpcapi


class _Conductor:
    """``ConductorAPI``'s methods, recording each call; ``cap`` as
    ``[upgrade_levels] conductor``, ``older``: refuses 1.11."""

    def __init__(self, cap: str = '1.11', older: bool = False) -> None:
        self.cap = tuple(int(p) for p in cap.split('.'))
        self.older = older
        self.calls: list[tuple[str, Any, tuple[Any, ...]]] = []

    def can_send_version(self, version: str) -> bool:
        return tuple(int(p) for p in version.split('.')) <= self.cap

    def _record(self, method: str, context: Any, *args: Any) -> None:
        self.calls.append((method, context, args))

    def arq_create(self, context, profile_name, project_id,
                   all_projects=False, idempotency_key=None):
        self._record('arq_create', context, profile_name, project_id,
                     all_projects, idempotency_key)
        if profile_name == 'nope':
            raise exception.DeviceProfileNotFound(name=profile_name)
        return [{'profile': profile_name}]

    def arq_create_many(self, context, requests):
        self._record('arq_create_many', context, requests)
        if self.older and any('idempotency_key' in r for r in requests):
            raise rpcapi.OlderConductor('1.13')
        return [[{'profile': r['profile_name']}] for r in requests]

    def arq_apply_patch(self, context, binds, unbinds, live=False):
        self._record('arq_apply_patch', context, binds, unbinds, live)
        if 'bad' in binds:
            raise exception.ARQNotFound(uuids='bad')
        if 'broken' in binds:
            raise RuntimeError('broken')

    def arq_apply_patches(self, context, patches):
        self._record('arq_apply_patches', context, patches)
        if self.older:
            raise rpcapi.OlderConductor('1.11')
        return [None] * len(patches)

    def arq_delete(self, context, uuids=None, instance_uuid=None,
                   project_id=None):
        self._record('arq_delete', context, uuids, instance_uuid,
                     project_id)

    def arq_delete_many(self, context, deletes):
        self._record('arq_delete_many', context, deletes)
        if self.older:
            raise rpcapi.OlderConductor('1.11')
        return [None] * len(deletes)


def _ctx(request_id: str) -> cyborg_context.RequestContext:
    return cyborg_context.RequestContext(request_id=request_id)


@pytest.mark.parametrize('batch,cap', [(1, '1.11'), (8, '1.3'),
                                       (8, '1.10')])
def test_without_batches_each_write_is_the_plain_call(batch, cap):
    conductor = _Conductor(cap)
    writes = rpc_batching.BatchedWrites(conductor, create_batch=batch,
                                        bind_batch=batch)
    ctx = _ctx('req-1')
    assert writes.arq_create(ctx, 'dp', 'p1', True) == [{'profile': 'dp'}]
    writes.arq_apply_patch(ctx, {'a': {}}, [], True)
    writes.arq_delete(ctx, None, 'i1', 'p1')
    assert conductor.calls == [
        ('arq_create', ctx, ('dp', 'p1', True, None)),
        ('arq_apply_patch', ctx, ({'a': {}}, [], True)),
        ('arq_delete', ctx, (None, 'i1', 'p1'))]
    # The batches are made only where the cap lets the batch calls go.
    assert (writes._creates is None) == (batch == 1 or cap == '1.3')
    assert writes._patches is None and writes._deletes is None


def test_a_write_alone_is_the_plain_call_with_its_context():
    conductor = _Conductor()
    writes = rpc_batching.BatchedWrites(conductor, create_batch=4,
                                        bind_batch=4)
    ctx = _ctx('req-1')
    assert writes.arq_create(ctx, 'dp', 'p1') == [{'profile': 'dp'}]
    writes.arq_apply_patch(ctx, {'a': {}}, ['b'])
    writes.arq_delete(ctx, ['c'])
    with pytest.raises(exception.DeviceProfileNotFound):
        writes.arq_create(ctx, 'nope', 'p1')
    assert conductor.calls == [
        ('arq_create', ctx, ('dp', 'p1', False, None)),
        ('arq_apply_patch', ctx, ({'a': {}}, ['b'], False)),
        ('arq_delete', ctx, (['c'], None, None)),
        ('arq_create', ctx, ('nope', 'p1', False, None))]


def test_several_writes_are_one_call_with_each_request_id():
    conductor = _Conductor()
    writes = rpc_batching.BatchedWrites(conductor, create_batch=4,
                                        bind_batch=4)
    assert writes._send_creates([(_ctx('r1'), 'a', 'p1', False, None),
                                 (_ctx('r2'), 'b', None, True, None)]) == [
        [{'profile': 'a'}], [{'profile': 'b'}]]
    assert writes._send_patches([(_ctx('r3'), {'x': {}}, [], True),
                                 (_ctx('r4'), {}, ['y'], False)]) == [
        None, None]
    assert writes._send_deletes([(_ctx('r5'), ['z'], None, None),
                                 (_ctx('r6'), None, 'i', 'p')]) == [
        None, None]
    assert [(method, args) for method, _, args in conductor.calls] == [
        ('arq_create_many', ([
            {'profile_name': 'a', 'project_id': 'p1', 'all_projects': False,
             'request_id': 'r1'},
            {'profile_name': 'b', 'project_id': None, 'all_projects': True,
             'request_id': 'r2'}],)),
        ('arq_apply_patches', ([
            {'binds': {'x': {}}, 'unbinds': [], 'live': True,
             'request_id': 'r3'},
            {'binds': {}, 'unbinds': ['y'], 'live': False,
             'request_id': 'r4'}],)),
        ('arq_delete_many', ([
            {'uuids': ['z'], 'instance_uuid': None, 'project_id': None,
             'request_id': 'r5'},
            {'uuids': None, 'instance_uuid': 'i', 'project_id': 'p',
             'request_id': 'r6'}],))]
    # Made for several callers: a context of its own, an admin's.
    for _, context, _ in conductor.calls:
        assert context.is_admin
        assert context.request_id not in ('r1', 'r3', 'r5')


def test_an_older_conductor_gets_each_write_alone():
    conductor = _Conductor(older=True)
    writes = rpc_batching.BatchedWrites(conductor, bind_batch=4)
    first, second, third = _ctx('r1'), _ctx('r2'), _ctx('r3')
    results = writes._send_patches([(first, {'a': {}}, [], False),
                                    (second, {'bad': {}}, [], False),
                                    (third, {}, ['c'], True)])
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], exception.ARQNotFound)
    assert writes._send_deletes([(first, ['a'], None, None),
                                 (second, None, 'i', 'p')]) == [None, None]
    assert [(method, context) for method, context, _ in conductor.calls] == [
        ('arq_apply_patches', conductor.calls[0][1]),
        ('arq_apply_patch', first), ('arq_apply_patch', second),
        ('arq_apply_patch', third),
        ('arq_delete_many', conductor.calls[4][1]),
        ('arq_delete', first), ('arq_delete', second)]


def test_creates_with_keys_carry_them_and_older_conductors_get_each():
    conductor = _Conductor()
    writes = rpc_batching.BatchedWrites(conductor, create_batch=4)
    creates = [(_ctx('r1'), 'a', 'p1', False, 'k1'),
               (_ctx('r2'), 'b', 'p1', False, None)]
    writes._send_creates(creates)
    # Only a create with a key carries one: a batch without any goes to
    # conductors before 1.13 as it did.
    assert conductor.calls[0][2] == ([
        {'profile_name': 'a', 'project_id': 'p1', 'all_projects': False,
         'request_id': 'r1', 'idempotency_key': 'k1'},
        {'profile_name': 'b', 'project_id': 'p1', 'all_projects': False,
         'request_id': 'r2'}],)
    older = _Conductor(older=True)
    writes = rpc_batching.BatchedWrites(older, create_batch=4)
    assert writes._send_creates(creates) == [[{'profile': 'a'}],
                                             [{'profile': 'b'}]]
    assert [(m, c, a) for m, c, a in older.calls[1:]] == [
        ('arq_create', creates[0][0], ('a', 'p1', False, 'k1')),
        ('arq_create', creates[1][0], ('b', 'p1', False, None))]


def test_an_error_other_than_a_refusal_fails_the_batch():
    conductor = _Conductor(older=True)
    writes = rpc_batching.BatchedWrites(conductor, bind_batch=4)
    with pytest.raises(RuntimeError, match='broken'):
        writes._send_patches([(_ctx('r1'), {'broken': {}}, [], False),
                              (_ctx('r2'), {'a': {}}, [], False)])
