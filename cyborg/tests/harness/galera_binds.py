"""Binds from conductors on the nodes of a Galera cluster.

One database made and seeded through the first node (``bind_load``: fake
devices of TEST_PCI handles, Initial requests), one ``cyborg-conductor``
process per node writing through it, RabbitMQ between them and the
clients here, and a fake Nova taking the bound events. What the binds
left is read back through every node. The functional test and
``tools/bench/galera.py`` run it, at two sizes.
"""
import collections
import contextlib
import dataclasses
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import requests
import sqlalchemy as sa
from oslo_config import cfg
from oslo_db.sqlalchemy import engines
from prometheus_client import parser

from cyborg.common import rpc
from cyborg.conductor import rpcapi
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import models
from cyborg.tests.fakes import nova as fake_nova
from cyborg.tests.harness import bind_load
from cyborg.tests.harness import galera
from cyborg.tests.harness import gate_stack

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
# A bind ends Bound or BindFailed; one refused leaves its ARQ Initial.
ENDED = ('Bound', 'BindFailed', 'Initial')


@dataclasses.dataclass
class Outcome:
    """What the binds left, as one node sees it."""

    node: str
    # ARQs by state.
    states: dict[str, int]
    # Attach handles (ids) held by more than one ARQ.
    shared: list[int]
    # Attach handles in use.
    in_use: int
    # Every ARQ's state and handle, to compare the nodes' views.
    rows: dict[str, tuple[str, int | None]]

    @property
    def stuck(self) -> int:
        """ARQs neither ended nor refused."""
        return sum(n for state, n in self.states.items()
                   if state not in ENDED)


@dataclasses.dataclass
class Deployment:
    """The conductors on the cluster's nodes, and a client of theirs."""

    cluster: galera.Cluster
    stack: gate_stack.Stack
    nova: fake_nova.FakeNova
    conductor: rpcapi.ConductorAPI
    database: str
    rp_uuids: list[str]
    uuids: list[str]
    metrics_ports: list[int]

    def bind(self, clients: int, batch: int = 1) -> bind_load.Load:
        """Bind every request, ``batch`` to a PATCH, from ``clients``
        threads."""
        return bind_load.fire(
            self.conductor,
            bind_load.patches(self.uuids, self.rp_uuids, batch), clients)

    def outcomes(self) -> list[Outcome]:
        """What each node holds. Each read waits until the node applied
        every write the cluster committed before it (wsrep_sync_wait)."""
        found = []
        for node, url in zip(self.cluster.nodes,
                             self.cluster.urls(self.database), strict=True):
            engine = sa.create_engine(url)
            try:
                with engine.connect() as conn:
                    conn.execute(sa.text('SET SESSION wsrep_sync_wait = 1'))
                    rows = {r.uuid: (r.state, r.attach_handle_id)
                            for r in conn.execute(sa.select(
                                ARQ.uuid, ARQ.state, ARQ.attach_handle_id))}
                    in_use = conn.scalar(
                        sa.select(sa.func.count()).select_from(AH)
                        .where(AH.in_use.is_(True)))
            finally:
                engine.dispose()
            held = collections.Counter(h for _, h in rows.values()
                                       if h is not None)
            found.append(Outcome(
                node=node.name,
                states=dict(collections.Counter(s for s, _ in rows.values())),
                shared=sorted(h for h, n in held.items() if n > 1),
                in_use=in_use, rows=rows))
        return found

    def deadlocks(self) -> dict[tuple[str, str], int]:
        """The conductors' ``cyborg_db_deadlocks_total``, summed, by
        (transaction, outcome)."""
        total: collections.Counter[tuple[str, str]] = collections.Counter()
        for port in self.metrics_ports:
            text = requests.get(f'http://127.0.0.1:{port}/metrics',
                                timeout=10).text
            for family in parser.text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == 'cyborg_db_deadlocks_total':
                        total[sample.labels['transaction'],
                              sample.labels['outcome']] += int(sample.value)
        return dict(total)

    def retried(self) -> int:
        """Transactions retried after a deadlock or certification
        conflict, by every conductor."""
        return sum(n for (_, outcome), n in self.deadlocks().items()
                   if outcome == 'retried')

    def sessions(self) -> dict[int, str]:
        """The nodes' and conductors' session ids (each was started in a
        session of its own), labelled for ``tools/bench/api.cpu_used``."""
        found = {n.process.pid: 'Galera nodes' for n in self.cluster.nodes
                 if n.process is not None}
        found.update((p.pid, 'conductors')
                     for p in self.stack.processes.values())
        return found

    def events(self) -> int:
        """Bound events Nova took."""
        return len(self.nova.events())


def make_database(cluster: galera.Cluster) -> str:
    """A new database on ``cluster``, migrated to head; its name."""
    name = f'cyborg_{uuid.uuid4().hex[:8]}'
    admin = sa.create_engine(cluster.nodes[0].server_url(),
                             isolation_level='AUTOCOMMIT')
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE {name}'))
    finally:
        admin.dispose()
    migration.upgrade('head', url=cluster.urls(name)[0])
    return name


@contextlib.contextmanager
def deployment(cluster: galera.Cluster, workdir: pathlib.Path,
               rabbit_url: str, conf: cfg.ConfigOpts, handles: int,
               requests_: int, devices: int = 1,
               extra: dict[str, dict[str, Any]] | None = None
               ) -> Iterator[Deployment]:
    """A database of ``devices`` devices with ``handles`` TEST_PCI handles
    in all (spread evenly) and ``requests_`` Initial requests, and a
    conductor on each node of ``cluster`` (``extra``: more options of
    theirs), until the block ends. ``conf`` is this process's, for its
    RPC client."""
    assert handles % devices == 0, 'spread handles evenly over devices'
    database = make_database(cluster)
    urls = cluster.urls(database)
    engine = engines.create_engine(db_api.connection_url(urls[0]))
    undo = db_api.patch_engine(engine)
    try:
        rp_uuids, uuids = bind_load.seed(conf, devices, handles // devices,
                                         requests_)
    finally:
        undo()
        engine.dispose()
    nova = fake_nova.FakeNova()
    nova.start()
    stack = gate_stack.Stack(workdir, rabbit_url, urls[0], nova.endpoint,
                             nova.token)
    ports = [gate_stack.free_port() for _ in urls]
    names = []
    for index, (url, port) in enumerate(zip(urls, ports, strict=True), 1):
        options: dict[str, dict[str, Any]] = {
            'database': {'connection': url},
            'conductor': {'metrics_host': '127.0.0.1',
                          'metrics_port': port}}
        for section, values in (extra or {}).items():
            options[section] = {**options.get(section, {}), **values}
        names.append(stack.add_conductor(f'conductor{index}',
                                         options).name)
    try:
        with stack.running():
            stack.start(*names)
            stack.ready(*names)
            rpc.set_defaults(control_exchange=stack.exchange)
            rpc.init(conf, url=rabbit_url)
            try:
                yield Deployment(cluster, stack, nova,
                                 rpcapi.ConductorAPI(conf), database,
                                 rp_uuids, uuids, ports)
            finally:
                rpc.cleanup()
                rpc.set_defaults()
    finally:
        nova.stop()
