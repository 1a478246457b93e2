"""Nova 34 as devstack deploys it, each service a process of a stack.

Cells v2 with cell0 and cell1 on MariaDB databases of their own (made by
``nova-manage`` as devstack makes them), nova-api under uWSGI, one
nova-conductor, one nova-scheduler that maps new compute hosts every two
seconds, and one nova-compute per host with the fake virt driver (a
subclass that records what it is handed, ``spawns.DRIVER``). Every
service authenticates as the ``nova`` service user, finds placement,
Glance, Neutron and cyborg in the Keystone catalog, and sends service
tokens (``[service_user] send_service_user_token``).

Nova 34 runs its API, conductor, scheduler and compute on native threads
unless told otherwise (``monkey_patch.patch(backend='threading')``); they
run so here, the way Nova ships them. Only ``nova-manage`` still patches
with eventlet, as it does everywhere.
"""
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import requests

from cyborg.tests.harness import gate_stack
from cyborg.tests.nova_stack import keystone as keystone_lib
from cyborg.tests.nova_stack import spawns

# Seconds nova-compute waits for cyborg's accelerator-request-bound
# events (Nova's default is 300): a bind that never finishes fails the
# build within a test's patience.
ARQ_BINDING_TIMEOUT = 60
# uWSGI threads of the single nova-api process.
API_THREADS = 4


class Nova:
    """The configuration and processes of Nova's services in ``stack``.

    ``databases``: the URLs of the ``api``, ``cell0`` and ``cell1``
    databases, created empty by the caller.
    """

    def __init__(self, stack: gate_stack.Stack,
                 keystone: keystone_lib.Keystone,
                 databases: dict[str, str], transport_url: str) -> None:
        self.stack = stack
        self.keystone = keystone
        self.databases = databases
        self.transport_url = transport_url
        self.workdir = stack.workdir / 'nova'
        self.workdir.mkdir(exist_ok=True)
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}/v2.1'
        # compute host -> the file its driver records spawns in
        self.accel_logs: dict[str, pathlib.Path] = {}
        paste = pathlib.Path(sys.prefix) / 'etc' / 'nova' / 'api-paste.ini'
        shutil.copy(paste, self.workdir / 'api-paste.ini')

    def sections(self, host: str) -> dict[str, dict[str, Any]]:
        """nova.conf of the service on ``host``."""
        state = self.workdir / f'{host}-state'
        state.mkdir(exist_ok=True)
        nova_auth = self.keystone.password_auth('nova')
        return {
            'DEFAULT': {
                'host': host, 'my_ip': '127.0.0.1', 'debug': 'true',
                'transport_url': self.transport_url,
                'state_path': str(state),
                'instances_path': str(state / 'instances'),
                'compute_driver': spawns.DRIVER,
                'enabled_apis': 'osapi_compute',
                'arq_binding_timeout': ARQ_BINDING_TIMEOUT},
            'api_database': {'connection': self.databases['api']},
            'database': {'connection': self.databases['cell1']},
            'wsgi': {'api_paste_config':
                     str(self.workdir / 'api-paste.ini')},
            'keystone_authtoken': self.keystone.authtoken('nova'),
            'service_user': {'send_service_user_token': 'true',
                             **nova_auth},
            'placement': nova_auth,
            'neutron': nova_auth,
            'glance': {'region_name': keystone_lib.REGION},
            'cyborg': {'region_name': keystone_lib.REGION},
            'scheduler': {'discover_hosts_in_cells_interval': 2,
                          'workers': 1},
            'conductor': {'workers': 1},
            'oslo_concurrency': {'lock_path': str(self.workdir / 'locks')},
            'oslo_messaging_notifications': {'driver': 'noop'}}

    def conf(self, host: str, compute: bool = False) -> pathlib.Path:
        sections = self.sections(host)
        if compute:
            # As devstack's nova-cpu.conf: a compute host reaches the
            # databases through nova-conductor only.
            del sections['api_database'], sections['database']
        return gate_stack.write_conf(self.workdir / f'{host}.conf', sections)

    def manage(self, *args: str) -> None:
        """nova-manage with the controller's configuration."""
        conf = self.conf('controller')
        with open(self.stack.workdir / 'nova-manage.log', 'ab') as out:
            subprocess.run([keystone_lib.bin_path('nova-manage'),
                            '--config-file', str(conf), *args], check=True,
                           stdout=out, stderr=subprocess.STDOUT,
                           cwd=self.workdir, timeout=300)

    def setup(self) -> None:
        """The API database, cell0 and cell1, as devstack makes them."""
        self.manage('api_db', 'sync')
        self.manage('cell_v2', 'map_cell0', '--database_connection',
                    self.databases['cell0'])
        # Syncs cell0 (through its mapping), then cell1.
        self.manage('db', 'sync')
        self.manage('cell_v2', 'create_cell', '--name', 'cell1',
                    '--transport-url', self.transport_url,
                    '--database_connection', self.databases['cell1'])

    def register(self) -> None:
        """The nova service user and the compute endpoints."""
        self.keystone.add_service_user('nova')
        self.keystone.add_service('nova', 'compute', self.url)

    # -- the processes -------------------------------------------------------

    def add_api(self) -> gate_stack.Process:
        """nova-api under uWSGI, one process, as devstack runs it."""
        self.conf('controller')
        (self.workdir / 'nova.conf').write_text(
            (self.workdir / 'controller.conf').read_text())
        argv = [keystone_lib.bin_path('uwsgi'),
                '--http-socket', f'127.0.0.1:{self.port}',
                '--module', 'nova.wsgi.osapi_compute:application',
                '--home', sys.prefix, '--master', '--processes', '1',
                '--threads', str(API_THREADS), '--enable-threads',
                '--die-on-term', '--need-app', '--buffer-size', '65535',
                # As devstack: uWSGI's HTTP socket does not keep a
                # connection alive, and a client reusing one is reset.
                '--add-header', 'Connection: close',
                '--hook-master-start',
                'unix_signal:15 gracefully_kill_them_all']
        return self.stack._add(
            'nova-api', 'nova', argv, cwd=self.workdir,
            env={'OS_NOVA_CONFIG_DIR': str(self.workdir)})

    def api_up(self) -> bool:
        try:
            return requests.get(self.url + '/', timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def add_service(self, binary: str, host: str = 'controller',
                    sysfs_root: str | None = None) -> gate_stack.Process:
        """nova-conductor, nova-scheduler or (with its host) nova-compute,
        whose driver creates the mdevs of its guests in the sysfs tree at
        ``sysfs_root`` when given."""
        env = {}
        if sysfs_root:
            env[spawns.SYSFS_ENV] = sysfs_root
        name = binary
        command = [keystone_lib.bin_path(binary)]
        if binary == 'nova-compute':
            name = f'nova-compute-{host}'
            self.accel_logs[host] = self.workdir / f'{host}-accel.jsonl'
            env[spawns.LOG_ENV] = str(self.accel_logs[host])
            command = [sys.executable, '-c', spawns.COMPUTE]
        conf = self.conf(host, compute=binary == 'nova-compute')
        return self.stack._add(
            name, 'nova', [*command, '--config-file', str(conf)],
            cwd=self.workdir, env=env)
