"""Three RabbitMQ nodes on loopback, clustered, for failover tests.

Each node runs from the RabbitMQ package's own scripts as the calling user,
with its name, AMQP and distribution ports, database, logs and
configuration under one work directory, and an Erlang cookie of the
cluster's own (a ``HOME`` in that directory), so that neither the machine's
broker nor another test process's cluster can be reached by mistake. Node
1 starts first; the others join it while they boot (classic peer
discovery), which saves the ``stop_app``/``join_cluster``/``start_app``
round of ``rabbitmqctl`` calls. They start once node 1 accepts AMQP
connections, not with it: a node that joins one still booting fails its
schema check and exits. Node 1 boots in about 5 s on an idle machine of two
cores, the two others side by side in about 7 s; the ``erl`` flags tried
(one scheduler, no busy waiting) changed nothing. ``running`` starts a
cluster outside pytest too (``tools/bench/rabbit_cluster.py``).
"""
import contextlib
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from cyborg.tests.harness import gate_stack

# The package's scripts. /usr/sbin/rabbitmq-server and rabbitmqctl switch
# to the rabbitmq user and its home, whose cookie is the machine broker's.
SCRIPTS = pathlib.Path(os.environ.get('CYBORG_TEST_RABBITMQ_SCRIPTS',
                                      '/usr/lib/rabbitmq/bin'))
USER = 'guest'
# Seconds a node may take to answer on its AMQP port: 5 s idle, 21 s was
# seen on a machine loaded 20 times over.
BOOT_TIMEOUT = 60
# Seconds a node gets to stop after ``rabbitmqctl stop`` before SIGKILL.
STOP_TIMEOUT = 30


class ClusterUnavailable(Exception):
    """The nodes could not be started here."""


class Node:
    """One RabbitMQ node: ``<prefix><index>@localhost`` under ``home``."""

    def __init__(self, cluster: 'Cluster', index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.name = f'{cluster.prefix}{index}@localhost'
        self.port = gate_stack.free_port()
        self.dist_port = gate_stack.free_port()
        self.dir = cluster.workdir / f'node{index}'
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def configure(self, seed: 'Node | None') -> None:
        """Its configuration; ``seed`` is the node it joins at its first
        boot (none for the first node)."""
        self.dir.mkdir(exist_ok=True)
        # No plugins: the management plugin's fixed ports would clash
        # between the nodes and with the machine's broker.
        (self.dir / 'enabled_plugins').write_text('[].\n')
        # Instead of /etc/rabbitmq/rabbitmq-env.conf, which names the
        # machine's node.
        (self.dir / 'rabbitmq-env.conf').write_text('')
        lines = [f'listeners.tcp.default = 127.0.0.1:{self.port}',
                 'log.console = false', 'log.file.level = info']
        if seed is not None:
            lines += ['cluster_formation.peer_discovery_backend = '
                      'classic_config',
                      f'cluster_formation.classic_config.nodes.1 = '
                      f'{seed.name}']
        (self.dir / 'rabbitmq.conf').write_text('\n'.join(lines) + '\n')

    def start(self) -> None:
        env = dict(
            self.cluster.env,
            RABBITMQ_NODENAME=self.name,
            RABBITMQ_NODE_IP_ADDRESS='127.0.0.1',
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_CONF_ENV_FILE=str(self.dir / 'rabbitmq-env.conf'),
            RABBITMQ_CONFIG_FILE=str(self.dir / 'rabbitmq.conf'),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / 'enabled_plugins'),
            RABBITMQ_MNESIA_BASE=str(self.dir / 'mnesia'),
            RABBITMQ_LOG_BASE=str(self.dir / 'log'),
            RABBITMQ_PID_FILE=str(self.dir / 'pid'),
            ERL_CRASH_DUMP=str(self.dir / 'erl_crash.dump'))
        with open(self.dir / 'console.log', 'ab') as log:
            # A session of its own: erl's helpers go with it on SIGKILL.
            self.popen = subprocess.Popen(
                [str(SCRIPTS / 'rabbitmq-server')], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.dir, env=env, start_new_session=True)

    def wait_listening(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    ('127.0.0.1', self.port), timeout=1):
                return
            if not self.running:
                raise ClusterUnavailable(
                    f'{self.name} exited: {self.tail()}')
            if time.monotonic() > deadline:
                raise ClusterUnavailable(
                    f'{self.name} did not listen within {BOOT_TIMEOUT}s: '
                    f'{self.tail()}')
            time.sleep(0.1)

    def stop(self) -> None:
        """``rabbitmqctl stop``, which closes its clients' connections
        and hands its queues' leadership over; SIGKILL if it does not end
        in STOP_TIMEOUT."""
        if not self.running:
            return
        with contextlib.suppress(subprocess.SubprocessError):
            self.cluster.ctl('stop', node=self, timeout=STOP_TIMEOUT)
        self.kill(wait_first=STOP_TIMEOUT)

    def kill(self, wait_first: float = 0) -> None:
        """SIGKILL to the node and its helpers, as a crash of its host
        would end it (after ``wait_first`` seconds for it to exit)."""
        if self.popen is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(wait_first)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def tail(self, chars: int = 2000) -> str:
        logs = [self.dir / 'console.log',
                self.dir / 'log' / f'{self.name}.log']
        return '\n'.join(path.read_text(errors='replace')[-chars:]
                         for path in logs if path.exists())


class Cluster:
    """``size`` clustered nodes under ``workdir``; ``start`` them, then
    ``stop_node``/``start_node`` one by its index (from 1)."""

    def __init__(self, workdir: pathlib.Path, size: int = 3) -> None:
        self.workdir = workdir
        # Node names are unique on the machine (one epmd for all).
        self.prefix = f'cyb{secrets.token_hex(3)}-'
        home = workdir / 'home'
        home.mkdir(parents=True, exist_ok=True)
        cookie = home / '.erlang.cookie'
        cookie.write_text(secrets.token_hex(16))
        cookie.chmod(0o400)
        self.env = dict(os.environ, HOME=str(home))
        self.nodes = [Node(self, i) for i in range(1, size + 1)]

    def node(self, index: int) -> Node:
        return self.nodes[index - 1]

    @property
    def transport_url(self) -> str:
        """An oslo.messaging URL listing every node, node 1 first."""
        hosts = ','.join(f'{USER}:{USER}@127.0.0.1:{n.port}'
                         for n in self.nodes)
        return f'rabbit://{hosts}/'

    def vhost_url(self, vhost: str) -> str:
        parsed = urllib.parse.urlsplit(self.transport_url)
        return urllib.parse.urlunsplit(parsed._replace(path=f'/{vhost}'))

    def start(self) -> None:
        """Start node 1, then the others side by side, joining it; wait
        until every node runs in the cluster."""
        if not (SCRIPTS / 'rabbitmq-server').exists():
            raise ClusterUnavailable(f'no {SCRIPTS}/rabbitmq-server')
        first, *others = self.nodes
        first.configure(None)
        for node in others:
            node.configure(first)
        first.start()
        first.wait_listening()
        for node in others:
            node.start()
        for node in others:
            node.wait_listening()
        try:
            self.ctl('await_online_nodes', str(len(self.nodes)),
                     timeout=BOOT_TIMEOUT)
        except subprocess.SubprocessError as exc:
            raise ClusterUnavailable(
                f'the nodes did not form a cluster: {exc}') from exc

    def stop_node(self, index: int) -> None:
        """Stop node ``index``: its clients lose their connections and
        quorum queues elect leaders on the others."""
        self.node(index).stop()

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index``, as a crash of its host would end it:
        its clients' sockets close without an AMQP goodbye."""
        self.node(index).kill()

    def start_node(self, index: int) -> None:
        """Start node ``index`` again (it rejoins the cluster from its
        database) and wait until every node runs."""
        node = self.node(index)
        node.start()
        node.wait_listening()
        self.ctl('await_online_nodes', str(len(self.nodes)),
                 timeout=BOOT_TIMEOUT)

    def running_nodes(self) -> list[str]:
        status = json.loads(self.ctl('cluster_status', '--formatter',
                                     'json'))
        return sorted(status['running_nodes'])

    def queues(self, vhost: str) -> dict[str, dict[str, str]]:
        """Each queue of ``vhost``: its type and its leader (quorum
        queues) or the node it lives on (classic ones)."""
        # Not --formatter json: it prints nothing once a process id is
        # among the columns.
        found = {}
        for line in self.ctl('list_queues', '-p', vhost,
                             '--no-table-headers', 'name', 'type',
                             'leader', 'pid').splitlines():
            name, kind, leader, pid = line.split('\t')
            # A classic queue's process: <rabbit@host.1.2.3>
            found[name] = {'type': kind, 'node': leader or pid.strip(
                '<>').rsplit('.', 3)[0]}
        return found

    def connections(self) -> dict[int, int]:
        """How many client connections each running node holds, by
        index."""
        ports = [c['port'] for c in json.loads(self.ctl(
            'list_connections', 'port', '--formatter', 'json'))]
        return {n.index: ports.count(n.port) for n in self.nodes
                if n.running}

    def add_vhost(self, vhost: str) -> None:
        self.ctl('add_vhost', vhost)
        self.ctl('set_permissions', '-p', vhost, USER, '.*', '.*', '.*')

    def ctl(self, *args: str, node: Node | None = None,
            timeout: float = 60) -> str:
        """``rabbitmqctl`` against ``node`` (the first running one); its
        output."""
        target = node or next((n for n in self.nodes if n.running),
                              self.nodes[0])
        done = subprocess.run(
            [str(SCRIPTS / 'rabbitmqctl'), '-n', target.name, '-q', *args],
            env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise subprocess.CalledProcessError(
                done.returncode, done.args, done.stdout, done.stderr)
        return done.stdout

    def stop(self) -> None:
        """Stop every node, side by side, killing what does not stop."""
        stopping = [subprocess.Popen(
            [str(SCRIPTS / 'rabbitmqctl'), '-n', n.name, 'stop'],
            env=self.env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL) for n in self.nodes if n.running]
        for ctl in stopping:
            with contextlib.suppress(subprocess.TimeoutExpired):
                ctl.wait(STOP_TIMEOUT)
            if ctl.poll() is None:
                ctl.kill()
                ctl.wait()
        for node in self.nodes:
            node.kill(wait_first=STOP_TIMEOUT if node.running else 0)

    def tails(self) -> str:
        return ''.join(f'\n--- {n.name} ---\n{n.tail()}\n'
                       for n in self.nodes)


@contextlib.contextmanager
def running(workdir: pathlib.Path, size: int = 3) -> Iterator[Cluster]:
    """A started cluster of ``size`` nodes in ``workdir``, stopped after
    the block, also when it fails to start (ClusterUnavailable)."""
    cluster = Cluster(workdir, size)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope='module')
def rabbit_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """Three clustered RabbitMQ nodes; skipped when they cannot start,
    unless CYBORG_TEST_REQUIRE_SERVICES=1."""
    from cyborg.tests import conftest
    workdir = tmp_path_factory.mktemp('rabbit-cluster')
    if shutil.which('erl') is None:
        conftest.unavailable('a RabbitMQ cluster', 'Erlang (erl) is missing')
    try:
        with running(workdir) as cluster:
            yield cluster
    except ClusterUnavailable as exc:
        conftest.unavailable('a RabbitMQ cluster', exc)
