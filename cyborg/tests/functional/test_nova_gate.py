"""Nova 34's real services booting servers with cyborg's accelerators.

Keystone, placement, Glance, nova-api (uWSGI), nova-conductor,
nova-scheduler and two nova-computes (the fake virt driver) run beside
cyborg-api, cyborg-conductor and one cyborg-agent per compute host, each
a process (``cyborg.tests.nova_stack``). A member of a project drives
them through openstacksdk as a user would, with flavors whose
``accel:device_profile`` names device profiles an administrator made.
After each scenario the invariants of ``nova_stack.checks`` hold.

Marked ``nova``: selected only by ``-m nova`` (``tox -e nova``), or by
``-m nova_reduced`` for the reduced run (a boot with one FPGA and its
delete, and the immediate failure). On any failure the end of every
service's log is printed.
"""
import contextlib
import dataclasses
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import sqlalchemy as sa

from cyborg.cmd import aio_glance
from cyborg.tests.functional import gate_stack
from cyborg.tests.nova_stack import checks
from cyborg.tests.nova_stack import keystone as keystone_lib
from cyborg.tests.nova_stack import spawns
from cyborg.tests.nova_stack import stack as stack_lib

openstack = pytest.importorskip('openstack')
if os.environ.get('CYBORG_TEST_REQUIRE_SERVICES') != '1':
    pytest.importorskip('nova')

pytestmark = [
    pytest.mark.nova,
    # The SDK's notices about its own future releases.
    pytest.mark.filterwarnings('ignore::PendingDeprecationWarning'),
    pytest.mark.filterwarnings('ignore::DeprecationWarning')]

FPGA_GROUP = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}
# A function no image in Glance provides: known to fail when Nova binds.
MISSING_FUNCTION = 'no-such-function'
PROFILES = {
    'nova-fpga': [FPGA_GROUP],
    'nova-fpga-missing-function': [
        {**FPGA_GROUP, 'accel:function_id': MISSING_FUNCTION}],
}
# flavor -> its device profile (None: no accelerator)
FLAVORS = {'fpga1': 'nova-fpga', 'plain': None,
           'fpga-missing-function': 'nova-fpga-missing-function'}
# Seconds a server gets to become ACTIVE or ERROR, or to be deleted.
SERVER_WAIT = 240
MEMBER = 'demo'


@dataclasses.dataclass
class Cloud:
    """The running stack and its users."""

    stack: stack_lib.NovaStack
    engine: sa.engine.Engine
    admin: Any          # openstack.connection.Connection
    member: Any
    admin_http: requests.Session
    image: str
    flavors: dict[str, str]

    @contextlib.contextmanager
    def watched(self) -> Iterator[None]:
        """Print the tails of every log when the body fails."""
        try:
            yield
        except BaseException:
            print(self.stack.tails(60), flush=True)
            raise

    def boot(self, flavor: str, wait: bool = True,
             status: str = 'ACTIVE') -> Any:
        server = self.member.compute.create_server(
            name=f'{flavor}-{uuid.uuid4().hex[:6]}', image_id=self.image,
            flavor_id=self.flavors[flavor], networks='none')
        if not wait:
            return server
        failures = ['ACTIVE'] if status == 'ERROR' else ['ERROR']
        return self.member.compute.wait_for_server(
            server, status=status, failures=failures, wait=SERVER_WAIT)

    def delete(self, server: Any) -> None:
        self.member.compute.delete_server(server)
        self.member.compute.wait_for_delete(server, wait=SERVER_WAIT)

    def host_of(self, server: Any) -> str:
        return self.admin.compute.get_server(server.id).compute_host

    def arqs(self, instance: str) -> list[dict[str, Any]]:
        """The instance's requests as cyborg-api lists them to an admin."""
        answer = self.admin_http.get(
            f'{self.stack.api_url}/accelerator_requests',
            params={'instance': instance}, timeout=30)
        assert answer.status_code == 200, answer.text
        return list(answer.json()['arqs'])

    def allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        """Placement's allocations of ``consumer``, by provider."""
        found = self.stack.placement(self.admin_http,
                                     f'/allocations/{consumer}')
        return {rp: a['resources']
                for rp, a in found['allocations'].items()}

    def usages(self, rp: str) -> dict[str, int]:
        return dict(self.stack.placement(
            self.admin_http, f'/resource_providers/{rp}/usages')['usages'])

    def spawns_of(self, instance: str) -> list[dict[str, Any]]:
        return [call for path in self.stack.nova.accel_logs.values()
                for call in spawns.read(str(path))
                if call['instance'] == instance]

    def assert_invariants(self) -> None:
        servers = {s.id for s in self.admin.compute.servers(
            all_projects=True)}
        found = checks.problems(self.engine, servers, self.usages)
        assert not found, found

    def assert_nothing_left(self, instance: str) -> None:
        """No request, no handle in use, no allocation of ``instance``."""
        assert self.arqs(instance) == []
        assert checks.arqs_of(self.engine, instance) == []
        assert self.allocations(instance) == {}
        assert checks.handles_in_use(self.engine) == 0


def _connection(keystone: keystone_lib.Keystone, user: str, password: str,
                project: str) -> Any:
    return openstack.connection.Connection(
        auth_url=keystone.url + '/v3', username=user, password=password,
        project_name=project, user_domain_name='Default',
        project_domain_name='Default',
        region_name=keystone_lib.REGION, compute_api_version='2.latest')


def _populate(stack: stack_lib.NovaStack) -> Cloud:
    """What an operator adds before users come: a project and its
    member, an image, the demo bitstream, device profiles and flavors."""
    keystone = stack.keystone
    member_password = 'member-' + uuid.uuid4().hex[:8]
    keystone.add_user(MEMBER, member_password, MEMBER, ('member',))
    admin = _connection(keystone, 'admin', keystone.admin_password, 'admin')
    member = _connection(keystone, MEMBER, member_password, MEMBER)
    admin_http = keystone.admin_session()
    aio_glance.ensure_demo_image(stack.glance.url,
                                 admin_http.headers['X-Auth-Token'])
    image = admin.image.create_image(
        name='tiny', data=b'\0' * 1024, disk_format='raw',
        container_format='bare', visibility='public',
        allow_duplicates=True)
    for name, groups in PROFILES.items():
        admin.accelerator.create_device_profile(name=name, groups=groups)
    flavors = {}
    for name, profile in FLAVORS.items():
        flavor = admin.compute.create_flavor(name=name, ram=64, vcpus=1,
                                             disk=1)
        if profile:
            admin.compute.create_flavor_extra_specs(
                flavor, {'accel:device_profile': profile})
        flavors[name] = flavor.id
    return Cloud(stack, sa.create_engine(stack.database_url), admin, member,
                 admin_http, image.id, flavors)


@pytest.fixture(scope='module')
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    workdir = tmp_path_factory.mktemp('nova-gate')
    with stack_lib.NovaStack.open(workdir) as stack:
        stack.bring_up()
        print(f'stack up: {stack.timings}')
        populated = _populate(stack)
        yield populated
        populated.engine.dispose()


@pytest.mark.nova_reduced
def test_boot_with_one_fpga_and_delete(cloud):
    with cloud.watched():
        server = cloud.boot('fpga1')
        host = cloud.host_of(server)
        [arq] = cloud.arqs(server.id)
        assert (arq['state'], arq['hostname'], arq['instance_uuid']) == (
            'Bound', host, server.id), arq
        assert cloud.allocations(server.id)[arq['device_rp_uuid']] == {
            'FPGA': 1}
        [spawn] = cloud.spawns_of(server.id)
        assert spawn['host'] == host
        assert [a['uuid'] for a in spawn['accel_info']] == [arq['uuid']]
        assert spawn['accel_info'][0]['attach_handle_info'] == \
            arq['attach_handle_info']
        assert checks.handles_in_use(cloud.engine) == 1
        cloud.assert_invariants()

        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


@pytest.mark.nova_reduced
def test_boot_the_same_flavor_without_an_accelerator(cloud):
    with cloud.watched():
        server = cloud.boot('plain')
        assert cloud.arqs(server.id) == []
        rps = set(cloud.allocations(server.id))
        assert rps == {gate_stack.wait_for(
            lambda: cloud.stack._compute_nodes(cloud.admin_http),
            'compute nodes')[cloud.host_of(server)]}
        [spawn] = cloud.spawns_of(server.id)
        assert spawn['accel_info'] == []
        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


@pytest.mark.nova_reduced
def test_bind_failure_known_at_patch_time_fails_the_server(cloud):
    """No image provides the profile's function: cyborg refuses the bind
    PATCH, nova-conductor deletes the requests and the server ends in
    ERROR with nothing left behind."""
    with cloud.watched():
        server = cloud.boot('fpga-missing-function', status='ERROR')
        assert cloud.spawns_of(server.id) == []
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()
        cloud.delete(server)
        cloud.assert_invariants()
