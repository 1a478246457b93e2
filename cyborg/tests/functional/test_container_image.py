"""cyborg's container image (the tree's Containerfile), built and run.

The image is built with podman on a bookworm base made from Debian's
packages (harness/container_image.py: no registry needed), then its
services run as containers on the host's network, each with a
configuration directory mounted at /etc/cyborg (read from there with no
--config-file, as an operator's would be) and a named volume for its
state: cyborg-dbsync upgrade on a MariaDB database of the test's own,
then cyborg-api, cyborg-conductor and cyborg-agent (fake driver) on a
RabbitMQ virtual host of its own, until the API lists the agent's
devices; each must stop cleanly on SIGTERM. The image's default command
must list setup.cfg's console scripts, and its services run as the
unprivileged user.

Marked ``image`` and left out of the default run (conftest.py): making
the base takes about 4 minutes (once a day, cached under /var/tmp) and
building the image 1-2 minutes; ``tox -e images`` runs it.

System packages: Debian's podman, runc and mmdebstrap, installed through
harness/system_packages.py when missing (as root; otherwise the test is
skipped, or fails under CYBORG_TEST_REQUIRE_SERVICES=1).
"""
import configparser
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cyborg.db import migration
from cyborg.tests import utils
from cyborg.tests.harness import container_image
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import packaging

pytestmark = pytest.mark.image

AGENT_HOST = 'img-cmp1'
DEVICES = 2
# The UID the Containerfile gives the user "cyborg".
CYBORG_UID = 42486


@pytest.fixture(scope='module')
def podman_env(tmp_path_factory) -> dict[str, str]:
    return container_image.podman_env(tmp_path_factory.mktemp('podman'))


@pytest.fixture(scope='module')
def image(podman_env) -> str:
    return container_image.build(podman_env,
                                 container_image.base(podman_env))


def _console_scripts() -> set[str]:
    setup = configparser.ConfigParser()
    setup.read(container_image.ROOT / 'setup.cfg')
    return {line.split('=')[0].strip() for line in setup.get(
        'options.entry_points', 'console_scripts').splitlines() if line}


def test_default_command_lists_the_services(podman_env, image):
    listed = container_image.podman(podman_env, 'run', '--rm', image)
    assert {line.strip() for line in listed.stdout.splitlines()[1:]} == \
        _console_scripts(), listed.stdout
    who = container_image.podman(podman_env, 'run', '--rm', image, 'id')
    assert who.stdout.startswith(
        f'uid={CYBORG_UID}(cyborg) gid={CYBORG_UID}(cyborg)'), who.stdout


class _Containers:
    """The containers and volumes of one test, named after it and removed
    with it."""

    def __init__(self, env: dict[str, str], image: str,
                 workdir: pathlib.Path) -> None:
        self.env = env
        self.image = image
        self.workdir = workdir
        self.prefix = f'cyborg-test-{uuid.uuid4().hex[:8]}'
        self.names: set[str] = set()

    def _argv(self, name: str, conf_dir: pathlib.Path,
              *command: str) -> list[str]:
        # The container and its volume have the same name.
        self.names.add(f'{self.prefix}-{name}')
        return ['podman', 'run', '--rm', '--name', f'{self.prefix}-{name}',
                '--volume', f'{conf_dir}:/etc/cyborg:ro',
                '--volume', f'{self.prefix}-{name}:/var/lib/cyborg',
                self.image, *command]

    def run(self, name: str, conf_dir: pathlib.Path, *command: str) -> str:
        argv = self._argv(name, conf_dir, *command)
        return container_image.podman(self.env, *argv[1:]).stdout

    def process(self, name: str, conf_dir: pathlib.Path,
                *command: str) -> gate_stack.Process:
        # SIGTERM to podman run reaches the service: podman passes it on
        # (--sig-proxy, the default).
        return gate_stack.Process(
            name, name, self._argv(name, conf_dir, *command),
            self.workdir / f'{name}.log',
            env={'CONTAINERS_CONF': self.env['CONTAINERS_CONF']})

    def remove(self) -> None:
        # A container left by a failed stop, then the volumes.
        if not self.names:
            return
        container_image.podman(self.env, 'rm', '--force', '--ignore',
                               *self.names, check=False)
        container_image.podman(self.env, 'volume', 'rm', '--force',
                               *self.names, check=False)


@pytest.fixture
def containers(podman_env, image, tmp_path) -> Iterator[_Containers]:
    made = _Containers(podman_env, image, tmp_path)
    yield made
    made.remove()


def _conf_dir(workdir: pathlib.Path, name: str, database_url: str,
              transport_url: str, exchange: str,
              **sections: dict[str, Any]) -> pathlib.Path:
    """A directory with cyborg.conf, for /etc/cyborg; readable by the
    container's user (pytest makes its directories 0700)."""
    conf_dir = workdir / name
    conf_dir.mkdir(mode=0o755)
    conf_dir.chmod(0o755)
    conf: dict[str, dict[str, Any]] = {
        'DEFAULT': {'transport_url': transport_url,
                    'control_exchange': exchange,
                    'heartbeat_interval': 1, 'debug': 'true'},
        'database': {'connection': database_url},
    }
    for section, values in sections.items():
        conf[section] = {**conf.get(section, {}), **values}
    gate_stack.write_conf(conf_dir / 'cyborg.conf', conf).chmod(0o644)
    return conf_dir




def _listening(process: gate_stack.Process) -> bool:
    assert process.running, f'{process.name} exited:\n{process.tail()}'
    return 'listening on topic' in process.log()


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
def test_services_run_from_the_image(containers, empty_db_url, rabbit_url,
                                     tmp_path):
    exchange = f'cyborg-img-{uuid.uuid4().hex[:8]}'
    port = gate_stack.free_port()
    api = f'http://127.0.0.1:{port}/v2'
    control = _conf_dir(tmp_path, 'control', empty_db_url, rabbit_url,
                        exchange, DEFAULT={'host': 'img-ctl1'},
                        api={'host_ip': '127.0.0.1', 'port': port,
                             'auth_strategy': 'noauth',
                             'require_service_token': 'false'})
    compute = _conf_dir(tmp_path, 'compute', empty_db_url, rabbit_url,
                        exchange, DEFAULT={'host': AGENT_HOST},
                        agent={'hostname': AGENT_HOST,
                               'periodic_interval': 1, 'hotplug': 'false',
                               'enabled_drivers': 'fake_driver'},
                        fake_driver={'device_count': DEVICES})

    containers.run('dbsync', control, 'cyborg-dbsync', 'upgrade')
    assert utils.query(
        empty_db_url, 'SELECT version_num FROM alembic_version') == [
        {'version_num': migration.head()}]

    api_process, conductor, agent = processes = [
        containers.process('api', control, 'cyborg-api'),
        containers.process('conductor', control, 'cyborg-conductor'),
        containers.process('agent', compute, 'cyborg-agent')]
    try:
        api_process.start()
        conductor.start()
        # The agent's first report is a call to the conductor: sent
        # before the conductor's queue exists, it would be lost.
        gate_stack.wait_for(lambda: _listening(conductor),
                            'the conductor to listen', 60)
        agent.start()
        gate_stack.wait_for(lambda: packaging.api_up(api), 'the API', 60)
        gate_stack.wait_for(
            lambda: packaging.services_up(api) >= {
                ('cyborg-conductor', 'img-ctl1'),
                ('cyborg-agent', AGENT_HOST)},
            'the conductor and the agent up', 60)
        devices = gate_stack.wait_for(
            lambda: packaging.devices(api, AGENT_HOST),
            "the agent's devices", 60)
        assert len(devices) == DEVICES, devices
    except BaseException:
        print(''.join(f'\n--- {p.name} ---\n{p.tail(40)}'
                      for p in processes))
        raise
    finally:
        codes = {p.name: p.stop() for p in processes}
    logs = {p.name: p.log() for p in processes}
    assert codes == dict.fromkeys(codes, 0), (codes, logs)
    for name, text in logs.items():
        assert 'Traceback' not in text, (name, text)
