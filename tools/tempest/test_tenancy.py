"""Tenancy probes: two projects' real Keystone tokens against a live stack.

``tools/tempest/run.py`` runs this module with pytest after tempest,
against the same Keystone and cyborg-api (which validates tokens with
keystonemiddleware). It makes two projects, each with a user holding the
``member`` role, and a ``nova`` user holding the ``service`` role in
project ``service``, whose token goes as ``X-Service-Token`` the way Nova
sends it. Project B must get for project A's requests and instance what
it gets for ones that do not exist, except that Nova acts for its
instances: a call by instance with a valid service token reaches every
project's requests of that instance. A device profile private to project
A (microversion 2.10) is seen and used by A alone until the administrator
adds B to its access list; to B it is a profile that does not exist. A
third project with limits of its own in Keystone meets them (the
conductor reads the limits there).

The stack is named by CYBORG_TENANCY_KEYSTONE (Keystone's URL),
CYBORG_TENANCY_API (cyborg-api's ``/v2`` URL) and
CYBORG_TENANCY_ADMIN_PASSWORD (the bootstrap admin's); without them the
module is skipped.
"""
import json
import os
import uuid
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest
import requests

from cyborg.tests.nova_stack import keystone

KEYSTONE = os.environ.get('CYBORG_TENANCY_KEYSTONE', '')
API = os.environ.get('CYBORG_TENANCY_API', '')
ADMIN_PASSWORD = os.environ.get('CYBORG_TENANCY_ADMIN_PASSWORD', '')

pytestmark = pytest.mark.skipif(
    not (KEYSTONE and API and ADMIN_PASSWORD),
    reason='no live stack: run through tools/tempest/run.py')

TIMEOUT = 30
PAGINATION = {'OpenStack-API-Version': 'accelerator 2.4'}
PRIVATE_PROFILES = {'OpenStack-API-Version': 'accelerator 2.10'}


def _token(user: str, password: str, project: str) -> str:
    return keystone.project_token(KEYSTONE, user, password, project,
                                  TIMEOUT)


class Identity:
    """Keystone's admin API, as the bootstrap admin."""

    def __init__(self) -> None:
        self.token = _token('admin', ADMIN_PASSWORD, 'admin')
        self.roles = {r['name']: r['id']
                      for r in self.call('GET', '/roles')['roles']}

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(
            method, f'{KEYSTONE}/v3{path}', timeout=TIMEOUT,
            headers={'X-Auth-Token': self.token}, **kwargs)
        assert response.status_code < 300, (path, response.text)
        return response.json() if response.content else None

    def project(self, name: str) -> str:
        found = self.call('GET', '/projects', params={'name': name})
        if found['projects']:
            return found['projects'][0]['id']
        return self.call('POST', '/projects', json={'project': {
            'name': name, 'domain_id': 'default'}})['project']['id']

    def user_token(self, project: str, role: str) -> str:
        """A token of a new user holding ``role`` in ``project``."""
        name = f'tenancy-{role}-{uuid.uuid4().hex[:8]}'
        password = uuid.uuid4().hex
        user = self.call('POST', '/users', json={'user': {
            'name': name, 'domain_id': 'default',
            'password': password}})['user']
        self.call('PUT', f'/projects/{self.project(project)}/users/'
                         f'{user["id"]}/roles/{self.roles[role]}')
        return _token(name, password, project)


class Caller:
    """Requests to cyborg-api with one set of tokens."""

    def __init__(self, token: str, service_token: str | None = None
                 ) -> None:
        self.headers = {'X-Auth-Token': token}
        if service_token:
            self.headers['X-Service-Token'] = service_token

    def __call__(self, method: str, path: str, status: int,
                 headers: dict[str, str] | None = None,
                 **kwargs: Any) -> requests.Response:
        response = requests.request(
            method, f'{API}{path}', headers={**self.headers,
                                             **(headers or {})},
            timeout=TIMEOUT, **kwargs)
        assert response.status_code == status, (
            method, path, response.status_code, response.text)
        return response


def fault(response: requests.Response) -> str:
    return json.loads(response.json()['error_message'])['faultstring']


def bind_body(arqs: list[str], hostname: str, rp_uuid: str,
              instance: str) -> dict[str, Any]:
    return {arq: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
        for arq in arqs}


class World:
    """Project A's request bound to A's instance, B's bound to B's
    instance, and a request of B's left unbound."""

    def __init__(self) -> None:
        identity = Identity()
        suffix = uuid.uuid4().hex[:8]
        # Keystone's calls take most of the probes' time: the three
        # users are made at once.
        with futures.ThreadPoolExecutor(3) as pool:
            service, a_token, b_token = pool.map(
                identity.user_token,
                ['service', f'tenancy-a-{suffix}', f'tenancy-b-{suffix}'],
                ['service', 'member', 'member'])
        self.a_project, self.b_project = (
            identity.project(f'tenancy-{p}-{suffix}') for p in 'ab')
        self.admin = Caller(identity.token, service)
        self.a = Caller(a_token, service)
        self.b = Caller(b_token, service)
        self.b_alone = Caller(b_token)
        self.profile = f'tenancy-{suffix}'
        self.admin('POST', '/device_profiles', 201, json=[{
            'name': self.profile,
            'groups': [{'resources:FPGA': '1',
                        'trait:CUSTOM_FAKE_DEVICE': 'required'}]}])
        device = self.admin('GET', '/devices', 200).json()['devices'][0]
        deployable = next(
            d for d in self.admin('GET', '/deployables', 200).json()[
                'deployables'] if d['rp_uuid'])
        self.hostname, self.rp_uuid = device['hostname'], deployable[
            'rp_uuid']
        self.a_instance, self.b_instance = (str(uuid.uuid4()),
                                            str(uuid.uuid4()))
        self.a_arq = self.create(self.a)
        self.bind(self.a, [self.a_arq], self.a_instance)
        self.b_arq = self.create(self.b)
        self.bind(self.b, [self.b_arq], self.b_instance)
        self.b_spare = self.create(self.b)

    def create(self, caller: Caller) -> str:
        [arq] = caller('POST', '/accelerator_requests', 201, json={
            'device_profile_name': self.profile}).json()['arqs']
        return arq['uuid']

    def bind(self, caller: Caller, arqs: list[str], instance: str,
             status: int = 202) -> requests.Response:
        return caller('PATCH', '/accelerator_requests', status,
                      json=bind_body(arqs, self.hostname, self.rp_uuid,
                                     instance))

    def state(self, caller: Caller, arq: str) -> str:
        return caller('GET', f'/accelerator_requests/{arq}', 200).json()[
            'state']

    def clean(self) -> None:
        for instance in (self.a_instance, self.b_instance):
            self.admin('DELETE', f'/accelerator_requests?instance={instance}',
                       204)
        listed = self.admin('GET', '/accelerator_requests', 200).json()
        if self.b_spare in {a['uuid'] for a in listed['arqs']}:
            self.admin('DELETE', f'/accelerator_requests/{self.b_spare}',
                       204)
        self.admin('DELETE', f'/device_profiles/{self.profile}', 204)


@pytest.fixture(scope='module')
def world() -> Iterator[World]:
    """Shared by the tests below, in their order: those that change
    nothing come first."""
    made = World()
    yield made
    made.clean()


def test_other_projects_requests_are_invisible(world):
    assert world.state(world.a, world.a_arq) == 'Bound'
    # A service token reaches across projects only by instance.
    for caller in (world.b, world.b_alone):
        caller('GET', f'/accelerator_requests/{world.a_arq}', 404)
        listed = caller('GET', '/accelerator_requests', 200).json()['arqs']
        assert {a['uuid'] for a in listed} == {world.b_arq, world.b_spare}
    for query in ('', '&bind_state=resolved'):
        assert world.b_alone('GET', f'/accelerator_requests?instance='
                                    f'{world.a_instance}{query}',
                             200).json()['arqs'] == []


def test_nova_reads_every_projects_requests_of_an_instance(world):
    for query in ('', '&bind_state=resolved'):
        listed = world.b('GET', f'/accelerator_requests?instance='
                                f'{world.a_instance}{query}', 200).json()
        assert [a['uuid'] for a in listed['arqs']] == [world.a_arq]


def test_marker_of_another_project_is_an_unknown_one(world):
    unknown = str(uuid.uuid4())
    answers = [fault(world.b('GET', f'/accelerator_requests?limit=1&marker='
                                    f'{marker}', 400, headers=PAGINATION)
                     ).replace(marker, '<marker>')
               for marker in (world.a_arq, unknown)]
    assert answers[0] == answers[1]


def test_binding_to_another_projects_instance_tells_nothing(world):
    own = fault(world.bind(world.b, [world.b_spare], world.b_instance, 400))
    other = fault(world.bind(world.b, [world.b_spare], world.a_instance,
                             400))
    assert other == own.replace(world.b_instance, world.a_instance)
    assert 'has accelerator requests' not in other
    assert world.state(world.b, world.b_spare) == 'Initial'


@pytest.mark.parametrize('value', ['', 'not-a-uuid'])
def test_instance_must_be_a_uuid(world, value):
    for method in ('GET', 'DELETE'):
        assert 'instance must be a UUID' in fault(world.b(
            method, f'/accelerator_requests?instance={value}', 400))


def test_delete_by_instance_needs_a_valid_service_token(world):
    """Without a service token or with a forged ``X-Service-Roles``
    (which keystonemiddleware drops): the ``403``. With a token lacking
    the ``service`` role as the service token: keystonemiddleware's
    ``401`` (the stack sets ``service_token_roles_required``). A's
    request stays."""
    path = f'/accelerator_requests?instance={world.a_instance}'
    for headers in ({}, {'X-Service-Roles': 'service'}):
        assert 'requires a service token' in fault(
            world.b_alone('DELETE', path, 403, headers=headers))
    b_token = world.b_alone.headers['X-Auth-Token']
    world.b_alone('DELETE', path, 401, headers={'X-Service-Token': b_token})
    assert world.state(world.a, world.a_arq) == 'Bound'
    unbind = {world.a_arq: [{'op': 'remove', 'path': f'/{field}'} for field
                            in ('hostname', 'device_rp_uuid',
                                'instance_uuid')]}
    world.b('PATCH', '/accelerator_requests', 404, json=unbind)
    world.b('DELETE', f'/accelerator_requests/{world.a_arq}', 404)
    assert world.state(world.a, world.a_arq) == 'Bound'


def test_nova_deletes_every_projects_requests_of_an_instance(world):
    """B's token with a service token, as Nova deletes a server whose
    requests it made under another project (an administrator's unshelve
    or evacuation): A's request of that instance goes, B's stay."""
    world.b('DELETE', f'/accelerator_requests?instance={world.a_instance}',
            204)
    world.a('GET', f'/accelerator_requests/{world.a_arq}', 404)
    assert world.state(world.b, world.b_arq) == 'Bound'


def test_the_owner_deletes_by_instance(world):
    world.b('DELETE', f'/accelerator_requests?instance={world.b_instance}',
            204)
    world.b('GET', f'/accelerator_requests/{world.b_arq}', 404)
    assert world.state(world.b, world.b_spare) == 'Initial'


# -- a device profile private to project A (2.10) ---------------------------

class Private:
    """A profile private to project A, and the requests made from it."""

    def __init__(self, world: World) -> None:
        self.name = f'{world.profile}-private'
        self.uuid = world.admin(
            'POST', '/device_profiles', 201, headers=PRIVATE_PROFILES,
            json=[{'name': self.name, 'is_public': False,
                   'groups': [{'resources:FPGA': '1'}]}]).json()['uuid']
        world.admin('PUT', f'/device_profiles/{self.uuid}/projects/'
                           f'{world.a_project}', 204,
                    headers=PRIVATE_PROFILES)
        self.arqs: list[str] = []

    def create(self, caller: Caller, status: int = 201
               ) -> requests.Response:
        response = caller('POST', '/accelerator_requests', status,
                          json={'device_profile_name': self.name})
        if status == 201:
            self.arqs += [a['uuid'] for a in response.json()['arqs']]
        return response

    def names(self, caller: Caller) -> list[str]:
        return [d['name'] for d in caller(
            'GET', f'/device_profiles?name={self.name}', 200,
            headers=PRIVATE_PROFILES).json()['device_profiles']]


@pytest.fixture(scope='module')
def private(world: World) -> Iterator[Private]:
    made = Private(world)
    yield made
    if made.arqs:
        world.admin('DELETE', '/accelerator_requests?arqs='
                              + ','.join(made.arqs), 204)
    world.admin('DELETE', f'/device_profiles/{made.uuid}', 204)


def test_a_private_profile_is_its_projects_alone(world, private):
    assert world.admin('GET', f'/device_profiles/{private.uuid}/projects',
                       200, headers=PRIVATE_PROFILES).json() == {
        'projects': [world.a_project]}
    assert private.names(world.a) == [private.name]
    for ref in (private.uuid, private.name):
        shown = world.a('GET', f'/device_profiles/{ref}', 200,
                        headers=PRIVATE_PROFILES).json()['device_profile']
        assert (shown['uuid'], shown['is_public']) == (private.uuid, False)
    # To B, with or without Nova's service token, it does not exist.
    missing = {private.uuid: str(uuid.uuid4()),
               private.name: f'{private.name}-missing'}
    for caller in (world.b, world.b_alone):
        assert private.names(caller) == []
        for ref, other in missing.items():
            hidden = fault(caller('GET', f'/device_profiles/{ref}', 404,
                                  headers=PRIVATE_PROFILES))
            absent = fault(caller('GET', f'/device_profiles/{other}', 404,
                                  headers=PRIVATE_PROFILES))
            assert hidden == absent.replace(other, ref)


def test_only_its_projects_create_requests_from_it(world, private):
    [arq] = private.create(world.a).json()['arqs']
    assert arq['device_profile_name'] == private.name
    refused = fault(private.create(world.b, 404))
    unknown = fault(world.b('POST', '/accelerator_requests', 404, json={
        'device_profile_name': f'{private.name}-missing'}))
    assert refused == unknown.replace(f'{private.name}-missing',
                                      private.name)


def test_a_project_added_by_the_administrator_may_use_it(world, private):
    path = f'/device_profiles/{private.uuid}/projects/{world.b_project}'
    world.admin('PUT', path, 204, headers=PRIVATE_PROFILES)
    assert private.names(world.b) == [private.name]
    private.create(world.b)
    world.admin('DELETE', path, 204, headers=PRIVATE_PROFILES)
    assert private.names(world.b) == []
    private.create(world.b, 404)


def test_a_projects_own_limits_refuse_what_goes_over(world):
    """A new project whose own limits in Keystone are one request and no
    FPGA: its second create is a 403 naming the limit, and so is the
    bind of its one request; the registered limits are far above."""
    identity = Identity()
    [service] = identity.call('GET', '/services', params={
        'type': 'accelerator'})['services']
    if not identity.call('GET', '/registered_limits', params={
            'service_id': service['id']})['registered_limits']:
        pytest.skip('no limits are registered for the accelerator service')
    name = f'tenancy-limits-{uuid.uuid4().hex[:8]}'
    project = identity.project(name)
    identity.call('POST', '/limits', json={'limits': [
        {'service_id': service['id'], 'region_id': keystone.REGION,
         'project_id': project, 'resource_name': resource,
         'resource_limit': value}
        for resource, value in (('accelerator_requests', 1),
                                ('class:FPGA', 0))]})
    caller = Caller(identity.user_token(name, 'member'),
                    world.a.headers['X-Service-Token'])
    arq = world.create(caller)
    try:
        over = fault(caller('POST', '/accelerator_requests', 403, json={
            'device_profile_name': world.profile}))
        assert over == (f'Project {project} is over its limit of 1 for '
                        'accelerator_requests: it holds 1 and this request '
                        'makes 1.')
        over = fault(world.bind(caller, [arq], str(uuid.uuid4()), 403))
        assert over == (f'Project {project} is over its limit of 0 for '
                        'class:FPGA: it holds 0 and this request binds 1.')
        assert world.state(caller, arq) == 'Initial'
    finally:
        caller('DELETE', f'/accelerator_requests/{arq}', 204)
