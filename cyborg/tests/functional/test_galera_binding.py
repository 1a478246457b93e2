"""Binds from three conductors, each writing through another node of a
3-node MariaDB Galera cluster (``cyborg.tests.harness.galera``), to fewer
attach handles than requests; and creates of one project through the
three nodes at once, against the project's limit.

The schema is checked first (every table InnoDB, with a primary key, on
every node). Each node locks rows for its own transactions only: two
conductors may take the same free handle through two nodes, and the
cluster's certification aborts the second commit. The bind is tried
again (``deadlocks``); no handle may end held twice, and every request
must end Bound or be refused. CYBORG_TEST_GALERA_BINDS sets how many
requests are bound (150 by default, with 4/5 as many handles; the
benchmark, ``tools/bench/galera.py``, runs 2,000).
"""
import concurrent.futures
import json
import os
import time
import uuid

import pytest
import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import engines

from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import attach_handles
from cyborg.db.api import usage
from cyborg.tests.harness import galera
from cyborg.tests.harness import galera_binds
from cyborg.tests.harness import gate_stack

REQUESTS = int(os.environ.get('CYBORG_TEST_GALERA_BINDS', '150'))
HANDLES = REQUESTS * 4 // 5
# Concurrent clients: enough that every conductor binds several requests
# at once, few enough for two cores shared with the three nodes.
CLIENTS = 24


def _check_schema(cluster: galera.Cluster, database: str) -> None:
    """Every node has every table, each fit for Galera."""
    tables = set()
    for node in cluster.nodes:
        assert galera.schema_problems(node, database) == []
        with node.connect() as connection:
            with connection.cursor() as cursor:
                cursor.execute(
                    'SELECT COUNT(*) FROM information_schema.tables '
                    'WHERE table_schema = %s', (database,))
                tables.add(cursor.fetchone()[0])
    assert len(tables) == 1 and tables.pop() > 10


def _check_search_from_random_handles(url: str) -> None:
    """A bind through a Galera node searches from a random handle, not
    from past the one this process took last: that one is where the
    other nodes' binds search too."""
    engine = engines.create_engine(db_api.connection_url(url))
    undo = db_api.patch_engine(engine)
    try:
        with engine.connect() as connection:
            assert connection.info[db_api.GALERA] is True
            deployable = connection.scalar(sa.select(models.Deployable.id))
        taken = set()
        for _ in range(20):
            # Rolled back: the handles stay free, the hint where it was.
            with sa.orm.Session(engine) as session:
                taken.add(attach_handles.take(session, deployable).id)
                session.rollback()
    finally:
        undo()
        engine.dispose()
    # From the hint, all 20 would be the same handle; from random ones
    # among HANDLES (120), all the same has a chance of 1 in 120 ** 19.
    assert len(taken) > 1, taken


# Creates of one project through the three nodes at once, against its
# limit of accelerator requests, in each of PROJECTS projects: without
# the lock's write, two rounds in three went over (60 creates, a limit of
# 10, 2026-11-28).
LIMIT = 10
LIMITED_CREATES = 60
PROJECTS = 4


def _create_through(engine: sa.engine.Engine, project: str,
                    limits: usage.Limits) -> str:
    """One limited create in a transaction through ``engine``'s node,
    tried again while the cluster aborts it: what became of it."""
    for _ in range(50):
        try:
            with sa.orm.Session(engine) as session, session.begin():
                [made] = arqs.create_in(session, [('one', project)],
                                        limits)
            return 'made' if isinstance(made, list) else type(made).__name__
        except db_exc.DBDeadlock:
            time.sleep(0.01)
    return 'gave up'


def _rows(engine: sa.engine.Engine, model: type[models.Base]) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(
            sa.select(sa.func.count()).select_from(model)))


def _per_project(engine: sa.engine.Engine) -> dict[str | None, int]:
    arq = models.AcceleratorRequest
    with engine.connect() as connection:
        return {project: count for project, count in connection.execute(
            sa.select(arq.project_id, sa.func.count())
            .group_by(arq.project_id))}


def _check_limits_hold(cluster: galera.Cluster) -> None:
    """Each node locks rows for its own transactions only: creates of
    one project through two nodes can both count what is below its limit.
    The project's lock row is written (``project_locks``), so the second
    to commit fails certification and counts again; none may go over.
    Without the write, 12 requests were made of a limit of 10."""
    database = galera_binds.make_database(cluster)
    nodes = [engines.create_engine(db_api.connection_url(url),
                                   max_pool_size=LIMITED_CREATES)
             .execution_options(isolation_level='READ COMMITTED')
             for url in cluster.urls(database)]
    try:
        with nodes[0].begin() as connection:
            connection.execute(sa.insert(models.DeviceProfile).values(
                uuid=str(uuid.uuid4()), name='one',
                groups=json.dumps([{'resources:FPGA': '1'}]),
                created_at=sa.func.now()))
        # A node applies what another committed a moment later: a create
        # through it would not find the profile yet.
        gate_stack.wait_for(lambda: all(_rows(
            node, models.DeviceProfile) for node in nodes),
            'every node to have the profile', 10)
        projects = [f'p{n}' for n in range(PROJECTS)]
        limits = usage.Limits({usage.REQUESTS: LIMIT},
                              dict.fromkeys(projects, {}))
        for project in projects:
            # The project's lock row first: every create then writes it.
            assert _create_through(nodes[0], project, limits) == 'made'
            with concurrent.futures.ThreadPoolExecutor(
                    LIMITED_CREATES) as pool:
                outcomes = list(pool.map(
                    lambda i, project=project: _create_through(
                        nodes[i % len(nodes)], project, limits),
                    range(LIMITED_CREATES)))
            assert sorted(set(outcomes)) == ['OverLimit', 'made'], outcomes
            assert outcomes.count('made') == LIMIT - 1, project
        expected = dict.fromkeys(projects, LIMIT)
        gate_stack.wait_for(lambda: all(
            _per_project(node) == expected for node in nodes),
            'every node to have the requests', 10)
        assert [_per_project(node) for node in nodes] == [expected] * 3
    finally:
        for node in nodes:
            node.dispose()


@pytest.mark.flow
def test_three_conductors_never_share_a_handle(conf, rabbit_url, tmp_path,
                                               record_property):
    # One test: a cluster takes 15-25 s to start, and pytest-xdist would
    # start one per worker that runs a test of this module.
    with galera.running() as cluster, galera_binds.deployment(
            cluster, tmp_path, rabbit_url, conf, HANDLES,
            REQUESTS) as deployment:
        _check_schema(cluster, deployment.database)
        _check_search_from_random_handles(
            cluster.urls(deployment.database)[1])
        _check_limits_hold(cluster)
        load = deployment.bind(CLIENTS)
        outcomes = deployment.outcomes()
        deadlocks = deployment.deadlocks()
        events = gate_stack.wait_for(
            lambda: (n := deployment.events()) >= HANDLES and n,
            'Nova to hear of every bind', 30)
    retried = sum(n for (_, outcome), n in deadlocks.items()
                  if outcome == 'retried')
    record_property('conflicts_retried', retried)
    print(f'\n{REQUESTS} binds to {HANDLES} handles through 3 nodes: '
          f'{load.rate:.0f} binds/s, {retried} certification conflicts '
          f'retried ({deadlocks})')

    # The binds past the handles are refused, each PATCH whole.
    others = [e for e in load.errors if 'BindRefused' not in e[1]]
    assert not others, others[:5]
    assert len(load.errors) == REQUESTS - HANDLES, load.errors[:5]
    first = outcomes[0]
    for outcome in outcomes:
        assert outcome.shared == [], (
            f'attach handles {outcome.shared} are held by two requests, '
            f'as {outcome.node} sees it')
        assert outcome.stuck == 0, (outcome.node, outcome.states)
        assert outcome.states == {'Bound': HANDLES,
                                  'Initial': REQUESTS - HANDLES}, (
            outcome.node, outcome.states)
        assert outcome.in_use == HANDLES, (outcome.node, outcome.in_use)
        assert outcome.rows == first.rows, (
            f'{outcome.node} and {first.node} disagree')
    # A retried conflict never ends a request: none gave up.
    assert not [k for k, count in deadlocks.items()
                if k[1] == 'failed' and count], deadlocks
    assert events == HANDLES
