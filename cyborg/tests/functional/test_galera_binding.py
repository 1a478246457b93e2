"""Binds from three conductors, each writing through another node of a
3-node MariaDB Galera cluster (``cyborg.tests.galera``), to fewer attach
handles than requests.

Each node locks rows for its own transactions only: two conductors may
take the same free handle through two nodes, and the cluster's
certification aborts the second commit. The bind is tried again
(``deadlocks``); no handle may end held twice, and every request must end
Bound or BindFailed. CYBORG_TEST_GALERA_BINDS sets how many requests are
bound (150 by default, with 4/5 as many handles; the benchmark,
``tools/bench/galera.py``, runs 2,000).
"""
import os
from collections.abc import Iterator

import pytest

from cyborg.db import migration
from cyborg.tests import galera
from cyborg.tests.functional import galera_binds
from cyborg.tests.functional import gate_stack

REQUESTS = int(os.environ.get('CYBORG_TEST_GALERA_BINDS', '150'))
HANDLES = REQUESTS * 4 // 5
# Concurrent clients: enough that every conductor binds several requests
# at once, few enough for two cores shared with the three nodes.
CLIENTS = 24


@pytest.fixture(scope='module')
def cluster() -> Iterator[galera.Cluster]:
    with galera.running() as started:
        yield started


@pytest.mark.flow
def test_schema_fits_galera(cluster):
    database = 'cyborg_schema'
    with cluster.nodes[0].connect() as connection:
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE {database}')
    migration.upgrade('head', url=cluster.urls(database)[0])
    assert galera.schema_problems(cluster.nodes[0], database) == []
    # The schema reached every node.
    for node in cluster.nodes[1:]:
        assert galera.schema_problems(node, database) == []
        with node.connect() as connection:
            with connection.cursor() as cursor:
                cursor.execute(
                    'SELECT COUNT(*) FROM information_schema.tables '
                    'WHERE table_schema = %s', (database,))
                assert cursor.fetchone()[0] > 10


@pytest.mark.flow
def test_three_conductors_never_share_a_handle(cluster, conf, rabbit_url,
                                               tmp_path, record_property):
    with galera_binds.deployment(cluster, tmp_path, rabbit_url, conf,
                                 HANDLES, REQUESTS) as deployment:
        load = deployment.bind(CLIENTS)
        outcomes = deployment.outcomes()
        deadlocks = deployment.deadlocks()
        events = gate_stack.wait_for(
            lambda: (n := deployment.events()) >= REQUESTS and n,
            'Nova to hear of every bind', 30)
    retried = sum(n for (_, outcome), n in deadlocks.items()
                  if outcome == 'retried')
    record_property('conflicts_retried', retried)
    print(f'\n{REQUESTS} binds to {HANDLES} handles through 3 nodes: '
          f'{load.rate:.0f} binds/s, {retried} certification conflicts '
          f'retried ({deadlocks})')

    assert not load.errors, load.errors[:5]
    first = outcomes[0]
    for outcome in outcomes:
        assert outcome.shared == [], (
            f'attach handles {outcome.shared} are held by two requests, '
            f'as {outcome.node} sees it')
        assert outcome.stuck == 0, (outcome.node, outcome.states)
        assert outcome.states == {'Bound': HANDLES,
                                  'BindFailed': REQUESTS - HANDLES}, (
            outcome.node, outcome.states)
        assert outcome.in_use == HANDLES, (outcome.node, outcome.in_use)
        assert outcome.rows == first.rows, (
            f'{outcome.node} and {first.node} disagree')
    # A retried conflict never ends a request: none gave up.
    assert not [k for k in deadlocks if k[1] == 'failed'], deadlocks
    assert events == REQUESTS
