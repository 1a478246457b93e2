"""cyborg-aio as a user runs it: one process, with placement and Glance
beside it."""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import requests
import sqlalchemy as sa
from openstack import connection

import cyborg
from cyborg.cmd import aio
from cyborg.cmd import aio_glance
from cyborg.cmd import aio_placement
from cyborg.cmd import aio_tour
from cyborg.tests import conftest
from cyborg.tests.functional import test_processes as processes
from cyborg.tests.harness import placement_server

README = pathlib.Path(cyborg.__file__).parents[1] / 'README.md'
# The tour's URLs in the README, the defaults of cyborg-aio.
README_API = 'http://127.0.0.1:6666/v2'
README_PLACEMENT = 'http://127.0.0.1:8778'
README_GLANCE = 'http://127.0.0.1:9292'
ADMIN = {'X-Auth-Token': 'admin'}

# The SDK's notices about its own future releases.
pytestmark = pytest.mark.filterwarnings(
    'ignore::PendingDeprecationWarning:openstack')


class _Output:
    """The lines a process prints, collected by a thread."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(stream,),
                         daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    @property
    def text(self) -> str:
        with self._changed:
            return ''.join(self.lines)

    def wait_for(self, marker: str, timeout: float = 60) -> str:
        with self._changed:
            if not self._changed.wait_for(
                    lambda: any(marker in line for line in self.lines),
                    timeout):
                raise AssertionError(f'no {marker!r} in:\n{self.text}')
        return self.text


def _tour_script() -> str:
    """The shell blocks of the README's tour."""
    text = README.read_text()
    tour = text.split('## A five-minute tour', 1)[1].split('\n## ', 1)[0]
    return '\n'.join(re.findall(r'```sh\n(.*?)```', tour, re.S))


def _printed_tour(text: str) -> str:
    """The commands cyborg-aio printed under "Try:"."""
    return textwrap.dedent(text.split('\nTry:\n', 1)[1].split('\n\n')[0])


def _run(script: str) -> subprocess.CompletedProcess:
    """``script`` as a reader pastes it, every call required to succeed
    (curl -f fails on an HTTP error), with this environment's
    ``openstack`` on the path."""
    script = script.replace('curl -s ', 'curl -sf ')
    path = f'{pathlib.Path(sys.executable).parent}:{os.environ["PATH"]}'
    return subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', script],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PATH=path))


def _start(state: pathlib.Path, *args: str
           ) -> tuple[subprocess.Popen, '_Output']:
    """cyborg-aio as a subprocess, its stderr in ``state``'s parent."""
    with open(state.parent / 'aio.log', 'w') as log:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'cyborg.cmd.aio', '--state-dir',
             str(state), '--port', '0', *args],
            stdout=subprocess.PIPE, stderr=log, text=True)
    return proc, _Output(proc.stdout)


def _stop(proc: subprocess.Popen, how: int) -> tuple[int, float]:
    """Its exit code and how long it took to stop after ``how``."""
    started = time.monotonic()
    proc.send_signal(how)
    try:
        code = proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    finally:
        proc.stdout.close()
    return code, time.monotonic() - started


def _get(api: str, path: str) -> dict:
    response = requests.get(f'{api}{path}', headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def _deployable(api: str, name: str) -> dict:
    [found] = _get(api, f'/deployables?name={name}')['deployables']
    return found


def _bind_ops(rp: str, instance: str) -> list[dict]:
    return [{'op': 'add', 'path': '/hostname', 'value': 'aio-host'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]


def _program_and_bind_with_sdk(api: str, state: pathlib.Path,
                               image: str) -> list[str]:
    """openstacksdk programs the second fake FPGA with ``image``, then
    binds two requests for the image's function: one to that FPGA, one to
    the third, which the bind programs. The requests' uuids."""
    second = _deployable(api, 'aio-host_0000:0d:00.0')
    third = _deployable(api, 'aio-host_0000:0e:00.0')
    conn = connection.Connection(auth_type='admin_token',
                                 auth={'endpoint': api, 'token': 'admin'})
    try:
        conn.accelerator.patch_deployable(second['uuid'], [
            {'op': 'replace', 'path': '/program',
             'value': [{'image_uuid': image}]}])
        # The agent downloaded the image's data, verified, and loaded it.
        assert _get(api, f'/deployables/{second["uuid"]}')[
            'bitstream_id'] == image
        assert (state / 'bitstreams' / f'{image}.bin').read_bytes() == \
            aio_glance.DEMO_DATA
        assert _get(api, f'/deployables/{third["uuid"]}')[
            'bitstream_id'] is None

        conn.accelerator.create_device_profile(
            name='sdk-function', groups=[{
                'resources:FPGA': '1',
                'accel:function_id': aio_glance.DEMO_FUNCTION_ID}])
        arqs = []
        for deployable in (second, third):
            arq = conn.accelerator.create_accelerator_request(
                device_profile_name='sdk-function')
            # One instance each: an instance's are bound in one PATCH.
            conn.accelerator.patch_accelerator_request(
                arq.id, _bind_ops(deployable['rp_uuid'], str(uuid.uuid4())))
            arqs.append(arq.id)
    finally:
        conn.close()
    deadline = time.monotonic() + 20
    while True:
        states = [_get(api, f'/accelerator_requests/{a}') for a in arqs]
        if all(s['state'] != 'BindStarted' for s in states) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [s['state'] for s in states] == ['Bound', 'Bound'], states
    assert [s['device_rp_uuid'] for s in states] == [
        second['rp_uuid'], third['rp_uuid']]
    # The conductor found the function's image in Glance and had the
    # third FPGA programmed with it to bind.
    assert _get(api, f'/deployables/{third["uuid"]}')[
        'bitstream_id'] == image
    return arqs


def _bind_through_http(api: str, placement: placement_server.Placement,
                       hostname: str) -> dict:
    """What Nova does for an instance with an accelerator."""
    response = requests.post(
        f'{api}/device_profiles', headers=ADMIN, timeout=10,
        json=[{'name': 'test-fpga',
               'groups': [{'resources:FPGA': '1',
                           'trait:CUSTOM_FAKE_DEVICE': 'required'}]}])
    assert response.status_code == 201, response.text
    response = requests.post(f'{api}/accelerator_requests', headers=ADMIN,
                             json={'device_profile_name': 'test-fpga'},
                             timeout=10)
    assert response.status_code == 201, response.text
    arq = response.json()['arqs'][0]['uuid']
    offered = placement.get('/resource_providers?resources=FPGA:1'
                            '&required=CUSTOM_FAKE_DEVICE')
    rp = offered['resource_providers'][0]['uuid']
    instance = str(uuid.uuid4())
    response = requests.patch(
        f'{api}/accelerator_requests', headers=ADMIN, timeout=10,
        json={arq: _bind_ops(rp, instance)})
    assert response.status_code == 202, response.text
    bound = _get(api, f'/accelerator_requests/{arq}')
    assert bound['state'] == 'Bound', bound
    assert (bound['device_rp_uuid'], bound['instance_uuid']) == (rp,
                                                                 instance)
    return bound


def test_aio_with_placement_and_glance(tmp_path):
    state = tmp_path / 'state'
    proc, out = _start(state, '--placement-port', '0', '--glance-port',
                       '0', '--devices', '4')
    try:
        text = out.wait_for('Running; press Ctrl-C to stop.')
        api = re.search(r'^API: (http://127\.0\.0\.1:\d+/v2) ', text,
                        re.M).group(1)
        url = re.search(r'^Placement: (http://127\.0\.0\.1:\d+) ', text,
                        re.M).group(1)
        glance = re.search(r'^Glance: (http://127\.0\.0\.1:\d+) ', text,
                           re.M).group(1)
        image = re.search(r' is image ([0-9a-f-]{36}) ', text).group(1)
        root = re.search(r"in_tree=([0-9a-f-]{36})'$", text, re.M).group(1)
        assert f"curl -s -H 'X-Auth-Token: admin' {api}/devices" in text
        assert f'--os-endpoint {api}' in text
        assert 'with 4 of 4 accelerator provider(s)' in text

        # The compute node as Nova makes it, one provider per device.
        placement = placement_server.Placement(url)
        assert placement.get(f'/resource_providers/{root}')['name'] == \
            'aio-host'
        assert 'COMPUTE_ACCELERATORS' in placement.traits(root)
        tree = placement.tree(root)
        assert len(tree) == 4
        for rp in tree.values():
            assert rp['parent_provider_uuid'] == root
            assert rp['name'].startswith('aio-host_')
            assert placement.inventories(rp['uuid'])['FPGA']['total'] == 16
            assert {'OWNER_CYBORG', 'CUSTOM_FAKE_DEVICE'} <= \
                placement.traits(rp['uuid'])

        # The demo bitstream in Glance, as cyborg's agent finds it.
        shown = requests.get(f'{glance}/v2/images/{image}', headers=ADMIN,
                             timeout=10).json()
        assert (shown['status'], shown['accel:function_id']) == (
            'active', aio_glance.DEMO_FUNCTION_ID)

        # The commands it printed, as a reader pastes them: they program
        # the last FPGA and bind a request for the function to it.
        printed = _printed_tour(text)
        last = _deployable(api, 'aio-host_0000:0f:00.0')
        assert f'/deployables/{last["uuid"]}/program' in printed
        assert (f'accelerator deployable program {last["uuid"]} {image}'
                in printed)
        tour = _run(printed)
        assert tour.returncode == 0, tour.stdout + tour.stderr
        assert f'"bitstream_id": "{image}"' in tour.stdout
        assert f'| uuid       | {last["uuid"]} |' in tour.stdout
        printed_arq = json.loads(tour.stdout[tour.stdout.rindex(
            '{"uuid": '):])
        assert (printed_arq['state'], printed_arq['device_rp_uuid']) == (
            'Bound', last['rp_uuid'])

        sdk_arqs = _program_and_bind_with_sdk(api, state, image)

        # The README's tour, as a reader pastes it (from a source tree);
        # it programs the first FPGA, which nothing above used.
        if README.exists() and shutil.which('curl'):
            script = _tour_script()
            assert (f'API={README_API} PLACEMENT={README_PLACEMENT} '
                    f'GLANCE={README_GLANCE}') in script
            tour = _run(script.replace(README_API, api).replace(
                README_PLACEMENT, url).replace(README_GLANCE, glance))
            assert tour.returncode == 0, tour.stdout + tour.stderr
            assert '"state": "Bound"' in tour.stdout, tour.stdout
            assert '"name": "aio-host_0000:0c:00.0"' in tour.stdout
            assert f'"bitstream_id": "{image}"' in tour.stdout
            assert '"device_profile_name": "fpga-function"' in tour.stdout
            assert '"health_reason": "fan failure"' in tour.stdout
            assert '"group_by": "host"' in tour.stdout
            # The last step deleted the tour's requests, not the others.
            listing = tour.stdout[tour.stdout.rindex('{\n    "arqs"'):]
            left = json.loads(listing)
            assert sorted(a['uuid'] for a in left['arqs']) == \
                sorted(sdk_arqs + [printed_arq['uuid']])

        bound = _bind_through_http(api, placement, 'aio-host')
        assert bound['device_rp_uuid'] in tree

        children = processes._children(proc.pid)
        assert len(children) == 2, children
    finally:
        code, took = _stop(proc, signal.SIGINT)
    log = (tmp_path / 'aio.log').read_text()
    assert code == 0, log
    assert took < 8
    assert not [c for c in children if processes._alive(c)], (
        'placement or Glance outlived cyborg-aio')
    assert 'Traceback' not in log, log
    assert out.lines[-1] == (
        f'cyborg-aio stopped; kept the database {state}/cyborg.sqlite, '
        f"placement's {state}/placement/placement.sqlite and Glance's "
        f'images and database under {state}/glance/ - run it again to '
        f'continue where it left off, or delete {state} to start over.\n')
    assert (state / 'placement' / 'placement.sqlite').exists()
    assert (state / 'glance' / 'images' / image).read_bytes() == \
        aio_glance.DEMO_DATA
    assert 'Traceback' not in (state / 'glance' / 'glance.log').read_text()


def test_aio_without_placement_or_glance(tmp_path):
    state = tmp_path / 'state'
    proc, out = _start(state, '--devices', '3', '--no-placement',
                       '--no-glance')
    try:
        text = out.wait_for('Running; press Ctrl-C to stop.')
        assert 'Discovered 3 device(s) on aio-host' in text
        assert text.count('deployable aio-host_') == 3
        assert 'Placement: not running' in text
        assert 'Glance: not running' in text
        assert '/program' not in text
        api = re.search(r'^API: (http://127\.0\.0\.1:\d+/v2) ', text,
                        re.M).group(1)
        # Programming needs an image service: a 4xx that says so.
        deployable = _deployable(api, 'aio-host_0000:0c:00.0')
        response = requests.patch(
            f'{api}/deployables/{deployable["uuid"]}/program',
            headers=ADMIN, timeout=30, json=[
                {'op': 'replace', 'path': '/program',
                 'value': [{'image_uuid': str(uuid.uuid4())}]}])
        assert response.status_code == 409, response.text
        assert 'Glance is not configured: [glance] has no auth_type' in \
            response.json()['error_message']
        assert processes._children(proc.pid) == []
    finally:
        code, _ = _stop(proc, signal.SIGTERM)
    assert code == 0, (tmp_path / 'aio.log').read_text()
    assert out.lines[-1] == (
        f'cyborg-aio stopped; kept the database {state}/cyborg.sqlite - '
        'run it again to continue where it left off, or delete '
        f'{state} to start over.\n')
    assert (state / 'cyborg.sqlite').exists()
    assert not (state / 'placement').exists()
    assert not (state / 'glance').exists()


def _write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def _once(tmp_path: pathlib.Path, *args: str
          ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.aio', '--state-dir',
         str(tmp_path / 'state'), '--port', '0', '--no-placement',
         '--no-glance', '--once', *args],
        capture_output=True, text=True, timeout=60)


@pytest.fixture
def mysql_url(tmp_path):
    yield from conftest.empty_database_url('mysql', tmp_path)


def test_aio_configuration_files_over_its_settings(tmp_path, mysql_url):
    """A file's database, drivers and host replace cyborg-aio's own; a
    flag of the command line wins over the files."""
    conf = _write(tmp_path / 'aio.conf', f"""
        [DEFAULT]
        host = file-host
        [database]
        connection = {mysql_url}
        [fake_driver]
        device_count = 3
        """)
    _write(tmp_path / 'aio.conf.d' / 'drivers.conf', """
        [agent]
        enabled_drivers = fake_driver,generic_pci
        """)
    proc = _once(tmp_path, '--config-file', str(conf), '--config-dir',
                 str(tmp_path / 'aio.conf.d'), '--devices', '1')
    assert proc.returncode == 0, proc.stderr
    shown = sa.engine.make_url(mysql_url).render_as_string(
        hide_password=True)
    assert f'cyborg-aio: database {shown}, in-process RPC.' in proc.stdout
    assert 'Discovered 1 device(s) on file-host' in proc.stdout
    assert '  driver fake: ok\n' in proc.stdout
    assert '  driver generic_pci: ' in proc.stdout
    assert f'kept the database {shown} (not under ' in proc.stdout
    assert not (tmp_path / 'state' / 'cyborg.sqlite').exists()
    engine = sa.create_engine(mysql_url)
    try:
        with engine.connect() as db:
            hosts = db.execute(sa.text('SELECT host FROM devices')).all()
    finally:
        engine.dispose()
    assert hosts == [('file-host',)]


@pytest.mark.parametrize('conf, error', [
    (None, 'cyborg-aio: Failed to find some config files: {path}'),
    ('[fake_driver\n',
     'cyborg-aio: Failed to parse {path}: at {path}:1, Invalid section '
     '(must end with ]): '),
    ('[fake_driver]\ndevice_count = many\n',
     'cyborg-aio: Value for option device_count from LocationInfo('
     "location=<Locations.user: (4, True)>, detail='{path}') is not "
     'valid: '),
    ('[agent]\nenabled_drivers = no_such_driver\n',
     'cyborg-aio: Unknown accelerator driver(s) in [agent] enabled_drivers: '
     'no_such_driver. Available drivers: amd_gpu, fake_driver, '),
], ids=['missing', 'unparsable', 'bad-value', 'unknown-driver'])
def test_aio_bad_configuration_is_one_line(tmp_path, conf, error):
    path = tmp_path / 'aio.conf'
    if conf is not None:
        path.write_text(conf)
    proc = _once(tmp_path, '--config-file', str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'Traceback' not in proc.stderr, proc.stderr
    last = proc.stderr.rstrip('\n').splitlines()[-1]
    assert last.startswith(error.format(path=path)), proc.stderr


def test_aio_says_placement_is_not_installed(monkeypatch, capsys):
    monkeypatch.setattr(aio_placement, 'installed', lambda: False)
    assert aio._start_placement(aio._parser().parse_args([])) is None
    assert capsys.readouterr().out == (
        "cyborg-aio: openstack-placement is not installed (pip install -e "
        "'.[aio]'); running without placement.\n")


def test_aio_says_glance_is_not_installed(monkeypatch, capsys):
    monkeypatch.setattr(aio_glance, 'installed', lambda: False)
    assert aio._start_glance(aio._parser().parse_args([])) is None
    assert capsys.readouterr().out == (
        "cyborg-aio: glance is not installed (pip install -e '.[aio]'); "
        'running without Glance: FPGAs cannot be programmed.\n')


def test_tour_names_what_runs():
    """Without Glance no program command; with Keystone, a warning that
    the commands' token is not one."""
    run = aio_tour.Running(api='http://127.0.0.1:1/v2', auth='keystone',
                           hostname='h', deployable='d', rp_uuid='r')
    text = aio_tour.text(run)
    assert text.startswith(
        'API: http://127.0.0.1:1/v2  ([api] auth_strategy = keystone: a '
        'Keystone token; the commands below need one in place of "admin")\n'
        'Placement: not running\n'
        'Glance: not running (programming an FPGA needs it)\n')
    assert '/program' not in text and 'accel:function_id' not in text

    run.glance, run.image = 'http://127.0.0.1:2', 'i'
    text = aio_tour.text(run)
    assert '/deployables/d/program' in text
    assert '"path": "/device_rp_uuid", "value": "r"' in text
    # Each tour binds for an instance of its own.
    assert aio_tour.Running(api='', auth='', hostname='').instance != \
        run.instance
