"""Reconcile shares the hosts between the live conductors: over the
services table on every database, and between real conductor processes."""
import datetime
import re
import uuid

import pytest
import sqlalchemy as sa
from oslo_log import log
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db.api import services
from cyborg.tests.functional import test_processes as processes

HOSTS = [f'node-{i:02d}' for i in range(40)]
CONDUCTORS = ('ctl1', 'ctl2', 'ctl3')


def _seed_hosts(engine, hosts):
    with engine.begin() as conn:
        conn.execute(sa.insert(models.Device), [
            {'uuid': str(uuid.uuid4()), 'type': 'FPGA', 'vendor': '8086',
             'model': 'm', 'host': f'agent-{h}', 'hostname': h,
             'status': 'enabled'} for h in hosts])


def _beat(ctx, *hosts, binary='cyborg-conductor'):
    for host in hosts:
        services.heartbeat(ctx, host, binary, '1.0')


def _shares(conf, sync, ctx, conductors):
    shares = {}
    for host in conductors:
        conf.set_override('host', host)
        shares[host] = sync.my_hosts(ctx)
    return shares


def _once_each(shares):
    """Whether every host is in exactly one share."""
    every = sorted(h for share in shares.values() for h in share)
    return every == sorted(HOSTS)


def test_live_conductors_share_the_hosts(conf, db_engine):
    ctx = cyborg_context.get_admin_context()
    _seed_hosts(db_engine, HOSTS)
    _beat(ctx, *CONDUCTORS)
    # An agent is no conductor, whatever its name.
    _beat(ctx, 'ctl4', binary='cyborg-agent')
    sync = placement_sync.PlacementSync(conf)

    before = _shares(conf, sync, ctx, CONDUCTORS)
    assert _once_each(before)
    assert all(before.values())

    # ctl2 stops: its heartbeat goes stale, the others take its hosts and
    # keep theirs.
    stale = timeutils.utcnow() - datetime.timedelta(
        seconds=conf.service_down_time + 1)
    with db_engine.begin() as conn:
        conn.execute(sa.update(models.Service)
                     .where(models.Service.host == 'ctl2')
                     .values(last_seen_at=stale))
    after = _shares(conf, sync, ctx, ('ctl1', 'ctl3'))
    assert _once_each(after)
    for host in ('ctl1', 'ctl3'):
        assert set(before[host]) <= set(after[host])
    # A conductor whose own heartbeat is not (yet) written counts itself:
    # its hosts are compared twice rather than not at all.
    assert _shares(conf, sync, ctx, ['ctl2'])['ctl2'] == before['ctl2']


def test_a_conductor_alone_reconciles_every_host(conf, db_engine):
    ctx = cyborg_context.get_admin_context()
    _seed_hosts(db_engine, HOSTS)
    conf.set_override('host', 'ctl-alone')
    assert placement_sync.PlacementSync(conf).my_hosts(ctx) == HOSTS


def _passes(text):
    """The completed reconcile passes in a conductor's log: (the live
    conductors it saw, the hosts it compared), oldest first."""
    done, current = [], None
    for line in text.splitlines():
        # Debug lines end with the function and file that logged them.
        start = re.search(r'Reconcile pass over .* live conductors: '
                          r'([^.]*)\. ', line)
        host = re.search(r'Reconciling host (\S+)\. ', line)
        if start:
            current = (frozenset(start.group(1).split(', ')), [])
        elif current is not None and host:
            current[1].append(host.group(1))
        elif current is not None and 'Reconcile pass done.' in line:
            done.append(current)
            current = None
    return done


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
def test_conductor_processes_share_and_take_over(
        tmp_path, rabbit_url, db_engine, empty_db_url, placement_url):
    _seed_hosts(db_engine, HOSTS)
    exchange = f'cyborg-test-{uuid.uuid4().hex[:8]}'
    levels = ','.join(log.get_default_log_levels()
                      + ['cyborg.conductor.placement_sync=DEBUG'])
    procs = {}
    for host in CONDUCTORS:
        conf_file = processes._write_conf(
            tmp_path / f'{host}.conf',
            DEFAULT={'transport_url': rabbit_url,
                     'control_exchange': exchange, 'host': host,
                     'state_path': str(tmp_path),
                     'default_log_levels': levels,
                     # Down 3 s after its last heartbeat.
                     'heartbeat_interval': 1, 'service_down_time': 3},
            database={'connection': empty_db_url},
            placement={'auth_type': 'admin_token', 'endpoint': placement_url,
                       'endpoint_override': placement_url, 'token': 'admin',
                       'reconcile_interval': 1})
        procs[host] = processes._start('cyborg.cmd.conductor', conf_file,
                                       tmp_path / f'{host}.log')

    def passes_with(members):
        """Each conductor of ``members``'s last pass that saw exactly
        them live; None until every one has made one."""
        found = {}
        for host in members:
            mine = [hosts for live, hosts in
                    _passes((tmp_path / f'{host}.log').read_text())
                    if live == frozenset(members)]
            if not mine:
                return None
            found[host] = mine[-1]
        return found

    try:
        shares = processes._wait(lambda: passes_with(CONDUCTORS),
                                 what='a pass of each of three conductors')
        assert _once_each(shares), shares
        assert all(shares.values())

        processes._kill(procs.pop('ctl2'))
        after = processes._wait(lambda: passes_with(('ctl1', 'ctl3')),
                                what='a pass of each conductor left')
        assert _once_each(after), after
        for host in ('ctl1', 'ctl3'):
            assert set(shares[host]) <= set(after[host])
    finally:
        codes = [processes._stop(p) for p in procs.values()]
    assert codes == [0, 0]
