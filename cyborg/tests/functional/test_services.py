"""Service registration and liveness from heartbeats."""
import datetime

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import services


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
