"""Project limits with a real Keystone's unified limits.

One stack for the module: Keystone (fernet tokens, under waitress, its
database on MariaDB), cyborg-api validating tokens against it, a
conductor reading cyborg's limits from it as the ``cyborg`` service user
(the system reader role, a system-scoped token) with ``[quota] driver =
unified_limits``, and an agent with the fake driver (one card of four
FPGA handles). No placement: Nova's binds need none. Keystone holds
registered limits of 3 accelerator requests and 1 FPGA; each test works
in projects of its own, made for it, with users holding ``member``, and
binds with a ``nova`` service user's token as Nova sends it.
"""
import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from cyborg.tests.harness import gate_stack
from cyborg.tests.nova_stack import keystone as keystone_lib

HOSTNAME = 'limits-node'
REGISTERED = {'accelerator_requests': 3, 'class:FPGA': 1}
TIMEOUT = 30


class Cloud:
    """The stack, its Keystone, and what the tests call them with."""

    def __init__(self, stack: keystone_lib.KeystoneStack,
                 keystone: keystone_lib.Keystone) -> None:
        self.stack = stack
        self.keystone = keystone
        self.admin = keystone.admin_session()
        keystone.add_service_user('nova')
        self.service_token = keystone.token(
            'nova', keystone.service_password, keystone_lib.SERVICE_PROJECT)
        [self.rp_uuid] = [d['rp_uuid'] for d in self.call(
            self.admin.headers, 'GET', '/deployables', 200).json()[
                'deployables']]
        for name, count in (('one', '1'), ('two', '2')):
            self.call(self.admin.headers, 'POST', '/device_profiles', 201,
                      json=[{'name': name, 'groups': [{
                          'resources:FPGA': count,
                          'trait:CUSTOM_FAKE_DEVICE': 'required'}]}])

    def call(self, headers: Any, method: str, path: str, status: int,
             **kwargs: Any) -> requests.Response:
        response = requests.request(method, self.stack.api_url + path,
                                    headers=dict(headers), timeout=TIMEOUT,
                                    **kwargs)
        assert response.status_code == status, (
            method, path, response.status_code, response.text)
        return response

    def member(self, limits: dict[str, int] | None = None
               ) -> tuple[str, dict[str, str]]:
        """A new project (with ``limits`` of its own) and the headers of a
        member of it, with Nova's service token."""
        name = f'limits-{uuid.uuid4().hex[:8]}'
        password = uuid.uuid4().hex
        project = self.keystone.project(name)
        for resource, value in (limits or {}).items():
            self.keystone.set_limit(project, resource, value)
        self.keystone.add_user(name, password, name, ('member', 'reader'))
        return project, {'X-Auth-Token': self.keystone.token(name, password,
                                                             name),
                         'X-Service-Token': self.service_token}

    def create(self, headers: dict[str, str], profile: str,
               status: int = 201) -> requests.Response:
        return self.call(headers, 'POST', '/accelerator_requests', status,
                         json={'device_profile_name': profile})

    def bind(self, headers: dict[str, str], arqs: list[str],
             status: int) -> requests.Response:
        instance = str(uuid.uuid4())
        return self.call(headers, 'PATCH', '/accelerator_requests', status,
                         json={arq: [
                             {'path': '/hostname', 'op': 'add',
                              'value': HOSTNAME},
                             {'path': '/device_rp_uuid', 'op': 'add',
                              'value': self.rp_uuid},
                             {'path': '/instance_uuid', 'op': 'add',
                              'value': instance}] for arq in arqs})


def _stop(stack: keystone_lib.KeystoneStack) -> None:
    """Stop every process; cyborg's must exit 0 on SIGTERM (Keystone,
    under waitress, may die of it)."""
    codes = stack.stop_all()
    codes.pop('keystone', None)
    assert codes == dict.fromkeys(codes, 0), (codes, stack.tails())


def _fault(response: requests.Response) -> str:
    return json.loads(response.json()['error_message'])['faultstring']


def _start(stack: keystone_lib.KeystoneStack,
           keystone: keystone_lib.Keystone) -> None:
    """Keystone with cyborg's service, endpoints and registered limits,
    then cyborg-api, the conductor and the agent, until the agent's card
    is listed."""
    keystone.setup()
    keystone.process().start()
    gate_stack.wait_for(keystone.up, 'keystone', 60)
    keystone.register(stack.api_url)
    keystone.register_limits(REGISTERED)
    stack.add_keystone_api(keystone)
    stack.add_conductor('conductor1', extra={
        'placement': {'auth_type': '', 'endpoint': '',
                      'endpoint_override': ''},
        'nova': {'send_events': 'false'},
        **keystone.limits_reader('cyborg')})
    stack.add_agent('agent1', HOSTNAME, 1, 4)
    stack.start('api', 'conductor1', 'agent1')
    stack.ready('conductor1', 'agent1')
    gate_stack.wait_for(stack.api_up, 'cyborg-api', 60)
    admin = keystone.admin_session()
    gate_stack.wait_for(
        lambda: admin.get(stack.api_url + '/deployables',
                          timeout=TIMEOUT).json()['deployables'],
        'the agent to report its card', 60)


@pytest.fixture(scope='module',
                params=gate_stack.backends('postgresql'))
def cloud(request, tmp_path_factory) -> Iterator[Cloud]:
    workdir = tmp_path_factory.mktemp('limits')
    with contextlib.ExitStack() as cleanup:
        stack, keystone = keystone_lib.new_stack(cleanup, workdir,
                                                 request.param)
        cleanup.callback(_stop, stack)
        try:
            _start(stack, keystone)
            made = Cloud(stack, keystone)
        except BaseException:
            print(stack.tails())
            raise
        yield made


@pytest.mark.flow
def test_a_create_over_the_registered_limit_is_refused(cloud):
    project, member = cloud.member()
    cloud.create(member, 'two')
    assert _fault(cloud.create(member, 'two', 403)) == (
        f'Project {project} is over its limit of 3 for accelerator_requests: '
        'it holds 2 and this request makes 2.')
    cloud.create(member, 'one')
    assert len(cloud.call(member, 'GET', '/accelerator_requests',
                          200).json()['arqs']) == 3


@pytest.mark.flow
def test_a_project_limit_goes_before_the_registered_one(cloud):
    project, member = cloud.member({'accelerator_requests': 5})
    for _ in range(2):
        cloud.create(member, 'two')
    assert _fault(cloud.create(member, 'two', 403)).startswith(
        f'Project {project} is over its limit of 5 for '
        'accelerator_requests: it holds 4')


@pytest.mark.flow
def test_a_bind_over_a_class_limit_is_refused_whole(cloud):
    project, member = cloud.member()
    arqs = [a['uuid'] for a in cloud.create(member, 'two').json()['arqs']]
    assert _fault(cloud.bind(member, arqs, 403)) == (
        f'Project {project} is over its limit of 1 for class:FPGA: it '
        'holds 0 and this request binds 2.')
    states = {a['uuid']: a['state'] for a in cloud.call(
        member, 'GET', '/accelerator_requests', 200).json()['arqs']}
    assert states == dict.fromkeys(arqs, 'Initial')
    cloud.bind(member, arqs[:1], 202)
    assert 'it holds 1 and this request binds 1' in _fault(
        cloud.bind(member, arqs[1:], 403))
