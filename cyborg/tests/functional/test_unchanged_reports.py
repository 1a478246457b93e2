"""Unchanged full reports answered from a conductor's memory, on every
database: one SELECT while the host's rows stay as the report left them,
the whole report again as soon as anyone changed them."""
import copy
import datetime

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.db import models
from cyborg.db.api import devices
from cyborg.db.api import inventory
from cyborg.tests.harness import simulated_hosts
from cyborg.tests.utils import InProcess

HOST = simulated_hosts.agent_host('node1')
LONG_AGO = datetime.datetime(2020, 1, 1)
INVENTORY = (models.Device, models.ControlpathID, models.Deployable,
             models.Attribute, models.AttachHandle, models.DriverState)


@pytest.fixture
def report(conf):
    return simulated_hosts.build_report(conf, 'node1', 2)


@pytest.fixture
def manager(conf, db_engine):
    return InProcess(conductor_manager.ConductorManager(conf))


def _age(engine: sa.engine.Engine) -> None:
    """As if the rows had been written long ago (reports come minutes
    apart) and published to placement (which these tests do without)."""
    with engine.begin() as conn:
        for model in INVENTORY:
            published = ({'rp_synced': 'published'}
                         if model is models.Deployable else {})
            conn.execute(sa.update(model).values(
                created_at=LONG_AGO, updated_at=LONG_AGO, **published))


class _Statements:
    def __init__(self, engine: sa.engine.Engine) -> None:
        self.engine = engine
        self.sent: list[str] = []

    def _record(self, conn, cursor, statement, *args) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper()
        # SQLite's writers begin explicitly (db.api._serialize_sqlite_...).
        if verb != 'BEGIN':
            self.sent.append(verb)

    def __enter__(self) -> list[str]:
        sa.event.listen(self.engine, 'before_cursor_execute', self._record)
        return self.sent

    def __exit__(self, *exc) -> None:
        sa.event.remove(self.engine, 'before_cursor_execute', self._record)


def _send(manager, report, host=HOST):
    return manager.report_data(cyborg_context.get_admin_context(), host,
                               copy.deepcopy(report))


def _settled(manager, engine, report) -> None:
    """Applied, aged, and applied again: from here on remembered."""
    _send(manager, report)
    _age(engine)
    assert _send(manager, report)['writes'] == 0


def test_an_unchanged_report_costs_one_select(manager, db_engine, report):
    _settled(manager, db_engine, report)
    with _Statements(db_engine) as sent:
        answer = _send(manager, report)
    assert sent == ['SELECT']
    assert answer == {'devices_added': 0, 'devices_updated': 0,
                      'devices_removed': 0, 'kept_in_use': 0, 'writes': 0,
                      'placement_pending': 0}


def test_fresh_rows_are_not_remembered(manager, db_engine, report):
    """A stamp read right after a write could miss a write of the same
    second: the rows must be STAMP_MARGIN old first."""
    _send(manager, report)
    for _ in range(2):
        with _Statements(db_engine) as sent:
            _send(manager, report)
        assert len(sent) > 1


def test_a_row_removed_behind_its_back_is_restored(manager, db_engine,
                                                   report):
    _settled(manager, db_engine, report)
    attributes = sa.select(sa.func.count(models.Attribute.id))
    with db_engine.begin() as conn:
        count = conn.execute(attributes).scalar()
        first = conn.execute(sa.select(sa.func.min(models.Attribute.id)))
        conn.execute(sa.delete(models.Attribute).where(
            models.Attribute.id == first.scalar()))
    assert _send(manager, report)['writes'] > 0
    with db_engine.connect() as conn:
        assert conn.execute(attributes).scalar() == count


def test_an_operator_change_makes_it_read_again(manager, db_engine,
                                                report):
    _settled(manager, db_engine, report)
    ctx = cyborg_context.get_admin_context()
    device = inventory.get_host_devices(ctx, HOST)[0]
    devices.set_status(ctx, device['uuid'], 'maintaining')
    with _Statements(db_engine) as sent:
        assert _send(manager, report)['writes'] == 0
    assert len(sent) > 1
    # The operator's status stays: known devices keep theirs.
    assert devices.get(ctx, device['uuid'])['status'] == 'maintaining'


def test_another_conductors_report_in_between(conf, manager, db_engine,
                                              report):
    """The host's next report went to another conductor and removed a
    device; the same first report again brings it back."""
    _settled(manager, db_engine, report)
    other = InProcess(conductor_manager.ConductorManager(conf))
    fewer = dict(report, devices=report['devices'][1:])
    assert _send(other, fewer)['devices_removed'] == 1
    assert _send(manager, report)['devices_added'] == 1
    assert len(inventory.get_host_devices(
        cyborg_context.get_admin_context(), HOST)) == 2


def test_a_malformed_report_is_still_refused(manager, db_engine, report):
    _settled(manager, db_engine, report)
    broken = copy.deepcopy(report)
    del broken['devices'][0]['deployables'][0]['name']
    for host, payload in ((HOST, broken), ('', report)):
        with pytest.raises(messaging.ExpectedException) as raised:
            _send(manager, payload, host)
        assert raised.value.exc_info[0] is exception.InvalidReport
