"""The end-to-end gate: a deployment of separate processes, driven by the
clients that call it for real, and the faults it must survive.

openstack-placement, cyborg-api, two cyborg-conductors and one cyborg-agent
per compute node run as processes (``gate_stack``) on MariaDB and a
RabbitMQ virtual host of their own; both agents report fake devices, the
second one also a PCI function of a fake sysfs tree through generic_pci.
Nova's events endpoint is a FakeNova on 127.0.0.1.

Two servers boot as Nova boots them: openstacksdk creates the device
profiles, placement answers the scheduler's allocation-candidates query,
Nova's own client (``nova.accelerator.cyborg``, in a child process)
creates, binds, resolves and finally deletes the requests, os-acc plugs
them, and the ``openstack accelerator`` commands list what exists. Then
the faults: a conductor killed while binds are in flight, both agents
restarted (one having lost its cache), and placement down while a device
is disabled.

It is one test because the steps build on each other and the processes
start once; on failure the end of every log is printed.
"""
import collections
import concurrent.futures
import contextlib
import dataclasses
import re
import signal
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from openstack import connection

from cyborg import context as cyborg_context
from cyborg import os_acc
from cyborg.agent import cache as agent_cache
from cyborg.db import models
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.os_acc import client as os_acc_client
from cyborg.tests.fakes import nova as fake_nova_lib
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import nova_side
from cyborg.tests.harness import placement_server
from cyborg.tests.harness.gate_stack import wait_for
from cyborg.tests.harness.sysfs import SysfsTree

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable

# host -> its compute node, as Nova names it in placement.
NODES = {'agent1': 'node1.gate', 'agent2': 'node2.gate'}
CONDUCTORS = ('ctl1', 'ctl2')
FAKE_DEVICES = 2            # per host
ACCELERATORS = 8            # TEST_PCI handles of each fake device
PCI_ADDRESS = '0000:3b:00.0'
PCI_RC = 'CUSTOM_GATE_PCI'
FPGA_GROUP = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}
PCI_GROUP = {f'resources:{PCI_RC}': '1'}
FPGA_PROFILE = 'gate-fpga'
MIXED_PROFILE = 'gate-fpga-and-pci'
# More binds than the fake devices have handles, so some are refused.
FAULT_BINDS = 40
# A cyborg-api process sends a PATCH alone or, with others that arrived
# while its calls were out, in one batch call.
BIND_CALLS = ('arq_apply_patch', 'arq_apply_patches')
PLACEMENT_CATCH_UP = 30     # seconds
ADMIN = {'X-Auth-Token': 'admin'}

# The SDK's notices about its own future releases.
pytestmark = pytest.mark.filterwarnings(
    'ignore::PendingDeprecationWarning:openstack')


@dataclasses.dataclass
class Gate:
    """What the steps share."""

    stack: gate_stack.Stack
    placement: placement_server.Placement
    events: fake_nova_lib.FakeNova
    engine: sa.engine.Engine
    tree: SysfsTree
    nova: nova_side.NovaSide | None = None
    sdk: connection.Connection | None = None
    # compute node name -> its provider uuid
    roots: dict[str, str] = dataclasses.field(default_factory=dict)
    # What each step took (s), and what the timing-dependent ones saw.
    report: dict[str, Any] = dataclasses.field(default_factory=dict)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.report[name] = round(time.monotonic() - started, 1)

    def api(self, method: str, path: str, **kwargs: Any
            ) -> requests.Response:
        return requests.request(method, self.stack.api_url + path,
                                headers=ADMIN, timeout=60, **kwargs)

    def events_of(self, instances: set[str]) -> list[dict[str, Any]]:
        return [e for e in self.events.events()
                if e['server_uuid'] in instances]


def _sysfs(tmp_path) -> SysfsTree:
    """Host 2's PCI functions: a host bridge and a GPU left to libvirt."""
    tree = SysfsTree(tmp_path / 'node2-sysfs')
    tree.add_function('0000:00:00.0', 0x8086, 0x0d57, 0x060000)
    tree.add_function(PCI_ADDRESS, 0x10de, 0x1eb8, 0x030200,
                      driver='nvidia')
    return tree


def _trees_complete(gate: Gate) -> bool:
    """Every deployable of both hosts is a provider with inventory under
    its compute node."""
    expected = {NODES['agent1']: FAKE_DEVICES,
                NODES['agent2']: FAKE_DEVICES + 1}
    for name, count in expected.items():
        tree = gate.placement.tree(gate.roots[name])
        if len(tree) != count or not all(
                gate.placement.inventories(rp) for rp in tree):
            return False
    return True


def _start(gate: Gate) -> None:
    stack = gate.stack
    stack.start('placement', *CONDUCTORS, 'api')
    gate.nova = stack.nova_client()
    wait_for(stack.placement_up, 'placement to answer', 60)
    # nova-compute registers its node before the agents report.
    for name in NODES.values():
        gate.roots[name] = gate.placement.create_compute_node(name)['uuid']
    # The agents' first reports need a conductor.
    gate.stack.ready(*CONDUCTORS)
    stack.start(*NODES)
    wait_for(stack.api_up, 'the API to answer', 60)
    gate.sdk = connection.Connection(
        auth_type='admin_token',
        auth={'endpoint': stack.api_url, 'token': 'admin'},
        accelerator_default_microversion='2.3')
    gate.stack.ready(*NODES)
    wait_for(lambda: _trees_complete(gate),
             'both hosts\' providers in placement', 60, interval=0.5)


# --- the boot of a server, as Nova does it ------------------------------

def _schedule(gate: Gate, profile: str, instance: str,
              node: str | None = None
              ) -> tuple[str, dict[str, list[str]], set[str]]:
    """Nova's scheduler: the profile's request groups (through Nova's
    client) as groups of GET /allocation_candidates at 1.36, each suffixed
    with its requester id as ``RequestGroup.to_queryparams`` writes them,
    then a candidate (on ``node`` if given) and its claim. Returns the
    node, the requester id -> providers map Nova binds with, and the nodes
    of all candidates."""
    groups = gate.nova('get_device_profile_request_groups', profile)
    query = [('limit', 1000), ('root_required', 'COMPUTE_ACCELERATORS')]
    if len(groups) > 1:
        # What Nova asks for when the flavor sets no group_policy.
        query.append(('group_policy', 'none'))
    for group in groups:
        suffix = group['requester_id']
        query.append((f'resources{suffix}', ','.join(
            f'{rc}:{n}' for rc, n in sorted(group['resources'].items()))))
        traits = group['required_traits'] + [
            '!' + t for t in group['forbidden_traits']]
        if traits:
            query.append((f'required{suffix}', ','.join(traits)))
    found = gate.placement.get(
        '/allocation_candidates?' + urllib.parse.urlencode(query),
        version='1.36')
    by_node: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for candidate in found['allocation_requests']:
        [rp, *_] = candidate['mappings'][groups[0]['requester_id']]
        root = found['provider_summaries'][rp]['root_provider_uuid']
        by_node[next(n for n, r in gate.roots.items() if r == root)].append(
            candidate)
    node = node or sorted(by_node)[0]
    candidate = by_node[node][0]
    claim = gate.placement.request(
        'PUT', f'/allocations/{instance}', version='1.36',
        json={'allocations': candidate['allocations'],
              'consumer_generation': None, 'project_id': 'admin',
              'user_id': 'admin'})
    assert claim.status_code == 204, claim.text
    mapping = {g['requester_id']: candidate['mappings'][g['requester_id']]
               for g in groups}
    return node, mapping, set(by_node)


def _resolved(gate: Gate, instance: str, count: int) -> list[dict]:
    """Nova's compute: the instance's resolved requests, once all
    ``count`` are."""
    found = gate.nova('get_arqs_for_instance', instance, True)
    return found if len(found) == count else []


def _boot(gate: Gate, profile: str, instance: str, node: str,
          mapping: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Nova's conductor creates and binds the requests, then its compute
    waits until they are resolved; returns them."""
    created = gate.nova('create_arqs_and_match_resource_providers',
                        profile, mapping)
    gate.nova('bind_arqs', {a['uuid']: {
        'hostname': node, 'device_rp_uuid': a['device_rp_uuid'],
        'instance_uuid': instance} for a in created})
    resolved = wait_for(lambda: _resolved(gate, instance, len(created)),
                        f'the requests of {instance} to be resolved')
    assert sorted(a['uuid'] for a in resolved) == sorted(
        a['uuid'] for a in created)
    for arq in resolved:
        assert (arq['state'], arq['hostname'], arq['instance_uuid']) == (
            'Bound', node, instance), arq
        group = arq['device_profile_group_id']
        assert arq['device_rp_uuid'] == mapping[f'device_profile_{group}'][0]
        info = arq['attach_handle_info']
        assert sorted(info) == ['bus', 'device', 'domain', 'function'], arq
        assert all(isinstance(v, str) for v in info.values()), arq
    return sorted(resolved, key=lambda a: a['device_profile_group_id'])


def _boot_two_servers(gate: Gate, a: str, b: str
                      ) -> tuple[list[dict], list[dict]]:
    """Server a asks for an FPGA, server b for an FPGA and the PCI
    function; returns their requests, Bound."""
    sdk = gate.sdk.accelerator
    fpga = sdk.create_device_profile(name=FPGA_PROFILE, groups=[FPGA_GROUP],
                                     description='one fake FPGA')
    assert (fpga.name, fpga.groups) == (FPGA_PROFILE, [FPGA_GROUP])
    sdk.create_device_profile(name=MIXED_PROFILE,
                              groups=[FPGA_GROUP, PCI_GROUP])
    # Server a: any host has an FPGA; it goes to node 1.
    node, mapping, candidates = _schedule(gate, FPGA_PROFILE, a,
                                          NODES['agent1'])
    assert candidates == set(NODES.values())
    arqs_a = _boot(gate, FPGA_PROFILE, a, node, mapping)
    assert [x['attach_handle_type'] for x in arqs_a] == ['TEST_PCI']
    # Server b: only node 2 has the PCI function as well.
    node, mapping, candidates = _schedule(gate, MIXED_PROFILE, b)
    assert candidates == {NODES['agent2']}
    arqs_b = _boot(gate, MIXED_PROFILE, b, node, mapping)
    assert [x['attach_handle_type'] for x in arqs_b] == ['TEST_PCI', 'PCI']
    assert arqs_b[1]['attach_handle_info'] == {
        'domain': '0000', 'bus': '3b', 'device': '00', 'function': '0'}
    every = {x['uuid'] for x in arqs_a + arqs_b}
    wait_for(lambda: {e['tag'] for e in gate.events_of({a, b})} >= every,
             'an event for every bound request')
    _one_event_each(gate, {**{x['uuid']: a for x in arqs_a},
                           **{x['uuid']: b for x in arqs_b}})
    return arqs_a, arqs_b


def _one_event_each(gate: Gate, instances: dict[str, str]) -> None:
    """Nova heard exactly one "completed" event for each request (a
    request uuid -> its instance)."""
    events = gate.events_of(set(instances.values()))
    assert sorted(e['tag'] for e in events) == sorted(instances), events
    assert {(e['name'], e['status']) for e in events} == {
        ('accelerator-request-bound', 'completed')}, events
    assert {e['tag']: e['server_uuid'] for e in events} == instances


def _plug(gate: Gate, a: str, b: str, arqs_b: list[dict]) -> None:
    """nova-compute's side: os-acc reads server a's requests itself and
    is given those of server b that Nova's client read."""
    os_acc.initialize(reset=True, sysfs_root=gate.tree.root)
    session = ks_session.Session(auth=token_endpoint.Token(None, 'admin'))
    client = os_acc_client.Client.from_session(
        session, endpoint_override=gate.stack.api_url)
    [van_a] = os_acc.plug(os_acc.InstanceInfo(a), client=client)
    # libvirt gets no device for the fake driver's TEST_PCI handles.
    assert (van_a.attach_handle_type, van_a.driver, van_a.config) == (
        'TEST_PCI', 'test_pci', None)
    vans_b = os_acc.plug(os_acc.InstanceInfo(b), arqs_b)
    assert [(v.arq_uuid, v.attach_handle_type, v.driver)
            for v in vans_b] == [(arqs_b[0]['uuid'], 'TEST_PCI', 'test_pci'),
                                 (arqs_b[1]['uuid'], 'PCI', 'pci')]
    assert vans_b[0].config is None
    assert vans_b[1].config == (
        '<hostdev mode="subsystem" type="pci" managed="yes"><source>'
        '<address domain="0x0000" bus="0x3b" slot="0x00" function="0x0" />'
        '</source></hostdev>')
    os_acc.unplug(os_acc.InstanceInfo(b), vans_b)
    os_acc.unplug(os_acc.InstanceInfo(a), [van_a])
    assert {v.device_state for v in vans_b + [van_a]} == {
        os_acc.objects.DeviceState.RELEASED}


def _check_cli(gate: Gate, arqs: list[dict[str, Any]]) -> None:
    """The commands list what the SDK and Nova's client see."""
    listed = gate.stack.openstack_lists(
        'device', 'deployable', 'device profile', 'arq')
    devices = {d.uuid: d.hostname for d in gate.sdk.accelerator.devices()}
    assert len(devices) == 2 * FAKE_DEVICES + 1
    assert {d['uuid']: d['hostname'] for d in listed['device']} == devices
    deployables = {d.id for d in gate.sdk.accelerator.deployables()}
    assert {d['uuid'] for d in listed['deployable']} == deployables
    assert len(deployables) == len(devices)
    assert {p['name']: p['groups'] for p in listed['device profile']} == {
        FPGA_PROFILE: [FPGA_GROUP], MIXED_PROFILE: [FPGA_GROUP, PCI_GROUP]}
    assert {(a['uuid'], a['state'], a['instance_uuid'])
            for a in listed['arq']} == {
        (a['uuid'], 'Bound', a['instance_uuid']) for a in arqs}


def _counts(gate: Gate) -> tuple[collections.Counter, int]:
    """Requests by state, and the attach handles in use."""
    with gate.engine.connect() as conn:
        states = collections.Counter(conn.execute(
            sa.select(ARQ.state)).scalars())
        in_use = conn.scalar(sa.select(sa.func.count()).select_from(AH)
                             .where(AH.in_use.is_(True)))
    return states, in_use


def _delete_servers(gate: Gate, *instances: str) -> None:
    """Server delete: Nova deletes the requests, then the allocations."""
    for instance in instances:
        gate.nova('delete_arqs_for_instance', instance)
        response = gate.placement.request('DELETE', f'/allocations/{instance}')
        assert response.status_code == 204, response.text
        with pytest.raises(nova_side.NovaError,
                           match='no accelerator requests'):
            gate.nova('get_arqs_for_instance', instance)
    assert _counts(gate) == (collections.Counter(), 0)


# --- faults --------------------------------------------------------------

def _fpga_providers(gate: Gate) -> list[tuple[str, str]]:
    """(compute node, provider) of every FPGA deployable."""
    return sorted((name, rp) for name, root in gate.roots.items()
                  for rp in gate.placement.tree(root)
                  if 'FPGA' in gate.placement.inventories(rp))


def _bind_ops(node: str, rp: str, instance: str) -> list[dict[str, str]]:
    return [{'path': '/hostname', 'op': 'add', 'value': node},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': rp},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance}]


def _kill_a_conductor_while_binding(gate: Gate) -> None:
    """40 servers' binds at once, one conductor SIGKILLed mid-way.

    A call the dead conductor had taken fails after the API's RPC
    timeout (503), and a bind past the handles is refused (409); Nova then
    deletes that server's requests. Whatever the timing, every request
    left is Bound (no bind fails after its PATCH's answer), no attach
    handle is held twice, the handles in use are those of the Bound
    requests, and Nova hears at most one event per request, matching
    its state. An event may be missing only for a bind the dead conductor
    answered: it died between its reply and its POST to Nova. Its event
    is stored (``nova_events``), and the other conductor sends it once
    the dead one's claim has run out (``[nova] event_claim_timeout``, 30 s,
    after this step looks; ``test_nova_outbox_flow`` checks that); Nova
    reads the state of the requests before it waits for events.
    """
    fpga = _fpga_providers(gate)
    assert len(fpga) == 2 * FAKE_DEVICES
    instances = [str(uuid.uuid4()) for _ in range(FAULT_BINDS)]
    answered: list[int] = []
    lock = threading.Lock()

    def create(_: int) -> str:
        response = gate.api('POST', '/accelerator_requests',
                            json={'device_profile_name': FPGA_PROFILE})
        assert response.status_code == 201, response.text
        return response.json()['arqs'][0]['uuid']

    def bind(i: int) -> int:
        node, rp = fpga[i % len(fpga)]
        response = gate.api('PATCH', '/accelerator_requests', json={
            created[i]: _bind_ops(node, rp, instances[i])})
        with lock:
            answered.append(i)
        return response.status_code

    with concurrent.futures.ThreadPoolExecutor(FAULT_BINDS) as pool:
        created = list(pool.map(create, range(FAULT_BINDS)))
        futures = [pool.submit(bind, i) for i in range(FAULT_BINDS)]
        killed = gate.stack.processes['ctl1']
        # Kill it while it holds a bind, alone or in a batch, which it does
        # for tens of milliseconds at a time. Watching starts at once: an
        # API process sends the PATCHes that arrive while its calls are
        # out together, so the 40 binds make a few calls, over within a
        # second. The moment is caught by watching its log, each look
        # taken with the conductor paused, so that it cannot finish the
        # bind between the look and the kill.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            killed.pause()
            taken, replied = killed.rpc_calls(*BIND_CALLS)
            if taken > replied:
                break
            killed.resume()
            time.sleep(0.002)
        with lock:
            outstanding = FAULT_BINDS - len(answered)
        killed.kill()
        statuses = [f.result() for f in futures]
    taken, replied = killed.rpc_calls(*BIND_CALLS)
    assert outstanding > 0, 'every bind ended before the kill'
    assert taken > replied, 'the killed conductor had no bind in hand'
    assert set(statuses) <= {202, 409, 503}, collections.Counter(statuses)
    failed = [created[i] for i, s in enumerate(statuses) if s != 202]
    if failed:
        # Nova's conductor, after AcceleratorRequestBindingFailed.
        gate.nova('delete_arqs_by_uuid', failed)
    # TEST_PCI binds are instant: each ends in its PATCH's transaction,
    # so none can be left BindStarted for the stale-bind sweep.
    with gate.engine.connect() as conn:
        rows = conn.execute(
            sa.select(ARQ.uuid, ARQ.state, ARQ.attach_handle_id,
                      ARQ.device_rp_uuid, Dep.rp_uuid)
            .outerjoin(AH, AH.id == ARQ.attach_handle_id)
            .outerjoin(Dep, Dep.id == AH.deployable_id)).all()
        in_use = conn.scalar(sa.select(sa.func.count()).select_from(AH)
                             .where(AH.in_use.is_(True)))
    states = {r.uuid: r.state for r in rows}
    # Events of the last binds may still be on their way.
    with contextlib.suppress(AssertionError):
        wait_for(lambda: {e['tag'] for e in gate.events_of(
            set(instances))} >= set(states), 'the events', 5)
    events = gate.events_of(set(instances))
    tags = collections.Counter(e['tag'] for e in events)
    unheard = set(states) - set(tags)
    summary = (f'{outstanding} binds outstanding at the kill; the killed '
               f'conductor took {taken} and answered {replied}; PATCH '
               f'statuses {dict(collections.Counter(statuses))}; requests '
               f'left {dict(collections.Counter(states.values()))}, '
               f'{len(unheard)} of them unheard of by Nova')
    assert set(states) == set(created) - set(failed), summary
    assert set(states.values()) <= {'Bound'}, summary
    bound = [r for r in rows if r.state == 'Bound']
    held = [r.attach_handle_id for r in bound]
    assert None not in held, summary
    assert len(set(held)) == len(held), f'a handle is held twice; {summary}'
    assert in_use == len(held), summary
    assert all(r.rp_uuid == r.device_rp_uuid for r in bound), summary
    assert max(tags.values(), default=1) == 1, tags
    # Only the dead conductor can have failed to send an event: those it
    # queued after its answers, to send joined with others.
    assert unheard <= killed.queued_events(), summary
    status = {'Bound': 'completed', 'BindFailed': 'failed'}
    wrong = [e for e in events
             if e['tag'] in states and e['status'] != status[states[e['tag']]]]
    assert not wrong, wrong
    gate.report['fault binds'] = summary
    # The servers are deleted.
    for instance in instances:
        gate.nova('delete_arqs_for_instance', instance)
    assert _counts(gate) == (collections.Counter(), 0)


def _devices(gate: Gate) -> list[tuple[str, str, str]]:
    return sorted((d.hostname, d.type, d.uuid)
                  for d in gate.sdk.accelerator.devices())


def _providers(gate: Gate) -> dict[str, list[str]]:
    return {name: sorted(gate.placement.tree(root))
            for name, root in gate.roots.items()}


def _restart_agents(gate: Gate) -> None:
    """Both agents stop and start again, agent 2 without its cache (as on
    a reinstalled host), so its report reaches a conductor again; the
    killed conductor comes back meanwhile. Nothing is duplicated."""
    devices, trees = _devices(gate), _providers(gate)
    processes = gate.stack.processes
    assert gate.stack.stop(*NODES) == dict.fromkeys(NODES, 0)
    (gate.stack.state_path('agent2') / agent_cache.FILE_NAME).unlink()
    gate.stack.start(*NODES, 'ctl1')
    gate.stack.ready(*NODES, 'ctl1')
    wait_for(lambda: 'Devices unchanged' in processes['agent1'].log(),
             'agent 1\'s first discovery pass')
    report = wait_for(lambda: re.search(
        rf'Reported {FAKE_DEVICES + 1} device\(s\): (.*) update',
        processes['agent2'].log()), 'agent 2\'s report')
    # The conductor found nothing to change.
    assert "'writes': 0" in report.group(1), report.group(0)
    assert _devices(gate) == devices
    assert _providers(gate) == trees


def _first_device(host: str) -> tuple[str, str]:
    """(device uuid, provider uuid) of the host's first fake device."""
    ctx = cyborg_context.get_admin_context()
    device = inventory.get_host_devices(ctx, host)[0]
    return device['uuid'], device['deployables'][0]['rp_uuid']


def _fpga_inventory(gate: Gate, rp: str) -> dict[str, Any]:
    return gate.placement.inventories(rp)['FPGA']


def _placement_outage(gate: Gate) -> None:
    """Placement stops; a device is disabled meanwhile; placement comes
    back on the same address and database, and the conductor that found
    it away writes the reservation as soon as its probe gets an answer."""
    node = NODES['agent1']
    device, rp = _first_device('agent1')
    assert _fpga_inventory(gate, rp)['reserved'] == 0
    conductors = [gate.stack.processes[c] for c in CONDUCTORS]
    before = {c.name: len(c.log()) for c in conductors}
    placement = gate.stack.processes['placement']
    placement.stop()
    stopped = time.monotonic()
    gate.sdk.accelerator.disable_device(device)
    assert gate.sdk.accelerator.get_device(device).status == 'maintaining'
    # The conductor that took the call tried to write at once, or a
    # periodic pass over another host found placement away first: then
    # every write waits for the probe, this one included.
    failures = ('Placement does not answer while publishing host',
                f'of host {node} not written',
                f'Cannot read placement for host {node}')
    wait_for(lambda: any(f in c.log()[before[c.name]:] for c in conductors
                         for f in failures),
             'a conductor to fail to write the reservation')
    ctx = cyborg_context.get_admin_context()
    [pending] = [p for p in providers.host_providers(ctx, node)
                 if p.uuid == rp]
    assert not pending.in_sync
    # Down for a periodic pass at least.
    time.sleep(max(0.0, gate_stack.PLACEMENT_SYNC_INTERVAL
                   - (time.monotonic() - stopped)))
    placement.start()
    wait_for(gate.stack.placement_up, 'placement to answer again', 60)
    back = time.monotonic()
    wait_for(lambda: _fpga_inventory(gate, rp)['reserved'] == ACCELERATORS,
             'the reservation to reach placement', PLACEMENT_CATCH_UP)
    assert _fpga_inventory(gate, rp)['total'] == ACCELERATORS
    gate.report['placement catch-up'] = round(time.monotonic() - back, 1)
    gate.sdk.accelerator.enable_device(device)
    # Placement just came back: a write it refuses (its SQLite busy, a
    # 500) waits for the next periodic pass, as the reservation did.
    wait_for(lambda: _fpga_inventory(gate, rp)['reserved'] == 0,
             'the device enabled in placement', PLACEMENT_CATCH_UP)


# --- the gate ------------------------------------------------------------

@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
def test_gate(conf, tmp_path, rabbit_url, db_engine, empty_db_url,
              fake_nova):
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    tree = _sysfs(tmp_path)
    stack.add_placement()
    # Every bind reaches the broker at once.
    stack.add_api(threads=FAULT_BINDS)
    for host in CONDUCTORS:
        stack.add_conductor(host)
    stack.add_agent('agent1', NODES['agent1'], FAKE_DEVICES, ACCELERATORS)
    stack.add_agent('agent2', NODES['agent2'], FAKE_DEVICES, ACCELERATORS,
                    pci_specs=({'address': PCI_ADDRESS,
                                'resource_class': PCI_RC},),
                    sysfs_root=tree.root)
    gate = Gate(stack, placement_server.Placement(stack.placement_url),
                fake_nova, db_engine, tree)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        with gate.step('start'):
            _start(gate)
        with gate.step('boot'):
            arqs_a, arqs_b = _boot_two_servers(gate, a, b)
        with gate.step('os-acc'):
            _plug(gate, a, b, arqs_b)
        with gate.step('cli'):
            _check_cli(gate, arqs_a + arqs_b)
        with gate.step('delete'):
            _delete_servers(gate, a, b)
            # Still one event each, seconds later.
            _one_event_each(gate, {x['uuid']: x['instance_uuid']
                                   for x in arqs_a + arqs_b})
        with gate.step('conductor killed'):
            _kill_a_conductor_while_binding(gate)
        with gate.step('agents restarted'):
            _restart_agents(gate)
        with gate.step('placement outage'):
            _placement_outage(gate)
    except BaseException:
        print(stack.tails())
        if gate.nova is not None:
            print('--- Nova\'s client ---\n' + gate.nova.stderr())
        raise
    finally:
        codes = stack.stop_all()
        if gate.nova is not None:
            gate.nova.close()
        if gate.sdk is not None:
            gate.sdk.close()
        os_acc._manager = None
        print(f'gate report: {gate.report}')
    # Placement runs under waitress, which SIGTERM ends.
    assert codes.pop('placement') in (0, -signal.SIGTERM), stack.tails()
    assert codes == dict.fromkeys(codes, 0), (codes, stack.tails())
