"""Fifty hosts of eight devices against two conductors and real placement.

The hosts are ``simulated_hosts`` in this process, as ``tools/bench/
hosts.py`` runs them, speaking the agent's RPC over RabbitMQ to two
``cyborg-conductor`` processes; placement is a real openstack-placement
on the same database server. Counts, not times: every provider placed
with three placement calls per device and one per host (plus the custom
traits each conductor creates once), a services row per host from the
batched heartbeats, and unchanged full reports that write nothing.
"""
import contextlib

import pytest
import sqlalchemy as sa

from cyborg.common import rpc
from cyborg.conductor import rpcapi
from cyborg.db import models
from cyborg.tests import conftest
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server
from cyborg.tests.harness import simulated_hosts

HOSTS = 50
DEVICES = 8
CONDUCTORS = ('conductor1', 'conductor2')
INVENTORY = (models.Device, models.ControlpathID, models.Deployable,
             models.Attribute, models.AttachHandle, models.DriverState)


def _placed(engine: sa.engine.Engine) -> tuple[int, int]:
    """Deployables, and those of them in placement."""
    dep = models.Deployable
    with engine.connect() as conn:
        return tuple(conn.execute(sa.select(
            sa.func.count(dep.id), sa.func.count(dep.rp_synced))).one())


def _newest_write(engine: sa.engine.Engine) -> tuple:
    """Row count and latest stamp of every inventory table."""
    with engine.connect() as conn:
        return tuple(conn.execute(sa.select(
            sa.func.count(model.id), sa.func.max(model.created_at),
            sa.func.max(model.updated_at))).one() for model in INVENTORY)


def _custom_traits(sim: simulated_hosts.SimulatedHosts) -> set[str]:
    return {value for report in sim.reports.values()
            for device in report['devices']
            for dep in device['deployables']
            for key, value in dep['attributes'].items()
            if key.startswith('trait') and value.startswith('CUSTOM_')}


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_fifty_hosts_against_two_conductors(conf, tmp_path, backend,
                                            rabbit_url, db_engine,
                                            empty_db_url, fake_nova):
    placement_db = contextlib.contextmanager(conftest.empty_database_url)
    (tmp_path / 'placement').mkdir()
    with placement_db(backend, tmp_path / 'placement') as placement_url, \
            placement_server.serve(tmp_path / 'placement',
                                   None if backend == 'sqlite'
                                   else placement_url) as url:
        stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                                 fake_nova.endpoint, fake_nova.token)
        stack.placement_url = url
        for name in CONDUCTORS:
            # No reconcile pass: its first, at the start, may meet hosts
            # registering and write their providers too.
            stack.add_conductor(name, extra={
                'placement': {'reconcile_interval': 0}})
        placement = placement_server.Placement(url)
        hostnames = [f'scale-{i:02d}' for i in range(HOSTS)]
        with stack.running():
            stack.start(*CONDUCTORS)
            roots = [placement.create_compute_node(hostname)['uuid']
                     for hostname in hostnames]
            stack.ready(*CONDUCTORS)
            rpc.set_defaults(stack.exchange)
            rpc.init(conf, url=rabbit_url)
            try:
                sim = simulated_hosts.SimulatedHosts(
                    conf, rpcapi.ConductorAPI(conf), hostnames, DEVICES)
                _run(sim, placement, roots, db_engine)
            finally:
                rpc.cleanup()
                rpc.set_defaults()


def _run(sim: simulated_hosts.SimulatedHosts,
         placement: placement_server.Placement, roots: list[str],
         engine: sa.engine.Engine) -> None:
    devices = HOSTS * DEVICES
    calls = placement.calls()
    answers = sim.register(8)
    assert sum(a['devices_added'] for a in answers) == devices
    # Each report syncs its own host before it answers.
    assert _placed(engine) == (devices, devices)
    extra = placement.calls() - calls - (3 * devices + HOSTS)
    assert 0 <= extra <= len(CONDUCTORS) * len(_custom_traits(sim)), extra
    assert {len(placement.tree(root)) for root in roots} == {DEVICES}

    for hostname in sim.hostnames:
        sim.heartbeat(hostname)
    agents = sa.select(sa.func.count(models.Service.id)).where(
        models.Service.binary == simulated_hosts.BINARY)

    def recorded() -> bool:
        with engine.connect() as conn:
            return conn.execute(agents).scalar() == HOSTS

    gate_stack.wait_for(recorded, 'a services row for every host', 30)

    before = _newest_write(engine)
    calls = placement.calls()
    for _ in range(2):
        answers = sim.register(8)
        assert {a['writes'] for a in answers} == {0}
        assert {a['placement_pending'] for a in answers} == {0}
    assert placement.calls() == calls
    assert _newest_write(engine) == before
