"""Projects are kept apart on every accelerator-request operation.

Project A's requests are invisible to project B: B gets for A's requests
and instances exactly what it gets for ones that do not exist.
Administrators and services (``cyborg:arq:all_projects``) see and change
every project's. Nova acts for its instances: a call by instance that
carries a valid service token (the user's token plus ``X-Service-Token``,
as Nova sends it) reaches every project's requests of that instance, as
after an administrator's evacuation or unshelve of a member's server.
"""
import json
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import manager
from cyborg.conductor.endpoints import arqs as arqs_endpoint
from cyborg.db import models
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

ARQS = '/v2/accelerator_requests'
# Nova's calls: the user's token and its own service token.
NOVA_A = user('pa', service_token=True)
NOVA_B = user('pb', service_token=True)
# B's user token alone, as a user's own client sends it.
USER_B = user('pb')
A_INSTANCE = '0a000000-0000-4000-8000-00000000000a'
B_INSTANCE = '0b000000-0000-4000-8000-00000000000b'


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _bind_body(arqs, rp_uuid, instance, hostname='node1'):
    return {a['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
        for a in arqs}


def _force(engine, arq, **values):
    """Write an ARQ's row as no API call would."""
    with engine.begin() as conn:
        conn.execute(sa.update(models.AcceleratorRequest).where(
            models.AcceleratorRequest.uuid == arq['uuid']).values(**values))


def _unbind_body(arqs):
    return {a['uuid']: [{'path': f'/{field}', 'op': 'remove'} for field in
                        ('hostname', 'device_rp_uuid', 'instance_uuid')]
            for a in arqs}


class Tenants:
    """Project A with a request bound to its instance, project B with an
    unbound one, on a deployable of the fake driver."""

    def __init__(self, api):
        self.api = api
        self.app = api.app
        devices = api.seed('cmp1', count=2, hostname='node1')
        self.rp_uuid = devices[0]['deployables'][0]['rp_uuid']
        api.dp('dp1')
        self.a_arq = self.create(NOVA_A)
        self.bind([self.a_arq], A_INSTANCE, NOVA_A)
        self.b_arq = self.create(NOVA_B)

    def create(self, headers):
        [arq] = self.app.post_json(ARQS, {'device_profile_name': 'dp1'},
                                   headers=headers, status=201).json['arqs']
        return arq

    def bind(self, arqs, instance, headers, status=202):
        return self.app.patch_json(ARQS, _bind_body(arqs, self.rp_uuid,
                                                    instance),
                                   headers=headers, status=status)

    def state(self, arq, headers=ADMIN):
        return self.app.get(f'{ARQS}/{arq["uuid"]}', headers=headers).json[
            'state']

    def uuids(self, headers=ADMIN, query=''):
        return {a['uuid'] for a in self.app.get(
            f'{ARQS}{query}', headers=headers).json['arqs']}


@pytest.fixture
def tenants(api):
    return Tenants(api)


@pytest.fixture
def tenants_all_dbs(api_all_dbs):
    """``tenants`` on each of SQLite, MariaDB and PostgreSQL."""
    return Tenants(api_all_dbs)


def test_delete_by_instance_without_a_service_token_is_the_callers(
        tenants_all_dbs):
    tenants = tenants_all_dbs
    app = tenants.app
    tenants.api.conf.set_override('require_service_token', False, 'api')
    app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=USER_B, status=204)
    assert tenants.state(tenants.a_arq, NOVA_A) == 'Bound'
    # As its unbind and delete by uuid are 404, with a service token too:
    # it reaches across projects only by instance.
    for headers in (USER_B, NOVA_B):
        app.patch_json(ARQS, _unbind_body([tenants.a_arq]), headers=headers,
                       status=404)
        app.delete(f'{ARQS}/{tenants.a_arq["uuid"]}', headers=headers,
                   status=404)
    assert tenants.state(tenants.a_arq, NOVA_A) == 'Bound'
    # A deleting its own instance; twice is fine.
    for _ in range(2):
        app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=user('pa'),
                   status=204)
    assert tenants.uuids() == {tenants.b_arq['uuid']}


def test_delete_by_instance_without_a_service_token_is_refused(tenants):
    """Unless ``[api] require_service_token`` is off: then as above."""
    fault = _fault(tenants.app.delete(f'{ARQS}?instance={A_INSTANCE}',
                                      headers=user('pa'), status=403))
    assert 'service token' in fault
    assert tenants.state(tenants.a_arq) == 'Bound'


def test_delete_by_instance_leaves_other_projects_requests(tenants_all_dbs,
                                                           db_engine):
    """An instance holding requests of two projects (written here: no
    bind makes it): without a service token the caller's go, the others
    stay."""
    tenants = tenants_all_dbs
    tenants.api.conf.set_override('require_service_token', False, 'api')
    _force(db_engine, tenants.b_arq, state='Bound',
           instance_uuid=A_INSTANCE, hostname='node1')
    tenants.app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=USER_B,
                       status=204)
    assert tenants.uuids() == {tenants.a_arq['uuid']}


def test_nova_deletes_every_projects_requests_of_its_instance(
        tenants_all_dbs, db_engine):
    """The member's delete of a server that an administrator unshelved
    or evacuated: Nova sends the member's token and its service token,
    and the requests Nova made under the administrator's project go with
    the member's own. Other instances' requests stay."""
    tenants = tenants_all_dbs
    _force(db_engine, tenants.b_arq, state='Bound',
           instance_uuid=A_INSTANCE, hostname='node1')
    c_arq = tenants.create(user('pc'))
    tenants.app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=NOVA_A,
                       status=204)
    assert tenants.uuids() == {c_arq['uuid']}


def test_administrators_delete_by_instance_across_projects(tenants):
    c_arq = tenants.create(user('pc'))
    admin = dict(ADMIN, **{'X-Service-Roles': 'service'})
    tenants.app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=admin,
                       status=204)
    assert tenants.uuids() == {tenants.b_arq['uuid'], c_arq['uuid']}


def test_services_delete_by_instance_across_projects(tenants):
    tenants.app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=SERVICE,
                       status=204)
    assert tenants.uuids() == {tenants.b_arq['uuid']}


def test_marker_of_another_project_is_as_unknown(tenants_all_dbs):
    tenants = tenants_all_dbs
    unknown = str(uuid.uuid4())
    faults = {}
    for marker in (tenants.a_arq['uuid'], unknown):
        response = tenants.app.get(
            f'{ARQS}?limit=1&marker={marker}',
            headers=version('2.4', NOVA_B), status=400)
        faults[marker] = _fault(response).replace(marker, '<marker>')
    assert faults[tenants.a_arq['uuid']] == faults[unknown]
    # Its own marker pages on; A's marker pages A's.
    page = tenants.app.get(f'{ARQS}?limit=1&marker={tenants.b_arq["uuid"]}',
                           headers=version('2.4', NOVA_B)).json
    assert page['arqs'] == []
    second = tenants.create(NOVA_A)
    page = tenants.app.get(f'{ARQS}?limit=1&marker={tenants.a_arq["uuid"]}',
                           headers=version('2.4', NOVA_A)).json
    assert [a['uuid'] for a in page['arqs']] == [second['uuid']]


def test_binding_to_another_projects_instance_tells_nothing_of_it(tenants):
    """B's bind to A's instance fails as B's bind to an instance of its
    own that has requests: one claim per instance keeps B's devices out
    of A's server, and the answer says nothing of A's requests."""
    b_second = tenants.create(NOVA_B)
    tenants.bind([tenants.b_arq], B_INSTANCE, NOVA_B)
    own = _fault(tenants.bind([b_second], B_INSTANCE, NOVA_B, status=400))
    other = _fault(tenants.bind([b_second], A_INSTANCE, NOVA_B,
                                status=400))
    assert other == own.replace(B_INSTANCE, A_INSTANCE)
    assert 'has accelerator requests' not in other
    assert 'already' not in other
    assert tenants.state(b_second) == 'Initial'
    assert tenants.state(tenants.a_arq) == 'Bound'
    assert tenants.uuids(USER_B, f'?instance={A_INSTANCE}') == set()


def test_listing_another_projects_instance_is_as_an_unknown_one(
        tenants, sqlite_engine):
    # A's request still being bound: A gets the 423, B as for nothing.
    _force(sqlite_engine, tenants.a_arq, state='BindStarted')
    resolved = f'{ARQS}?instance={A_INSTANCE}&bind_state=resolved'
    tenants.app.get(resolved, headers=NOVA_A, status=423)
    for instance in (A_INSTANCE, str(uuid.uuid4())):
        for query in (f'?instance={instance}',
                      f'?instance={instance}&bind_state=resolved'):
            assert tenants.uuids(USER_B, query) == set()


def test_nova_reads_every_projects_requests_of_its_instance(
        tenants_all_dbs, db_engine):
    """After an administrator's unshelve or evacuation, nova-compute reads
    the instance's requests (on a reboot, say) with the member's token
    and its service token: it gets those made under the administrator's
    project too, and waits while any of them is still being bound. The
    member's token alone, or a list not by instance, stays within the
    project."""
    tenants = tenants_all_dbs
    a_uuid, b_uuid = tenants.a_arq['uuid'], tenants.b_arq['uuid']
    _force(db_engine, tenants.b_arq, state='Bound',
           instance_uuid=A_INSTANCE, hostname='node1')
    by_instance = f'?instance={A_INSTANCE}'
    resolved = f'{by_instance}&bind_state=resolved'
    assert tenants.uuids(NOVA_A, by_instance) == {a_uuid, b_uuid}
    assert tenants.uuids(NOVA_A, resolved) == {a_uuid, b_uuid}
    assert tenants.uuids(user('pa'), by_instance) == {a_uuid}
    assert tenants.uuids(NOVA_A) == {a_uuid}
    assert tenants.uuids(NOVA_A, '?bind_state=resolved') == {a_uuid}
    _force(db_engine, tenants.b_arq, state='BindStarted')
    tenants.app.get(f'{ARQS}{resolved}', headers=NOVA_A, status=423)
    assert tenants.uuids(user('pa'), resolved) == {a_uuid}


def test_errors_name_only_what_the_caller_sent(tenants):
    a_uuid, b_uuid = tenants.a_arq['uuid'], tenants.b_arq['uuid']
    unknown = str(uuid.uuid4())
    for headers, url in [
            (NOVA_B, f'{ARQS}?arqs={a_uuid}%2C{b_uuid}'),
            (NOVA_B, f'{ARQS}/{a_uuid}'),
            (NOVA_B, f'{ARQS}?arqs={unknown}%2C{b_uuid}')]:
        fault = _fault(tenants.app.delete(url, headers=headers, status=404))
        assert A_INSTANCE not in fault and b_uuid not in fault
    fault = _fault(tenants.app.get(f'{ARQS}/{a_uuid}', headers=NOVA_B,
                                   status=404))
    assert A_INSTANCE not in fault
    body = _bind_body([tenants.a_arq, tenants.b_arq], tenants.rp_uuid,
                      B_INSTANCE)
    fault = _fault(tenants.app.patch_json(ARQS, body, headers=NOVA_B,
                                          status=404))
    assert a_uuid in fault and b_uuid not in fault
    assert A_INSTANCE not in fault
    assert tenants.uuids() == {a_uuid, b_uuid}
    assert tenants.state(tenants.b_arq) == 'Initial'


@pytest.mark.parametrize('value', ['', 'nope', '1234', A_INSTANCE + 'x'])
@pytest.mark.parametrize('headers', [NOVA_A, ADMIN, version('2.4')])
def test_instance_must_be_a_uuid(tenants, value, headers):
    for method in (tenants.app.get, tenants.app.delete):
        fault = _fault(method(f'{ARQS}?instance={value}', headers=headers,
                              status=400))
        assert 'instance must be a UUID' in fault
    assert tenants.state(tenants.a_arq) == 'Bound'


def test_nova_flow_with_the_users_token(tenants):
    """Nova's calls carry the user's token (of the instance's project)
    and a service token: create, bind, list, delete by instance."""
    arqs = [tenants.create(NOVA_B) for _ in range(2)]
    tenants.bind(arqs, B_INSTANCE, NOVA_B)
    listed = tenants.app.get(f'{ARQS}?instance={B_INSTANCE}',
                             headers=NOVA_B).json['arqs']
    assert {a['state'] for a in listed} == {'Bound'}
    assert len(listed) == 2
    tenants.app.delete(f'{ARQS}?instance={B_INSTANCE}', headers=NOVA_B,
                       status=204)
    assert tenants.uuids(NOVA_B) == {tenants.b_arq['uuid']}
    assert tenants.state(tenants.a_arq) == 'Bound'
    # A new instance of B's gets the freed devices.
    tenants.bind([tenants.b_arq], str(uuid.uuid4()), NOVA_B)
    assert tenants.state(tenants.b_arq) == 'Bound'


def test_an_instance_in_another_uuid_form_is_the_same_instance(tenants):
    """Binds store the canonical uuid; a filter or delete naming the
    instance in upper case finds the same requests."""
    upper = A_INSTANCE.upper()
    listed = tenants.app.get(f'{ARQS}?instance={upper}',
                             headers=NOVA_A).json['arqs']
    assert [a['uuid'] for a in listed] == [tenants.a_arq['uuid']]
    tenants.app.delete(f'{ARQS}?instance={upper}', headers=NOVA_A,
                       status=204)
    assert tenants.a_arq['uuid'] not in tenants.uuids()


OLD_TARGET = messaging.Target(version='1.6')


class OldArqs(arqs_endpoint.ArqEndpoint):
    """Accelerator requests at RPC 1.6: delete by instance takes no
    project."""

    target = OLD_TARGET

    def arq_delete(self, context, uuids=None, instance_uuid=None):
        return super().arq_delete(context, uuids, instance_uuid)


def _old_conductor(conf):
    """The endpoints of a conductor of RPC 1.6: every endpoint at 1.6, as
    a conductor of that release serves them."""
    parts = manager.ConductorManager(conf)
    endpoints = parts.endpoints()
    for endpoint in endpoints:
        endpoint.target = OLD_TARGET
    return [OldArqs(parts.binder, parts.notifier) if hasattr(e, 'arq_delete')
            else e for e in endpoints]


@pytest.mark.parametrize('cap', [None, '1.6'])
def test_old_conductors_delete_by_instance_within_the_project(
        api, sqlite_engine, caplog, cap):
    """A conductor before 1.7 (or a cap below it) would delete every
    project's requests of the instance: it is sent the caller's, by uuid,
    when the caller has no service token."""
    api.conf.set_override('require_service_token', False, 'api')
    api.stop_conductor()
    old = rpc_service.RPCService(rpc.CONDUCTOR_TOPIC, 'old-conductor',
                                 _old_conductor(api.conf))
    old.start()
    try:
        if cap:
            api.conf.set_override('conductor', cap, 'upgrade_levels')
        tenants = Tenants(api)
        _force(sqlite_engine, tenants.b_arq, state='Bound',
               instance_uuid=A_INSTANCE, hostname='node1')
        tenants.app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=USER_B,
                           status=204)
        assert tenants.uuids() == {tenants.a_arq['uuid']}
        # Refused, not capped: the operator is told what to set.
        assert ('[upgrade_levels] conductor = 1.6' in caplog.text) == (
            cap is None)
        tenants.app.delete(f'{ARQS}?instance={A_INSTANCE}', headers=NOVA_A,
                           status=204)
        assert tenants.uuids() == set()
    finally:
        old.stop()
