"""The placement service cyborg-aio runs beside itself, when installed.

openstack-placement (``pip install 'cyborg[aio]'``) is served by waitress
in a child process: placement reads its own configuration through
``OS_PLACEMENT_CONFIG_DIR`` and sets up logging for the whole process it
runs in, so it gets a process of its own. It runs on SQLite under the state
directory with ``noauth2`` (the token ``admin`` is an administrator), on
a socket the parent binds, so the address is known before it starts. The
child is in a session of its own, so a Ctrl-C reaches only the parent,
which stops it; it also ends when the parent dies.
"""
import importlib.util
import os
import pathlib
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import requests
from oslo_config import cfg

from cyborg.conductor import placement_client

# The placement microversion of the calls cyborg-aio prints.
MICROVERSION = '1.39'
TOKEN = 'admin'

# Runs in the child: argv is the listening socket's fd and the parent pid.
_SERVE = '''
import ctypes, os, signal, socket, sys
try:
    # PR_SET_PDEATHSIG: a SIGTERM when the parent dies, however it dies.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[2]):
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
import waitress
import placement.wsgi.api as api
listener = socket.socket(fileno=int(sys.argv[1]))
waitress.serve(api.application, sockets=[listener], threads=4,
               ident="placement", _quiet=True)
'''


def _session() -> requests.Session:
    session = requests.Session()
    # 127.0.0.1 is never behind the proxy of the environment.
    session.trust_env = False
    return session


def installed() -> bool:
    """Whether openstack-placement can be imported."""
    return importlib.util.find_spec('placement') is not None


class PlacementNotStarted(Exception):
    """The child process did not answer in time or exited."""


class EmbeddedPlacement:
    """One placement child process; ``start``, ``wait``, ``stop``."""

    def __init__(self, state_dir: str, port: int) -> None:
        self.workdir = pathlib.Path(state_dir) / 'placement'
        self.port = port
        self.url = ''
        self.log_path = self.workdir / 'placement.log'
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Bind the port and start the child; its URL. OSError if the
        port is taken."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / 'placement.conf').write_text(
            '[api]\nauth_strategy = noauth2\n'
            '[placement_database]\n'
            f'connection = sqlite:///{self.workdir}/placement.sqlite\n'
            'sync_on_startup = true\n')
        sock = socket.create_server(('127.0.0.1', self.port))
        try:
            with open(self.log_path, 'ab') as log:
                # cwd: no directory on the caller's path may shadow the
                # placement package ("python -c" puts it first).
                self.process = subprocess.Popen(
                    [sys.executable, '-c', _SERVE, str(sock.fileno()),
                     str(os.getpid())],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    cwd=self.workdir, pass_fds=[sock.fileno()],
                    start_new_session=True,
                    env=dict(os.environ,
                             OS_PLACEMENT_CONFIG_DIR=str(self.workdir)))
            self.url = f'http://127.0.0.1:{sock.getsockname()[1]}'
        finally:
            sock.close()
        return self.url

    def wait(self, timeout: float = 60) -> None:
        """Until placement answers ``GET /``; PlacementNotStarted with the
        end of its log otherwise."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        session = _session()
        while True:
            try:
                if session.get(self.url + '/', timeout=2).ok:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or \
                    time.monotonic() > deadline:
                tail = self.log_path.read_text(errors='replace')[-2000:]
                raise PlacementNotStarted(
                    f'placement did not start (log {self.log_path}):\n'
                    f'{tail}')
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def configure(conf: cfg.ConfigOpts, url: str) -> None:
    """Point ``[placement]`` at ``url`` with the admin token, no
    Keystone."""
    # The admin_token plugin's options exist once the plugin is named.
    from keystoneauth1 import loading
    conf.set_override('auth_type', 'admin_token', 'placement')
    loading.register_auth_conf_options(conf, 'placement')
    conf.register_opts(loading.get_auth_plugin_conf_options('admin_token'),
                       group='placement')
    conf.set_override('endpoint', url, 'placement')
    conf.set_override('token', TOKEN, 'placement')


def ensure_compute_node(conf: cfg.ConfigOpts, name: str) -> str:
    """The uuid of the compute node provider ``name``, created as
    nova-compute would (with the trait COMPUTE_ACCELERATORS) if absent."""
    client = placement_client.PlacementClient(conf)
    node: dict[str, Any] | None = client.find_provider(name)
    if node is None:
        response = client.adapter.post(
            '/resource_providers', microversion=placement_client.MV_CREATE,
            json={'name': name, 'uuid': str(uuid.uuid4())}, raise_exc=True)
        node = response.json()
    traits = client.get_traits(node['uuid'])[1]
    if 'COMPUTE_ACCELERATORS' not in traits:
        client.set_traits(node['uuid'], traits | {'COMPUTE_ACCELERATORS'})
    return node['uuid']


def tree(url: str, root_uuid: str) -> list[dict[str, Any]]:
    """The providers below ``root_uuid``, as an operator would list them."""
    response = _session().get(
        f'{url}/resource_providers', params={'in_tree': root_uuid},
        headers={'X-Auth-Token': TOKEN,
                 'OpenStack-API-Version': f'placement {MICROVERSION}'},
        timeout=10)
    response.raise_for_status()
    return [p for p in response.json()['resource_providers']
            if p['uuid'] != root_uuid]

