"""Cleaning attach handles after use, in the conductor.

On every database with a real placement; the agent is a fake at the RPC
edge. A handle given back by an unbind or a delete is ``cleaning`` and
reserved until its clean succeeds; a failed clean holds it in maintenance
until an operator retries or releases it; an agent that is down leaves it
cleaning until the periodic pass finds the agent back; two conductors
never clean one handle twice, and a late answer never frees a handle
cleaned again since.
"""
import datetime
import threading
import time
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import cleaning as conductor_cleaning
from cyborg.conductor import manager as conductor_manager
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import capacity
from cyborg.db.api import cleaning
from cyborg.db.api import device_profiles
from cyborg.db.api import providers
from cyborg.tests.fakes import fixtures
from cyborg.tests.functional.test_placement_sync import _report
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import InProcess
from cyborg.tests.utils import wait_for

AH = models.AttachHandle


class FakeAgent:
    """The agent RPC client, at the process edge: records each clean and
    answers as ``mode`` says (``ok``, ``fail``, ``down``); ``gate``, when
    set, holds each clean until it is set."""

    def __init__(self) -> None:
        self.mode = 'ok'
        self.calls: list[str] = []
        self.gate: threading.Event | None = None
        self._lock = threading.Lock()

    def clean_handle(self, context, host, driver_name, attach_type,
                     attach_info, handle_uuid, timeout):
        with self._lock:
            self.calls.append(handle_uuid)
        if self.gate is not None:
            assert self.gate.wait(30)
        if self.mode == 'down':
            raise exception.AgentUnavailable(host=host,
                                             reason='nothing listens')
        if self.mode == 'fail':
            raise exception.DeviceActionError(
                action='clean', device=str(attach_info),
                reason='reset failed')


@pytest.fixture
def node(placement):
    return placement.create_compute_node()


@pytest.fixture
def agent():
    return FakeAgent()


@pytest.fixture
def conductor(conf, placement_url, db_engine, fake_nova, agent):
    placement_server.point_at(conf, placement_url)
    fixtures.nova_conf(conf, fake_nova)
    made = InProcess(conductor_manager.ConductorManager(
        conf, agent_api=agent))
    yield made
    made.binder.stop()


def _setup(conf, conductor, node, driver_cleans=False, profile_cleans=False):
    """One fake FPGA of two handles on ``node``, and an ARQ bound to
    it; (context, arq uuid, rp uuid)."""
    ctx = cyborg_context.get_admin_context()
    report = _report(conf, node['name'], devices=1, per_device=2)
    if driver_cleans:
        for dep in report['devices'][0]['deployables']:
            dep['attributes']['clean_after_use'] = 'true'
    conductor.report_data(ctx, conf.host, report)
    group = {'resources:FPGA': '1'}
    if profile_cleans:
        group['accel:clean_after_use'] = 'true'
    device_profiles.create(ctx, {'name': 'p', 'groups': [group]})
    (arq,) = arqs.create(ctx, 'p', 'project')
    handles = cleaning.get_all(ctx)[0]
    (provider,) = providers.host_providers(ctx, node['name'])
    rp = provider.uuid
    conductor.arq_apply_patch(ctx, {arq['uuid']: {
        'hostname': node['name'], 'device_rp_uuid': rp,
        'instance_uuid': str(uuid.uuid4())}}, [])
    assert arqs.get(ctx, arq['uuid'])['state'] == 'Bound'
    assert len(handles) == 2
    return ctx, arq['uuid'], rp


def _taken(ctx):
    return [h for h in cleaning.get_all(ctx)[0] if h['in_use']]


def _reserved(placement, rp):
    return placement.inventories(rp)['FPGA']['reserved']


def test_delete_cleans_then_frees(conf, conductor, agent, placement, node):
    ctx, arq, rp = _setup(conf, conductor, node, driver_cleans=True)
    agent.gate = threading.Event()
    conductor.arq_delete(ctx, [arq])
    (handle,) = _taken(ctx)
    assert handle['clean_state'] == 'cleaning'
    assert handle['clean_since'] is not None
    # Placement reserved it before the delete returned.
    assert _reserved(placement, rp) == 1
    (row,) = capacity.get(ctx)
    assert (row['used'], row['reserved'], row['available']) == (0, 1, 1)
    agent.gate.set()
    wait_for(lambda: not _taken(ctx))
    assert agent.calls == [handle['uuid']]
    # Written by the worker right after its commit.
    wait_for(lambda: _reserved(placement, rp) == 0)
    (row,) = capacity.get(ctx)
    assert (row['used'], row['reserved'], row['available']) == (0, 0, 2)


def test_unbind_by_profile_fails_into_maintenance_then_release(
        conf, conductor, agent, placement, node):
    ctx, arq, rp = _setup(conf, conductor, node, profile_cleans=True)
    agent.mode = 'fail'
    conductor.arq_apply_patch(ctx, {}, [arq])
    wait_for(lambda: _taken(ctx)[0]['clean_state'] == 'maintenance')
    (handle,) = _taken(ctx)
    assert 'reset failed' in handle['clean_reason']
    assert _reserved(placement, rp) == 1
    # Release only from maintenance: a free handle is a 409.
    other = [h for h in cleaning.get_all(ctx)[0] if not h['in_use']][0]
    with pytest.raises(messaging.ExpectedException) as caught:
        conductor.attach_handle_release(ctx, other['uuid'])
    assert isinstance(caught.value.exc_info[1],
                      exception.HandleNotInMaintenance)
    released = conductor.attach_handle_release(ctx, handle['uuid'])
    assert (released['in_use'], released['clean_state']) == (False, None)
    assert _reserved(placement, rp) == 0
    assert not _taken(ctx)


def test_retry_from_maintenance_cleans(conf, conductor, agent, placement,
                                       node):
    ctx, arq, rp = _setup(conf, conductor, node, driver_cleans=True)
    agent.mode = 'fail'
    conductor.arq_delete(ctx, [arq])
    wait_for(lambda: _taken(ctx)[0]['clean_state'] == 'maintenance')
    (handle,) = _taken(ctx)
    agent.mode = 'ok'
    again = conductor.attach_handle_clean(ctx, handle['uuid'])
    assert again['clean_state'] == 'cleaning'
    wait_for(lambda: not _taken(ctx))
    assert agent.calls == [handle['uuid']] * 2
    wait_for(lambda: _reserved(placement, rp) == 0)
    with pytest.raises(messaging.ExpectedException):
        conductor.attach_handle_clean(ctx, handle['uuid'])


def test_no_clean_asked_frees_at_once(conf, conductor, agent, placement,
                                      node):
    ctx, arq, rp = _setup(conf, conductor, node)
    conductor.arq_delete(ctx, [arq])
    assert not _taken(ctx)
    assert agent.calls == []
    assert _reserved(placement, rp) == 0


def _age(db_engine, seconds=120):
    """Make every attempt look ``seconds`` old, as the periodic pass
    sees one that a down agent left."""
    old = timeutils.utcnow().replace(microsecond=0) - datetime.timedelta(
        seconds=seconds)
    with db_engine.begin() as conn:
        conn.execute(sa.update(AH).where(AH.clean_state == 'cleaning')
                     .values(clean_since=old))


def test_agent_down_stays_cleaning_until_the_periodic_pass(
        conf, conductor, agent, placement, node, db_engine):
    ctx, arq, rp = _setup(conf, conductor, node, driver_cleans=True)
    agent.mode = 'down'
    conductor.arq_delete(ctx, [arq])
    wait_for(lambda: agent.calls)
    wait_for(lambda: 'waiting for the agent' in (
        _taken(ctx)[0]['clean_reason'] or ''))
    assert _taken(ctx)[0]['clean_state'] == 'cleaning'
    assert _reserved(placement, rp) == 1
    # Not yet stale: the pass leaves it.
    assert conductor.cleaner.retry_stale() == {}
    _age(db_engine)
    # Still down: waiting again, and backed off in this conductor.
    assert conductor.cleaner.retry_stale() == {'waiting': 1}
    _age(db_engine)
    assert conductor.cleaner.retry_stale() == {}
    agent.mode = 'ok'
    # Once the backoff (2 x RETRY_AFTER after the second failure) is over.
    conductor.cleaner.clock = lambda: (
        time.monotonic() + conductor_cleaning.MAX_BACKOFF)
    assert conductor.cleaner.retry_stale() == {'cleaned': 1}
    assert not _taken(ctx)
    assert _reserved(placement, rp) == 0
    assert len(agent.calls) == 3


def test_two_conductors_clean_once(conf, conductor, agent, placement, node,
                                   db_engine):
    ctx, arq, rp = _setup(conf, conductor, node, driver_cleans=True)
    agent.mode = 'down'
    conductor.arq_delete(ctx, [arq])
    wait_for(lambda: agent.calls)
    wait_for(lambda: 'waiting' in (_taken(ctx)[0]['clean_reason'] or ''))
    agent.mode = 'ok'
    agent.calls.clear()
    _age(db_engine)
    other = conductor_cleaning.Cleaner(conf, conductor.binder.executor,
                                       conductor.agent_api,
                                       conductor.sync_placement)
    start = threading.Barrier(2)
    results = []

    def run(cleaner):
        start.wait()
        results.append(cleaner.retry_stale())

    threads = [threading.Thread(target=run, args=(c,))
               for c in (conductor.cleaner, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(agent.calls) == 1
    assert sorted(results, key=len) == [{}, {'cleaned': 1}]
    assert not _taken(ctx)


def test_late_answer_never_frees_a_handle_cleaned_again(
        conf, conductor, agent, node, db_engine):
    ctx, arq, _ = _setup(conf, conductor, node, driver_cleans=True)
    agent.mode = 'down'
    conductor.arq_delete(ctx, [arq])
    wait_for(lambda: agent.calls)
    (handle,) = _taken(ctx)
    _age(db_engine)
    (stale,) = cleaning.to_clean(ctx, started_before=timeutils.utcnow())
    second = cleaning.claim(ctx, handle['id'], stale['clean_since'])
    assert second is not None
    # A second claim of the same attempt loses.
    assert cleaning.claim(ctx, handle['id'], stale['clean_since']) is None
    # The first attempt's answer comes late: dropped.
    assert cleaning.finish(ctx, handle['id'], stale['clean_since'],
                           None) == []
    assert _taken(ctx)[0]['clean_state'] == 'cleaning'
    assert cleaning.finish(ctx, handle['id'], second, None) == [node['name']]
    assert not _taken(ctx)
