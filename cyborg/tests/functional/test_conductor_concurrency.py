"""Two conductor processes binding at once never share an attach handle.

Both run as real ``cyborg-conductor`` processes on one MariaDB database and
one RabbitMQ virtual host; the broker hands the PATCHes sent from here to
them in turn, so concurrent transactions of both take handles of the same
deployables. More accelerator requests are bound than there are handles.
"""
import collections
import concurrent.futures
import random
import re
import subprocess
import uuid

import pytest
import sqlalchemy as sa
from oslo_log import log

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import inventory
from cyborg.db.api import services
from cyborg.tests.functional.test_arq_binding import _seed
from cyborg.tests.functional.test_processes import _start
from cyborg.tests.functional.test_processes import _stop
from cyborg.tests.functional.test_processes import _wait
from cyborg.tests.functional.test_processes import _write_conf

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable

DEPLOYABLES = 4
HANDLES_PER_DEPLOYABLE = 40
REQUESTS = 200
CLIENT_THREADS = 24
CONDUCTORS = ('ctl1', 'ctl2')
# Short enough that a hung bind fails the test well within its time.
RPC_TIMEOUT = 20
# oslo.messaging logs every message an RPC server takes, at DEBUG.
_RECEIVED = re.compile(r'Receive incoming message with id \S+ and '
                       r'method: arq_apply_patch\.')


def _tails(logs, lines=40):
    """The end of each log, without the lines of every message taken."""
    tails = []
    for name, path in logs.items():
        kept = [line for line in path.read_text().splitlines()
                if 'oslo_messaging.rpc.server' not in line]
        tails.append(f'\n--- {name} (last {lines} lines) ---\n'
                     + '\n'.join(kept[-lines:]))
    return ''.join(tails)


def _heartbeating(ctx):
    return {s['host'] for s in services.get_all(ctx, 'cyborg-conductor')}


def _stop_all(procs):
    """Their exit codes, 'killed' for one that ignored SIGTERM."""
    codes = []
    for proc in procs:
        try:
            codes.append(_stop(proc))
        except subprocess.TimeoutExpired:
            codes.append('killed')
    return codes


def _batches(rng, deployables):
    """Random PATCHes of 1-4 binds; each deployable is asked for as many
    ARQs as the others, more than it has handles."""
    per_deployable = REQUESTS // len(deployables)
    targets = [d['rp_uuid'] for d in deployables
               for _ in range(per_deployable)]
    rng.shuffle(targets)
    batches = []
    while targets:
        size = rng.randint(1, 4)
        batches.append(targets[:size])
        targets = targets[size:]
    return batches


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
def test_two_conductors_never_share_a_handle(conf, tmp_path, rabbit_url,
                                             db_engine, empty_db_url):
    conf.set_override('device_count', DEPLOYABLES, 'fake_driver')
    _seed(conf, handles=HANDLES_PER_DEPLOYABLE)
    ctx = cyborg_context.get_admin_context()
    deployables = [dep for device in inventory.get_host_devices(ctx, 'cmp1')
                   for dep in device['deployables']]
    assert len(deployables) == DEPLOYABLES
    requests_ = [arqs.create(ctx, 'dp', 'p1')[0]['uuid']
                 for _ in range(REQUESTS)]
    seed = random.randrange(2 ** 32)
    batches = _batches(random.Random(seed), deployables)
    unassigned = iter(requests_)
    patches = []
    for batch in batches:
        instance = str(uuid.uuid4())
        patches.append({next(unassigned): {
            'hostname': 'node1', 'device_rp_uuid': rp,
            'instance_uuid': instance} for rp in batch})

    exchange = f'cyborg-test-{uuid.uuid4().hex[:8]}'
    levels = ','.join(log.get_default_log_levels()
                      + ['oslo_messaging.rpc.server=DEBUG'])
    logs = {host: tmp_path / f'{host}.log' for host in CONDUCTORS}
    procs = []
    errors = []
    refused = []
    try:
        for host in CONDUCTORS:
            conf_file = _write_conf(
                tmp_path / f'{host}.conf',
                DEFAULT={'transport_url': rabbit_url,
                         'control_exchange': exchange, 'host': host,
                         'heartbeat_interval': 1,
                         'default_log_levels': levels},
                database={'connection': empty_db_url},
                nova={'send_events': 'false'})
            procs.append(_start('cyborg.cmd.conductor', conf_file,
                                logs[host]))
        # A conductor heartbeats once its RPC server consumes.
        try:
            _wait(lambda: _heartbeating(ctx) == set(CONDUCTORS)
                  or any(p.poll() is not None for p in procs),
                  timeout=30, what='both conductors to start')
        except AssertionError:
            pass
        if (_heartbeating(ctx) != set(CONDUCTORS)
                or any(p.poll() is not None for p in procs)):
            pytest.fail('the conductors did not start' + _tails(logs))

        rpc.set_defaults(control_exchange=exchange)
        rpc.init(conf, url=rabbit_url)
        api = conductor_rpcapi.ConductorAPI(conf)
        # Registered by the client just made.
        conf.set_override('rpc_response_timeout', RPC_TIMEOUT)
        with concurrent.futures.ThreadPoolExecutor(CLIENT_THREADS) as pool:
            futures = {pool.submit(api.arq_apply_patch,
                                   cyborg_context.get_admin_context(),
                                   patch, []): patch for patch in patches}
            for future in concurrent.futures.as_completed(futures):
                if isinstance(future.exception(), exception.BindRefused):
                    # Whole: a PATCH that found a deployable full.
                    refused.append(futures[future])
                elif future.exception() is not None:
                    errors.append(f'{sorted(futures[future])}: '
                                  f'{future.exception()!r}')
    finally:
        try:
            codes = _stop_all(procs)
        finally:
            rpc.cleanup()
            rpc.set_defaults()
    context = f'\n(random seed {seed})' + _tails(logs)
    if errors:
        pytest.fail(f'{len(errors)} PATCH(es) failed:\n'
                    + '\n'.join(errors[:10]) + context)
    assert codes == [0] * len(CONDUCTORS), context

    # Both conductors served PATCHes, between them every one of them.
    served = {host: len(_RECEIVED.findall(path.read_text()))
              for host, path in logs.items()}
    assert sum(served.values()) == len(patches), (served, context)
    assert all(served.values()), (served, context)

    with db_engine.connect() as conn:
        states = collections.Counter(conn.execute(
            sa.select(ARQ.state)).scalars())
        bound = conn.execute(
            sa.select(ARQ.uuid, ARQ.attach_handle_id, ARQ.device_rp_uuid,
                      ARQ.deployable_id, Dep.id.label('handle_deployable'),
                      Dep.rp_uuid)
            .outerjoin(AH, AH.id == ARQ.attach_handle_id)
            .outerjoin(Dep, Dep.id == AH.deployable_id)
            .where(ARQ.state == 'Bound')).all()
        in_use = conn.scalar(sa.select(sa.func.count()).select_from(AH)
                             .where(AH.in_use.is_(True)))
    held = [row.attach_handle_id for row in bound]
    assert None not in held, context
    shared = sorted(h for h, n in collections.Counter(held).items() if n > 1)
    assert not shared, (f'attach handles {shared} are bound to more than '
                        f'one accelerator request{context}')
    assert in_use == len(bound), (in_use, len(bound), context)
    handles = DEPLOYABLES * HANDLES_PER_DEPLOYABLE
    assert states['Bound'] <= handles, (states, context)
    assert states == {'Bound': states['Bound'],
                      'Initial': REQUESTS - states['Bound']}, (states, context)
    # Each PATCH bound all its requests, or none of them.
    state_of = dict(zip(requests_, [None] * REQUESTS, strict=True))
    with db_engine.connect() as conn:
        state_of.update(conn.execute(sa.select(ARQ.uuid, ARQ.state)).all())
    half = [p for p in patches
            if len({state_of[u] for u in p}) != 1
            or (p in refused) != (state_of[next(iter(p))] == 'Initial')]
    assert not half, (half, context)
    wrong = [row.uuid for row in bound
             if row.rp_uuid != row.device_rp_uuid
             or row.deployable_id != row.handle_deployable]
    assert not wrong, (f'{wrong} hold a handle of another deployable'
                       f'{context}')
