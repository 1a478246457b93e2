"""A deployment for the dashboard: Keystone, cyborg's services with fake
devices, and Horizon with the plugin, as processes on 127.0.0.1.

``running`` starts it and stops every process at the end: Keystone
(fernet tokens, under waitress, its database on MariaDB) with cyborg's
``accelerator`` endpoint in its catalog, placement, cyborg-api validating
tokens against that Keystone, a conductor, an agent with the fake driver
(two cards of two FPGA functions) on SQLite and RabbitMQ, and Horizon
(``horizon_server.py``). ``Cloud`` holds the users: an administrator and
a member of the project ``dashboard``, and a member of a second project
who owns a request the first must not see. Used by the browser test
(cyborg/tests/functional/test_dashboard.py) and the dashboard's
benchmark (tools/bench/dashboard.py).
"""
import contextlib
import json
import pathlib
import uuid
from collections.abc import Iterator

import requests

from cyborg.tests import conftest
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import horizon_server
from cyborg.tests.harness import placement_server
from cyborg.tests.nova_stack import keystone as keystone_lib

HOSTNAME = 'dashboard-node'
# The agent's [DEFAULT] host, apart from its compute node's name: the
# drivers API takes this one, the host pages show the other.
AGENT_HOST = 'agent1'
PROJECT = 'dashboard'
OTHER_PROJECT = 'dashboard-other'
PROFILE = 'dashboard-fpga'
TIMEOUT = 30


class Cloud:
    """The stack, its Keystone and Horizon, and the users the tests sign
    in as (name -> password)."""

    def __init__(self, stack: keystone_lib.KeystoneStack,
                 keystone: keystone_lib.Keystone, horizon_url: str,
                 workdir: pathlib.Path) -> None:
        self.stack = stack
        self.keystone = keystone
        self.horizon_url = horizon_url
        self.workdir = workdir
        self.passwords: dict[str, str] = {}
        self.admin = self._user('dashboard-admin', PROJECT,
                                ('admin', 'member', 'reader'))
        self.member = self._user('dashboard-member', PROJECT,
                                 ('member', 'reader'))
        self.other = self._user('dashboard-other', OTHER_PROJECT,
                                ('member', 'reader'))
        self.project_id = keystone.project(PROJECT)
        self.api('dashboard-admin', 'POST', '/device_profiles', 201,
                 json=[{'name': PROFILE, 'groups': [{
                     'resources:FPGA': '1',
                     'trait:CUSTOM_FAKE_DEVICE': 'required'}]}])
        # One request of each project.
        self.own_arq = self.api('dashboard-member', 'POST',
                                '/accelerator_requests', 201,
                                json={'device_profile_name': PROFILE}
                                ).json()['arqs'][0]['uuid']
        self.other_arq = self.api('dashboard-other', 'POST',
                                  '/accelerator_requests', 201,
                                  json={'device_profile_name': PROFILE}
                                  ).json()['arqs'][0]['uuid']

    def _user(self, name: str, project: str, roles: tuple[str, ...]) -> str:
        self.passwords[name] = uuid.uuid4().hex
        self.keystone.add_user(name, self.passwords[name], project, roles)
        return name

    def api(self, user: str, method: str, path: str, status: int,
            **kwargs: object) -> requests.Response:
        """A cyborg-api call with a token of ``user`` in its project."""
        project = OTHER_PROJECT if user == self.other else PROJECT
        token = self.keystone.token(user, self.passwords[user], project)
        response = requests.request(
            method, self.stack.api_url + path, timeout=TIMEOUT,
            headers={'X-Auth-Token': token,
                     'OpenStack-API-Version': 'accelerator latest'},
            **kwargs)  # type: ignore[arg-type]
        assert response.status_code == status, (
            method, path, response.status_code, response.text)
        return response


def fault(response: requests.Response) -> str:
    """The sentence of an API refusal (its ``faultstring``)."""
    return str(json.loads(response.json()['error_message'])['faultstring'])


def start(stack: keystone_lib.KeystoneStack,
          keystone: keystone_lib.Keystone) -> None:
    """Keystone with cyborg's service and endpoints, placement with the
    agent's compute node, then cyborg-api, the conductor and the agent,
    until the agent's cards are listed."""
    keystone.setup()
    keystone.process().start()
    stack.add_placement().start()
    gate_stack.wait_for(keystone.up, 'keystone', 60)
    keystone.register(stack.api_url)
    gate_stack.wait_for(stack.placement_up, 'placement', 60)
    placement_server.Placement(stack.placement_url).create_compute_node(
        HOSTNAME)
    stack.add_keystone_api(keystone)
    stack.add_conductor('conductor1', extra={
        'nova': {'send_events': 'false'}})
    stack.add_agent(AGENT_HOST, HOSTNAME, 2, 2)
    stack.start('api', 'conductor1', AGENT_HOST)
    stack.ready('conductor1', AGENT_HOST)
    gate_stack.wait_for(stack.api_up, 'cyborg-api', 60)
    admin = keystone.admin_session()
    gate_stack.wait_for(
        lambda: len(admin.get(stack.api_url + '/devices',
                              timeout=TIMEOUT).json()['devices']) == 2,
        'the agent to report its cards', 60)


def stop(stack: keystone_lib.KeystoneStack) -> None:
    """Stop every process; cyborg's must exit 0 on SIGTERM (Keystone,
    placement and Horizon, under waitress, may die of it)."""
    codes = stack.stop_all()
    for name in ('keystone', 'placement', 'horizon'):
        codes.pop(name, None)
    assert codes == dict.fromkeys(codes, 0), (codes, stack.tails())


@contextlib.contextmanager
def running(workdir: pathlib.Path,
            cyborg_backend: str = 'sqlite') -> Iterator[Cloud]:
    """The deployment, its processes stopped at the end; in ``workdir``.
    cyborg's database on ``cyborg_backend`` (sqlite, mysql or
    postgresql)."""
    conftest.require_module('openstack_dashboard')
    with contextlib.ExitStack() as cleanup:
        stack, keystone = keystone_lib.new_stack(cleanup, workdir,
                                                 cyborg_backend)
        cleanup.callback(stop, stack)
        try:
            start(stack, keystone)
            horizon = horizon_server.Horizon(stack, keystone.url,
                                             keystone_lib.REGION)
            horizon.start()
            made = Cloud(stack, keystone, horizon.url, workdir)
        except BaseException:
            print(stack.tails())
            raise
        yield made


