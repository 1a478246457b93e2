"""Binds from three conductors, each writing through another node of a
3-node MariaDB Galera cluster (``cyborg.tests.harness.galera``), to fewer
attach handles than requests.

The schema is checked first (every table InnoDB, with a primary key, on
every node). Each node locks rows for its own transactions only: two
conductors may take the same free handle through two nodes, and the
cluster's certification aborts the second commit. The bind is tried
again (``deadlocks``); no handle may end held twice, and every request
must end Bound or be refused. CYBORG_TEST_GALERA_BINDS sets how many
requests are bound (150 by default, with 4/5 as many handles; the
benchmark, ``tools/bench/galera.py``, runs 2,000).
"""
import os

import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import attach_handles
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
