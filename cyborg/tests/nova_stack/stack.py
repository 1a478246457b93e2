"""Nova, Keystone, placement, Glance and cyborg as one deployment.

``NovaStack`` brings up, each as a process on one MariaDB server and one
RabbitMQ virtual host: Keystone, placement and Glance behind it, the
Neutron stand-in, cyborg-api (behind Keystone, service tokens required),
one cyborg-conductor, nova-api, -conductor, -scheduler, and per compute
host a nova-compute and a cyborg-agent with the fake driver. The
conductor enforces Keystone's unified limits, registered generously
(``GENEROUS_LIMITS``). The agent
of ``VGPU_HOST`` also has the ``nvidia_gpu`` driver, over a sysfs tree
with a T4 whose vGPUs nova-compute creates (``mdev_creator = nova``),
followed by an emulated kernel (``cyborg.tests.harness.sysfs_kernel``). Every
service is in the Keystone catalog and every service user is made as
devstack makes it. ``NovaStack.open`` makes the databases and the
virtual host and removes them afterwards, printing the tails of every
log when the body fails.
"""
import contextlib
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import requests

from cyborg.db import migration
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.nova_stack import backing
from cyborg.tests.nova_stack import glance as glance_lib
from cyborg.tests.nova_stack import keystone as keystone_lib
from cyborg.tests.nova_stack import neutron
from cyborg.tests.nova_stack import nova as nova_lib

# compute host (and node) name -> the name of its cyborg-agent process.
HOSTS = {'nova-cn1': 'agent-cn1', 'nova-cn2': 'agent-cn2'}
FAKE_DEVICES = 2            # fake FPGAs per host
ACCELERATORS = 2            # attach handles of each fake FPGA
# The compute host whose agent reports a T4 as vGPUs of VGPU_TYPE, the
# mdevs created by nova-compute.
VGPU_HOST = 'nova-cn1'
T4 = '0000:af:00.0'
# (type, name, instances) as a T4 on the vGPU host driver offers them.
T4_TYPES = (('nvidia-222', 'GRID T4-1B', 16),
            ('nvidia-223', 'GRID T4-2B', 8))
VGPU_TYPE = 'nvidia-223'
VGPU_TRAIT = 'CUSTOM_NVIDIA_1EB8_T4_2B'
# The registered limits of cyborg's endpoint (Keystone's unified limits,
# which the conductor enforces): far above what any scenario holds.
GENEROUS_LIMITS = {'accelerator_requests': 1000, 'class:FPGA': 100,
                   'class:VGPU': 100}


class NovaStack(keystone_lib.KeystoneStack):
    """The whole deployment; see the module's docstring."""

    def __init__(self, workdir: pathlib.Path, rabbit_url: str,
                 databases: dict[str, str]) -> None:
        super().__init__(workdir, rabbit_url, databases['cyborg'],
                         nova_endpoint='', nova_token='')
        self.databases = databases
        self.keystone = keystone_lib.Keystone(self, databases['keystone'])
        self.glance = glance_lib.Glance(self, self.keystone)
        self.nova = nova_lib.Nova(self, self.keystone, databases,
                                  rabbit_url)
        # Where the conductor sends Nova's events, besides the catalog.
        self.nova_endpoint = self.nova.url
        self.neutron_port = gate_stack.free_port()
        # VGPU_HOST's sysfs, which its agent and nova-compute share.
        self.gpu_tree = SysfsTree(workdir / f'{VGPU_HOST}-sysfs')
        self.gpu_tree.add_t4(T4, T4_TYPES)
        # What bring_up took, step by step (s).
        self.timings: dict[str, float] = {}

    @classmethod
    @contextlib.contextmanager
    def open(cls, workdir: pathlib.Path) -> Iterator['NovaStack']:
        """A stack on new databases and a new virtual host, all removed
        when the body ends; every process is stopped by PID."""
        names = ('cyborg', 'keystone', 'placement', 'api', 'cell0', 'cell1')
        databases = {name: backing.Database(backing.MYSQL_URL,
                                            f'nova_gate_{name}')
                     for name in names}
        vhost = backing.VirtualHost(backing.RABBIT_URL, 'cyborg-nova')
        stack = None
        try:
            for database in databases.values():
                database.create()
            migration.upgrade('head', url=databases['cyborg'].url)
            stack = cls(workdir, vhost.create(),
                        {n: d.url for n, d in databases.items()})
            yield stack
        except BaseException:
            if stack is not None:
                print(stack.tails(40), flush=True)
            raise
        finally:
            if stack is not None:
                stack.stop_all()
            vhost.delete()
            for database in databases.values():
                database.drop()

    # -- bringing it up ------------------------------------------------------

    def _timed(self, step: str, started: float) -> float:
        now = time.monotonic()
        self.timings[step] = round(now - started, 1)
        return now

    def bring_up(self) -> None:
        """Every service, in the order each needs the others; returns once
        Nova has mapped both compute hosts and placement holds both
        hosts' FPGAs."""
        keystone = self.keystone
        started = step = time.monotonic()
        keystone.setup()
        keystone.process().start()
        # On MariaDB: on SQLite, nova-compute's and cyborg's writes at
        # start-up fail with "database is locked".
        self.add_placement({
            'placement_database': {'connection':
                                   self.databases['placement']},
            'api': {'auth_strategy': 'keystone'},
            'keystone_authtoken': keystone.authtoken('placement')})
        self.start('placement')
        self.glance.setup()
        self.glance.process().start()
        self._add('neutron', 'neutron',
                  [sys.executable, '-m', neutron.__name__,
                   str(self.neutron_port)]).start()
        self._add('sysfs-kernel', 'kernel',
                  [sys.executable, '-m', sysfs_kernel.__name__,
                   self.gpu_tree.root]).start()
        gate_stack.wait_for(keystone.up, 'keystone', 60)
        step = self._timed('keystone', step)
        keystone.add_service_user('placement')
        keystone.add_service('placement', 'placement', self.placement_url)
        keystone.add_service_user('neutron')
        keystone.add_service('neutron', 'network',
                             f'http://127.0.0.1:{self.neutron_port}')
        self.glance.register()
        keystone.register(self.api_url)
        self.nova.register()
        step = self._timed('catalog', step)
        self.nova.setup()
        step = self._timed('nova-manage', step)
        cyborg_auth = keystone.password_auth('cyborg')
        # Nova's flow runs under limits generous enough never to refuse
        # it; a scenario lowers one project's limit to see a refusal.
        keystone.register_limits(GENEROUS_LIMITS)
        limits = keystone.limits_reader('cyborg')
        # Read again for every write: a scenario's limit applies at once.
        limits['quota']['cache_seconds'] = '0'
        self.add_keystone_api(keystone)
        self.add_conductor('conductor', extra={
            'placement': cyborg_auth, 'nova': cyborg_auth,
            'glance': cyborg_auth, **limits})
        self.nova.add_api()
        self.nova.add_service('nova-conductor')
        self.nova.add_service('nova-scheduler')
        for host in HOSTS:
            self.nova.add_service(
                'nova-compute', host,
                self.gpu_tree.root if host == VGPU_HOST else None)
        self.start('conductor', 'api', 'nova-api', 'nova-conductor',
                   'nova-scheduler',
                   *(f'nova-compute-{host}' for host in HOSTS))
        gate_stack.wait_for(self.placement_up, 'placement', 60)
        gate_stack.wait_for(self.glance.up, 'glance', 60)
        gate_stack.wait_for(self.nova.api_up, 'nova-api', 120)
        admin = keystone.admin_session()
        roots = gate_stack.wait_for(
            lambda: self.compute_nodes(admin),
            'nova-compute to register both nodes in placement', 180, 1)
        step = self._timed('nova', step)
        gate_stack.wait_for(
            lambda: (pathlib.Path(self.gpu_tree.root) /
                     sysfs_kernel.READY_NAME).exists(),
            'the sysfs kernel emulator', 30)
        for host in HOSTS:
            self.add_host_agent(host)
        self.start(*HOSTS.values())
        self.ready('conductor', *HOSTS.values(), timeout=120)
        gate_stack.wait_for(self.api_up, 'cyborg-api', 60)
        gate_stack.wait_for(
            lambda: self._devices_in_placement(admin, roots),
            'both hosts\' FPGAs and the vGPUs in placement', 120, 1)
        gate_stack.wait_for(lambda: self._hypervisors(admin),
                            'nova to map both compute hosts', 120, 1)
        self._timed('cyborg', step)
        self.timings['total'] = round(time.monotonic() - started, 1)

    def add_host_agent(self, host: str,
                       extra: dict[str, dict[str, Any]] | None = None
                       ) -> gate_stack.Process:
        """(Re)define the cyborg-agent of compute host ``host``; ``extra``
        adds options, e.g. ``{'fake_driver': {'program_fail': 'true'}}``."""
        sections: dict[str, dict[str, Any]] = {
            'glance': self.keystone.password_auth('cyborg')}
        if host == VGPU_HOST:
            sections['agent'] = {'enabled_drivers': 'fake_driver,nvidia_gpu',
                                 'sysfs_root': self.gpu_tree.root}
            sections['gpu_devices'] = {
                'enabled_vgpu_types': VGPU_TYPE,
                'vgpu_type_addresses': f'{VGPU_TYPE}:{T4}',
                'mdev_creator': 'nova'}
        for section, values in (extra or {}).items():
            sections[section] = {**sections.get(section, {}), **values}
        return self.add_agent(HOSTS[host], host, FAKE_DEVICES, ACCELERATORS,
                              extra=sections)

    def restart_agents(self, extra: dict[str, dict[str, Any]] | None = None
                       ) -> None:
        """Stop every cyborg-agent, start it again with ``extra``, and wait
        until each listens."""
        agents = tuple(HOSTS.values())
        codes = self.stop(*agents)
        assert codes == dict.fromkeys(agents, 0), codes
        for host in HOSTS:
            self.add_host_agent(host, extra)
        self.start(*agents)
        self.ready(*agents)

    def placement(self, admin: requests.Session, path: str) -> Any:
        answer = admin.get(self.placement_url + path, timeout=30, headers={
            'OpenStack-API-Version': 'placement 1.39'})
        answer.raise_for_status()
        return answer.json()

    def compute_nodes(self, admin: requests.Session
                      ) -> dict[str, str] | None:
        """The compute nodes' providers by host, once both exist."""
        found = {rp['name']: rp['uuid'] for rp in self.placement(
            admin, '/resource_providers')['resource_providers']}
        if all(host in found for host in HOSTS):
            return {host: found[host] for host in HOSTS}
        return None

    def _devices_in_placement(self, admin: requests.Session,
                              roots: dict[str, str]) -> bool:
        for host, root in roots.items():
            tree = [rp for rp in self.placement(
                admin, f'/resource_providers?in_tree={root}'
            )['resource_providers'] if rp['uuid'] != root]
            classes = [set(self.placement(
                admin, f'/resource_providers/{rp["uuid"]}/inventories'
            )['inventories']) for rp in tree]
            if sum('FPGA' in found for found in classes) < FAKE_DEVICES:
                return False
            if host == VGPU_HOST and not any('VGPU' in found
                                             for found in classes):
                return False
        return True

    def _hypervisors(self, admin: requests.Session) -> bool:
        answer = admin.get(self.nova.url + '/os-hypervisors', timeout=30)
        return answer.status_code == 200 and len(
            answer.json()['hypervisors']) == len(HOSTS)
