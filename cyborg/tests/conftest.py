"""Shared fixtures: real databases and the real message broker.

The machine services are MariaDB (127.0.0.1:3306, root), PostgreSQL
(127.0.0.1:5432, postgres) and RabbitMQ (127.0.0.1:5672, guest/guest); the
addresses can be changed with CYBORG_TEST_MYSQL_URL, CYBORG_TEST_PG_URL and
CYBORG_TEST_RABBIT_URL. A service that cannot be reached skips its tests,
unless CYBORG_TEST_REQUIRE_SERVICES=1 (set by .ci/run), where it fails them;
so does a Python package of test-requirements.txt that is not installed
(``require_module``, called by the test or its fixture, never at import).
"""
import contextlib
import importlib.util
import os
import socket
import threading
import uuid
from collections.abc import Iterator

import futurist._thread
import pytest
import sqlalchemy as sa
from oslo_config import cfg
from oslo_db.sqlalchemy import engines

import cyborg.cmd  # noqa: F401  (native threads, before oslo.service loads)
from cyborg import conf as cyborg_conf  # noqa: F401  (registers options)
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import attach_handles
from cyborg.tests import utils
from cyborg.tests.fakes.fixtures import fake_glance  # noqa: F401
from cyborg.tests.fakes.fixtures import fake_nova  # noqa: F401
from cyborg.tests.harness.placement_server import placement  # noqa: F401
from cyborg.tests.harness.placement_server import placement_url  # noqa: F401

MYSQL_URL = os.environ.get('CYBORG_TEST_MYSQL_URL',
                           'mysql+pymysql://root@127.0.0.1:3306/')
PG_URL = os.environ.get('CYBORG_TEST_PG_URL',
                        'postgresql+psycopg2://postgres@127.0.0.1:5432/')
RABBIT_URL = os.environ.get('CYBORG_TEST_RABBIT_URL',
                            'rabbit://guest:guest@127.0.0.1:5672/')

BACKENDS = ('sqlite', 'mysql', 'postgresql')

# oslo.messaging serves each RPC server from a futurist thread pool whose
# idle threads notice they are to stop only when a 1 s wait for work ends
# (MAX_IDLE_FOR), so stopping an in-process server waited 0.5 s on
# average: about 1 s of each test of the API fixture (a conductor and an
# agent), some 1,000 s of the suite's 4,700 s of test time (2026-11-27).
# Services in processes of their own are not affected: they exit.
futurist._thread.ThreadWorker.MAX_IDLE_FOR = 0.05


def pytest_configure(config) -> None:
    config.addinivalue_line(
        'markers', 'flow: a multi-process flow (gate_stack.backends)')


# Markers of tests that only a run whose ``-m`` expression names them
# selects, each with a tox environment of its own.
#   nova: the Nova gate starts some twenty processes for minutes. With its
#     reduced set the suite took 21 min 20 s on two cores (2026-11-27),
#     past the 20 minutes CI's whole run may take, so the reduced set is
#     ``tox -e nova -- -m nova_reduced``, not part of the suite.
#   image: building the container image takes minutes (a base made from
#     Debian's packages, the dependencies from the index): tox -e images.
#   dashboard: Horizon and a headless Chromium, which need the
#     ``dashboard`` extra and Debian's chromium: tox -e dashboard.
OPT_IN_MARKERS = ('nova', 'image', 'dashboard')


def pytest_collection_modifyitems(config, items) -> None:
    """Leave out the tests of OPT_IN_MARKERS the ``-m`` expression does
    not name."""
    named = config.option.markexpr or ''
    left_out = [item for item in items if any(
        item.get_closest_marker(marker) and marker not in named
        for marker in OPT_IN_MARKERS)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


def services_required() -> bool:
    return os.environ.get('CYBORG_TEST_REQUIRE_SERVICES') == '1'


def _skip_or_fail(message: str) -> None:
    if services_required():
        pytest.fail(message + ' (CYBORG_TEST_REQUIRE_SERVICES=1)',
                    pytrace=False)
    pytest.skip(message)


def unavailable(what: str, reason: object) -> None:
    """Skip, or fail when the machine services are required."""
    _skip_or_fail(f'{what} is not reachable: {reason}')


def require_module(name: str) -> None:
    """Skip, or fail when the machine services are required, unless the
    Python package ``name`` is installed.

    Called by a test or its fixture: a module that skipped while it was
    imported would take every module importing it along, without a word
    under CYBORG_TEST_REQUIRE_SERVICES=1.
    """
    if importlib.util.find_spec(name) is None:
        _skip_or_fail(f'{name} is not installed (test-requirements.txt)')


def require_command(name: str, found: str | None) -> None:
    """Skip, or fail when the machine services are required, when the
    command ``name`` of test-requirements.txt was not ``found``."""
    if found is None:
        _skip_or_fail(f'{name} is not installed (test-requirements.txt)')


class _ServerDatabase:
    """A throw-away database on a real server, created and dropped here."""

    def __init__(self, backend: str, server_url: str) -> None:
        self.backend = backend
        self.name = f'cyborg_test_{uuid.uuid4().hex[:12]}'
        admin_db = 'postgres' if backend == 'postgresql' else ''
        base = sa.engine.make_url(server_url)
        self.admin = sa.create_engine(base.set(database=admin_db or None),
                                      isolation_level='AUTOCOMMIT')
        self.url = base.set(database=self.name).render_as_string(
            hide_password=False)

    def create(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE {self.name}'))

    def drop(self) -> None:
        with self.admin.connect() as conn:
            if self.backend == 'postgresql':
                conn.execute(sa.text(
                    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                    'WHERE datname = :name AND pid <> pg_backend_pid()'),
                    {'name': self.name})
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS {self.name}'))
        self.admin.dispose()


def empty_database_url(backend: str, tmp_path) -> Iterator[str]:
    """Yield the URL of a new, empty database on ``backend``."""
    if backend == 'sqlite':
        yield f'sqlite:///{tmp_path}/cyborg.sqlite'
        return
    server = MYSQL_URL if backend == 'mysql' else PG_URL
    if not utils.port_open(server, 3306 if backend == 'mysql' else 5432):
        unavailable(backend, f'nothing listens at {server}')
    database = _ServerDatabase(backend, server)
    try:
        database.create()
    except sa.exc.OperationalError as exc:
        unavailable(backend, exc)
    try:
        yield database.url
    finally:
        database.drop()


@pytest.fixture(autouse=True)
def _fresh_handle_search() -> Iterator[None]:
    """Every test's database is new, so is where this process's binds
    start looking for a free handle (``attach_handles._search_from``): a
    hint left by another test's deployable of the same id would make the
    handle a bind takes depend on the order the tests ran in."""
    attach_handles._search_from.clear()
    yield


@pytest.fixture(autouse=True)
def _no_default_socket_timeout() -> Iterator[None]:
    """A process-wide ``socket.setdefaulttimeout()`` reaches every socket
    made after it, the test relays' listeners included: Horizon's test
    settings set 1 s at import, each relay stopped accepting after its
    first idle second, and the next database connection through it
    waited for ever (the suite hung). Checked before each test (an import
    set it) and after (the test did)."""
    assert socket.getdefaulttimeout() is None, (
        'socket.getdefaulttimeout() is %r: an import during collection or '
        'an earlier test set it' % socket.getdefaulttimeout())
    yield
    assert socket.getdefaulttimeout() is None, (
        'the test left socket.setdefaulttimeout(%r) set'
        % socket.getdefaulttimeout())


# Seconds a stopped writer may take to end: its last flush.
HEARTBEAT_WRITER_GRACE = 5


@pytest.fixture(autouse=True)
def _no_heartbeat_writer_left() -> Iterator[None]:
    """A conductor manager a test made and did not stop keeps writing the
    heartbeats it took, every second, into whatever database this process
    uses next: another test's. One did, and a later test's conductor
    reported an agent of the earlier test as down."""
    before = set(_heartbeat_writers())
    yield
    left = [t for t in _heartbeat_writers() if t not in before]
    for thread in left:
        thread.join(HEARTBEAT_WRITER_GRACE)
    left = [t for t in left if t.is_alive()]
    assert not left, ('the test left a conductor manager\'s heartbeat '
                      'writer running: call its stop()')


def _heartbeat_writers() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t.name == 'heartbeat-batch' and t.is_alive()]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def empty_db_url(backend, tmp_path) -> Iterator[str]:
    yield from empty_database_url(backend, tmp_path)


@pytest.fixture
def conf(tmp_path_factory) -> Iterator[cfg.ConfigOpts]:
    """The global CONF, parsed with no files and reset afterwards.

    ``state_path`` is a directory of the test's own, so that what an
    agent keeps there (its cache) never leaks from one test to another.
    """
    cfg.CONF([], project='cyborg', default_config_files=[])
    cfg.CONF.set_override('state_path',
                          str(tmp_path_factory.mktemp('state')))
    yield cfg.CONF
    cfg.CONF.reset()


def migrated_engine(url: str) -> Iterator[sa.engine.Engine]:
    """Migrate the database at ``url`` to head and wire it in."""
    migration.upgrade('head', url=url)
    with wired_engine(url) as engine:
        yield engine


@contextlib.contextmanager
def wired_engine(url: str) -> Iterator[sa.engine.Engine]:
    """Wire the database at ``url`` in as cyborg's, as it is."""
    engine = engines.create_engine(db_api.connection_url(url),
                                   sqlite_fk=True)
    undo = db_api.patch_engine(engine)
    try:
        yield engine
    finally:
        undo()
        engine.dispose()


@pytest.fixture
def db_engine(empty_db_url) -> Iterator[sa.engine.Engine]:
    """A database migrated to head, on each of the three backends."""
    yield from migrated_engine(empty_db_url)


@pytest.fixture
def sqlite_engine(tmp_path) -> Iterator[sa.engine.Engine]:
    """Like db_engine, on SQLite only, for tests about logic not SQL."""
    yield from migrated_engine(f'sqlite:///{tmp_path}/cyborg.sqlite')


@pytest.fixture
def rabbit_url() -> Iterator[str]:
    """A transport URL on a virtual host of its own (tests running side by
    side would consume each other's messages otherwise)."""
    if not utils.port_open(RABBIT_URL, 5672):
        unavailable('RabbitMQ', f'nothing listens at {RABBIT_URL}')
    with utils.virtual_host(RABBIT_URL, 'cyborg-test') as url:
        yield url
