"""Databases made by the real upstream OpenStack Cyborg 17.0.0, for tests.

``venv()`` installs ``openstack-cyborg`` from PyPI into a virtual
environment of its own, once per machine, under the user's cache
directory (``$XDG_CACHE_HOME/cyborg-tests``); pytest workers asking at once
wait on a file lock, and an environment that was not finished or no
longer imports upstream is built again. ``dbsync`` runs upstream's own
migrations on a database (to head, or to an older revision); ``migrate``
does the same on PostgreSQL too, where upstream's migrations cannot get
to head alone (see POSTGRESQL_LAST). ``fill`` starts upstream's
cyborg-api, cyborg-conductor and cyborg-agent (fake driver) as real
processes of that environment, against a real placement, a RabbitMQ
virtual host and a fake Nova, and makes device profiles, accelerator
requests in every state and Nova's allocations through upstream's own
REST API, the way Nova and an operator would; it stops them all again
and describes what it made (``Filled``).

Upstream has no "noauth" mode: its paste pipeline always holds
keystonemiddleware. The API here is served from a paste file of our own
that leaves it out, so the identity comes from the headers that
keystonemiddleware would have set (``X-Roles: admin`` makes an admin for
upstream's policy, ``X-Service-Roles: service`` a Nova service token for
binds). Its [placement] and [nova] clients use keystoneauth's
``admin_token`` plugin: a fixed token to a fixed endpoint.

Where the environment cannot be built (no registry), or a service is not
reachable, the caller is skipped, or failed under
CYBORG_TEST_REQUIRE_SERVICES=1 (``conftest.unavailable``).
"""
import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import sqlalchemy as sa

from cyborg.tests.conftest import unavailable
from cyborg.tests.fakes import http
from cyborg.tests.fakes import nova
from cyborg.tests.functional import gate_stack
from cyborg.tests.placement_server import Placement

VERSION = '17.0.0'
# Upstream's alembic head at VERSION.
HEAD = 'b47c8f2d1e3a'
# Upstream's migrations, oldest first.
REVISIONS = (
    'f50980397351', 'd6f033d8fa5b', 'ede4e3f1a232', '589ff20545b7',
    'c1b5abada09c', '57539722e5cf', '22fb1af2d51e', '7b696fd94949',
    '62bcf2610c5d', '7a4fd0fc3f8c', '60d8ac91fd20', '7e6f1f107f2b',
    '899cead40bc9', '4cc1d79978fc', '6c77bd6afea5', '9625668549b5',
    'a35b4295a0e5', HEAD)
# On PostgreSQL upstream's dbsync reaches POSTGRESQL_LAST and no further:
# POSTGRESQL_BROKEN adds a column of an enum type without a name, which
# PostgreSQL cannot create, and the whole upgrade is rolled back (from an
# empty database, nothing is left). Its migrations also widen enums by
# MySQL's MODIFY alone, so PostgreSQL lacks these labels of its models.
POSTGRESQL_LAST = '4cc1d79978fc'
POSTGRESQL_BROKEN = '6c77bd6afea5'
POSTGRESQL_MISSING_LABELS = {
    'device_type': ('AICHIP', 'QAT', 'NIC', 'SSD', 'MDEV', 'PCI', 'NVME'),
    'attach_type': ('TEST_PCI',),
    'state': ('BindStarted', 'Unbound', 'Deleting'),
}
# On SQLite it stops after SQLITE_LAST (upstream's migrations use MySQL's
# ALTER ... MODIFY); SQLite keeps each migration's DDL, so the database is
# left at SQLITE_LAST.
SQLITE_LAST = 'ede4e3f1a232'
REQUIREMENTS = (f'openstack-cyborg=={VERSION}', 'pymysql', 'psycopg2-binary')
# The file a finished build leaves in the environment.
COMPLETE = 'cyborg-tests-complete'
# Seconds for building the environment (43 s here with nothing in pip's
# cache, 17 s with its downloads there), for a dbsync, for a service to
# come up, and for a bind to be resolved.
BUILD_TIMEOUT = 900
DBSYNC_TIMEOUT = 120
START_TIMEOUT = 60
BIND_TIMEOUT = 30
# How often the agent reports its devices (upstream's default is 60 s),
# and how long an RPC call may wait for its answer (also 60 s).
REPORT_INTERVAL = 2
RPC_TIMEOUT = 20
# Upstream's fake driver: one FPGA device per host with this many
# attach handles, the FPGA resource class and this trait.
FAKE_HANDLES = 16
FAKE_TRAIT = 'CUSTOM_FAKE_DEVICE'
# The identity of every call to upstream's API: an admin of this project
# carrying a service token, as Nova's calls carry one.
PROJECT_ID = '5f3b7c1e9a0d4b6c8e2f1a3b5c7d9e0f'
USER_ID = 'a1b2c3d4e5f60718293a4b5c6d7e8f90'
API_HEADERS = {
    'X-Roles': 'admin,member,reader',
    'X-Project-Id': PROJECT_ID,
    'X-User-Id': USER_ID,
    'X-Service-Roles': 'service',
    'OpenStack-API-Version': 'accelerator 2.3',
}
# upstream's cyborg-api command fails in 17.0.0 (oslo.service's WSGI server
# refuses its threading backend); its WSGI application is served here by
# the standard library instead, as devstack serves it by uwsgi. The port
# comes first, then upstream's own arguments.
SERVE_API = '''
import socketserver, sys
from wsgiref import simple_server
port = int(sys.argv.pop(1))
from cyborg.wsgi import api
class Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
class Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass
simple_server.make_server("127.0.0.1", port, api.application,
                          server_class=Server,
                          handler_class=Quiet).serve_forever()
'''
# Upstream's paste pipeline without keystonemiddleware (see above).
API_PASTE = '''[pipeline:main]
pipeline = request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory
'''


def cache_dir() -> pathlib.Path:
    base = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
    return pathlib.Path(base) / 'cyborg-tests'


@pytest.fixture(scope='session')
def upstream_venv() -> pathlib.Path:
    """Upstream's environment, built (or checked) once per process."""
    return venv()


def venv_path() -> pathlib.Path:
    return cache_dir() / f'openstack-cyborg-{VERSION}'


def _works(path: pathlib.Path) -> bool:
    """Whether the environment at ``path`` has upstream's commands and
    database drivers."""
    python = path / 'bin' / 'python'
    if not (path / COMPLETE).exists() or not python.exists():
        return False
    check = subprocess.run(
        [str(python), '-c', 'import cyborg.cmd.dbsync, pymysql, psycopg2'],
        capture_output=True, timeout=120, check=False)
    return check.returncode == 0


def venv() -> pathlib.Path:
    """The environment with upstream installed, built on first use."""
    path = venv_path()
    if _works(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f'{path.name}.lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _works(path):
                _build(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def _build(path: pathlib.Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    log = path.with_name(path.name + '.log')
    started = time.monotonic()
    with open(log, 'w') as out:
        for argv in ([sys.executable, '-m', 'venv', str(path)],
                     [str(path / 'bin' / 'python'), '-m', 'pip', 'install',
                      '-q', *REQUIREMENTS]):
            try:
                done = subprocess.run(argv, stdout=out,
                                      stderr=subprocess.STDOUT,
                                      timeout=BUILD_TIMEOUT, check=False)
            except subprocess.TimeoutExpired:
                unavailable(f'openstack-cyborg {VERSION}',
                            f'{" ".join(argv[:4])} ... took over '
                            f'{BUILD_TIMEOUT} s, see {log}')
            if done.returncode != 0:
                unavailable(f'openstack-cyborg {VERSION}',
                            f'{" ".join(argv[:4])} ... failed: '
                            f'{log.read_text(errors="replace")[-800:]}')
        out.write(f'built in {time.monotonic() - started:.0f} s\n')
    # Written last: an interrupted build has none and is built again.
    (path / COMPLETE).write_text(' '.join(REQUIREMENTS) + '\n')


def write_config(workdir: pathlib.Path, database_url: str,
                 **sections: dict[str, Any]) -> pathlib.Path:
    """An upstream configuration file in ``workdir``: the database, logs to
    stderr, and ``sections`` over that."""
    conf: dict[str, dict[str, Any]] = {
        'DEFAULT': {'debug': 'true', 'use_stderr': 'true'},
        'database': {'connection': database_url},
        'oslo_concurrency': {'lock_path': str(workdir / 'locks')},
    }
    for name, values in sections.items():
        conf.setdefault(name, {}).update(values)
    return gate_stack.write_conf(workdir / 'cyborg.conf', conf)


def run_dbsync(database_url: str, workdir: pathlib.Path,
               *args: str) -> subprocess.CompletedProcess[str]:
    """Upstream's ``cyborg-dbsync <args>`` on ``database_url``, whatever
    its outcome."""
    conf = write_config(workdir, database_url)
    return subprocess.run(
        [str(venv() / 'bin' / 'cyborg-dbsync'), '--config-file', str(conf),
         *args], capture_output=True, text=True, timeout=DBSYNC_TIMEOUT,
        check=False)


def dbsync(database_url: str, workdir: pathlib.Path,
           revision: str = 'head', command: str = 'upgrade') -> str:
    """Upstream's ``cyborg-dbsync upgrade`` (or ``stamp``) to ``revision``
    on ``database_url``, which must succeed; returns its output."""
    args = [command] + ([] if revision == 'head' else
                        ['--revision', revision])
    done = run_dbsync(database_url, workdir, *args)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (
        f'upstream dbsync {" ".join(args)} failed:\n{output[-3000:]}')
    return output


def migrate(database_url: str, workdir: pathlib.Path,
            revision: str = 'head') -> None:
    """``dbsync``, also on PostgreSQL, where upstream's migrations stop
    after POSTGRESQL_LAST: past it, the schema is repaired by hand
    (``_repair_postgresql``) and upstream's dbsync stamped over the
    broken revision and run on from there."""
    if (not database_url.startswith('postgresql')
            or REVISIONS.index(revision if revision != 'head' else HEAD)
            <= REVISIONS.index(POSTGRESQL_LAST)):
        dbsync(database_url, workdir, revision)
        return
    dbsync(database_url, workdir, POSTGRESQL_LAST)
    _repair_postgresql(database_url)
    dbsync(database_url, workdir, POSTGRESQL_BROKEN, command='stamp')
    if revision != POSTGRESQL_BROKEN:
        dbsync(database_url, workdir, revision)


def _repair_postgresql(database_url: str) -> None:
    """What upstream's 17.0.0 models declare and its migrations never made
    on PostgreSQL: the labels its enum migrations add through MySQL's
    MODIFY only, and the device status column of POSTGRESQL_BROKEN, under
    the type name its model gives. Not upstream's: a PostgreSQL database
    of upstream 17.0.0 exists only with a repair like this one, whose
    details are whoever made it's."""
    engine = sa.create_engine(database_url, isolation_level='AUTOCOMMIT')
    try:
        with engine.connect() as conn:
            for type_name, labels in POSTGRESQL_MISSING_LABELS.items():
                for label in labels:
                    conn.execute(sa.text(
                        f"ALTER TYPE {type_name} ADD VALUE IF NOT EXISTS "
                        f"'{label}'"))
            conn.execute(sa.text(
                "CREATE TYPE device_status AS ENUM ('enabled', "
                "'maintaining')"))
            conn.execute(sa.text(
                'ALTER TABLE devices ADD COLUMN status device_status '
                'NOT NULL'))
    finally:
        engine.dispose()


def schema(database_url: str, workdir: pathlib.Path) -> None:
    """Upstream's empty schema at its head on ``database_url``: by its
    migrations on the servers (``migrate``), by its ``create_schema``
    (its models, stamped at its head) on SQLite, where its migrations
    stop at the first ALTER."""
    if database_url.startswith('sqlite'):
        dbsync(database_url, workdir, command='create_schema')
    else:
        migrate(database_url, workdir)


def copy_schema(source_url: str, target_url: str) -> None:
    """Make the empty database at ``target_url`` hold what the one at
    ``source_url`` holds (an upstream schema, made once by ``schema``):
    a tenth of the time of running upstream's dbsync again.

    PostgreSQL copies the database whole (``CREATE DATABASE ...
    TEMPLATE``); MariaDB runs each table's own ``SHOW CREATE TABLE`` and
    copies the rows; SQLite copies the file.
    """
    source = sa.engine.make_url(source_url)
    target = sa.engine.make_url(target_url)
    backend = source.get_backend_name()
    if backend == 'sqlite':
        shutil.copyfile(str(source.database), str(target.database))
        return
    if backend == 'postgresql':
        admin = sa.create_engine(target.set(database='postgres'),
                                 isolation_level='AUTOCOMMIT')
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE {target.database}'))
                conn.execute(sa.text(
                    f'CREATE DATABASE {target.database} TEMPLATE '
                    f'{source.database}'))
        finally:
            admin.dispose()
        return
    engine = sa.create_engine(target)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text('SET FOREIGN_KEY_CHECKS = 0'))
            tables = conn.scalars(sa.text(
                f'SHOW TABLES FROM `{source.database}`')).all()
            for table in tables:
                ddl = conn.execute(sa.text(
                    f'SHOW CREATE TABLE `{source.database}`.`{table}`')
                ).one()[1]
                conn.execute(sa.text(ddl))
                conn.execute(sa.text(
                    f'INSERT INTO `{table}` SELECT * FROM '
                    f'`{source.database}`.`{table}`'))
            conn.execute(sa.text('SET FOREIGN_KEY_CHECKS = 1'))
    finally:
        engine.dispose()


def alembic_version(database_url: str) -> list[str]:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(
                sa.text('SELECT version_num FROM alembic_version'))]
    finally:
        engine.dispose()


@dataclasses.dataclass
class Handle:
    uuid: str
    # As upstream stores it: a JSON string of the PCI address.
    attach_info: str
    attach_type: str
    in_use: bool


@dataclasses.dataclass
class Deployable:
    uuid: str
    name: str
    rp_uuid: str
    num_accelerators: int
    handles: list[Handle]


@dataclasses.dataclass
class Device:
    uuid: str
    hostname: str
    # As upstream stores it: the control path's JSON string.
    cpid_info: str
    deployables: list[Deployable]


@dataclasses.dataclass
class Profile:
    name: str
    uuid: str
    groups: list[dict[str, str]]
    description: str | None


@dataclasses.dataclass
class Arq:
    uuid: str
    state: str
    profile_name: str
    group_id: int
    hostname: str | None
    instance_uuid: str | None
    device_rp_uuid: str | None
    attach_handle_uuid: str | None
    attach_info: str | None
    # How it got its state: 'api', or 'sql' for the states upstream's API
    # cannot produce.
    made_by: str = 'api'


@dataclasses.dataclass
class Allocation:
    """What Nova would hold in placement for one instance."""

    consumer_uuid: str
    # Resources by provider uuid, then by resource class.
    resources: dict[str, dict[str, int]]


@dataclasses.dataclass
class Filled:
    """What ``fill`` made."""

    database_url: str
    placement_url: str
    host: str
    compute_node_uuid: str
    project_id: str
    devices: list[Device]
    profiles: list[Profile]
    arqs: list[Arq]
    allocations: list[Allocation]
    # Where upstream's processes wrote their logs and configuration.
    workdir: pathlib.Path

    def arqs_in(self, state: str) -> list[Arq]:
        return [arq for arq in self.arqs if arq.state == state]

    @property
    def deployables(self) -> list[Deployable]:
        return [dep for dev in self.devices for dep in dev.deployables]

    @property
    def handles(self) -> list[Handle]:
        return [h for dep in self.deployables for h in dep.handles]

    def logs(self, chars: int = 3000) -> str:
        """The end of each upstream process's log, for assertion
        messages."""
        return '\n'.join(
            f'--- {log} ---\n{log.read_text(errors="replace")[-chars:]}'
            for log in sorted(self.workdir.glob('*.log')))


class Upstream:
    """Upstream's API, conductor and agent on one configuration; a
    context manager that stops them on the way out, also when starting
    them failed."""

    def __init__(self, workdir: pathlib.Path, database_url: str,
                 placement_url: str, transport_url: str,
                 fake_nova: nova.FakeNova, host: str) -> None:
        self.workdir = workdir
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        (workdir / 'api-paste.ini').write_text(API_PASTE)
        self.conf = write_config(
            workdir, database_url,
            DEFAULT={'transport_url': transport_url, 'host': host,
                     'periodic_interval': REPORT_INTERVAL,
                     'rpc_response_timeout': RPC_TIMEOUT},
            api={'host_ip': '127.0.0.1', 'port': self.port,
                 'api_workers': 1,
                 'api_paste_config': str(workdir / 'api-paste.ini')},
            agent={'enabled_drivers': 'fake_driver',
                   'resource_provider_name': host,
                   'resource_provider_startup_retries': 0},
            placement={'auth_type': 'admin_token', 'token': 'admin',
                       'endpoint': placement_url,
                       'endpoint_override': placement_url},
            nova={'auth_type': 'admin_token', 'token': fake_nova.token,
                  'endpoint': fake_nova.endpoint,
                  'endpoint_override': fake_nova.endpoint},
        )
        bindir = venv() / 'bin'
        argv = {kind: [str(bindir / f'cyborg-{kind}')]
                for kind in ('conductor', 'agent')}
        argv['api'] = [str(bindir / 'python'), '-c', SERVE_API,
                       str(self.port)]
        self.processes = [
            gate_stack.Process(
                f'upstream-{kind}', kind,
                argv[kind] + ['--config-file', str(self.conf)],
                workdir / f'{kind}.log', cwd=workdir)
            for kind in ('conductor', 'api', 'agent')]
        self.session = requests.Session()
        self.session.headers.update(API_HEADERS)

    def __enter__(self) -> 'Upstream':
        conductor, api, agent = self.processes
        try:
            # The agent's first report is a call to the conductor: sent
            # before the conductor's queue exists, it would be lost and the
            # agent would wait for its answer until the RPC timeout.
            conductor.start()
            self.wait_for(lambda: 'Created RPC server' in conductor.log(),
                          'upstream cyborg-conductor to listen')
            api.start()
            agent.start()
            self.wait_for(self._api_up, 'upstream cyborg-api to answer')
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM to each, SIGKILL after gate_stack.STOP_TIMEOUT; then
        SIGKILL to whatever is left in their sessions (a launcher's
        workers)."""
        started = [p for p in self.processes if p.popen is not None]
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def logs(self, lines: int = 40) -> str:
        return '\n'.join(f'--- {p.name} ({p.log_path}) ---\n{p.tail(lines)}'
                         for p in self.processes)

    def wait_for(self, check: Any, what: str,
                 timeout: float = START_TIMEOUT) -> Any:
        """gate_stack.wait_for, failing early when a process has exited,
        with the processes' logs."""
        def checked() -> Any:
            dead = [p.name for p in self.processes
                    if p.popen is not None and not p.running]
            if dead:
                raise AssertionError(
                    f'{", ".join(dead)} exited while waiting for {what}:\n'
                    + self.logs())
            return check()
        try:
            return gate_stack.wait_for(checked, what, timeout)
        except AssertionError as exc:
            if 'exited while' in str(exc):
                raise
            raise AssertionError(f'{exc}\n{self.logs()}') from None

    def _api_up(self) -> bool:
        try:
            return self.session.get(self.url + '/', timeout=2).ok
        except requests.ConnectionError:
            return False

    def request(self, method: str, path: str, expect: int,
                **kwargs: Any) -> Any:
        response = self.session.request(method, self.url + '/v2' + path,
                                        timeout=60, **kwargs)
        assert response.status_code == expect, (
            f'{method} {path}: {response.status_code} {response.text}\n'
            + self.logs())
        return response.json() if response.content else None

    def create_profile(self, name: str, groups: list[dict[str, str]],
                       description: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {'name': name, 'groups': groups}
        if description is not None:
            body['description'] = description
        return self.request('POST', '/device_profiles', 201, json=[body])

    def create_arqs(self, profile: str) -> list[dict[str, Any]]:
        return self.request('POST', '/accelerator_requests', 201,
                            json={'device_profile_name': profile})['arqs']

    def bind(self, arqs: list[dict[str, Any]], hostname: str, rp_uuid: str,
             instance_uuid: str, expect: int = 202) -> None:
        """Bind as Nova's conductor does; all of an instance's ARQs in one
        PATCH (upstream refuses a second bind for an instance)."""
        self.request('PATCH', '/accelerator_requests', expect, json={
            arq['uuid']: [
                {'op': 'add', 'path': '/hostname', 'value': hostname},
                {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                {'op': 'add', 'path': '/instance_uuid',
                 'value': instance_uuid}]
            for arq in arqs})

    def unbind(self, arqs: list[dict[str, Any]]) -> None:
        self.request('PATCH', '/accelerator_requests', 202, json={
            arq['uuid']: [{'op': 'remove', 'path': f'/{field}'}
                          for field in ('hostname', 'device_rp_uuid',
                                        'instance_uuid')]
            for arq in arqs})

    def resolved(self, instance_uuid: str) -> list[dict[str, Any]]:
        """The instance's ARQs once all are resolved (upstream answers
        423 until then), as Nova's compute waits for them."""
        def check() -> list[dict[str, Any]] | None:
            response = self.session.get(
                self.url + '/v2/accelerator_requests', timeout=30,
                params={'instance': instance_uuid, 'bind_state': 'resolved'})
            if response.status_code == 423:
                return None
            assert response.status_code == 200, response.text
            return response.json()['arqs']
        return self.wait_for(check, f'the ARQs of {instance_uuid} to be '
                                    'resolved', BIND_TIMEOUT)


def device_rp_name(host: str) -> str:
    """The provider upstream's conductor makes for the fake driver's one
    deployable (the deployable's name)."""
    return f'{host}_FakeDevice'


def _reported(engine: sa.engine.Engine, placement: Placement,
              host: str) -> str | None:
    """The device provider's uuid once the agent's report reached both
    the database and placement (with its inventory)."""
    with engine.connect() as conn:
        rp_uuid = conn.execute(sa.text(
            'SELECT dep.rp_uuid FROM deployables dep JOIN devices d '
            'ON d.id = dep.device_id WHERE d.hostname = :host'),
            {'host': host}).scalar()
    if rp_uuid is None:
        return None
    response = placement.request('GET',
                                 f'/resource_providers/{rp_uuid}/inventories')
    if response.status_code != 200 or not response.json()['inventories']:
        return None
    return rp_uuid


def fill(database_url: str, placement_url: str, transport_url: str,
         workdir: pathlib.Path) -> Filled:
    """Migrate the empty database at ``database_url`` with upstream's
    dbsync and fill it through upstream's services (see the module's
    docstring); upstream's processes are stopped when this returns."""
    workdir.mkdir(parents=True, exist_ok=True)
    migrate(database_url, workdir)
    placement = Placement(placement_url)
    host = f'upstream-{uuid.uuid4().hex[:10]}'
    # The compute node provider as nova-compute makes it, with some
    # inventory of its own for the instances' allocations.
    node = placement.create_compute_node(host)
    node = placement.get(f'/resource_providers/{node["uuid"]}')
    response = placement.request(
        'PUT', f'/resource_providers/{node["uuid"]}/inventories', json={
            'resource_provider_generation': node['generation'],
            'inventories': {'VCPU': {'total': 16},
                            'MEMORY_MB': {'total': 32768}}})
    assert response.status_code == 200, response.text
    fake_nova = nova.FakeNova()
    # Upstream's clients read the compute API's version document first.
    fake_nova.route('GET', fake_nova.prefix,
                    lambda request: _nova_version(fake_nova))
    fake_nova.start()
    engine = sa.create_engine(database_url)
    try:
        with Upstream(workdir, database_url, placement_url, transport_url,
                      fake_nova, host) as up:
            made = _make(up, engine, placement, host, fake_nova)
        _finish(engine, made)
        filled = _read(engine, database_url, placement_url, host,
                       node['uuid'], made, workdir)
    finally:
        engine.dispose()
        fake_nova.stop()
    filled.allocations = _allocate(placement, filled)
    return filled


def _nova_version(fake_nova: nova.FakeNova) -> http.Response:
    return http.json_response({'version': {
        'id': 'v2.1', 'status': 'CURRENT', 'version': '2.104',
        'min_version': '2.1',
        'links': [{'rel': 'self', 'href': fake_nova.endpoint + '/'}]}})


def _make(up: Upstream, engine: sa.engine.Engine, placement: Placement,
          host: str, fake_nova: nova.FakeNova) -> dict[str, Any]:
    """Profiles and ARQs through upstream's API; what was made, by
    role."""
    rp_uuid = up.wait_for(lambda: _reported(engine, placement, host),
                          'the agent to report its device')
    up.create_profile('upstream-fpga', [{'resources:FPGA': '1'}],
                      description='One FPGA, any kind')
    up.create_profile('upstream-fpga-trait', [
        {'resources:FPGA': '1', f'trait:{FAKE_TRAIT}': 'required'}])
    up.create_profile('upstream-fpga-pair', [{'resources:FPGA': '2'}],
                      description='Two FPGAs in one group')
    # Upstream refuses to bind a group asking for a bitstream and a
    # function at once, after it marked the ARQ BindFailed.
    up.create_profile('upstream-fpga-conflict', [
        {'resources:FPGA': '1',
         'accel:bitstream_id': str(uuid.uuid4()),
         'accel:function_id': str(uuid.uuid4())}])
    made: dict[str, Any] = {'rp_uuid': rp_uuid, 'host': host, 'instances': {}}
    instances = made['instances']

    made['initial'] = up.create_arqs('upstream-fpga')
    # Two instances with Bound ARQs: two from one group, and one with a
    # trait.
    for role, profile in (('pair', 'upstream-fpga-pair'),
                          ('trait', 'upstream-fpga-trait')):
        arqs = up.create_arqs(profile)
        instance = str(uuid.uuid4())
        up.bind(arqs, host, rp_uuid, instance)
        up.resolved(instance)
        instances[instance] = [a['uuid'] for a in arqs]
        made[role] = arqs
    # Bound, then unbound.
    made['unbound'] = up.create_arqs('upstream-fpga')
    instance = str(uuid.uuid4())
    up.bind(made['unbound'], host, rp_uuid, instance)
    up.resolved(instance)
    up.unbind(made['unbound'])
    # upstream answers the refusal with a 400 (InvalidParameterValue).
    made['failed'] = up.create_arqs('upstream-fpga-conflict')
    up.bind(made['failed'], host, rp_uuid, str(uuid.uuid4()), expect=400)
    # Two more Initial ARQs to be put by SQL into the states upstream's
    # API never produces (_finish).
    made['bind_started'] = up.create_arqs('upstream-fpga')
    made['deleting'] = up.create_arqs('upstream-fpga')
    made['bind_started_instance'] = str(uuid.uuid4())
    # One POST of events per instance whose bind ended well: the two
    # bound ones and the one unbound since (none for the failed bind).
    up.wait_for(lambda: len(fake_nova.events()) >= 4,
                "upstream's bind events to reach Nova", BIND_TIMEOUT)
    return made


def _finish(engine: sa.engine.Engine, made: dict[str, Any]) -> None:
    """The states upstream's API cannot produce, set by SQL with its
    processes stopped.

    BindStarted: upstream sets it at the start of a bind and leaves it
    only when the bind ends, so a conductor that died mid-bind leaves
    one, with the binding fields set and no attach handle.
    Deleting: in upstream's state list but never set by its code.
    """
    (started,) = made['bind_started']
    (deleting,) = made['deleting']
    with engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE extended_accelerator_requests SET state = 'BindStarted', "
            'hostname = :host, device_rp_uuid = :rp, instance_uuid = :inst '
            'WHERE uuid = :uuid'),
            {'host': made['host'],
             'rp': made['rp_uuid'], 'inst': made['bind_started_instance'],
             'uuid': started['uuid']})
        conn.execute(sa.text(
            "UPDATE extended_accelerator_requests SET state = 'Deleting' "
            'WHERE uuid = :uuid'), {'uuid': deleting['uuid']})


def _read(engine: sa.engine.Engine, database_url: str, placement_url: str,
          host: str, node_uuid: str, made: dict[str, Any],
          workdir: pathlib.Path) -> Filled:
    """The upstream tables, read back into a ``Filled``."""
    sql_made = {made['bind_started'][0]['uuid'],
                made['deleting'][0]['uuid']}
    with engine.connect() as conn:
        def rows(query: str, **params: Any) -> list[Any]:
            return list(conn.execute(sa.text(query), params).mappings())

        devices = []
        for dev in rows('SELECT d.id, d.uuid, d.hostname, c.cpid_info '
                        'FROM devices d JOIN controlpath_ids c '
                        'ON c.device_id = d.id ORDER BY d.id'):
            deployables = []
            for dep in rows('SELECT id, uuid, name, rp_uuid, '
                            'num_accelerators FROM deployables '
                            'WHERE device_id = :d ORDER BY id', d=dev['id']):
                handles = [Handle(h['uuid'], h['attach_info'],
                                  h['attach_type'], bool(h['in_use']))
                           for h in rows('SELECT uuid, attach_info, '
                                         'attach_type, in_use FROM '
                                         'attach_handles WHERE '
                                         'deployable_id = :d ORDER BY id',
                                         d=dep['id'])]
                deployables.append(Deployable(
                    dep['uuid'], dep['name'], dep['rp_uuid'],
                    dep['num_accelerators'], handles))
            devices.append(Device(dev['uuid'], dev['hostname'],
                                  dev['cpid_info'], deployables))
        profiles = [Profile(p['name'], p['uuid'],
                            json.loads(p['profile_json'])['groups'],
                            p['description'])
                    for p in rows('SELECT name, uuid, profile_json, '
                                  'description FROM device_profiles '
                                  'ORDER BY id')]
        arqs = [Arq(a['uuid'], a['state'], a['name'],
                    a['device_profile_group_id'], a['hostname'],
                    a['instance_uuid'], a['device_rp_uuid'], a['ah_uuid'],
                    a['attach_info'],
                    'sql' if a['uuid'] in sql_made else 'api')
                for a in rows(
                    'SELECT a.uuid, a.state, p.name, '
                    'a.device_profile_group_id, a.hostname, '
                    'a.instance_uuid, a.device_rp_uuid, h.uuid AS ah_uuid, '
                    'h.attach_info FROM extended_accelerator_requests a '
                    'JOIN device_profiles p ON p.id = a.device_profile_id '
                    'LEFT JOIN attach_handles h ON h.id = a.attach_handle_id '
                    'ORDER BY a.id')]
    return Filled(database_url, placement_url, host, node_uuid, PROJECT_ID,
                  devices, profiles, arqs, [], workdir)


def _allocate(placement: Placement, filled: Filled) -> list[Allocation]:
    """Nova's allocations for the instances with Bound ARQs: one
    accelerator per ARQ from its device provider, and the instance's
    own resources from the compute node."""
    by_instance: dict[str, dict[str, dict[str, int]]] = {}
    for arq in filled.arqs_in('Bound'):
        assert arq.instance_uuid and arq.device_rp_uuid, arq
        resources = by_instance.setdefault(arq.instance_uuid, {
            filled.compute_node_uuid: {'VCPU': 1, 'MEMORY_MB': 512}})
        device = resources.setdefault(arq.device_rp_uuid, {'FPGA': 0})
        device['FPGA'] += 1
    allocations = []
    for instance, resources in by_instance.items():
        response = placement.request('PUT', f'/allocations/{instance}', json={
            'allocations': {rp: {'resources': r}
                            for rp, r in resources.items()},
            'project_id': filled.project_id, 'user_id': USER_ID,
            'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert response.status_code == 204, response.text
        allocations.append(Allocation(instance, resources))
    return allocations


@contextlib.contextmanager
def upstream_database(database_url: str, placement_url: str,
                      transport_url: str,
                      workdir: pathlib.Path) -> Iterator[Filled]:
    """``fill``, and the Nova allocations removed from placement after
    the block (the placement server outlives one test)."""
    filled = fill(database_url, placement_url, transport_url, workdir)
    try:
        yield filled
    finally:
        placement = Placement(placement_url)
        for allocation in filled.allocations:
            placement.request('DELETE',
                              f'/allocations/{allocation.consumer_uuid}')
