"""A real Keystone for a stack: set up, served, and filled with services.

keystone-manage makes its database, fernet keys and the bootstrap admin;
the WSGI application then runs under waitress as a process of the stack.
``add_service`` and ``add_service_user`` register what devstack
registers for each service: a catalog entry with public, internal and
admin endpoints, and a user of the ``service`` project with the
``admin`` and ``service`` roles. The ``*_sections`` helpers write the
options by which a service validates tokens (keystonemiddleware) or
calls another one (keystoneauth's password plugin).
"""
import contextlib
import grp
import os
import pathlib
import pwd
import subprocess
import sys
import uuid
from typing import Any

import requests

from cyborg.db import migration
from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.harness import gate_stack

REGION = 'RegionOne'
SERVICE_PROJECT = 'service'

# keystone parses the command line itself: the port comes after it.
_SERVE = '''
import sys, waitress
port = int(sys.argv.pop())
import keystone.wsgi.api as api
waitress.serve(api.application, host="127.0.0.1", port=port,
               threads=8, _quiet=True)
'''


def bin_path(name: str) -> str:
    """A console script installed beside the running interpreter."""
    path = pathlib.Path(sys.executable).parent / name
    if not path.exists():
        raise SystemExit(f'{name} is not installed next to '
                         f'{sys.executable}; run it through tox')
    return str(path)


def project_token(url: str, user: str, password: str, project: str,
                  timeout: float = 30) -> str:
    """A project-scoped token of a user of the default domain, from the
    Keystone at ``url``."""
    body = {'auth': {
        'identity': {'methods': ['password'], 'password': {'user': {
            'name': user, 'domain': {'id': 'default'},
            'password': password}}},
        'scope': {'project': {'name': project,
                              'domain': {'id': 'default'}}}}}
    response = requests.post(url + '/v3/auth/tokens', json=body,
                             timeout=timeout)
    response.raise_for_status()
    return response.headers['X-Subject-Token']


class Keystone:
    """keystone-manage to set it up, then the WSGI app under waitress, as
    the process ``keystone`` of ``stack``."""

    def __init__(self, stack: gate_stack.Stack, database_url: str) -> None:
        self.stack = stack
        self.workdir = stack.workdir / 'keystone'
        self.workdir.mkdir(exist_ok=True)
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        self.admin_password = 'admin-' + uuid.uuid4().hex[:12]
        # One password for every service user: they live for one run.
        self.service_password = 'service-' + uuid.uuid4().hex[:12]
        self.conf = gate_stack.write_conf(self.workdir / 'keystone.conf', {
            'DEFAULT': {'log_file': str(stack.workdir / 'keystone.log')},
            # SQLite would fail concurrent credential set-ups with
            # "database is locked".
            'database': {'connection': database_url},
            'token': {'provider': 'fernet'},
            # Every user lives for one run: bcrypt's fewest rounds spare
            # some 0.25 s of hashing per password set or checked.
            'identity': {'password_hash_rounds': '4'},
            'fernet_tokens': {'key_repository':
                              str(self.workdir / 'fernet-keys')},
            'fernet_receipts': {'key_repository':
                                str(self.workdir / 'fernet-keys')},
            'credential': {'key_repository':
                           str(self.workdir / 'credential-keys')}})
        self._session: requests.Session | None = None

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
                    '--bootstrap-password', self.admin_password,
                    '--bootstrap-admin-url', self.url + '/v3',
                    '--bootstrap-internal-url', self.url + '/v3',
                    '--bootstrap-public-url', self.url + '/v3',
                    '--bootstrap-region-id', REGION)

    def process(self) -> gate_stack.Process:
        return self.stack._add(
            'keystone', 'keystone',
            [sys.executable, '-c', _SERVE, str(self.port)],
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

    def token(self, user: str, password: str, project: str) -> str:
        """A project-scoped token of a user of the default domain."""
        return project_token(self.url, user, password, project)

    def admin_session(self) -> requests.Session:
        session = requests.Session()
        session.headers['X-Auth-Token'] = self.token(
            'admin', self.admin_password, 'admin')
        return session

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """An identity API call as the bootstrap admin."""
        if self._session is None:
            self._session = self.admin_session()
        response = self._session.request(method, self.url + '/v3' + path,
                                         timeout=30, **kwargs)
        if response.status_code >= 300:
            raise RuntimeError(f'{method} {path}: {response.status_code} '
                               f'{response.text}')
        return response.json() if response.content else {}

    def _role_ids(self) -> dict[str, str]:
        return {r['name']: r['id']
                for r in self.call('GET', '/roles')['roles']}

    def project(self, name: str) -> str:
        """The id of project ``name``, created unless it exists."""
        found = self.call('GET', f'/projects?name={name}')['projects']
        if found:
            return str(found[0]['id'])
        return str(self.call('POST', '/projects', json={'project': {
            'name': name, 'domain_id': 'default'}})['project']['id'])

    def add_user(self, name: str, password: str, project: str,
                 roles: tuple[str, ...]) -> str:
        """A user of the default domain with ``roles`` on ``project``."""
        project_id = self.project(project)
        user = self.call('POST', '/users', json={'user': {
            'name': name, 'domain_id': 'default',
            'password': password}})['user']
        role_ids = self._role_ids()
        for role in roles:
            if role not in role_ids:
                role_ids[role] = self.call('POST', '/roles', json={
                    'role': {'name': role}})['role']['id']
            self.call('PUT', f'/projects/{project_id}/users/{user["id"]}'
                             f'/roles/{role_ids[role]}')
        return str(user['id'])

    def add_service_user(self, name: str) -> str:
        """A service's own user, as devstack makes it."""
        return self.add_user(name, self.service_password, SERVICE_PROJECT,
                             ('admin', 'service'))

    def add_service(self, name: str, service_type: str, url: str) -> None:
        """A catalog entry: the same URL for every interface."""
        service = self.call('POST', '/services', json={'service': {
            'name': name, 'type': service_type}})['service']
        for interface in ('public', 'internal', 'admin'):
            self.call('POST', '/endpoints', json={'endpoint': {
                'service_id': service['id'], 'interface': interface,
                'region_id': REGION, 'url': url}})

    def register(self, api_url: str) -> None:
        """The cyborg service user and the accelerator endpoints."""
        self.add_service_user('cyborg')
        self.add_service('cyborg', 'accelerator', api_url)

    # -- unified limits ------------------------------------------------------

    def _service_id(self, service_type: str) -> str:
        [service] = self.call('GET', f'/services?type={service_type}')[
            'services']
        return str(service['id'])

    def register_limits(self, limits: dict[str, int],
                        service_type: str = 'accelerator') -> None:
        """Registered limits (every project's default) of the service's
        resources in REGION."""
        service = self._service_id(service_type)
        self.call('POST', '/registered_limits', json={'registered_limits': [
            {'service_id': service, 'region_id': REGION,
             'resource_name': name, 'default_limit': value}
            for name, value in limits.items()]})

    def set_limit(self, project_id: str, resource: str, value: int,
                  service_type: str = 'accelerator') -> str:
        """A project's own limit of a resource, over the registered one
        (which must exist); its id."""
        created = self.call('POST', '/limits', json={'limits': [{
            'service_id': self._service_id(service_type),
            'region_id': REGION, 'project_id': project_id,
            'resource_name': resource, 'resource_limit': value}]})
        return str(created['limits'][0]['id'])

    def delete_limit(self, limit_id: str) -> None:
        self.call('DELETE', f'/limits/{limit_id}')

    def limits_reader(self, user: str) -> dict[str, dict[str, str]]:
        """The options by which the conductor, as service user ``user``,
        reads cyborg's limits ([quota] and [oslo_limit]), the user given
        the ``reader`` role on the system as Nova's needs: a token scoped
        to a project without an admin or service role sees that project's
        limits alone."""
        [found] = self.call('GET', f'/users?name={user}')['users']
        reader = self._role_ids()['reader']
        self.call('PUT', f'/system/users/{found["id"]}/roles/{reader}')
        auth = {key: value for key, value in self.password_auth(user).items()
                if not key.startswith('project_')}
        return {'quota': {'driver': 'unified_limits'},
                'oslo_limit': {**auth, 'system_scope': 'all',
                               'endpoint_service_type': 'accelerator',
                               'endpoint_region_name': REGION,
                               'endpoint_interface': 'public'}}

    # -- what services are configured with ----------------------------------

    def password_auth(self, user: str) -> dict[str, str]:
        """keystoneauth options of a client group acting as the service
        user ``user``."""
        return {'auth_type': 'password', 'auth_url': self.url,
                'username': user, 'password': self.service_password,
                'project_name': SERVICE_PROJECT,
                'user_domain_name': 'Default',
                'project_domain_name': 'Default',
                'region_name': REGION}

    def authtoken(self, user: str) -> dict[str, str]:
        """[keystone_authtoken] of a service whose user is ``user``,
        which takes service tokens only with the ``service`` role."""
        return {'www_authenticate_uri': self.url,
                **self.password_auth(user),
                'service_token_roles_required': 'true',
                'service_token_roles': 'service'}


class KeystoneStack(gate_stack.Stack):
    """The gate's stack, with cyborg-api behind Keystone: real tokens,
    the new policy defaults and scope, and service tokens required for
    what only Nova may do."""

    def add_keystone_api(self, keystone: Keystone,
                         extra: dict[str, dict[str, Any]] | None = None
                         ) -> gate_stack.Process:
        return self._service('api', 'api', {
            'DEFAULT': self._default(
                'api', rpc_response_timeout=gate_stack.RPC_TIMEOUT),
            'database': {'connection': self.database_url},
            'api': {'host_ip': '127.0.0.1', 'port': self.api_port,
                    'auth_strategy': 'keystone',
                    'require_service_token': 'true'},
            'oslo_policy': {'enforce_new_defaults': 'true',
                            'enforce_scope': 'true'},
            'keystone_authtoken': keystone.authtoken('cyborg')}, extra)


def new_stack(cleanup: contextlib.ExitStack, workdir: pathlib.Path,
              cyborg_backend: str) -> tuple[KeystoneStack, Keystone]:
    """A KeystoneStack in ``workdir`` (its processes not added yet) on a
    RabbitMQ virtual host of its own, cyborg's database new and migrated
    on ``cyborg_backend`` and Keystone's on MariaDB, and its Keystone
    (not set up); ``cleanup`` drops the databases and the virtual host.
    Without RabbitMQ: skipped, or failed under
    CYBORG_TEST_REQUIRE_SERVICES=1."""
    if not utils.port_open(conftest.RABBIT_URL, 5672):
        conftest.unavailable('RabbitMQ',
                             f'nothing listens at {conftest.RABBIT_URL}')
    rabbit_url = cleanup.enter_context(
        utils.virtual_host(conftest.RABBIT_URL, 'cyborg-test'))
    urls = {}
    for name, backend in (('cyborg', cyborg_backend), ('keystone', 'mysql')):
        (workdir / name).mkdir()
        found = conftest.empty_database_url(backend, workdir / name)
        urls[name] = next(found)
        cleanup.callback(next, found, None)
    migration.upgrade('head', url=urls['cyborg'])
    stack = KeystoneStack(workdir, rabbit_url, urls['cyborg'],
                          'http://127.0.0.1:9', 'none')
    return stack, Keystone(stack, urls['keystone'])
