"""Run cyborg-tempest-plugin's API tests against a real deployment.

Starts, each as a process of its own: a Keystone (fernet tokens, under
waitress), openstack-placement, cyborg-api validating tokens with
keystonemiddleware against that Keystone and enforcing the new policy
defaults and scope, a cyborg-conductor and a cyborg-agent with the fake
driver, on fresh MariaDB databases (one for Keystone, one for cyborg)
and a RabbitMQ virtual host. Then it
writes a tempest workspace whose tempest.conf points at the Keystone,
runs ``tempest run`` over ``cyborg_tempest_plugin.tests.api`` and prints
tempest's summary, then the tenancy probes (``test_tenancy.py``: real
tokens of two projects and of a service user against the same stack).
Every process is stopped by PID at the end, whatever happened. The exit
code is tempest's, or the probes' when tempest passed (1 when the
deployment did not come up).

    tox -e tempest-api [-- --keep] [-- --regex REGEX] [-- --no-tenancy]

The database and broker addresses are read from CYBORG_TEST_MYSQL_URL and
CYBORG_TEST_RABBIT_URL, as the test suite does.
"""
import argparse
import grp
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from typing import Any

import requests
import sqlalchemy as sa

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cyborg.db import migration  # noqa: E402
from cyborg.tests import utils  # noqa: E402
from cyborg.tests.functional import gate_stack  # noqa: E402

MYSQL_URL = os.environ.get('CYBORG_TEST_MYSQL_URL',
                           'mysql+pymysql://root@127.0.0.1:3306/')
RABBIT_URL = os.environ.get('CYBORG_TEST_RABBIT_URL',
                            'rabbit://guest:guest@127.0.0.1:5672/')
REGION = 'RegionOne'
ADMIN_PASSWORD = 'tempest-admin-' + uuid.uuid4().hex[:8]
SERVICE_PASSWORD = 'cyborg-service-' + uuid.uuid4().hex[:8]

# Tests left out of the run, each with the reason. The API tests need no
# Nova; none is excluded at present.
EXCLUDED: dict[str, str] = {}

# keystone parses the command line itself: the port comes after it.
_SERVE_KEYSTONE = '''
import sys, waitress
port = int(sys.argv.pop())
import keystone.wsgi.api as api
waitress.serve(api.application, host="127.0.0.1", port=port,
               threads=8, _quiet=True)
'''


def log(message: str) -> None:
    print(f'[tempest-api {time.strftime("%H:%M:%S")}] {message}',
          flush=True)


def bin_path(name: str) -> str:
    path = pathlib.Path(sys.executable).parent / name
    if not path.exists():
        raise SystemExit(f'{name} is not installed next to '
                         f'{sys.executable}; run through tox -e tempest-api')
    return str(path)


class Database:
    """A throw-away MariaDB database, created and dropped here."""

    def __init__(self, server_url: str, prefix: str) -> None:
        self.name = f'{prefix}_{uuid.uuid4().hex[:12]}'
        base = sa.engine.make_url(server_url)
        self.admin = sa.create_engine(base.set(database=None),
                                      isolation_level='AUTOCOMMIT')
        self.url = base.set(database=self.name).render_as_string(
            hide_password=False)

    def create(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE {self.name}'))

    def drop(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS {self.name}'))
        self.admin.dispose()


class VirtualHost:
    """A RabbitMQ virtual host of our own, when rabbitmqctl is at hand."""

    def __init__(self, url: str) -> None:
        self.parsed = urllib.parse.urlsplit(url)
        self.name = f'cyborg-tempest-{uuid.uuid4().hex[:12]}'
        self.url = url
        self.created = False

    @staticmethod
    def _ctl(*args: str) -> None:
        subprocess.run(['rabbitmqctl', *args], check=True, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def create(self) -> str:
        try:
            self._ctl('add_vhost', self.name)
            self.created = True
            self._ctl('set_permissions', '-p', self.name,
                      self.parsed.username or 'guest', '.*', '.*', '.*')
        except (OSError, subprocess.SubprocessError):
            # A remote broker: share its default virtual host.
            return self.url
        return urllib.parse.urlunsplit(
            self.parsed._replace(path=f'/{self.name}'))

    def delete(self) -> None:
        if self.created:
            try:
                self._ctl('delete_vhost', self.name)
            except (OSError, subprocess.SubprocessError) as exc:
                log(f'could not delete virtual host {self.name}: {exc}')


class Keystone:
    """keystone-manage to set it up, then the WSGI app under waitress."""

    def __init__(self, stack: 'TempestStack', database_url: str) -> None:
        self.stack = stack
        self.workdir = stack._dir('keystone')
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        self.conf = gate_stack.write_conf(self.workdir / 'keystone.conf', {
            'DEFAULT': {'log_file': str(stack.workdir / 'keystone.log')},
            # SQLite would fail tempest's concurrent credential set-ups
            # with "database is locked".
            'database': {'connection': database_url},
            'token': {'provider': 'fernet'},
            # Every user lives for one run: bcrypt's fewest rounds spare
            # tempest's credential set-ups and the tenancy probes some
            # 0.25 s of hashing per password set or checked.
            'identity': {'password_hash_rounds': '4'},
            'fernet_tokens': {'key_repository':
                              str(self.workdir / 'fernet-keys')},
            'fernet_receipts': {'key_repository':
                                str(self.workdir / 'fernet-keys')},
            'credential': {'key_repository':
                           str(self.workdir / 'credential-keys')}})

    def manage(self, *args: str) -> None:
        with open(self.stack.workdir / 'keystone-manage.log', 'ab') as out:
            subprocess.run([bin_path('keystone-manage'), '--config-file',
                            str(self.conf), *args], check=True,
                           stdout=out, stderr=subprocess.STDOUT,
                           cwd=self.workdir)

    def setup(self) -> None:
        for directory in ('fernet-keys', 'credential-keys'):
            (self.workdir / directory).mkdir(mode=0o700, exist_ok=True)
        self.manage('db_sync')
        owner = ['--keystone-user', pwd.getpwuid(os.getuid()).pw_name,
                 '--keystone-group', grp.getgrgid(os.getgid()).gr_name]
        self.manage('fernet_setup', *owner)
        self.manage('credential_setup', *owner)
        self.manage('bootstrap',
                    '--bootstrap-password', ADMIN_PASSWORD,
                    '--bootstrap-admin-url', self.url + '/v3',
                    '--bootstrap-internal-url', self.url + '/v3',
                    '--bootstrap-public-url', self.url + '/v3',
                    '--bootstrap-region-id', REGION)

    def process(self) -> gate_stack.Process:
        return self.stack._add(
            'keystone', 'keystone',
            [sys.executable, '-c', _SERVE_KEYSTONE, str(self.port)],
            cwd=self.workdir,
            env={'OS_KEYSTONE_CONFIG_DIR': str(self.workdir)})

    def up(self) -> bool:
        if not self.stack.processes['keystone'].running:
            raise RuntimeError('keystone exited')
        try:
            return requests.get(self.url + '/v3',
                                timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def admin_session(self) -> requests.Session:
        body = {'auth': {
            'identity': {'methods': ['password'], 'password': {'user': {
                'name': 'admin', 'domain': {'id': 'default'},
                'password': ADMIN_PASSWORD}}},
            'scope': {'project': {'name': 'admin',
                                  'domain': {'id': 'default'}}}}}
        response = requests.post(self.url + '/v3/auth/tokens', json=body,
                                 timeout=30)
        response.raise_for_status()
        session = requests.Session()
        session.headers['X-Auth-Token'] = response.headers['X-Subject-Token']
        return session

    def register(self, api_url: str) -> None:
        """The cyborg service user and the accelerator endpoints."""
        session = self.admin_session()

        def call(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
            response = session.request(method, self.url + '/v3' + path,
                                       timeout=30, **kwargs)
            if response.status_code >= 300:
                raise RuntimeError(f'{method} {path}: {response.status_code}'
                                   f' {response.text}')
            return response.json() if response.content else {}

        roles = {r['name']: r['id'] for r in call('GET', '/roles')['roles']}
        project = call('POST', '/projects', json={'project': {
            'name': 'service', 'domain_id': 'default'}})['project']
        user = call('POST', '/users', json={'user': {
            'name': 'cyborg', 'domain_id': 'default',
            'password': SERVICE_PASSWORD}})['user']
        for role in ('admin', 'service'):
            call('PUT', f'/projects/{project["id"]}/users/{user["id"]}'
                        f'/roles/{roles[role]}')
        service = call('POST', '/services', json={'service': {
            'name': 'cyborg', 'type': 'accelerator',
            'description': 'Accelerator management'}})['service']
        for interface in ('public', 'internal', 'admin'):
            call('POST', '/endpoints', json={'endpoint': {
                'service_id': service['id'], 'interface': interface,
                'region_id': REGION, 'url': api_url}})


class TempestStack(gate_stack.Stack):
    """The gate's stack, with cyborg-api behind Keystone."""

    def add_keystone_api(self, keystone: Keystone) -> gate_stack.Process:
        return self._service('api', 'api', {
            'DEFAULT': self._default(
                'api', rpc_response_timeout=gate_stack.RPC_TIMEOUT),
            'database': {'connection': self.database_url},
            'api': {'host_ip': '127.0.0.1', 'port': self.api_port,
                    'auth_strategy': 'keystone',
                    'require_service_token': 'true'},
            'oslo_policy': {'enforce_new_defaults': 'true',
                            'enforce_scope': 'true'},
            'keystone_authtoken': {
                'www_authenticate_uri': keystone.url,
                'auth_url': keystone.url,
                'auth_type': 'password',
                'username': 'cyborg',
                'password': SERVICE_PASSWORD,
                'project_name': 'service',
                'user_domain_id': 'default',
                'project_domain_id': 'default',
                'region_name': REGION,
                'service_token_roles_required': 'true',
                'service_token_roles': 'service'}})


def write_tempest_conf(workspace: pathlib.Path, keystone: Keystone,
                       concurrency: int) -> pathlib.Path:
    available = {name: 'false' for name in (
        'nova', 'glance', 'neutron', 'cinder', 'swift', 'heat', 'horizon',
        'placement')}
    available['cyborg'] = 'true'
    path = workspace / 'etc' / 'tempest.conf'
    gate_stack.write_conf(path, {
        'DEFAULT': {'log_dir': str(workspace / 'logs'),
                    'log_file': 'tempest.log'},
        'auth': {'use_dynamic_credentials': 'true',
                 'create_isolated_networks': 'false',
                 'admin_username': 'admin',
                 'admin_password': ADMIN_PASSWORD,
                 'admin_project_name': 'admin',
                 'admin_domain_name': 'Default',
                 'admin_system': 'all'},
        'identity': {'uri_v3': keystone.url + '/v3',
                     'auth_version': 'v3',
                     'region': REGION,
                     'v3_endpoint_type': 'public'},
        'identity-feature-enabled': {'api_v2': 'false'},
        'service_available': available,
        'cyborg_policy': {'enforce_new_defaults': 'true'}})
    return path


def run_tempest(workspace: pathlib.Path, regex: str,
                concurrency: int) -> int:
    tempest = bin_path('tempest')
    argv = [tempest, 'run', '--config-file',
            str(workspace / 'etc' / 'tempest.conf'), '--regex', regex,
            '--concurrency', str(concurrency)]
    if EXCLUDED:
        argv += ['--exclude-regex', '|'.join(EXCLUDED)]
        for test, reason in EXCLUDED.items():
            log(f'excluded {test}: {reason}')
    log(' '.join(argv[1:]))
    return subprocess.run(argv, cwd=workspace).returncode


def run_tenancy(keystone: Keystone, api_url: str) -> int:
    """The tenancy probes (``test_tenancy.py``, next to this file) with
    real tokens of two projects against the running stack."""
    argv = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
            str(pathlib.Path(__file__).with_name('test_tenancy.py'))]
    log(' '.join(argv[1:]))
    # Without the plugins installed for the test suite (schemathesis,
    # xdist) pytest starts in a fraction of a second instead of several.
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD='1',
               CYBORG_TENANCY_KEYSTONE=keystone.url,
               CYBORG_TENANCY_API=api_url,
               CYBORG_TENANCY_ADMIN_PASSWORD=ADMIN_PASSWORD)
    return subprocess.run(argv, cwd=ROOT, env=env).returncode


def _unreachable() -> list[str]:
    """Which of the database and broker servers do not accept a
    connection."""
    return [name for name, url, port in (
        ('MariaDB', MYSQL_URL, 3306), ('RabbitMQ', RABBIT_URL, 5672))
        if not utils.port_open(url, port)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--regex', default='cyborg_tempest_plugin.tests.api',
                        help='which tests tempest runs')
    parser.add_argument('--concurrency', type=int, default=4)
    parser.add_argument('--workdir', help='where configuration and logs go '
                        '(default: a new temporary directory)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory afterwards')
    parser.add_argument('--no-tenancy', dest='tenancy',
                        action='store_false',
                        help='skip the tenancy probes that follow tempest')
    args = parser.parse_args()
    missing = _unreachable()
    if missing:
        # As the test suite does: skipped unless the services are required.
        required = os.environ.get('CYBORG_TEST_REQUIRE_SERVICES') == '1'
        log(f'{" and ".join(missing)} not reachable: '
            + ('failing (CYBORG_TEST_REQUIRE_SERVICES=1)' if required
               else 'skipping the tempest API tests'))
        return 1 if required else 0

    started = time.monotonic()
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(
        prefix='cyborg-tempest-')).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    log(f'work directory {workdir}')
    database = Database(MYSQL_URL, 'cyborg_tempest')
    keystone_database = Database(MYSQL_URL, 'keystone_tempest')
    vhost = VirtualHost(RABBIT_URL)
    stack: TempestStack | None = None
    failed = True
    try:
        database.create()
        keystone_database.create()
        migration.upgrade('head', url=database.url)
        stack = TempestStack(workdir, vhost.create(), database.url,
                             'http://127.0.0.1:9', 'no-nova')
        keystone = Keystone(stack, keystone_database.url)
        keystone.setup()
        keystone.process().start()
        stack.add_placement().start()
        gate_stack.wait_for(keystone.up, 'keystone', 60)
        keystone.register(stack.api_url)
        gate_stack.wait_for(stack.placement_up, 'placement', 60)
        stack.add_keystone_api(keystone)
        stack.add_conductor('conductor-1')
        stack.add_agent('agent-1', 'tempest-compute-1', devices=2,
                        accelerators=2)
        stack.start('api', 'conductor-1', 'agent-1')
        stack.ready('conductor-1', 'agent-1', timeout=120)
        gate_stack.wait_for(stack.api_up, 'cyborg-api', 60)
        admin = keystone.admin_session()

        def inventory() -> bool:
            listed = [admin.get(f'{stack.api_url}/{kind}', timeout=10)
                      for kind in ('devices', 'deployables')]
            return all(r.status_code == 200 and next(iter(r.json().values()))
                       for r in listed)

        gate_stack.wait_for(inventory, 'the agent to report its devices',
                            120)
        log(f'deployment up after {time.monotonic() - started:.0f}s')

        workspace = workdir / 'tempest'
        # No "tempest init": it would register the workspace in
        # ~/.tempest. tempest run writes the .stestr.conf it needs.
        (workspace / 'etc').mkdir(parents=True)
        (workspace / 'logs').mkdir()
        write_tempest_conf(workspace, keystone, args.concurrency)
        code = run_tempest(workspace, args.regex, args.concurrency)
        if args.tenancy:
            probes = time.monotonic()
            probed = run_tenancy(keystone, stack.api_url)
            log(f'tenancy probes took {time.monotonic() - probes:.1f}s')
            code = code or probed
        failed = code != 0
        return code
    except Exception as exc:
        log(f'the deployment failed: {exc!r}')
        return 1
    finally:
        if stack is not None:
            if failed:
                print(stack.tails(40), flush=True)
            codes = stack.stop_all()
            log(f'stopped: {codes}')
        vhost.delete()
        for db in (database, keystone_database):
            try:
                db.drop()
            except sa.exc.SQLAlchemyError as exc:
                log(f'could not drop database {db.name}: {exc}')
        log(f'total {time.monotonic() - started:.0f}s')
        if args.keep or failed:
            log(f'logs kept in {workdir}')
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
