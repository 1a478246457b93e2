"""A whole cyborg deployment as separate processes, for the end-to-end gate.

``Stack`` writes one configuration file per process and starts each with
the interpreter that runs the tests: a real openstack-placement under
waitress (on a port and an SQLite file of its own, so that it can be
stopped and started again on the same address), cyborg-api, conductors
and agents, on one MariaDB database and one RabbitMQ virtual host and
exchange. Each process appends to a log of its own; ``tails`` shows their
ends. Processes are stopped by PID: SIGTERM, then SIGKILL. The clients
that run as processes too are started here: Nova's own client and the
``openstack`` command.
"""
import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import TypeVar

import pytest
import requests
from oslo_log import log

from cyborg.tests import utils
from cyborg.tests.harness import nova_side
from cyborg.tests.harness import placement_server
from cyborg.tests.harness import sysfs_kernel

# Seconds a process gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT = 15
# Seconds an API call waits for a conductor; a call taken by a conductor
# that dies fails after this.
RPC_TIMEOUT = 8
# Seconds between two placement passes of a conductor (also the longest
# backoff after placement failed).
PLACEMENT_SYNC_INTERVAL = 5
# Logs each message an RPC server takes, at DEBUG.
RPC_SERVER_LOGGER = 'oslo_messaging.rpc.server'
BINDING_LOGGER = 'cyborg.conductor.nova_outbox'
# An administrator of placement under noauth2.
PLACEMENT_TOKEN = 'admin'

# An administrator of cyborg-api under noauth, at the microversion of the
# device lifecycle.
API_HEADERS = {'X-Auth-Token': 'admin',
               'OpenStack-API-Version': 'accelerator 2.8'}

# Set to 1 (``tox -e flows``): every multi-process flow on every database.
ALL_BACKENDS = 'CYBORG_TEST_ALL_BACKENDS'

T = TypeVar('T')


def backends(default: str, among: tuple[str, ...] | None = None
             ) -> list[Any]:
    """The ``backend`` parameters of a multi-process flow: ``default``
    alone, or every database (of ``among``, when the flow needs one of
    those) when CYBORG_TEST_ALL_BACKENDS=1.

    A flow starts placement, cyborg-api, conductors and agents: 16-78 s
    of a pytest worker each. On three databases each the flows would add
    minutes to the default suite for SQL that the in-process tests
    already run on all three, so each takes one, a different one from
    flow to flow, and every database carries some flow in every run.
    Each is marked ``flow`` (``pytest -m flow`` runs the flows alone).
    """
    # Here, not at the top: the conftest selects oslo.service's backend,
    # which fails in a benchmark that has loaded oslo.service already.
    from cyborg.tests.conftest import BACKENDS
    among = among or BACKENDS
    assert default in among, default
    names = among if os.environ.get(ALL_BACKENDS) == '1' else (default,)
    return [pytest.param(name, marks=pytest.mark.flow) for name in names]


@contextlib.contextmanager
def emulated_host(workdir: pathlib.Path, rabbit_url: str, database_url: str,
                  nova: Any, node: str, sysfs_root: str,
                  agent: dict[str, dict[str, Any]],
                  env: dict[str, str] | None = None,
                  vf_drivers: dict[str, str] | None = None
                  ) -> Iterator[tuple['Stack', placement_server.Placement,
                                      str]]:
    """One host's flow: placement, cyborg-api, ``conductor1`` and
    ``agent1`` of ``node`` as processes, the agent reading the sysfs
    tree at ``sysfs_root`` with ``agent``'s options (its drivers
    among them) and ``env``, and the emulated kernel of the tree
    (``sysfs_kernel``) as another. Yields the stack, placement's
    client and the node's compute node uuid once all answer; stops
    them all after."""
    stack = Stack(workdir, rabbit_url, database_url, nova.endpoint,
                  nova.token)
    stack.add_placement()
    stack.add_api()
    stack.add_conductor('conductor1',
                        extra={'conductor': {'bind_timeout': 30}})
    options = dict(agent)
    options['agent'] = dict(agent.get('agent', {}),
                            sysfs_root=sysfs_root)
    stack.add_agent('agent1', node, 0, 1, extra=options, env=env)
    placement = placement_server.Placement(stack.placement_url)
    kernel = sysfs_kernel.spawn(sysfs_root, vf_drivers=vf_drivers)
    with stack.running(after=lambda: (kernel.terminate(),
                                      kernel.wait(10))):
        root = stack.bring_up(placement, {'agent1': node})[node]
        yield stack, placement, root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def write_conf(path: pathlib.Path,
               sections: dict[str, dict[str, Any]]) -> pathlib.Path:
    """An oslo.config file; list values become repeated lines (MultiStr)."""
    lines = []
    for section, values in sections.items():
        lines.append(f'[{section}]')
        for key, value in values.items():
            for item in value if isinstance(value, list) else [value]:
                lines.append(f'{key} = {item}')
    path.write_text('\n'.join(lines) + '\n')
    return path


def wait_for(check: Callable[[], T], what: str, timeout: float = 30,
             interval: float = 0.2) -> T:
    """utils.wait_for, polling less often: the gate's checks are HTTP
    calls and SQL queries."""
    return utils.wait_for(check, what, timeout, interval)


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process: the test's, unbuffered, with
    ``extra`` over it; a PYTHONPATH in ``extra`` goes before the
    inherited one, so that what it names (e.g. nvml_double.SHIM_DIR)
    is found first and the rest is still found."""
    found = dict(os.environ, PYTHONUNBUFFERED='1', **(extra or {}))
    inherited = os.environ.get('PYTHONPATH')
    if extra and 'PYTHONPATH' in extra and inherited:
        found['PYTHONPATH'] = os.pathsep.join([extra['PYTHONPATH'],
                                               inherited])
    return found


class Process:
    """One service process: how to start it, its PID and its log.

    Every start appends a marker line to the log, so that ``log()`` is
    what the current run wrote.
    """

    def __init__(self, name: str, kind: str, argv: list[str],
                 log_path: pathlib.Path, cwd: pathlib.Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        # placement, api, conductor or agent
        self.kind = kind
        self.argv = argv
        self.log_path = log_path
        self.cwd = cwd
        self.env = environment(env)
        self.popen: subprocess.Popen[bytes] | None = None
        self._offset = 0

    def start(self) -> None:
        with open(self.log_path, 'ab') as log:
            self._offset = log.tell()
            log.write(f'==== {self.name}: {" ".join(self.argv[-3:])} '
                      f'====\n'.encode())
            log.flush()
            # A session of its own: a launcher's children are signalled
            # with it (kill, pause).
            self.popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.cwd, env=self.env,
                start_new_session=True)

    @property
    def pid(self) -> int:
        assert self.popen is not None, f'{self.name} never started'
        return self.popen.pid

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL to it and the children it launched, as a crash of the
        host's service would end them: killed alone, a launcher's child
        would be told to stop gracefully."""
        os.killpg(self.pid, signal.SIGKILL)
        assert self.popen is not None
        self.popen.wait(STOP_TIMEOUT)

    def pause(self) -> None:
        """SIGSTOP to it and its children: nothing more happens until
        ``resume`` or ``kill``."""
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)

    def terminate(self) -> None:
        """SIGTERM, if it runs."""
        if self.running:
            os.kill(self.pid, signal.SIGTERM)

    def wait(self) -> int | str | None:
        """Its exit code once it has exited; SIGKILL after STOP_TIMEOUT
        ('killed'); None if it never ran."""
        if self.popen is None:
            return None
        try:
            return self.popen.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait()
            return 'killed'

    def stop(self) -> int | str | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; see ``wait``."""
        self.terminate()
        return self.wait()

    def rpc_calls(self, *methods: str) -> tuple[int, int]:
        """How many RPC messages calling any of ``methods`` the current
        run took, and how many of them it answered (from a conductor's
        log)."""
        text = self.log()
        names = '|'.join(re.escape(method) for method in methods)

        def count(event: str) -> int:
            return len(re.findall(
                rf'{event} message with id \S+ and method: (?:{names})\.',
                text))

        return count('Receive incoming'), count('Replied success')

    def queued_events(self) -> set[str]:
        """The ARQs whose Nova events the current run queued (from a
        conductor's log)."""
        return {uuid for found in re.findall(
            r'Nova events queued for accelerator request\(s\) ([^.]+)\.',
            self.log()) for uuid in found.split(', ')}

    def log(self) -> str:
        """What the current (or last) run wrote."""
        with open(self.log_path, 'rb') as log:
            log.seek(self._offset)
            return log.read().decode(errors='replace')

    def tail(self, lines: int = 30) -> str:
        """The end of the log, without a line per RPC message taken."""
        try:
            text = self.log_path.read_text(errors='replace')
        except OSError:
            return '(no log)'
        kept = [line for line in text.splitlines()
                if RPC_SERVER_LOGGER not in line]
        return '\n'.join(kept[-lines:])


class Stack:
    """Placement, cyborg-api, conductors and agents, each a process.

    ``nova_endpoint``/``nova_token`` are where the conductors send their
    events (a FakeNova). Add processes with the ``add_*`` methods, start
    them by name with ``start`` and stop them with ``stop`` (side by
    side) or ``stop_all``.
    """

    def __init__(self, workdir: pathlib.Path, rabbit_url: str,
                 database_url: str, nova_endpoint: str,
                 nova_token: str) -> None:
        self.workdir = workdir
        self.rabbit_url = rabbit_url
        self.database_url = database_url
        self.nova_endpoint = nova_endpoint
        self.nova_token = nova_token
        self.exchange = f'cyborg-gate-{uuid.uuid4().hex[:8]}'
        self.processes: dict[str, Process] = {}
        self.placement_url = f'http://127.0.0.1:{free_port()}'
        self.api_port = free_port()
        self.api_url = f'http://127.0.0.1:{self.api_port}/v2'

    def _dir(self, name: str) -> pathlib.Path:
        path = self.workdir / name
        path.mkdir(exist_ok=True)
        return path

    def _add(self, name: str, kind: str, argv: list[str],
             **kwargs: Any) -> Process:
        process = Process(name, kind, argv, self.workdir / f'{name}.log',
                          **kwargs)
        self.processes[name] = process
        return process

    def _service(self, name: str, kind: str,
                 sections: dict[str, dict[str, Any]],
                 extra: dict[str, dict[str, Any]] | None = None,
                 env: dict[str, str] | None = None) -> Process:
        """A cyborg service; ``extra`` adds options, section by section,
        over those the stack sets, ``env`` variables to its environment
        (see ``environment``)."""
        for section, values in (extra or {}).items():
            sections[section] = {**sections.get(section, {}), **values}
        conf = write_conf(self.workdir / f'{name}.conf', sections)
        return self._add(name, kind, [sys.executable, '-m',
                                      f'cyborg.cmd.{kind}',
                                      '--config-file', str(conf)], env=env)

    def _default(self, name: str, **values: Any) -> dict[str, Any]:
        return {'transport_url': self.rabbit_url,
                'control_exchange': self.exchange,
                'state_path': str(self._dir(f'{name}-state')),
                'heartbeat_interval': 1, **values}

    # -- the processes -----------------------------------------------------

    def add_placement(self, extra: dict[str, dict[str, Any]] | None = None
                      ) -> Process:
        """openstack-placement on a fixed port and SQLite file, noauth2
        unless ``extra`` (options, section by section) says otherwise."""
        workdir = self._dir('placement')
        sections: dict[str, dict[str, Any]] = {
            'api': {'auth_strategy': 'noauth2'},
            'placement_database': {
                'connection': f'sqlite:///{workdir}/placement.sqlite',
                'sync_on_startup': 'true'}}
        for section, values in (extra or {}).items():
            sections[section] = {**sections.get(section, {}), **values}
        write_conf(workdir / 'placement.conf', sections)
        port = self.placement_url.rsplit(':', 1)[1]
        # Started from its directory, so that nothing on the caller's path
        # shadows the placement package.
        return self._add('placement', 'placement',
                         [sys.executable, '-c', placement_server._SERVE,
                          port],
                         cwd=workdir,
                         env={'OS_PLACEMENT_CONFIG_DIR': str(workdir)})

    def placement_up(self) -> bool:
        try:
            return requests.get(self.placement_url + '/',
                                timeout=2).status_code == 200
        except requests.RequestException:
            # Not listening yet, or bound but not serving yet.
            return False

    def add_api(self, threads: int = 8,
                extra: dict[str, dict[str, Any]] | None = None) -> Process:
        """cyborg-api without Keystone: the token ``admin`` is an
        administrator. No Keystone validates service tokens here, so
        binds do not require one. ``extra`` as for ``add_conductor``."""
        return self._service('api', 'api', {
            'DEFAULT': self._default('api',
                                     rpc_response_timeout=RPC_TIMEOUT),
            'database': {'connection': self.database_url},
            'api': {'host_ip': '127.0.0.1', 'port': self.api_port,
                    'auth_strategy': 'noauth',
                    'require_service_token': 'false',
                    'threads': threads}}, extra)

    def api_up(self) -> bool:
        try:
            return requests.get(self.api_url, timeout=2).status_code == 200
        except requests.RequestException:
            # Not listening yet, or bound but not serving yet.
            return False

    def bring_up(self, placement: placement_server.Placement,
                 agents: dict[str, str]) -> dict[str, str]:
        """Start placement, ``conductor1`` and the API, make a compute
        node in placement for each agent's hostname (``agents``: process
        name -> hostname), then start the agents; wait until each
        answers. The compute nodes' uuids, by hostname."""
        self.start('placement', 'conductor1', 'api')
        wait_for(self.placement_up, 'placement to answer', 60)
        roots = {node: placement.create_compute_node(node)['uuid']
                 for node in agents.values()}
        self.ready('conductor1')
        self.start(*agents)
        self.ready(*agents)
        wait_for(self.api_up, 'the API to answer', 60)
        return roots

    def first_device(self, hostname: str, what: str,
                     query: str = '') -> dict[str, Any]:
        """Wait for the API to list a device of ``hostname`` (``query``:
        more filters, e.g. ``&type=GPU``) and return the first;
        ``what`` names it in the failure."""
        def listed() -> dict[str, Any] | None:
            found = requests.get(
                f'{self.api_url}/devices?hostname={hostname}{query}',
                headers=API_HEADERS, timeout=10).json()
            return found['devices'][0] if found['devices'] else None

        return wait_for(listed, f'{what} in the API', 60, interval=0.5)

    def create_profile(self, name: str, group: dict[str, str]) -> None:
        """Create device profile ``name`` of one request group."""
        answer = requests.post(
            f'{self.api_url}/device_profiles', headers=API_HEADERS,
            timeout=30, json=[{'name': name, 'groups': [group]}])
        assert answer.status_code == 201, answer.text

    def bind_new(self, profile: str, hostname: str, rp_uuid: str,
                 status: int = 202) -> tuple[str, str]:
        """Create a request of device profile ``profile`` and bind it to a
        new instance on the device ``rp_uuid`` of ``hostname``, as Nova
        does, answered with ``status``; (instance uuid, request uuid)."""
        api = self.api_url
        arq = requests.post(
            f'{api}/accelerator_requests', headers=API_HEADERS, timeout=30,
            json={'device_profile_name': profile}).json()['arqs'][0]
        instance = str(uuid.uuid4())
        answer = requests.patch(
            f'{api}/accelerator_requests', headers=API_HEADERS, timeout=30,
            json={arq['uuid']: [
                {'path': '/hostname', 'op': 'add', 'value': hostname},
                {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
                {'path': '/instance_uuid', 'op': 'add', 'value': instance}]})
        assert answer.status_code == status, answer.text
        return instance, arq['uuid']

    def delete_instance(self, instance: str) -> None:
        """Delete the requests of ``instance``, as Nova does."""
        answer = requests.delete(
            f'{self.api_url}/accelerator_requests?instance={instance}',
            headers=API_HEADERS, timeout=30)
        assert answer.status_code == 204, answer.text

    def wait_bound(self, arq_uuid: str) -> dict[str, Any]:
        """The request once the API shows it Bound (within 30 s)."""
        def bound() -> dict[str, Any] | None:
            found = requests.get(
                f'{self.api_url}/accelerator_requests/{arq_uuid}',
                headers=API_HEADERS, timeout=10).json()
            return found if found['state'] == 'Bound' else None

        return wait_for(bound, f'request {arq_uuid} to be bound', 30,
                        interval=0.5)

    def wait_free(self, hostname: str) -> None:
        """Wait (30 s) until no attach handle of ``hostname`` is in use."""
        wait_for(lambda: not any(h['in_use']
                                 for h in self.attach_handles(hostname)),
                 f'the attach handles of {hostname} to be free', 30,
                 interval=0.5)

    def attach_handles(self, hostname: str) -> list[dict[str, Any]]:
        """The attach handles of ``hostname`` as the API lists them
        (microversion 2.8)."""
        answer = requests.get(
            f'{self.api_url}/attach_handles', timeout=10,
            headers=API_HEADERS)
        return [h for h in answer.json()['attach_handles']
                if h['hostname'] == hostname]

    def add_conductor(self, host: str,
                      extra: dict[str, dict[str, Any]] | None = None
                      ) -> Process:
        """A conductor publishing to placement and telling Nova, both with
        fixed tokens (keystoneauth's admin_token plugin). It logs each RPC
        message it takes and answers (see ``rpc_calls``) and the Nova
        events it queues (``queued_events``)."""
        levels = ','.join(log.get_default_log_levels()
                          + [f'{RPC_SERVER_LOGGER}=DEBUG',
                             f'{BINDING_LOGGER}=DEBUG'])
        return self._service(host, 'conductor', {
            'DEFAULT': self._default(host, host=host,
                                     default_log_levels=levels),
            'database': {'connection': self.database_url},
            'placement': {'auth_type': 'admin_token',
                          'endpoint': self.placement_url,
                          'endpoint_override': self.placement_url,
                          'token': PLACEMENT_TOKEN,
                          'sync_interval': PLACEMENT_SYNC_INTERVAL},
            'nova': {'auth_type': 'admin_token',
                     'endpoint': self.nova_endpoint,
                     'endpoint_override': self.nova_endpoint,
                     'token': self.nova_token}}, extra)

    def add_agent(self, host: str, hostname: str, devices: int,
                  accelerators: int,
                  pci_specs: tuple[dict[str, Any], ...] = (),
                  sysfs_root: str | None = None,
                  extra: dict[str, dict[str, Any]] | None = None,
                  env: dict[str, str] | None = None) -> Process:
        """An agent of host ``host`` (compute node ``hostname``) with the
        fake driver, and generic_pci over ``sysfs_root`` when
        ``pci_specs`` select functions. It logs at DEBUG, which says
        whether each discovery pass was reported. ``env`` adds to its
        environment (``environment``), e.g. to load the NVML double."""
        agent: dict[str, Any] = {'hostname': hostname,
                                 'periodic_interval': 2, 'hotplug': 'false',
                                 'enabled_drivers': 'fake_driver'}
        sections: dict[str, dict[str, Any]] = {
            'DEFAULT': self._default(host, host=host, debug='true'),
            'agent': agent,
            'fake_driver': {'device_count': devices,
                            'accelerators_per_device': accelerators}}
        if pci_specs:
            agent['enabled_drivers'] = 'fake_driver,generic_pci'
            agent['sysfs_root'] = sysfs_root
            sections['generic_pci'] = {
                'device_specs': [json.dumps(s) for s in pci_specs]}
        return self._service(host, 'agent', sections, extra, env)

    def state_path(self, name: str) -> pathlib.Path:
        return self._dir(f'{name}-state')

    # -- all of them -------------------------------------------------------

    def start(self, *names: str) -> None:
        for name in names:
            self.processes[name].start()

    def ready(self, *names: str, timeout: float = 60) -> None:
        """Wait until each service listens on its RPC topic; fail at once
        when one of them exits."""
        processes = [self.processes[n] for n in names]

        def check() -> bool:
            dead = [p.name for p in processes if not p.running]
            assert not dead, f'{dead} exited'
            return all('listening on topic' in p.log() for p in processes)

        wait_for(check, f'{", ".join(names)} to listen', timeout)

    def stop(self, *names: str) -> dict[str, int | str | None]:
        """Stop the processes ``names`` side by side; their exit codes."""
        for name in names:
            self.processes[name].terminate()
        return {name: self.processes[name].wait() for name in names}

    def stop_all(self) -> dict[str, int | str | None]:
        """Stop every process, side by side; their exit codes."""
        return self.stop(*self.processes)

    @contextlib.contextmanager
    def running(self, after: Callable[[], object] | None = None
                ) -> Iterator['Stack']:
        """Run a flow's body, then stop every process (and call ``after``,
        e.g. to stop an emulated kernel). A failing body prints the tails
        of the logs; a passing one is checked to have stopped cleanly:
        every process exits 0 on SIGTERM, placement (waitress) may die of
        it."""
        try:
            yield self
        except BaseException:
            print(self.tails())
            raise
        finally:
            codes = self.stop_all()
            if after is not None:
                after()
        assert codes.pop('placement', 0) in (0, -15), self.tails()
        assert codes == dict.fromkeys(codes, 0), (codes, self.tails())

    # -- the clients --------------------------------------------------------

    def nova_client(self) -> nova_side.NovaSide:
        """Nova's own client in a child process (see harness/nova_side),
        sending a service token as Nova does."""
        config = write_conf(self.workdir / 'nova.conf', {
            'cyborg': {'endpoint_override': self.api_url, 'timeout': 30},
            'service_user': {'send_service_user_token': 'true',
                             'auth_type': 'admin_token',
                             'endpoint': self.api_url,
                             'token': 'nova-service-token'}})
        return nova_side.start(config, self.workdir / 'nova-client.log')

    def openstack(self, *args: str) -> str:
        """``openstack accelerator <args>`` with an admin token and no
        Keystone; its standard output, once it succeeded."""
        openstack = os.path.join(os.path.dirname(sys.executable),
                                 'openstack')
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
        done = subprocess.run(
            [openstack, '--os-auth-type', 'admin_token', '--os-endpoint',
             self.api_url, '--os-token', 'admin', 'accelerator', *args],
            env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def openstack_lists(self, *nouns: str) -> dict[str, list[Any]]:
        """``openstack accelerator <noun> list -f json`` for each noun,
        side by side, with an admin token and no Keystone."""
        openstack = os.path.join(os.path.dirname(sys.executable),
                                 'openstack')
        assert os.path.exists(openstack), 'python-openstackclient is missing'
        base = [openstack, '--os-auth-type', 'admin_token', '--os-endpoint',
                self.api_url, '--os-token', 'admin', 'accelerator']
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
        running = {noun: subprocess.Popen(
            base + noun.split() + ['list', '-f', 'json'], env=env,
            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for noun in nouns}
        listed = {}
        for noun, process in running.items():
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, f'accelerator {noun} list: {err}'
            listed[noun] = json.loads(out)
        return listed

    def tails(self, lines: int = 30) -> str:
        return ''.join(f'\n--- {name}: {p.log_path} (pid '
                       f'{p.popen.pid if p.popen else "-"}, last {lines} '
                       f'lines) ---\n{p.tail(lines)}\n'
                       for name, p in self.processes.items())
