"""cyborg-aio as a user runs it: one process, with placement beside it."""
import json
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import requests

import cyborg
from cyborg.cmd import aio
from cyborg.cmd import aio_placement
from cyborg.tests import placement_server
from cyborg.tests.functional import test_processes as processes

README = pathlib.Path(cyborg.__file__).parents[1] / 'README.md'
# The tour's URLs in the README, the defaults of cyborg-aio.
README_API = 'http://127.0.0.1:6666/v2'
README_PLACEMENT = 'http://127.0.0.1:8778'
ADMIN = {'X-Auth-Token': 'admin'}


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
        json={arq: [
            {'op': 'add', 'path': '/hostname', 'value': hostname},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]})
    assert response.status_code == 202, response.text
    bound = requests.get(f'{api}/accelerator_requests/{arq}',
                         headers=ADMIN, timeout=10).json()
    assert bound['state'] == 'Bound', bound
    assert (bound['device_rp_uuid'], bound['instance_uuid']) == (rp,
                                                                 instance)
    return bound


def test_aio_with_placement(tmp_path):
    with open(tmp_path / 'aio.log', 'w') as log:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'cyborg.cmd.aio', '--state-dir',
             str(tmp_path / 'state'), '--port', '0', '--placement-port',
             '0', '--devices', '3'],
            stdout=subprocess.PIPE, stderr=log, text=True)
    out = _Output(proc.stdout)
    try:
        text = out.wait_for('Running; press Ctrl-C to stop.')
        api = re.search(r'^API: (http://127\.0\.0\.1:\d+/v2) ', text,
                        re.M).group(1)
        url = re.search(r'^Placement: (http://127\.0\.0\.1:\d+) ', text,
                        re.M).group(1)
        root = re.search(r"in_tree=([0-9a-f-]{36})'$", text, re.M).group(1)
        assert f"curl -s -H 'X-Auth-Token: admin' {api}/devices" in text
        assert f'--os-endpoint {api}' in text
        assert 'with 3 of 3 accelerator provider(s)' in text

        # The compute node as Nova makes it, one provider per device.
        placement = placement_server.Placement(url)
        assert placement.get(f'/resource_providers/{root}')['name'] == \
            'aio-host'
        assert 'COMPUTE_ACCELERATORS' in placement.traits(root)
        tree = placement.tree(root)
        assert len(tree) == 3
        for rp in tree.values():
            assert rp['parent_provider_uuid'] == root
            assert rp['name'].startswith('aio-host_')
            assert placement.inventories(rp['uuid'])['FPGA']['total'] == 16
            assert {'OWNER_CYBORG', 'CUSTOM_FAKE_DEVICE'} <= \
                placement.traits(rp['uuid'])

        bound = _bind_through_http(api, placement, 'aio-host')
        assert bound['device_rp_uuid'] in tree

        # The README's tour, as a reader pastes it (from a source tree).
        if README.exists() and shutil.which('curl') and \
                shutil.which('python3'):
            script = _tour_script()
            assert f'API={README_API} PLACEMENT={README_PLACEMENT}' in script
            # Every call must succeed: curl -f fails on an HTTP error.
            script = script.replace(README_API, api).replace(
                README_PLACEMENT, url).replace('curl -s ', 'curl -sf ')
            tour = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c',
                                   script], capture_output=True, text=True,
                                  timeout=60)
            assert tour.returncode == 0, tour.stdout + tour.stderr
            assert '"state": "Bound"' in tour.stdout, tour.stdout
            assert '"name": "aio-host_0000:0c:00.0"' in tour.stdout
            assert '"health_reason": "fan failure"' in tour.stdout
            assert '"group_by": "host"' in tour.stdout
            # The last step deleted the tour's request, not ours.
            listing = tour.stdout[tour.stdout.rindex('{\n    "arqs"'):]
            left = json.loads(listing)
            assert [a['uuid'] for a in left['arqs']] == [bound['uuid']]

        children = processes._children(proc.pid)
        assert len(children) == 1, children
    finally:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            proc.stdout.close()
    log = (tmp_path / 'aio.log').read_text()
    assert code == 0, log
    assert time.monotonic() - started < 8
    assert not [c for c in children if processes._alive(c)], (
        'placement outlived cyborg-aio')
    assert 'Traceback' not in log, log
    assert (tmp_path / 'state' / 'placement' / 'placement.sqlite').exists()


def test_aio_without_placement(tmp_path):
    proc = subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.aio', '--state-dir',
         str(tmp_path / 'state'), '--devices', '3', '--port', '0',
         '--no-placement', '--once'],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert 'Discovered 3 device(s) on aio-host' in proc.stdout
    assert proc.stdout.count('deployable aio-host_') == 3
    assert 'API: http://127.0.0.1:' in proc.stdout
    assert 'Placement: not running' in proc.stdout
    assert (tmp_path / 'state' / 'cyborg.sqlite').exists()
    assert not (tmp_path / 'state' / 'placement').exists()


def test_aio_says_placement_is_not_installed(monkeypatch, capsys):
    monkeypatch.setattr(aio_placement, 'installed', lambda: False)
    assert aio._start_placement(aio._parser().parse_args([])) is None
    assert capsys.readouterr().out == (
        "cyborg-aio: openstack-placement is not installed (pip install -e "
        "'.[aio]'); running without placement.\n")
