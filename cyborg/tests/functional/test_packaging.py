"""cyborg as a packaged install runs it: the sdist and the wheel, installed.

The tests run in development mode, from the source tree, where every file
is at hand; a packaged install (a container image, a distribution
package, ``pip install cyborg``) has only what the sdist and the wheel
carry. Here both are built from the tree
(``cyborg.tests.harness.packaging``) and
installed each into an environment of its own, with no source tree on
its path, and their console scripts are run from a directory outside the
tree: ``cyborg-dbsync upgrade`` (the alembic environment and migrations
are files it reads from the installed package), then cyborg-api,
cyborg-conductor and cyborg-agent with the fake driver (found through
the installed entry points) until the API lists the agent's devices and
both services up, ``cyborg-status upgrade check``, which must pass every
check, and ``cyborg-aio --once`` alongside; each must stop cleanly. The
wheel runs on MariaDB and the sdist on SQLite.
``test_wheel_and_sdist_carry_the_tree`` checks that every file under
cyborg/ in the tree is in the wheel and that the sdist carries the whole
tree, so that a new data file cannot be left out of a release unnoticed.

Network: the first run on a machine installs cyborg's dependencies from
PyPI into a cached environment (``packaging.deps_venv``: 25 s with pip's
cache warm, once per change of requirements.txt); where the index cannot
be reached, the test is skipped, or fails under
CYBORG_TEST_REQUIRE_SERVICES=1. Later runs reach no index.

Where the time goes, 50-60 s of one pytest worker with that environment
cached (two cores shared with other suites, 2026-11-27): building the
sdist and the wheel 4-5 s (once per worker), checking the cached
environment 1 s, installing the wheel 4 s and the sdist 6 s (pip builds
its wheel first), placement 2-3 s (once per worker), then for each:
dbsync 3-4 s, the services 6-9 s to come up (the agent starts once the
conductor listens), cyborg-status 2-3 s and stopping them 2-3 s, with
cyborg-aio running alongside (6 s).
"""
import json
import pathlib
import subprocess
import tarfile
import uuid
import zipfile
from typing import Any

import pytest

from cyborg.db import migration
from cyborg.tests import utils
from cyborg.tests.harness import cached_venv
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import packaging

AGENT_HOST = 'pkg-cmp1'
DEVICES = 2


@pytest.fixture(scope='module')
def artifacts(tmp_path_factory) -> packaging.Artifacts:
    """The sdist and the wheel of the tree, built once per process."""
    return packaging.build(tmp_path_factory.mktemp('build'))


def _zip_names(wheel: pathlib.Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _tar_names(sdist: pathlib.Path) -> set[str]:
    with tarfile.open(sdist) as archive:
        # Every member is under one directory, cyborg-<version>/.
        return {member.name.split('/', 1)[1]
                for member in archive.getmembers()
                if member.isfile() and '/' in member.name}


def test_wheel_and_sdist_carry_the_tree(artifacts):
    tree = packaging.source_files()
    # Every file under cyborg/, whatever it is: modules, the alembic
    # environment and migrations (no __init__.py), data files. The tests go
    # too, since cyborg.tests is a package of the distribution, and so do
    # their data files.
    package = {name for name in tree if name.startswith('cyborg/')}
    assert package, 'no file under cyborg/ in the tree'
    assert 'cyborg/db/alembic/env.py' in package
    missing = sorted(package - _zip_names(artifacts.wheel))
    assert not missing, f'the wheel lacks {missing}'
    # .gitignore is git's alone: a build from the sdist has no use for it.
    missing = sorted(set(tree) - _tar_names(artifacts.sdist)
                     - {'.gitignore'})
    assert not missing, f'the sdist lacks {missing}'


@pytest.fixture
def installed(request, artifacts, tmp_path) -> pathlib.Path:
    """An environment with the artifact ``request.param`` (sdist or
    wheel) installed, and nothing of the source tree."""
    deps = packaging.deps_venv()
    venv = packaging.install(getattr(artifacts, request.param),
                             tmp_path / 'venv', deps)
    found = subprocess.run(
        [str(cached_venv.python(venv)), '-I', '-c',
         'import cyborg; print(cyborg.__file__)'], cwd=tmp_path,
        env=cached_venv.env(), capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(
        cached_venv.site_packages(venv) / 'cyborg' / '__init__.py'), found
    return venv


def _conf(workdir: pathlib.Path, name: str, database_url: str,
          transport_url: str, exchange: str,
          **sections: dict[str, Any]) -> pathlib.Path:
    conf: dict[str, dict[str, Any]] = {
        'DEFAULT': {'transport_url': transport_url,
                    'control_exchange': exchange,
                    'state_path': str(workdir / f'{name}-state'),
                    'heartbeat_interval': 1, 'debug': 'true'},
        'database': {'connection': database_url},
        'oslo_concurrency': {'lock_path': str(workdir / 'locks')},
        # An explicit path, so that no policy file of the machine counts.
        'oslo_policy': {'policy_file': str(workdir / 'no-policy.yaml')},
    }
    for section, values in sections.items():
        conf[section] = {**conf.get(section, {}), **values}
    return gate_stack.write_conf(workdir / f'{name}.conf', conf)


def _process(venv: pathlib.Path, workdir: pathlib.Path, name: str,
             *args: str) -> gate_stack.Process:
    process = gate_stack.Process(
        name, name, packaging.command(venv, f'cyborg-{name}', *args),
        workdir / f'{name}.log', cwd=workdir)
    process.env = cached_venv.env()
    return process



def _listening(process: gate_stack.Process) -> bool:
    assert process.running, f'{process.name} exited'
    return 'listening on topic' in process.log()



@pytest.mark.parametrize(
    'installed, backend', [('wheel', 'mysql'), ('sdist', 'sqlite')],
    indirect=True)
def test_installed_services_run(installed, empty_db_url, rabbit_url,
                                placement_url, tmp_path):
    work = tmp_path / 'work'
    work.mkdir()
    exchange = f'cyborg-pkg-{uuid.uuid4().hex[:8]}'
    port = gate_stack.free_port()
    api = f'http://127.0.0.1:{port}/v2'
    conf = _conf(work, 'cyborg', empty_db_url, rabbit_url, exchange,
                 DEFAULT={'host': 'pkg-ctl1'},
                 api={'host_ip': '127.0.0.1', 'port': port,
                      'auth_strategy': 'noauth',
                      'require_service_token': 'false'})
    agent_conf = _conf(work, 'agent', empty_db_url, rabbit_url, exchange,
                       DEFAULT={'host': AGENT_HOST},
                       agent={'hostname': AGENT_HOST,
                              'periodic_interval': 1, 'hotplug': 'false',
                              'enabled_drivers': 'fake_driver'},
                       fake_driver={'device_count': DEVICES})
    # cyborg-aio alongside, on SQLite and in-process RPC of its own.
    aio_log = work / 'aio.log'
    with open(aio_log, 'w') as log:
        aio = subprocess.Popen(
            packaging.command(installed, 'cyborg-aio', '--no-placement',
                              '--no-glance', '--once', '--port', '0',
                              '--state-dir', str(work / 'aio')),
            cwd=work, env=cached_venv.env(), stdout=log,
            stderr=subprocess.STDOUT)
    try:
        dbsync = packaging.run(installed, work, 'cyborg-dbsync',
                               '--config-file', str(conf), 'upgrade')
        assert dbsync.returncode == 0, dbsync.stdout + dbsync.stderr
        assert utils.query(
            empty_db_url, 'SELECT version_num FROM alembic_version') == [
            {'version_num': migration.head()}]

        processes = [_process(installed, work, name, '--config-file',
                              str(agent_conf if name == 'agent' else conf))
                     for name in ('api', 'conductor', 'agent')]
        api_process, conductor, agent = processes
        try:
            api_process.start()
            conductor.start()
            # The agent's first report is a call to the conductor: sent
            # before the conductor's queue exists, it would be lost.
            gate_stack.wait_for(
                lambda: _listening(conductor), 'the conductor to listen', 60)
            agent.start()
            gate_stack.wait_for(lambda: packaging.api_up(api), 'the API', 60)
            gate_stack.wait_for(
                lambda: packaging.services_up(api) >= {
                    ('cyborg-conductor', 'pkg-ctl1'),
                    ('cyborg-agent', AGENT_HOST)},
                'the conductor and the agent up', 60)
            devices = gate_stack.wait_for(
                lambda: packaging.devices(api, AGENT_HOST),
                "the agent's devices", 60)
            assert len(devices) == DEVICES, devices

            status_conf = _conf(
                work, 'status', empty_db_url, rabbit_url, exchange,
                placement={'auth_type': 'admin_token',
                           'endpoint': placement_url, 'token': 'admin'})
            status = packaging.run(installed, work, 'cyborg-status',
                                   '--config-file', str(status_conf),
                                   'upgrade', 'check', '--json')
            # 0: every check passed.
            assert status.returncode == 0, status.stdout + status.stderr
            assert {c['check'] for c in json.loads(status.stdout)[
                'checks']} >= {'Database schema', 'Agents alive'}
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
    finally:
        try:
            aio.wait(120)
        except subprocess.TimeoutExpired:
            aio.kill()
            aio.wait()
    output = aio_log.read_text()
    assert aio.returncode == 0, output
    assert f'Discovered {DEVICES} device(s) on aio-host' in output, output
    assert 'Traceback' not in output, output
