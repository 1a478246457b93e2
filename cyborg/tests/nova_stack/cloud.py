"""The deployment as its users see it: a project member, an administrator,
and what an operator adds before users come.

``populate`` makes a project with a member, a tiny public image, the
demo bitstream for the fake FPGAs (``aio_glance``), device profiles and
flavors through openstacksdk; ``Cloud`` boots and deletes servers as
the member and reads what cyborg, placement and the virt driver hold.
"""
import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import openstack
import requests
import sqlalchemy as sa

from cyborg.cmd import aio_glance
from cyborg.tests.harness import gate_stack
from cyborg.tests.nova_stack import checks
from cyborg.tests.nova_stack import keystone as keystone_lib
from cyborg.tests.nova_stack import neutron
from cyborg.tests.nova_stack import spawns
from cyborg.tests.nova_stack import stack as stack_lib

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
    # The demo bitstream, whose accel:function_id the profiles ask for.
    bitstream: str

    @contextlib.contextmanager
    def watched(self) -> Iterator[None]:
        """Print the tails of every log when the body fails."""
        try:
            yield
        except BaseException:
            print(self.stack.tails(60), flush=True)
            raise

    def boot(self, flavor: str, wait: bool = True,
             status: str = 'ACTIVE', interval: float = 2) -> Any:
        """A server of ``flavor`` created by the member, once it is in
        ``status`` (ACTIVE or ERROR; the other one fails at once),
        polled every ``interval`` seconds."""
        server = self.member.compute.create_server(
            name=f'{flavor}-{uuid.uuid4().hex[:6]}', image_id=self.image,
            flavor_id=self.flavors[flavor], networks='none')
        if not wait:
            return server
        return self.wait(server, status, interval)

    def wait(self, server: Any, status: str = 'ACTIVE',
             interval: float = 2) -> Any:
        failures = ['ACTIVE'] if status == 'ERROR' else ['ERROR']
        return self.member.compute.wait_for_server(
            server, status=status, failures=failures, interval=interval,
            wait=SERVER_WAIT)

    @contextlib.contextmanager
    def server(self, flavor: str, status: str = 'ACTIVE') -> Iterator[Any]:
        """``boot``, and ``clean_up`` afterwards whatever happened."""
        server = self.boot(flavor, wait=False)
        try:
            yield self.wait(server, status)
        finally:
            self.clean_up(server.id)

    def delete(self, server: Any) -> None:
        self.member.compute.delete_server(server)
        self.member.compute.wait_for_delete(server, wait=SERVER_WAIT)

    def clean_up(self, instance: str) -> None:
        """Delete the server if it is still there, then whatever requests
        are left of it (an administrator with Nova's service token): one
        scenario's failure does not break the checks of the next."""
        self.admin.compute.delete_server(instance, ignore_missing=True)
        gate_stack.wait_for(
            lambda: self.admin.compute.find_server(
                instance, all_projects=True) is None,
            f'server {instance} to be deleted', SERVER_WAIT, 1)
        keystone = self.stack.keystone
        nova_token = keystone.token('nova', keystone.service_password,
                                    keystone_lib.SERVICE_PROJECT)
        answer = self.admin_http.delete(
            f'{self.stack.api_url}/accelerator_requests',
            params={'instance': instance}, timeout=30,
            headers={'X-Service-Token': nova_token})
        assert answer.status_code == 204, answer.text

    def settled_on(self, server: Any, host: str, status: str) -> bool:
        """Whether the server is in ``status`` on ``host``, with no task."""
        found = self.admin.compute.get_server(server.id)
        return bool(found.status == status and found.task_state is None
                    and found.compute_host == host)

    def forced_up(self, host: str) -> bool:
        """Unset the forced-down flag of ``host``'s nova-compute; False
        while Nova refuses it."""
        try:
            self.admin.compute.update_service_forced_down(
                None, host=host, binary='nova-compute', forced=False)
        except openstack.exceptions.BadRequestException:
            return False
        return True

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

    def bound(self, server: Any, count: int) -> list[dict[str, Any]]:
        """The server's requests, each Bound on its host, by group."""
        host = self.host_of(server)
        arqs = self.arqs(server.id)
        assert len(arqs) == count, arqs
        for arq in arqs:
            assert (arq['state'], arq['hostname'], arq['instance_uuid']) \
                == ('Bound', host, server.id), arq
        return sorted(arqs, key=lambda a: a['device_profile_group_id'])

    def device_allocations(self, server: Any) -> dict[str, int]:
        """The server's FPGA allocations, by provider."""
        return {rp: resources['FPGA'] for rp, resources in
                self.allocations(server.id).items() if 'FPGA' in resources}

    def deployable_of(self, rp: str) -> dict[str, Any]:
        answer = self.admin_http.get(f'{self.stack.api_url}/deployables',
                                     timeout=30)
        assert answer.status_code == 200, answer.text
        [found] = [d for d in answer.json()['deployables']
                   if d['rp_uuid'] == rp]
        return dict(found)

    def upload_bitstream(self, name: str, function_id: str) -> str:
        """Another bitstream for the fake FPGAs, by an administrator; its
        image id."""
        glance = self.stack.glance.url
        created = self.admin_http.post(f'{glance}/v2/images', timeout=30,
                                       json={'name': name,
                                             'disk_format': 'raw',
                                             'container_format': 'bare',
                                             'visibility': 'public',
                                             'accel:function_id': function_id})
        assert created.status_code == 201, created.text
        image = str(created.json()['id'])
        uploaded = self.admin_http.put(
            f'{glance}/v2/images/{image}/file', timeout=30,
            data=aio_glance.DEMO_DATA,
            headers={'Content-Type': 'application/octet-stream'})
        assert uploaded.status_code == 204, uploaded.text
        return image

    def assert_invariants(self) -> None:
        servers = {s.id for s in self.admin.compute.servers(
            all_projects=True)}
        found = checks.problems(self.engine, servers, self.usages)
        assert not found, found
        # Nova asked the Neutron stand-in nothing it does not answer.
        unanswered = [line for line in
                      self.stack.processes['neutron'].log().splitlines()
                      if line.startswith(neutron.UNANSWERED)]
        assert not unanswered, unanswered

    def assert_nothing_left(self, instance: str) -> None:
        """No request, no handle in use, no allocation of ``instance``."""
        left = checks.arqs_of(self.engine, instance)
        assert self.arqs(instance) == [], left
        assert left == [], left
        assert self.allocations(instance) == {}, self.allocations(instance)
        assert checks.handles_in_use(self.engine) == 0, 'handles in use'


def connection(keystone: keystone_lib.Keystone, user: str, password: str,
               project: str) -> Any:
    return openstack.connection.Connection(
        auth_url=keystone.url + '/v3', username=user, password=password,
        project_name=project, user_domain_name='Default',
        project_domain_name='Default',
        region_name=keystone_lib.REGION, compute_api_version='2.latest')


def populate(stack: stack_lib.NovaStack,
             profiles: dict[str, list[dict[str, str]]],
             flavors: dict[str, str | None]) -> Cloud:
    """What an operator adds before users come: a project and its
    member, an image, the demo bitstream, the device ``profiles`` (name
    -> groups) and the ``flavors`` (name -> device profile or None; one
    whose name ends with ``-large`` has twice the memory)."""
    keystone = stack.keystone
    member_password = 'member-' + uuid.uuid4().hex[:8]
    keystone.add_user(MEMBER, member_password, MEMBER, ('member',))
    admin = connection(keystone, 'admin', keystone.admin_password, 'admin')
    member = connection(keystone, MEMBER, member_password, MEMBER)
    admin_http = keystone.admin_session()
    demo_image = aio_glance.ensure_demo_image(
        stack.glance.url, admin_http.headers['X-Auth-Token'])
    image = admin.image.create_image(
        name='tiny', data=b'\0' * 1024, disk_format='raw',
        container_format='bare', visibility='public',
        allow_duplicates=True)
    for name, groups in profiles.items():
        admin.accelerator.create_device_profile(name=name, groups=groups)
    flavor_ids = {}
    for name, profile in flavors.items():
        flavor = admin.compute.create_flavor(
            name=name, ram=128 if name.endswith('-large') else 64, vcpus=1,
            disk=1)
        if profile:
            admin.compute.create_flavor_extra_specs(
                flavor, {'accel:device_profile': profile})
        flavor_ids[name] = flavor.id
    return Cloud(stack, sa.create_engine(stack.database_url), admin, member,
                 admin_http, image.id, flavor_ids, demo_image)
