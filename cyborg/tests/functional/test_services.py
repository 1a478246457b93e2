"""Service registration and liveness from heartbeats."""
import concurrent.futures
import datetime
import threading

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.conductor import heartbeats
from cyborg.conductor import manager as conductor_manager
from cyborg.db import models
from cyborg.db.api import services
from cyborg.tests.utils import InProcess


def test_heartbeat_registers_then_refreshes(db_engine):
    ctx = cyborg_context.get_admin_context()
    services.heartbeat(ctx, 'cmp1', 'cyborg-agent', '1.0', 'cmp1.example')
    services.heartbeat(ctx, 'cmp1', 'cyborg-agent', '1.1', 'cmp1.example')
    services.heartbeat(ctx, 'ctl1', 'cyborg-conductor', '1.1')
    found = services.get_all(ctx)
    assert [(s['binary'], s['host'], s['version'], s['alive'])
            for s in found] == [('cyborg-agent', 'cmp1', '1.1', True),
                                ('cyborg-conductor', 'ctl1', '1.1', True)]
    assert [s['host'] for s in services.get_all(ctx, 'cyborg-agent')] == [
        'cmp1']


def test_silent_service_is_down(db_engine):
    ctx = cyborg_context.get_admin_context()
    services.heartbeat(ctx, 'cmp1', 'cyborg-agent', '1.0')
    long_ago = datetime.datetime(2020, 1, 1)
    with db_engine.begin() as conn:
        conn.execute(sa.update(models.Service).values(last_seen_at=long_ago))
    [agent] = services.get_all(ctx, down_time=60)
    assert agent['alive'] is False


def _rows(engine: sa.engine.Engine) -> dict[tuple[str, str], tuple]:
    with engine.connect() as conn:
        return {(r.binary, r.host): (r.version, r.hostname, r.last_seen_at)
                for r in conn.execute(sa.select(
                    models.Service.binary, models.Service.host,
                    models.Service.version, models.Service.hostname,
                    models.Service.last_seen_at))}


def _at(second: int) -> datetime.datetime:
    return datetime.datetime(2030, 1, 1, 0, 0, second)


def _beat(host: str, second: int, version: str = '1.0',
          binary: str = 'cyborg-agent') -> services.Beat:
    return services.Beat(host, binary, version, f'{host}.node', _at(second))


def test_heartbeat_many_registers_refreshes_and_updates(db_engine):
    ctx = cyborg_context.get_admin_context()
    services.heartbeat_many(ctx, [_beat('h1', 1), _beat('h2', 1),
                                  _beat('c1', 1, binary='cyborg-conductor')])
    # h1 unchanged, h2 upgraded, h3 new; of h1's two beats the last counts.
    services.heartbeat_many(ctx, [_beat('h1', 3), _beat('h1', 5),
                                  _beat('h2', 4, '2.0'), _beat('h3', 6)])
    assert _rows(db_engine) == {
        ('cyborg-agent', 'h1'): ('1.0', 'h1.node', _at(5)),
        ('cyborg-agent', 'h2'): ('2.0', 'h2.node', _at(4)),
        ('cyborg-agent', 'h3'): ('1.0', 'h3.node', _at(6)),
        ('cyborg-conductor', 'c1'): ('1.0', 'c1.node', _at(1))}


def test_heartbeat_many_stamps_the_oldest_and_never_goes_back(db_engine):
    ctx = cyborg_context.get_admin_context()
    services.heartbeat_many(ctx, [_beat('h1', 1), _beat('h2', 1)])
    services.heartbeat_many(ctx, [_beat('h2', 9)])
    # A batch written late: h1 moves to its oldest beat, h2 stays at 9.
    services.heartbeat_many(ctx, [_beat('h1', 4), _beat('h2', 5)])
    assert {key[1]: row[2] for key, row in _rows(db_engine).items()} == {
        'h1': _at(4), 'h2': _at(9)}


def test_heartbeat_many_splits_long_host_lists(db_engine):
    ctx = cyborg_context.get_admin_context()
    hosts = [f'h{i:04d}' for i in range(services._IN_BATCH * 2 + 7)]
    services.heartbeat_many(ctx, [_beat(h, 1) for h in hosts])
    services.heartbeat_many(ctx, [_beat(h, 2) for h in hosts])
    rows = _rows(db_engine)
    assert len(rows) == len(hosts)
    assert {row[2] for row in rows.values()} == {_at(2)}


def test_heartbeat_many_from_two_conductors_at_once(db_engine):
    """Both write the same new and known hosts at the same time: each
    service has one row, with the newer of the two conductors' beats."""
    ctx = cyborg_context.get_admin_context()
    known = [f'k{i:03d}' for i in range(50)]
    new = [f'n{i:03d}' for i in range(50)]
    services.heartbeat_many(ctx, [_beat(h, 1) for h in known])
    batches = [[_beat(h, 2 + i, f'1.{i}') for h in known + new]
               for i in range(2)]
    barrier = threading.Barrier(2)

    def flush(beats: list[services.Beat]) -> None:
        barrier.wait()
        services.heartbeat_many(cyborg_context.get_admin_context(), beats)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(flush, b) for b in batches]:
            future.result()
    rows = _rows(db_engine)
    assert sorted(key[1] for key in rows) == known + new
    # Version and hostname are the last writer's; the stamp is the newer.
    assert {row[2] for row in rows.values()} == {_at(3)}
    assert len({row[0] for row in rows.values()}) == 1


def test_heartbeat_many_registers_a_host_another_conductor_just_did(
        db_engine):
    """The row appears between the SELECT and the INSERT: the INSERT
    fails on the unique key, and each new beat is written on its own."""
    ctx = cyborg_context.get_admin_context()
    inserted = []

    def insert_first(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith('INSERT') \
                and not inserted:
            inserted.append(True)
            # In this transaction: a separate connection would wait for
            # the write lock this one holds on SQLite.
            cursor.execute(*_raw_insert(conn, _beat('h2', 1, '0.9')))

    sa.event.listen(db_engine, 'before_cursor_execute', insert_first)
    try:
        services.heartbeat_many(ctx, [_beat('h1', 3), _beat('h2', 3)])
    finally:
        sa.event.remove(db_engine, 'before_cursor_execute', insert_first)
    assert inserted
    assert _rows(db_engine) == {
        ('cyborg-agent', 'h1'): ('1.0', 'h1.node', _at(3)),
        ('cyborg-agent', 'h2'): ('1.0', 'h2.node', _at(3))}


def _raw_insert(conn, beat: services.Beat) -> tuple[str, tuple]:
    """The INSERT of ``beat``'s row, as DB-API statement and parameters."""
    compiled = sa.insert(models.Service).values(
        host=beat.host, binary=beat.binary, version=beat.version,
        hostname=beat.hostname, last_seen_at=beat.seen_at,
        created_at=beat.seen_at).compile(dialect=conn.dialect)
    params = compiled.construct_params()
    return compiled.string, tuple(params[k] for k in compiled.positiontup) \
        if compiled.positional else params


def test_invalid_heartbeat_values():
    assert services.invalid_heartbeat('h1', '1.0', None) is None
    assert services.invalid_heartbeat('h1', '1.0', 'node') is None
    assert 'host' in services.invalid_heartbeat('', '1.0', None)
    assert 'version' in services.invalid_heartbeat('h1', 5, None)
    assert 'longer than 255' in services.invalid_heartbeat('h' * 256, '1',
                                                           None)


def test_conductor_writes_heartbeats_in_batches(conf, db_engine):
    """Taken by RPC, written by the batch's flush (here at the stop, as
    the thread's next flush is an hour away); the last beat of a host
    counts; invalid ones never reach the batch."""
    parts = conductor_manager.ConductorManager(conf)
    parts.heartbeats = heartbeats.HeartbeatBatch(interval=3600)
    conductor = InProcess(parts)
    ctx = cyborg_context.get_admin_context()
    conductor.service_heartbeat(ctx, 'h1', 'cyborg-agent', '1.0', 'n1')
    conductor.service_heartbeat(ctx, 'h1', 'cyborg-agent', '1.1', 'n1')
    conductor.service_heartbeat(ctx, 'h2', 'cyborg-agent', '1.0', None)
    conductor.service_heartbeat(ctx, 'h' * 300, 'cyborg-agent', '1.0', None)
    conductor.service_heartbeat(ctx, 'h3', 'cyborg-api', '1.0', None)
    assert _rows(db_engine) == {}
    conductor.heartbeats.stop()
    assert {key: row[:2] for key, row in _rows(db_engine).items()} == {
        ('cyborg-agent', 'h1'): ('1.1', 'n1'),
        ('cyborg-agent', 'h2'): ('1.0', None)}
    # Stopped: a straggler is written at once.
    conductor.service_heartbeat(ctx, 'h4', 'cyborg-agent', '1.0', None)
    assert ('cyborg-agent', 'h4') in _rows(db_engine)
