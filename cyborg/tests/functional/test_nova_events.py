"""Events owed to Nova, on every database: written in the transaction that
ends a bind, deleted once Nova answered, claimed by one sender at a time.

Nova is a FakeNova on 127.0.0.1; the binds are the database layer's.
"""
import concurrent.futures
import datetime
import threading
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import nova_client
from cyborg.conductor import nova_outbox
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import bind_ends
from cyborg.db.api import nova_events
from cyborg.db.api import writer
from cyborg.tests.fakes import fixtures
from cyborg.tests.functional.test_metrics import _seed

NE = models.NovaEvent


@pytest.fixture
def outbox(conf, db_engine, fake_nova):
    """Seeded devices, and an outbox sending to the FakeNova; the
    failures it ends, by uuid, in ``outbox.ended``."""
    fixtures.nova_conf(conf, fake_nova)
    outbox = nova_outbox.NovaOutbox(conf, nova_client.NovaClient(conf),
                                    lambda ended: outbox.ended.update(ended))
    outbox.ended = {}
    outbox.rps = _seed(conf)
    return outbox


def _bind(rps, kind='fpga', instance=None):
    ctx = cyborg_context.get_admin_context()
    arq = arqs.create(ctx, kind, 'p1')[0]['uuid']
    binding = {'hostname': 'node1',
               'device_rp_uuid': rps['GPU' if kind == 'vgpu' else 'FPGA'],
               'instance_uuid': instance or str(uuid.uuid4())}
    return arq, binding


def _rows(engine):
    with engine.connect() as conn:
        return {r.arq_uuid: r for r in conn.execute(sa.select(NE))}


def _state(arq):
    return arqs.get(cyborg_context.get_admin_context(), arq)['state']


def test_a_bind_owes_its_event_in_its_own_transaction(outbox, db_engine):
    ctx = cyborg_context.get_admin_context()
    arq, binding = _bind(outbox.rps)

    @writer
    def bind_then_fail(context):
        arq_bindings.apply_in(context.session, {arq: binding}, [], None,
                              False)
        assert arq in _rows_in(context.session)
        raise exception.Conflict(reason='rolled back')

    def _rows_in(session):
        return set(session.scalars(sa.select(NE.arq_uuid)))

    with pytest.raises(exception.Conflict):
        bind_then_fail(ctx)
    # Rolled back with the bind: nothing owed for a bind that is not.
    assert _state(arq) == 'Initial'
    assert _rows(db_engine) == {}
    batch = arq_bindings.apply_patch(ctx, {arq: binding}, [])
    [row] = _rows(db_engine).values()
    assert (row.arq_uuid, row.instance_uuid, row.status, row.attempts) == (
        arq, binding['instance_uuid'], 'completed', 0)
    # Born claimed by the conductor that bound it, to send once committed.
    assert [o.claim for o in batch.owed] == [row.claim]
    assert row.claim and row.next_attempt_at > datetime.datetime.utcnow()
    # A refused PATCH owes nothing.
    other, refused = _bind(outbox.rps)
    refused['device_rp_uuid'] = str(uuid.uuid4())
    with pytest.raises(exception.BindRefused):
        arq_bindings.apply_patch(ctx, {other: refused}, [])
    assert set(_rows(db_engine)) == {arq}


def test_an_answered_event_is_deleted(outbox, db_engine, fake_nova):
    ctx = cyborg_context.get_admin_context()
    arq, binding = _bind(outbox.rps)
    batch = arq_bindings.apply_patch(ctx, {arq: binding}, [])
    outbox.deliver(batch.owed)
    assert [(e['tag'], e['status']) for e in fake_nova.events()] == [
        (arq, 'completed')]
    assert _rows(db_engine) == {}
    # 422 for a Bound request: nova-compute reads it; nothing more owed.
    late, binding = _bind(outbox.rps)
    fake_nova.answer(binding['instance_uuid'], 422)
    outbox.deliver(arq_bindings.apply_patch(ctx, {late: binding}, []).owed)
    assert fake_nova.codes(late) == [422]
    assert _rows(db_engine) == {}


def test_nova_down_keeps_the_event_for_any_conductor(outbox, db_engine,
                                                     fake_nova, conf):
    conf.set_override('connect_retries', 0, 'nova')
    ctx = cyborg_context.get_admin_context()
    arq, binding = _bind(outbox.rps)
    owed = arq_bindings.apply_patch(ctx, {arq: binding}, []).owed
    port = fake_nova.port
    fake_nova.stop()
    try:
        outbox.deliver(owed)
    finally:
        fake_nova.start(port)
    row = _rows(db_engine)[arq]
    # Unclaimed, tried once, due again after the first delay.
    assert (row.claim, row.attempts) == (None, 1)
    assert fake_nova.events() == []
    with db_engine.begin() as conn:
        conn.execute(sa.update(NE).values(
            next_attempt_at=datetime.datetime.utcnow()
            - datetime.timedelta(seconds=1)))
    outbox.resend()
    assert [e['tag'] for e in fake_nova.events()] == [arq]
    assert _rows(db_engine) == {}


def _failed_bind(outbox, instance=None):
    """A vGPU bind that failed on its host: still BindStarted, owed."""
    ctx = cyborg_context.get_admin_context()
    arq, binding = _bind(outbox.rps, 'vgpu', instance)
    batch = arq_bindings.apply_patch(ctx, {arq: binding}, [])
    assert batch.states[arq] == 'BindStarted' and batch.owed == []
    ended = bind_ends.finish_binds(ctx, [], batch.jobs,
                                   reasons={arq: 'no vGPU'})
    assert ended.states == {arq: 'BindStarted'}
    return arq, binding['instance_uuid'], ended.events


def test_a_failure_dropped_by_nova_stays_owed_until_taken(outbox,
                                                          db_engine,
                                                          fake_nova,
                                                          monkeypatch):
    monkeypatch.setattr(nova_outbox, 'FIRST_DELAY', 0)
    instance = str(uuid.uuid4())
    fake_nova.answer(instance, 422, times=1)
    arq, _, events = _failed_bind(outbox, instance)
    row = _rows(db_engine)[arq]
    assert (row.status, row.reason, row.claim) == (
        'failed', 'no vGPU', events[0].claim)
    outbox.deliver(events)
    # Dropped: still owed, and unresolved as nova-compute reads it.
    assert _rows(db_engine)[arq].attempts == 1
    assert _state(arq) == 'BindStarted' and outbox.ended == {}
    outbox.resend()
    assert fake_nova.codes(arq) == [422, 200]
    assert _rows(db_engine) == {}
    assert _state(arq) == 'BindFailed'
    assert outbox.ended == {arq: 'no vGPU'}


def test_a_failure_for_an_unknown_instance_ends(outbox, db_engine,
                                                fake_nova):
    instance = str(uuid.uuid4())
    fake_nova.answer(instance, 404)
    arq, _, events = _failed_bind(outbox, instance)
    outbox.deliver(events)
    assert _rows(db_engine) == {}
    assert _state(arq) == 'BindFailed'


@pytest.mark.parametrize('action', ['unbind', 'delete'])
def test_an_unbind_or_delete_drops_what_is_owed(outbox, db_engine,
                                                fake_nova, action):
    ctx = cyborg_context.get_admin_context()
    instance = str(uuid.uuid4())
    fake_nova.answer(instance, 422)
    arq, _, events = _failed_bind(outbox, instance)
    outbox.deliver(events)
    assert set(_rows(db_engine)) == {arq}
    if action == 'unbind':
        arq_bindings.apply_patch(ctx, {}, [arq])
    else:
        arq_bindings.delete(ctx, instance_uuid=instance)
    assert _rows(db_engine) == {}
    # An answer that comes after changes nothing.
    fake_nova.answer(instance, 200)
    outbox.deliver(events)
    assert _rows(db_engine) == {} and outbox.ended == {}
    if action == 'unbind':
        assert _state(arq) == 'Unbound'


def test_one_claim_wins_each_event(outbox, db_engine):
    ctx = cyborg_context.get_admin_context()
    owed = set()
    for _ in range(2):
        arq, binding = _bind(outbox.rps)
        arq_bindings.apply_patch(ctx, {arq: binding}, [])
        owed.add(arq)
    # Their sender stopped: every claim ran out.
    with db_engine.begin() as conn:
        conn.execute(sa.update(NE).values(
            next_attempt_at=datetime.datetime.utcnow()
            - datetime.timedelta(seconds=1)))
    start = threading.Barrier(4)

    def claim():
        start.wait()
        return nova_events.claim_due(cyborg_context.get_admin_context(), 10)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        claims = [f.result(timeout=60)
                  for f in [pool.submit(claim) for _ in range(4)]]
    taken = [o.arq_uuid for c in claims for o in c]
    assert sorted(taken) == sorted(owed)
    # Claimed again for the lease: nothing is due any more.
    assert not nova_events.any_due(ctx)
    assert nova_events.claim_due(ctx, 10) == []
