"""Upstream OpenStack Cyborg 17.0.0's services filling its database.

``fill`` starts upstream's cyborg-api, cyborg-conductor and cyborg-agent
(fake driver) as real processes of ``upstream_cyborg``'s environment,
against a real placement, a RabbitMQ virtual host and a fake Nova, and
makes device profiles, accelerator requests in every state and Nova's
allocations through upstream's own REST API, the way Nova and an
operator would; it stops them all again and describes what it made
(``Filled``). The services are ``upstream_services.Upstream``.
"""
import contextlib
import dataclasses
import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from cyborg.tests.fakes import http
from cyborg.tests.fakes import nova
from cyborg.tests.harness import upstream_cyborg
from cyborg.tests.harness import upstream_services
from cyborg.tests.harness.placement_server import Placement

# Upstream's fake driver: one FPGA device per host with this many
# attach handles, the FPGA resource class and this trait.
FAKE_HANDLES = 16
FAKE_TRAIT = 'CUSTOM_FAKE_DEVICE'


@dataclasses.dataclass
class Handle:
    uuid: str
    # As upstream stores it: a JSON string of the PCI address.
    attach_info: str
    attach_type: str
    in_use: bool


@dataclasses.dataclass
class Deployable:
    uuid: str
    name: str
    rp_uuid: str
    num_accelerators: int
    handles: list[Handle]


@dataclasses.dataclass
class Device:
    uuid: str
    hostname: str
    # As upstream stores it: the control path's JSON string.
    cpid_info: str
    deployables: list[Deployable]


@dataclasses.dataclass
class Profile:
    name: str
    uuid: str
    groups: list[dict[str, str]]
    description: str | None


@dataclasses.dataclass
class Arq:
    uuid: str
    state: str
    profile_name: str
    group_id: int
    hostname: str | None
    instance_uuid: str | None
    device_rp_uuid: str | None
    attach_handle_uuid: str | None
    attach_info: str | None
    # How it got its state: 'api', or 'sql' for the states upstream's API
    # cannot produce.
    made_by: str = 'api'


@dataclasses.dataclass
class Allocation:
    """What Nova would hold in placement for one instance."""

    consumer_uuid: str
    # Resources by provider uuid, then by resource class.
    resources: dict[str, dict[str, int]]


@dataclasses.dataclass
class Filled:
    """What ``fill`` made."""

    database_url: str
    placement_url: str
    host: str
    compute_node_uuid: str
    project_id: str
    devices: list[Device]
    profiles: list[Profile]
    arqs: list[Arq]
    allocations: list[Allocation]
    # Where upstream's processes wrote their logs and configuration.
    workdir: pathlib.Path

    def arqs_in(self, state: str) -> list[Arq]:
        return [arq for arq in self.arqs if arq.state == state]

    @property
    def deployables(self) -> list[Deployable]:
        return [dep for dev in self.devices for dep in dev.deployables]

    @property
    def handles(self) -> list[Handle]:
        return [h for dep in self.deployables for h in dep.handles]

    def logs(self, chars: int = 3000) -> str:
        """The end of each upstream process's log, for assertion
        messages."""
        return '\n'.join(
            f'--- {log} ---\n{log.read_text(errors="replace")[-chars:]}'
            for log in sorted(self.workdir.glob('*.log')))


def device_rp_name(host: str) -> str:
    """The provider upstream's conductor makes for the fake driver's one
    deployable (the deployable's name)."""
    return f'{host}_FakeDevice'


def _reported(engine: sa.engine.Engine, placement: Placement,
              host: str) -> str | None:
    """The device provider's uuid once the agent's report reached both
    the database and placement (with its inventory)."""
    with engine.connect() as conn:
        rp_uuid = conn.execute(sa.text(
            'SELECT dep.rp_uuid FROM deployables dep JOIN devices d '
            'ON d.id = dep.device_id WHERE d.hostname = :host'),
            {'host': host}).scalar()
    if rp_uuid is None:
        return None
    response = placement.request('GET',
                                 f'/resource_providers/{rp_uuid}/inventories')
    if response.status_code != 200 or not response.json()['inventories']:
        return None
    return rp_uuid


def fill(database_url: str, placement_url: str, transport_url: str,
         workdir: pathlib.Path) -> Filled:
    """Migrate the empty database at ``database_url`` with upstream's
    dbsync and fill it through upstream's services (see the module's
    docstring); upstream's processes are stopped when this returns."""
    workdir.mkdir(parents=True, exist_ok=True)
    upstream_cyborg.migrate(database_url, workdir)
    placement = Placement(placement_url)
    host = f'upstream-{uuid.uuid4().hex[:10]}'
    # The compute node provider as nova-compute makes it, with some
    # inventory of its own for the instances' allocations.
    node = placement.create_compute_node(host)
    node = placement.get(f'/resource_providers/{node["uuid"]}')
    response = placement.request(
        'PUT', f'/resource_providers/{node["uuid"]}/inventories', json={
            'resource_provider_generation': node['generation'],
            'inventories': {'VCPU': {'total': 16},
                            'MEMORY_MB': {'total': 32768}}})
    assert response.status_code == 200, response.text
    fake_nova = nova.FakeNova()
    # Upstream's clients read the compute API's version document first.
    fake_nova.route('GET', fake_nova.prefix,
                    lambda request: _nova_version(fake_nova))
    fake_nova.start()
    engine = sa.create_engine(database_url)
    try:
        with upstream_services.Upstream(
                workdir, database_url, placement_url, transport_url,
                fake_nova, host) as up:
            made = _make(up, engine, placement, host, fake_nova)
        _finish(engine, made)
        filled = _read(engine, database_url, placement_url, host,
                       node['uuid'], made, workdir)
    finally:
        engine.dispose()
        fake_nova.stop()
    filled.allocations = _allocate(placement, filled)
    return filled


def _nova_version(fake_nova: nova.FakeNova) -> http.Response:
    return http.json_response({'version': {
        'id': 'v2.1', 'status': 'CURRENT', 'version': '2.104',
        'min_version': '2.1',
        'links': [{'rel': 'self', 'href': fake_nova.endpoint + '/'}]}})


def _make(up: upstream_services.Upstream, engine: sa.engine.Engine,
          placement: Placement, host: str,
          fake_nova: nova.FakeNova) -> dict[str, Any]:
    """Profiles and ARQs through upstream's API; what was made, by
    role."""
    rp_uuid = up.wait_for(lambda: _reported(engine, placement, host),
                          'the agent to report its device')
    up.create_profile('upstream-fpga', [{'resources:FPGA': '1'}],
                      description='One FPGA, any kind')
    up.create_profile('upstream-fpga-trait', [
        {'resources:FPGA': '1', f'trait:{FAKE_TRAIT}': 'required'}])
    up.create_profile('upstream-fpga-pair', [{'resources:FPGA': '2'}],
                      description='Two FPGAs in one group')
    # Upstream refuses to bind a group asking for a bitstream and a
    # function at once, after it marked the ARQ BindFailed.
    up.create_profile('upstream-fpga-conflict', [
        {'resources:FPGA': '1',
         'accel:bitstream_id': str(uuid.uuid4()),
         'accel:function_id': str(uuid.uuid4())}])
    made: dict[str, Any] = {'rp_uuid': rp_uuid, 'host': host, 'instances': {}}
    instances = made['instances']

    made['initial'] = up.create_arqs('upstream-fpga')
    # Two instances with Bound ARQs: two from one group, and one with a
    # trait.
    for role, profile in (('pair', 'upstream-fpga-pair'),
                          ('trait', 'upstream-fpga-trait')):
        arqs = up.create_arqs(profile)
        instance = str(uuid.uuid4())
        up.bind(arqs, host, rp_uuid, instance)
        up.resolved(instance)
        instances[instance] = [a['uuid'] for a in arqs]
        made[role] = arqs
    # Bound, then unbound.
    made['unbound'] = up.create_arqs('upstream-fpga')
    instance = str(uuid.uuid4())
    up.bind(made['unbound'], host, rp_uuid, instance)
    up.resolved(instance)
    up.unbind(made['unbound'])
    # upstream answers the refusal with a 400 (InvalidParameterValue).
    made['failed'] = up.create_arqs('upstream-fpga-conflict')
    up.bind(made['failed'], host, rp_uuid, str(uuid.uuid4()), expect=400)
    # Two more Initial ARQs to be put by SQL into the states upstream's
    # API never produces (_finish).
    made['bind_started'] = up.create_arqs('upstream-fpga')
    made['deleting'] = up.create_arqs('upstream-fpga')
    made['bind_started_instance'] = str(uuid.uuid4())
    # One POST of events per instance whose bind ended well: the two
    # bound ones and the one unbound since (none for the failed bind).
    up.wait_for(lambda: len(fake_nova.events()) >= 4,
                "upstream's bind events to reach Nova",
                upstream_services.BIND_TIMEOUT)
    return made


def _finish(engine: sa.engine.Engine, made: dict[str, Any]) -> None:
    """The states upstream's API cannot produce, set by SQL with its
    processes stopped.

    BindStarted: upstream sets it at the start of a bind and leaves it
    only when the bind ends, so a conductor that died mid-bind leaves
    one, with the binding fields set and no attach handle.
    Deleting: in upstream's state list but never set by its code.
    """
    (started,) = made['bind_started']
    (deleting,) = made['deleting']
    with engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE extended_accelerator_requests SET state = 'BindStarted', "
            'hostname = :host, device_rp_uuid = :rp, instance_uuid = :inst '
            'WHERE uuid = :uuid'),
            {'host': made['host'],
             'rp': made['rp_uuid'], 'inst': made['bind_started_instance'],
             'uuid': started['uuid']})
        conn.execute(sa.text(
            "UPDATE extended_accelerator_requests SET state = 'Deleting' "
            'WHERE uuid = :uuid'), {'uuid': deleting['uuid']})


def _read(engine: sa.engine.Engine, database_url: str, placement_url: str,
          host: str, node_uuid: str, made: dict[str, Any],
          workdir: pathlib.Path) -> Filled:
    """The upstream tables, read back into a ``Filled``."""
    sql_made = {made['bind_started'][0]['uuid'],
                made['deleting'][0]['uuid']}
    with engine.connect() as conn:
        def rows(query: str, **params: Any) -> list[Any]:
            return list(conn.execute(sa.text(query), params).mappings())

        devices = []
        for dev in rows('SELECT d.id, d.uuid, d.hostname, c.cpid_info '
                        'FROM devices d JOIN controlpath_ids c '
                        'ON c.device_id = d.id ORDER BY d.id'):
            deployables = []
            for dep in rows('SELECT id, uuid, name, rp_uuid, '
                            'num_accelerators FROM deployables '
                            'WHERE device_id = :d ORDER BY id', d=dev['id']):
                handles = [Handle(h['uuid'], h['attach_info'],
                                  h['attach_type'], bool(h['in_use']))
                           for h in rows('SELECT uuid, attach_info, '
                                         'attach_type, in_use FROM '
                                         'attach_handles WHERE '
                                         'deployable_id = :d ORDER BY id',
                                         d=dep['id'])]
                deployables.append(Deployable(
                    dep['uuid'], dep['name'], dep['rp_uuid'],
                    dep['num_accelerators'], handles))
            devices.append(Device(dev['uuid'], dev['hostname'],
                                  dev['cpid_info'], deployables))
        profiles = [Profile(p['name'], p['uuid'],
                            json.loads(p['profile_json'])['groups'],
                            p['description'])
                    for p in rows('SELECT name, uuid, profile_json, '
                                  'description FROM device_profiles '
                                  'ORDER BY id')]
        arqs = [Arq(a['uuid'], a['state'], a['name'],
                    a['device_profile_group_id'], a['hostname'],
                    a['instance_uuid'], a['device_rp_uuid'], a['ah_uuid'],
                    a['attach_info'],
                    'sql' if a['uuid'] in sql_made else 'api')
                for a in rows(
                    'SELECT a.uuid, a.state, p.name, '
                    'a.device_profile_group_id, a.hostname, '
                    'a.instance_uuid, a.device_rp_uuid, h.uuid AS ah_uuid, '
                    'h.attach_info FROM extended_accelerator_requests a '
                    'JOIN device_profiles p ON p.id = a.device_profile_id '
                    'LEFT JOIN attach_handles h ON h.id = a.attach_handle_id '
                    'ORDER BY a.id')]
    return Filled(database_url, placement_url, host, node_uuid,
                  upstream_services.PROJECT_ID, devices, profiles, arqs, [],
                  workdir)


def _allocate(placement: Placement, filled: Filled) -> list[Allocation]:
    """Nova's allocations for the instances with Bound ARQs: one
    accelerator per ARQ from its device provider, and the instance's
    own resources from the compute node."""
    by_instance: dict[str, dict[str, dict[str, int]]] = {}
    for arq in filled.arqs_in('Bound'):
        assert arq.instance_uuid and arq.device_rp_uuid, arq
        resources = by_instance.setdefault(arq.instance_uuid, {
            filled.compute_node_uuid: {'VCPU': 1, 'MEMORY_MB': 512}})
        device = resources.setdefault(arq.device_rp_uuid, {'FPGA': 0})
        device['FPGA'] += 1
    allocations = []
    for instance, resources in by_instance.items():
        response = placement.request('PUT', f'/allocations/{instance}', json={
            'allocations': {rp: {'resources': r}
                            for rp, r in resources.items()},
            'project_id': filled.project_id,
            'user_id': upstream_services.USER_ID,
            'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert response.status_code == 204, response.text
        allocations.append(Allocation(instance, resources))
    return allocations


@contextlib.contextmanager
def upstream_database(database_url: str, placement_url: str,
                      transport_url: str,
                      workdir: pathlib.Path) -> Iterator[Filled]:
    """``fill``, and the Nova allocations removed from placement after
    the block (the placement server outlives one test)."""
    filled = fill(database_url, placement_url, transport_url, workdir)
    try:
        yield filled
    finally:
        placement = Placement(placement_url)
        for allocation in filled.allocations:
            placement.request('DELETE',
                              f'/allocations/{allocation.consumer_uuid}')
