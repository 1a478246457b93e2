"""cyborg on a three-node RabbitMQ cluster with quorum queues: the node its
services use stops in the middle of a burst of creates and binds, and no
request is lost or done twice.

cyborg-api and two cyborg-conductors run as processes (``gate_stack``) on
MariaDB, with a transport URL listing the three nodes (``rabbit_cluster``)
and oslo.messaging's quorum queues on, for the servers' queues and the
reply queues. Client threads create and bind (``burst``); once a third of
the items is done the node leading the conductors' queue is stopped. A
request may need its one retry; the database must show one request per
answered create and every bind Bound once, on a handle of its own, and no
conductor may have run a call twice. The node then starts again and
rejoins, and the services go on without a retry.
"""
import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from cyborg.tests import conftest
from cyborg.tests.harness import burst
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness.rabbit_cluster import rabbit_cluster  # noqa: F401

# Items (a create and a bind each) and client threads; the benchmark
# (tools/bench/rabbit_cluster.py) runs 2,000 with 16 clients.
ITEMS = int(os.environ.get('CYBORG_TEST_RABBIT_BURST', '120'))
CLIENTS = 4
CONDUCTORS = ('ctl1', 'ctl2')
# What an operator sets for a cluster (doc/source/admin/messaging.rst).
QUORUM = {'oslo_messaging_rabbit': {'rabbit_quorum_queue': 'true',
                                    'rabbit_transient_quorum_queue': 'true'}}


@pytest.fixture
def mysql_engine(tmp_path) -> Iterator[sa.engine.Engine]:
    for url in conftest.empty_database_url('mysql', tmp_path):
        yield from conftest.migrated_engine(url)


def leader(cluster, queue: str) -> int:
    """The index of the node leading quorum queue ``queue`` of ``/``."""
    found = cluster.queues('/')[queue]
    assert found['type'] == 'quorum', found
    return next(n.index for n in cluster.nodes if n.name == found['node'])


@pytest.mark.flow
def test_stopping_the_leading_node_loses_no_request(
        conf, rabbit_cluster, mysql_engine, fake_nova, tmp_path):  # noqa: F811
    rp_uuids = burst.seed(conf, mysql_engine, ITEMS)
    stack = gate_stack.Stack(
        tmp_path, rabbit_cluster.transport_url,
        mysql_engine.url.render_as_string(hide_password=False),
        fake_nova.endpoint, fake_nova.token)
    stack.add_api(extra=QUORUM)
    for host in CONDUCTORS:
        stack.add_conductor(host, extra=QUORUM)
    with stack.running():
        stack.start(*CONDUCTORS, 'api')
        stack.ready(*CONDUCTORS)
        gate_stack.wait_for(stack.api_up, 'the API to answer', 60)
        stopped = leader(rabbit_cluster, 'cyborg-conductor')
        connections: dict[int, int] = {}

        def stop() -> None:
            connections.update(rabbit_cluster.connections())
            rabbit_cluster.stop_node(stopped)

        run = burst.Burst(stack.api_url, rp_uuids, ITEMS, CLIENTS)
        run.run(ITEMS // 3, stop)
        tally = burst.tally(run, mysql_engine)
        run_twice = burst.run_twice(
            [stack.processes[h].log() for h in CONDUCTORS])
        print(f'node {stopped} stopped, connections by node '
              f'{connections}, {run_twice} calls run twice: '
              f'{tally.figures()}')
        # A new leader on a node still running, elected by the other two.
        assert leader(rabbit_cluster, 'cyborg-conductor') != stopped
        assert tally.requests == 2 * tally.items, tally
        assert (tally.lost, tally.refused, tally.duplicated,
                tally.unbound) == (0, 0, 0, 0), tally
        assert tally.bound == tally.handles_in_use == tally.items, tally
        # No call was run by both conductors, or twice by one.
        assert run_twice == 0
        # The burst went on once the node was down.
        assert tally.answered_after > 0, tally
        # The node comes back, rejoins, and the services go on.
        rabbit_cluster.start_node(stopped)
        assert len(rabbit_cluster.running_nodes()) == 3
        again = burst.Burst(stack.api_url, rp_uuids, CLIENTS, CLIENTS,
                            after=0, first=tally.items)
        again.run(0, lambda: None)
        assert [r for r in again.requests
                if len(r.attempts) > 1 or not r.answered] == []
        items = tally.items + again.taken
        events = gate_stack.wait_for(
            lambda: len(fake_nova.events()) >= items
            and fake_nova.events(), 'Nova to hear of every bind')
        assert sorted(e['server_uuid'] for e in events) == sorted(
            burst.instance_of(i) for i in range(items))
