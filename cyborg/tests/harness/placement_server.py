"""A real openstack-placement on 127.0.0.1 for tests, and a way to call it.

One server per test process (pytest-xdist worker), on SQLite with
``noauth2``: the token ``admin`` is an admin. Tests keep out of each
other's way by naming their compute nodes uniquely. ``serve`` starts one
outside pytest too (``tools/bench/placement.py``).
"""
import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from oslo_config import cfg

# Placement under waitress, counting the requests it takes; GET CALLS_PATH
# answers the count so far (itself not counted), for tests and benchmarks
# that count the calls an operation costs.
CALLS_PATH = '/_calls'
_SERVE = '''
import itertools, json, sys, waitress
import placement.wsgi.api as api
# Requests taken (itertools.count is atomic), and of them reads of CALLS_PATH.
calls, reads = itertools.count(), itertools.count()
def counted(environ, start_response):
    taken = next(calls)
    if environ["PATH_INFO"] == "%s":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"calls": taken - next(reads)}).encode()]
    return api.application(environ, start_response)
waitress.serve(counted, host="127.0.0.1", port=int(sys.argv[1]),
               threads=8, _quiet=True)
''' % CALLS_PATH


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class Placement:
    """Direct calls, as Nova or an operator would make them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers['X-Auth-Token'] = 'admin'

    def request(self, method: str, path: str, version: str = '1.39',
                **kwargs: Any) -> requests.Response:
        headers = {'OpenStack-API-Version': f'placement {version}'}
        return self.session.request(method, self.url + path,
                                    headers=headers, timeout=30, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        response = self.request('GET', path, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()

    def create_compute_node(self, name: str | None = None) -> dict[str, Any]:
        """A compute node provider as nova-compute makes it."""
        name = name or f'cn-{uuid.uuid4().hex[:10]}'
        response = self.request('POST', '/resource_providers',
                                json={'name': name, 'uuid': str(uuid.uuid4())})
        assert response.status_code == 200, response.text
        node = response.json()
        response = self.request(
            'PUT', f'/resource_providers/{node["uuid"]}/traits',
            json={'resource_provider_generation': node['generation'],
                  'traits': ['COMPUTE_ACCELERATORS']})
        assert response.status_code == 200, response.text
        return node

    def tree(self, root_uuid: str) -> dict[str, dict[str, Any]]:
        """Providers below the root, by uuid."""
        return {p['uuid']: p for p in self.get(
            f'/resource_providers?in_tree={root_uuid}')['resource_providers']
            if p['uuid'] != root_uuid}

    def inventories(self, rp_uuid: str) -> dict[str, Any]:
        return self.get(f'/resource_providers/{rp_uuid}/inventories'
                        )['inventories']

    def inventory_below(self, root_uuid: str
                        ) -> list[tuple[str, str, int, int]]:
        """(provider name, resource class, total, reserved) of every
        inventory in the tree of ``root_uuid``, sorted."""
        return sorted((rp['name'], rc, inv['total'], inv['reserved'])
                      for rp_uuid, rp in self.tree(root_uuid).items()
                      for rc, inv in self.inventories(rp_uuid).items())

    def offered(self, root_uuid: str
                ) -> list[tuple[str, dict[str, tuple[int, int]], set[str]]]:
        """Every provider below the root with inventory: its name,
        {resource class: (total, reserved)} and traits, by name."""
        found = []
        for rp_uuid, rp in self.tree(root_uuid).items():
            inventories = self.inventories(rp_uuid)
            if inventories:
                found.append((rp['name'], {
                    rc: (inventory['total'], inventory['reserved'])
                    for rc, inventory in inventories.items()},
                    self.traits(rp_uuid)))
        return sorted(found, key=lambda entry: entry[0])

    def reserved(self, root_uuid: str) -> int:
        """What placement holds back below the root, all classes summed."""
        return sum(inventory['reserved'] for rp in self.tree(root_uuid)
                   for inventory in self.inventories(rp).values())

    def calls(self) -> int:
        """Requests the server has taken since it started, but these."""
        return int(self.session.get(self.url + CALLS_PATH, timeout=30
                                    ).json()['calls'])

    def traits(self, rp_uuid: str) -> set[str]:
        return set(self.get(f'/resource_providers/{rp_uuid}/traits'
                            )['traits'])


class Relay:
    """A TCP relay on 127.0.0.1 in front of ``url``, to take placement
    away and bring it back without restarting it: while closed, its port
    refuses connections and the ones it carried are cut. ``freeze`` holds
    what it carries, both ways, until ``thaw``, as a stalled network link
    does: connections stay open and nothing is lost."""

    def __init__(self, url: str) -> None:
        target = urllib.parse.urlsplit(url)
        self.target = (target.hostname, target.port)
        self.port = _free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._accepting: tuple[socket.socket, threading.Thread] | None = None
        self._flowing = threading.Event()
        self._flowing.set()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(('127.0.0.1', self.port))
        listener.listen(64)
        thread = threading.Thread(target=self._accept, args=(listener,),
                                  daemon=True)
        thread.start()
        self._accepting = (listener, thread)

    def close(self) -> None:
        if self._accepting is not None:
            listener, thread = self._accepting
            self._accepting = None
            # Wakes accept(); the port refuses from here on.
            _shut(listener)
            thread.join(5)
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _shut(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                _shut(client)
                continue
            with self._lock:
                self._sockets.update((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(src, dst),
                                 daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with self._lock:
                self._sockets.discard(sock)
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@contextlib.contextmanager
def serve(workdir: pathlib.Path,
          database_url: str | None = None) -> Iterator[str]:
    """Run placement, with its configuration and log in ``workdir``, until
    the block ends; yields its URL. Its database is an SQLite file there
    unless ``database_url`` names an empty one (SQLite serialises writes:
    concurrent writers meet "database is locked")."""
    database_url = database_url or f'sqlite:///{workdir}/placement.sqlite'
    (workdir / 'placement.conf').write_text(
        '[api]\nauth_strategy = noauth2\n'
        '[placement_database]\n'
        f'connection = {database_url}\n'
        'sync_on_startup = true\n')
    port = _free_port()
    log = open(workdir / 'placement.log', 'wb')
    # Started from workdir, so that no directory on the caller's path
    # shadows the placement package.
    process = subprocess.Popen(
        [sys.executable, '-c', _SERVE, str(port)], stdout=log, stderr=log,
        cwd=workdir,
        env=dict(os.environ, OS_PLACEMENT_CONFIG_DIR=str(workdir)))
    url = f'http://127.0.0.1:{port}'
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if requests.get(url + '/', timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise RuntimeError(
                    'placement did not start: '
                    + (workdir / 'placement.log').read_text()[-2000:])
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()


@pytest.fixture(scope='session')
def placement_url(tmp_path_factory) -> Iterator[str]:
    """The URL of a real placement service, started once per process."""
    with serve(tmp_path_factory.mktemp('placement')) as url:
        yield url


@pytest.fixture
def placement(placement_url) -> Placement:
    return Placement(placement_url)


def point_at(conf: cfg.ConfigOpts, url: str) -> None:
    """Configure [placement] for the test server (admin token, no
    Keystone)."""
    conf.set_override('auth_type', 'admin_token', 'placement')
    # The plugin's own options exist once the plugin is known.
    from keystoneauth1 import loading
    loading.register_auth_conf_options(conf, 'placement')
    conf.register_opts(loading.get_auth_plugin_conf_options('admin_token'),
                       group='placement')
    conf.set_override('endpoint', url, 'placement')
    conf.set_override('token', 'admin', 'placement')
