"""A MariaDB Galera cluster on 127.0.0.1 for tests and benchmarks.

Each node is a ``mariadbd`` of its own (Debian's mariadb-server with the
galera-4 provider) with a data directory, socket, pid file, SQL port and
Galera ports (group communication, IST, SST) under one directory of its own,
started from a configuration file written here (``--defaults-file``: no
/etc/mysql file is read, so nothing is shared with the machine's own
MariaDB). The first node bootstraps the cluster, the others join it by
state transfer (rsync). ``Cluster`` is a context manager that stops every
node on the way out, also when starting failed, and removes the directory.

Run by root, the nodes run as the ``mysql`` user mariadb-server makes, as
Debian's own service does: the rsync daemon that receives a joiner's
state transfer, started by a root server, would switch to ``nobody`` and
find nothing it may write. Their directory is therefore a new one under
/tmp, not the caller's (pytest's are root's alone).

galera-4 is installed through apt-get when missing
(``system_packages``); where it cannot be had the caller is skipped, or
failed under CYBORG_TEST_REQUIRE_SERVICES=1 (``conftest.unavailable``).
"""
import contextlib
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import types
from collections.abc import Iterator

import pymysql

from cyborg.tests.conftest import unavailable
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import system_packages

PROVIDER = '/usr/lib/galera/libgalera_smm.so'
MARIADBD = '/usr/sbin/mariadbd'
INSTALL_DB = '/usr/bin/mariadb-install-db'
# Debian's packages: the server, the provider, and rsync for the state
# transfer of a joining node.
PACKAGES = ('mariadb-server', 'galera-4', 'rsync')
# Seconds a node gets to bootstrap or join, and to stop after SIGTERM:
# the whole cluster was up in 13-24 s here, on two busy cores.
START_TIMEOUT = 90
STOP_TIMEOUT = 30
# Each node's InnoDB buffer pool: the test databases hold a few MB, and
# three nodes share a small machine with everything else.
BUFFER_POOL = '64M'
# Who runs the nodes when root starts them (see above).
USER = 'mysql'


def _user() -> str:
    if os.geteuid() == 0:
        return USER
    return pwd.getpwuid(os.geteuid()).pw_name


def require() -> None:
    """Install what a cluster needs, or skip (fail) the caller."""
    if not (os.path.exists(PROVIDER) and os.path.exists(MARIADBD)
            and shutil.which('rsync')):
        system_packages.debian(*PACKAGES)
    if not os.path.exists(PROVIDER):
        unavailable('Galera', f'{PROVIDER} is missing after installing '
                              f'{", ".join(PACKAGES)}')
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(USER)
        except KeyError:
            unavailable('Galera', f'there is no user {USER} to run it as')


def schema_problems(node: 'Node', database: str) -> list[str]:
    """What in ``database`` Galera cannot replicate safely: a table that
    is not InnoDB (only InnoDB is replicated), or that has no primary key
    (its rows' write-sets cannot be certified or applied in parallel)."""
    connection = node.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT t.table_name, t.engine, COUNT(c.constraint_name) "
                "FROM information_schema.tables t "
                "LEFT JOIN information_schema.table_constraints c "
                "ON c.table_schema = t.table_schema "
                "AND c.table_name = t.table_name "
                "AND c.constraint_type = 'PRIMARY KEY' "
                "WHERE t.table_schema = %s AND t.table_type = 'BASE TABLE' "
                "GROUP BY t.table_name, t.engine ORDER BY t.table_name",
                (database,))
            rows = list(cursor)
    finally:
        connection.close()
    problems = [f'{name} is {engine}, not InnoDB'
                for name, engine, _ in rows if engine != 'InnoDB']
    problems += [f'{name} has no primary key'
                 for name, _, keys in rows if not keys]
    return problems


class Node:
    """One cluster member: its ports, paths and process."""

    def __init__(self, index: int, workdir: pathlib.Path) -> None:
        self.index = index
        self.name = f'node{index}'
        self.dir = workdir / self.name
        self.datadir = self.dir / 'data'
        self.socket = self.dir / 'mysqld.sock'
        self.pid_file = self.dir / 'mysqld.pid'
        self.error_log = self.dir / 'error.log'
        self.conf = self.dir / 'my.cnf'
        self.port = gate_stack.free_port()
        self.group_port = gate_stack.free_port()
        self.ist_port = gate_stack.free_port()
        self.sst_port = gate_stack.free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def server_url(self) -> str:
        return f'mysql+pymysql://root@127.0.0.1:{self.port}/'

    def url(self, database: str) -> str:
        return f'mysql+pymysql://root@127.0.0.1:{self.port}/{database}'

    def write_conf(self, cluster_address: str) -> None:
        provider_options = ';'.join([
            'base_host=127.0.0.1', f'base_port={self.group_port}',
            f'gmcast.listen_addr=tcp://127.0.0.1:{self.group_port}',
            f'ist.recv_addr=127.0.0.1:{self.ist_port}',
            # The write-set cache: a restarted node catches up by IST
            # from it; the tests' few thousand binds need a few MB.
            'gcache.size=64M'])
        self.conf.write_text('\n'.join([
            '[mysqld]',
            f'user={_user()}',
            f'datadir={self.datadir}',
            f'socket={self.socket}',
            f'pid-file={self.pid_file}',
            f'log-error={self.error_log}',
            f'port={self.port}',
            'bind-address=127.0.0.1',
            'skip-name-resolve',
            'default_storage_engine=InnoDB',
            f'innodb_buffer_pool_size={BUFFER_POOL}',
            # Durability comes from the other nodes: no fsync per commit.
            'innodb_flush_log_at_trx_commit=0',
            'binlog_format=ROW',
            'innodb_autoinc_lock_mode=2',
            'max_connections=500',
            'wsrep_on=ON',
            f'wsrep_provider={PROVIDER}',
            'wsrep_cluster_name=cyborg-test',
            f'wsrep_cluster_address={cluster_address}',
            f'wsrep_node_name={self.name}',
            'wsrep_node_address=127.0.0.1',
            f'wsrep_provider_options="{provider_options}"',
            'wsrep_sst_method=rsync',
            f'wsrep_sst_receive_address=127.0.0.1:{self.sst_port}',
            'wsrep_slave_threads=2',
            '']))

    def start(self, bootstrap: bool) -> None:
        argv = [MARIADBD, f'--defaults-file={self.conf}']
        if bootstrap:
            argv.append('--wsrep-new-cluster')
        with open(self.dir / 'stdout.log', 'ab') as out:
            # A session of its own: the state transfer's rsync and
            # scripts are stopped with it.
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def connect(self) -> pymysql.Connection:  # type: ignore[type-arg]
        return pymysql.connect(host='127.0.0.1', port=self.port,
                               user='root', connect_timeout=2)

    def status(self) -> dict[str, str]:
        """The node's ``wsrep_%`` status variables."""
        connection = self.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW GLOBAL STATUS LIKE 'wsrep_%'")
                return {name: str(value) for name, value in cursor}
        finally:
            connection.close()

    def synced(self, size: int) -> bool:
        try:
            status = self.status()
        except pymysql.Error:
            return False
        return (status.get('wsrep_ready') == 'ON'
                and status.get('wsrep_cluster_size') == str(size)
                and status.get('wsrep_local_state_comment') == 'Synced')

    def terminate(self) -> None:
        """SIGTERM to the node and what it started, if it runs."""
        if self.running:
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self) -> int | str | None:
        """SIGTERM, SIGKILL after STOP_TIMEOUT; the exit code, 'killed',
        or None if never started."""
        if self.process is None:
            return None
        self.terminate()
        try:
            return self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            return 'killed'

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.error_log.read_text(errors='replace')[-chars:]
        except OSError:
            return '(no log)'


class Cluster:
    """``size`` Galera nodes: ``with Cluster() as c`` starts them and waits
    until each is Synced in a cluster of ``size``; leaving the block stops
    them all and removes their directory (kept with ``keep``, for the
    logs)."""

    def __init__(self, size: int = 3, keep: bool = False) -> None:
        self.workdir = pathlib.Path(
            tempfile.mkdtemp(prefix='cyborg-galera-'))
        self.keep = keep
        self.nodes = [Node(i + 1, self.workdir) for i in range(size)]

    @property
    def cluster_address(self) -> str:
        return 'gcomm://' + ','.join(f'127.0.0.1:{n.group_port}'
                                     for n in self.nodes)

    def urls(self, database: str) -> list[str]:
        """A SQLAlchemy URL of ``database`` through each node."""
        return [n.url(database) for n in self.nodes]

    def _init(self) -> None:
        # One system database, copied: a joiner's is replaced by the state
        # transfer anyway, and mariadb-install-db takes seconds each.
        first = self.nodes[0]
        for node in self.nodes:
            node.dir.mkdir()
            node.write_conf(self.cluster_address)
        self._chown()
        done = subprocess.run(
            [INSTALL_DB, '--no-defaults', f'--datadir={first.datadir}',
             f'--user={_user()}', '--auth-root-authentication-method=normal',
             '--skip-test-db'],
            capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f'mariadb-install-db failed: '
                               f'{(done.stderr or done.stdout)[-2000:]}')
        for node in self.nodes[1:]:
            shutil.copytree(first.datadir, node.datadir, symlinks=True)
        self._chown()

    def _chown(self) -> None:
        """Give the directory to the nodes' user (see above)."""
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam(USER)
        for path in [self.workdir, *self.workdir.rglob('*')]:
            os.lchown(path, user.pw_uid, user.pw_gid)

    def _wait(self, nodes: list[Node], size: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not all(n.synced(size) for n in nodes):
            dead = [n.name for n in nodes if not n.running]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(
                    f'Galera nodes {", ".join(n.name for n in nodes)} did '
                    f'not reach Synced in a cluster of {size} '
                    f'({"exited: " + ", ".join(dead) if dead else "timeout"})'
                    + self.tails())
            time.sleep(0.25)

    def start(self) -> None:
        self._init()
        first = self.nodes[0]
        first.start(bootstrap=True)
        self._wait([first], 1)
        # The joiners one at a time, as Galera's documentation starts a
        # cluster: two side by side have been seen to fail on a busy
        # two-core host, the second's state transfer racing the first's
        # (node3 exited right after its transfer, 2026-11-27).
        for size, node in enumerate(self.nodes[1:], start=2):
            node.start(bootstrap=False)
            try:
                self._wait(self.nodes[:size], size)
            except RuntimeError:
                # A joiner that exited asks for a whole state transfer
                # again when started once more, as an operator would.
                if node.running or not first.running:
                    raise
                node.start(bootstrap=False)
                self._wait(self.nodes[:size], size)

    def stop(self) -> dict[str, int | str | None]:
        """Stop every node, side by side, and remove their directory
        unless ``keep``; their exit codes."""
        for node in self.nodes:
            node.terminate()
        codes = {node.name: node.stop() for node in self.nodes}
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return codes

    def tails(self, chars: int = 3000) -> str:
        return ''.join(f'\n--- {n.name}: {n.error_log} ---\n'
                       f'{n.log_tail(chars)}' for n in self.nodes)

    def __enter__(self) -> 'Cluster':
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None,
                 exc: BaseException | None,
                 traceback: types.TracebackType | None) -> None:
        self.stop()


@contextlib.contextmanager
def running(size: int = 3, keep: bool = False) -> Iterator[Cluster]:
    """A cluster of ``size`` nodes, once what it needs is installed
    (skipping the caller where it cannot be)."""
    require()
    with Cluster(size, keep) as cluster:
        yield cluster
