"""Run cyborg-tempest-plugin's API tests against a real deployment.

Starts, each as a process of its own: a Keystone (fernet tokens, under
waitress), openstack-placement, cyborg-api validating tokens with
keystonemiddleware against that Keystone and enforcing the new policy
defaults and scope, a cyborg-conductor enforcing project limits read
from that Keystone (``[quota] driver = unified_limits``, registered
limits far above what tempest makes) and a cyborg-agent with the fake
driver, on fresh MariaDB databases (one for Keystone, one for cyborg)
and a RabbitMQ virtual host. Then it
writes a tempest workspace whose tempest.conf points at the Keystone,
runs ``tempest run`` over ``cyborg_tempest_plugin.tests.api`` and prints
tempest's summary, then the tenancy probes (``test_tenancy.py``: real
tokens of two projects and of a service user against the same stack).
Every process is stopped by PID at the end, whatever happened. The exit
code is tempest's, or the probes' when tempest passed (1 when the
deployment did not come up).

    tox -e tempest-api [-- --keep] [-- --regex REGEX] [-- --no-tenancy]

The database and broker addresses are read from CYBORG_TEST_MYSQL_URL and
CYBORG_TEST_RABBIT_URL, as the test suite does.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import sqlalchemy as sa

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cyborg.db import migration  # noqa: E402
from cyborg.tests import utils  # noqa: E402
from cyborg.tests.harness import gate_stack  # noqa: E402
from cyborg.tests.nova_stack import backing  # noqa: E402
from cyborg.tests.nova_stack import keystone as keystone_lib  # noqa: E402
from cyborg.tests.nova_stack.keystone import Keystone  # noqa: E402

# Tests left out of the run, each with the reason. The API tests need no
# Nova; none is excluded at present.
EXCLUDED: dict[str, str] = {}
# Every project's limits (registered limits): far above what tempest's
# tests make, so that only the tenancy probes' own project, with limits
# of its own, meets one.
REGISTERED_LIMITS = {'accelerator_requests': 1000, 'class:FPGA': 1000}


def log(message: str) -> None:
    print(f'[tempest-api {time.strftime("%H:%M:%S")}] {message}',
          flush=True)


def write_tempest_conf(workspace: pathlib.Path, keystone: Keystone,
                       concurrency: int) -> pathlib.Path:
    available = {name: 'false' for name in (
        'nova', 'glance', 'neutron', 'cinder', 'swift', 'heat', 'horizon',
        'placement')}
    available['cyborg'] = 'true'
    path = workspace / 'etc' / 'tempest.conf'
    gate_stack.write_conf(path, {
        'DEFAULT': {'log_dir': str(workspace / 'logs'),
                    'log_file': 'tempest.log'},
        'auth': {'use_dynamic_credentials': 'true',
                 'create_isolated_networks': 'false',
                 'admin_username': 'admin',
                 'admin_password': keystone.admin_password,
                 'admin_project_name': 'admin',
                 'admin_domain_name': 'Default',
                 'admin_system': 'all'},
        'identity': {'uri_v3': keystone.url + '/v3',
                     'auth_version': 'v3',
                     'region': keystone_lib.REGION,
                     'v3_endpoint_type': 'public'},
        'identity-feature-enabled': {'api_v2': 'false'},
        'service_available': available,
        'cyborg_policy': {'enforce_new_defaults': 'true'}})
    return path


def run_tempest(workspace: pathlib.Path, regex: str,
                concurrency: int) -> int:
    tempest = keystone_lib.bin_path('tempest')
    argv = [tempest, 'run', '--config-file',
            str(workspace / 'etc' / 'tempest.conf'), '--regex', regex,
            '--concurrency', str(concurrency)]
    if EXCLUDED:
        argv += ['--exclude-regex', '|'.join(EXCLUDED)]
        for test, reason in EXCLUDED.items():
            log(f'excluded {test}: {reason}')
    log(' '.join(argv[1:]))
    return subprocess.run(argv, cwd=workspace).returncode


def run_tenancy(keystone: Keystone, api_url: str) -> int:
    """The tenancy probes (``test_tenancy.py``, next to this file) with
    real tokens of two projects against the running stack."""
    argv = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
            str(pathlib.Path(__file__).with_name('test_tenancy.py'))]
    log(' '.join(argv[1:]))
    # Without the plugins installed for the test suite (schemathesis,
    # xdist) pytest starts in a fraction of a second instead of several.
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD='1',
               CYBORG_TENANCY_KEYSTONE=keystone.url,
               CYBORG_TENANCY_API=api_url,
               CYBORG_TENANCY_ADMIN_PASSWORD=keystone.admin_password)
    return subprocess.run(argv, cwd=ROOT, env=env).returncode


def _unreachable() -> list[str]:
    """Which of the database and broker servers do not accept a
    connection."""
    return [name for name, url, port in (
        ('MariaDB', backing.MYSQL_URL, 3306),
        ('RabbitMQ', backing.RABBIT_URL, 5672))
        if not utils.port_open(url, port)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--regex', default='cyborg_tempest_plugin.tests.api',
                        help='which tests tempest runs')
    parser.add_argument('--concurrency', type=int, default=4)
    parser.add_argument('--workdir', help='where configuration and logs go '
                        '(default: a new temporary directory)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory afterwards')
    parser.add_argument('--no-tenancy', dest='tenancy',
                        action='store_false',
                        help='skip the tenancy probes that follow tempest')
    args = parser.parse_args()
    missing = _unreachable()
    if missing:
        # As the test suite does: skipped unless the services are required.
        required = os.environ.get('CYBORG_TEST_REQUIRE_SERVICES') == '1'
        log(f'{" and ".join(missing)} not reachable: '
            + ('failing (CYBORG_TEST_REQUIRE_SERVICES=1)' if required
               else 'skipping the tempest API tests'))
        return 1 if required else 0

    started = time.monotonic()
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(
        prefix='cyborg-tempest-')).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    log(f'work directory {workdir}')
    database = backing.Database(backing.MYSQL_URL, 'cyborg_tempest')
    keystone_database = backing.Database(backing.MYSQL_URL,
                                         'keystone_tempest')
    vhost = backing.VirtualHost(backing.RABBIT_URL)
    stack: keystone_lib.KeystoneStack | None = None
    failed = True
    try:
        database.create()
        keystone_database.create()
        migration.upgrade('head', url=database.url)
        stack = keystone_lib.KeystoneStack(
            workdir, vhost.create(), database.url, 'http://127.0.0.1:9',
            'no-nova')
        keystone = Keystone(stack, keystone_database.url)
        keystone.setup()
        keystone.process().start()
        stack.add_placement().start()
        gate_stack.wait_for(keystone.up, 'keystone', 60)
        keystone.register(stack.api_url)
        keystone.register_limits(REGISTERED_LIMITS)
        gate_stack.wait_for(stack.placement_up, 'placement', 60)
        stack.add_keystone_api(keystone)
        stack.add_conductor('conductor-1',
                            extra=keystone.limits_reader('cyborg'))
        stack.add_agent('agent-1', 'tempest-compute-1', devices=2,
                        accelerators=2)
        stack.start('api', 'conductor-1', 'agent-1')
        stack.ready('conductor-1', 'agent-1', timeout=120)
        gate_stack.wait_for(stack.api_up, 'cyborg-api', 60)
        admin = keystone.admin_session()

        def inventory() -> bool:
            listed = [admin.get(f'{stack.api_url}/{kind}', timeout=10)
                      for kind in ('devices', 'deployables')]
            return all(r.status_code == 200 and next(iter(r.json().values()))
                       for r in listed)

        gate_stack.wait_for(inventory, 'the agent to report its devices',
                            120)
        log(f'deployment up after {time.monotonic() - started:.0f}s')

        workspace = workdir / 'tempest'
        # No "tempest init": it would register the workspace in
        # ~/.tempest. tempest run writes the .stestr.conf it needs.
        (workspace / 'etc').mkdir(parents=True)
        (workspace / 'logs').mkdir()
        write_tempest_conf(workspace, keystone, args.concurrency)
        code = run_tempest(workspace, args.regex, args.concurrency)
        if args.tenancy:
            probes = time.monotonic()
            probed = run_tenancy(keystone, stack.api_url)
            log(f'tenancy probes took {time.monotonic() - probes:.1f}s')
            code = code or probed
        failed = code != 0
        return code
    except Exception as exc:
        log(f'the deployment failed: {exc!r}')
        return 1
    finally:
        if stack is not None:
            if failed:
                print(stack.tails(40), flush=True)
            codes = stack.stop_all()
            log(f'stopped: {codes}')
        problem = vhost.delete()
        if problem:
            log(problem)
        for db in (database, keystone_database):
            try:
                db.drop()
            except sa.exc.SQLAlchemyError as exc:
                log(f'could not drop database {db.name}: {exc}')
        log(f'total {time.monotonic() - started:.0f}s')
        if args.keep or failed:
            log(f'logs kept in {workdir}')
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
