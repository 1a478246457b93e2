"""How many of cyborg's functions one PATCH binding several requests crosses.

Runs the API (the WSGI app under webtest), a conductor and an agent with
the fake driver in this process, on a fresh SQLite database, with their
messages on oslo.messaging's ``fake://`` transport and Nova's events
endpoint a fake on 127.0.0.1. One PATCH binds four requests of one
instance: two on a fake FPGA (TEST_PCI handles, Bound in the PATCH) and
two on a fake GPU (mdevs the agent creates, Bound in the background).
From just before the PATCH until Nova has the events of all four, a
profiler in every thread records each function called; the script prints
how many distinct functions whose code is under ``cyborg/`` (but not
``cyborg/tests``) ran, by package, and the longest chain of them on one
thread's stack where a SQL statement or an RPC message leaves it, for the
API and for the services (``--chains`` prints the chains).
Comprehensions are not counted (they are part of the function they are
written in); lambdas are.

    PYTHONPATH=$PWD .tox/py3/bin/python tools/bench/trace_bind.py [--list]

``--list`` also prints each function, as ``path:line qualified name``.
"""
import argparse
import collections
import os
import sys
import tempfile
import threading
import time
import types
import uuid
from typing import Any

import cyborg

ROOT = os.path.dirname(os.path.abspath(cyborg.__file__)) + os.sep
TESTS = os.path.join(ROOT, 'tests') + os.sep
API = os.path.join(ROOT, 'api') + os.sep
COMPREHENSIONS = {'<listcomp>', '<dictcomp>', '<setcomp>', '<genexpr>'}
ARQS_PER_DEVICE = 2

_recording = False
_seen: set[types.CodeType] = set()
# Where a chain of cyborg's own frames ends: a statement sent to the
# database (SQLAlchemy) or a call or cast to another service
# (oslo.messaging's client).
ENDS = {('_execute_context', 'base.py'), ('call', 'client.py'),
        ('cast', 'client.py')}
# The longest such chain on one thread's stack, for the API's threads and
# for the others (the conductor's and the agent's).
_deepest: dict[str, list[types.CodeType]] = {}


def _chain(frame: types.FrameType | None) -> list[types.CodeType]:
    chain = []
    while frame is not None:
        if _ours(frame.f_code):
            chain.append(frame.f_code)
        frame = frame.f_back
    return chain[::-1]


def _profile(frame: types.FrameType, event: str, arg: Any) -> None:
    if _recording and event == 'call':
        _seen.add(frame.f_code)
        if (frame.f_code.co_name, os.path.basename(
                frame.f_code.co_filename)) in ENDS:
            chain = _chain(frame)
            api = any(c.co_filename.startswith(API) for c in chain)
            side = 'the API' if api else 'the services'
            if len(chain) > len(_deepest.get(side, ())):
                _deepest[side] = chain


# Before any thread starts, so that every thread of the services is seen.
threading.setprofile(_profile)
sys.setprofile(_profile)

import sqlalchemy as sa  # noqa: E402
import webtest  # noqa: E402
from oslo_config import cfg  # noqa: E402

import cyborg.cmd  # noqa: E402,F401  (native threads first)
from cyborg import conf as cyborg_conf  # noqa: E402,F401
from cyborg import context as cyborg_context  # noqa: E402
from cyborg.api import app  # noqa: E402
from cyborg.common import rpc  # noqa: E402
from cyborg.common import rpc_service  # noqa: E402
from cyborg.conductor import manager  # noqa: E402
from cyborg.conductor import rpcapi as conductor_rpcapi  # noqa: E402
from cyborg.db import models  # noqa: E402
from cyborg.db.api import inventory  # noqa: E402
from cyborg.tests import conftest  # noqa: E402
from cyborg.tests.fakes import fixtures  # noqa: E402
from cyborg.tests.fakes import nova  # noqa: E402
from cyborg.tests.functional.api import fixtures as api_fixtures  # noqa

HOST = 'cmp1'


def _ours(code: types.CodeType) -> bool:
    return (code.co_filename.startswith(ROOT)
            and not code.co_filename.startswith(TESTS)
            and code.co_name not in COMPREHENSIONS
            and code.co_name != '<module>')


def _seed(conf: cfg.ConfigOpts) -> dict[str, str]:
    """A host with a fake FPGA and a fake GPU, and its agent; the
    resource provider of each device type."""
    conf.set_override('host', HOST)
    conf.set_override('device_count', 1, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('accelerators_per_device', ARQS_PER_DEVICE,
                      'fake_driver')
    conf.set_override('vgpus_per_device', ARQS_PER_DEVICE, 'fake_driver')
    from cyborg.accelerator.drivers import fake
    from cyborg.agent import manager as agent_manager
    from cyborg.agent import resource_tracker
    driver = fake.FakeDriver(conf)
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, {
        'hostname': HOST, 'devices': [d.to_dict() for d in driver.discover()]})
    conductor_api = conductor_rpcapi.ConductorAPI(conf)
    tracker = resource_tracker.ResourceTracker(conf, [driver], conductor_api)
    agent = rpc_service.RPCService(
        rpc.AGENT_TOPIC, HOST,
        agent_manager.AgentManager(conf, tracker, conductor_api).endpoints())
    agent.start()
    return {d['type']: d['deployables'][0]['rp_uuid']
            for d in inventory.get_host_devices(ctx, HOST)}


def _bound(engine: sa.engine.Engine, uuids: list[str]) -> bool:
    arq = models.AcceleratorRequest
    with engine.connect() as conn:
        states = conn.execute(sa.select(arq.state)
                              .where(arq.uuid.in_(uuids))).scalars().all()
    return states == ['Bound'] * len(uuids)


def trace(workdir: str) -> set[types.CodeType]:
    """The functions of cyborg one PATCH of four binds crosses."""
    global _recording
    conf = cfg.CONF
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('state_path', workdir)
    conf.set_override('auth_strategy', 'noauth', 'api')
    fake_nova = nova.FakeNova()
    fake_nova.start()
    fixtures.nova_conf(conf, fake_nova)
    url = f'sqlite:///{workdir}/cyborg.sqlite'
    engines = conftest.migrated_engine(url)
    engine = next(engines)
    rpc.init(conf, url='fake://')
    conductor = rpc_service.RPCService(
        rpc.CONDUCTOR_TOPIC, 'conductor',
        manager.ConductorManager(conf).endpoints())
    conductor.start()
    web = webtest.TestApp(app.setup_app(conf))
    rp = _seed(conf)
    headers = api_fixtures.SERVICE
    created = []
    for device_type, rc in (('FPGA', 'FPGA'), ('GPU', 'VGPU')):
        web.post_json('/v2/device_profiles', [
            {'name': rc, 'groups': [{f'resources:{rc}': '1'}]}],
            headers=api_fixtures.ADMIN)
        for _ in range(ARQS_PER_DEVICE):
            [arq] = web.post_json('/v2/accelerator_requests',
                                  {'device_profile_name': rc},
                                  headers=headers).json['arqs']
            created.append((arq['uuid'], rp[device_type]))
    instance = str(uuid.uuid4())
    body = {u: [{'path': '/hostname', 'op': 'add', 'value': HOST},
                {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
                {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
            for u, rp_uuid in created}
    uuids = [u for u, _ in created]
    _recording = True
    web.patch_json('/v2/accelerator_requests', body, headers=headers,
                   status=202)
    deadline = time.monotonic() + 30
    while not (_bound(engine, uuids) and {
            e['tag'] for e in fake_nova.events()} >= set(uuids)):
        assert time.monotonic() < deadline, 'the binds did not end'
        time.sleep(0.01)
    # What a worker does after posting Nova's events (notifications off).
    time.sleep(0.5)
    _recording = False
    threading.setprofile(None)
    sys.setprofile(None)
    conductor.stop()
    rpc.cleanup()
    fake_nova.stop()
    engines.close()
    return {code for code in _seen if _ours(code)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--list', action='store_true',
                        help='print each function crossed')
    parser.add_argument('--chains', action='store_true',
                        help='print the deepest chain of each side')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        crossed = trace(workdir)
    by_package = collections.Counter(
        os.path.dirname(c.co_filename[len(ROOT):]) or '.' for c in crossed)
    print(f'{len(crossed)} functions of cyborg crossed by one PATCH '
          f'of {2 * ARQS_PER_DEVICE} binds:')
    for package, count in sorted(by_package.items()):
        print(f'  {count:4d}  cyborg/{package}')
    for side, chain in sorted(_deepest.items()):
        print(f'{len(chain)} of cyborg\'s frames on a stack of {side} at '
              f'its deepest SQL statement or RPC message')
        if args.chains:
            for code in chain:
                print(f'    {code.co_filename[len(ROOT):]} '
                      f'{code.co_qualname}')
    if args.list:
        for code in sorted(crossed, key=lambda c: (c.co_filename,
                                                   c.co_firstlineno)):
            print(f'{code.co_filename[len(ROOT):]}:{code.co_firstlineno} '
                  f'{code.co_qualname}')


if __name__ == '__main__':
    main()
