"""The real cyborg-conductor and cyborg-agent processes over RabbitMQ."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from cyborg import context as cyborg_context
from cyborg.db import migration
from cyborg.db.api import inventory
from cyborg.db.api import services
from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.harness import gate_stack


def _write_conf(path, **sections):
    lines = []
    for section, values in sections.items():
        lines.append(f'[{section}]')
        lines.extend(f'{k} = {v}' for k, v in values.items())
    path.write_text('\n'.join(lines) + '\n')
    return str(path)


def _uwsgi_conf(tmp_path, transport_url, db_url):
    """The configuration a uwsgi-served API reads in these tests: its own
    exchange, no authentication; the port is uwsgi's."""
    return _write_conf(
        tmp_path / 'cyborg.conf',
        DEFAULT={'transport_url': transport_url,
                 'control_exchange': f'cyborg-test-{uuid.uuid4().hex[:8]}'},
        database={'connection': db_url},
        api={'auth_strategy': 'noauth'})


def _start(module, conf_file, log_path):
    log = open(log_path, 'w')
    # A session of its own, so that _kill reaches the children a launcher
    # forked.
    return subprocess.Popen(
        [sys.executable, '-m', module, '--config-file', conf_file],
        stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED='1'), start_new_session=True)


def _kill(proc):
    """SIGKILL to a process started by _start and to its children, as a
    crash would end them (killed alone, a launcher's child is told to stop
    gracefully)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _wait(predicate, timeout=60, what='condition'):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f'timed out waiting for {what}')


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
def test_conductor_and_agent_processes(tmp_path, rabbit_url, db_engine,
                                       empty_db_url):
    exchange = f'cyborg-test-{uuid.uuid4().hex[:8]}'
    common = {'transport_url': rabbit_url, 'control_exchange': exchange,
              'heartbeat_interval': 1, 'state_path': str(tmp_path)}
    conductor_conf = _write_conf(
        tmp_path / 'conductor.conf',
        DEFAULT=dict(common, host='ctl1'),
        database={'connection': empty_db_url})
    agent_conf = _write_conf(
        tmp_path / 'agent.conf',
        DEFAULT=dict(common, host='cmp1'),
        agent={'hostname': 'cmp1.example', 'periodic_interval': 1},
        fake_driver={'device_count': 3})
    ctx = cyborg_context.get_admin_context()
    procs = [_start('cyborg.cmd.conductor', conductor_conf,
                    tmp_path / 'conductor.log')]
    try:
        # The agent's first report needs a conductor listening.
        _wait(lambda: services.get_all(ctx, 'cyborg-conductor'),
              what='the conductor to register')
        procs.append(_start('cyborg.cmd.agent', agent_conf,
                            tmp_path / 'agent.log'))
        devices = _wait(lambda: inventory.get_host_devices(ctx, 'cmp1'),
                        what='devices from the agent')
        assert len(devices) == 3
        assert {d['hostname'] for d in devices} == {'cmp1.example'}
        alive = _wait(
            lambda: {(s['binary'], s['host']) for s in services.get_all(ctx)
                     if s['alive']} >= {('cyborg-agent', 'cmp1'),
                                        ('cyborg-conductor', 'ctl1')},
            what='both services to heartbeat')
        assert alive
    finally:
        codes = [_stop(p) for p in procs]
    logs = {p: (tmp_path / p).read_text()
            for p in ('conductor.log', 'agent.log')}
    assert codes == [0, 0], logs
    assert 'Traceback' not in logs['conductor.log'], logs['conductor.log']
    assert 'Traceback' not in logs['agent.log'], logs['agent.log']

    # A restarted agent finds the same devices: nothing is duplicated.
    agent = _start('cyborg.cmd.agent', agent_conf, tmp_path / 'agent2.log')
    conductor = _start('cyborg.cmd.conductor', conductor_conf,
                       tmp_path / 'conductor2.log')
    try:
        time.sleep(3)
        after = inventory.get_host_devices(ctx, 'cmp1')
    finally:
        _stop(agent)
        _stop(conductor)
    assert [d['uuid'] for d in after] == [d['uuid'] for d in devices]


def test_unknown_driver_stops_the_agent(tmp_path):
    conf_file = _write_conf(
        tmp_path / 'agent.conf',
        DEFAULT={'transport_url': 'rabbit://guest:guest@127.0.0.1:1/'},
        agent={'enabled_drivers': 'fake_driver,no_such_driver'})
    proc = subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.agent', '--config-file',
         conf_file], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert 'no_such_driver' in proc.stderr
    assert 'Available drivers: amd_gpu, fake_driver' in proc.stderr
    assert 'Traceback' not in proc.stderr


def _stat(pid):
    """(state, parent pid) of a process, or None once it is gone."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _alive(pid):
    stat = _stat(pid)
    return stat is not None and stat[0] != 'Z'


def _children(pid):
    """PIDs of the live processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir('/proc'):
        stat = _stat(entry) if entry.isdigit() else None
        if stat is not None and stat[0] != 'Z' and stat[1] == pid:
            found.append(int(entry))
    return sorted(found)


def _get(url, token=None):
    request = urllib.request.Request(
        url, headers={'X-Auth-Token': token} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except OSError:
        return None


def test_api_worker_processes_share_one_port(tmp_path):
    url = f'sqlite:///{tmp_path}/cyborg.sqlite'
    migration.upgrade('head', url=url)
    port = gate_stack.free_port()
    conf_file = _write_conf(
        tmp_path / 'cyborg.conf', DEFAULT={'transport_url': 'fake://'},
        database={'connection': url},
        api={'auth_strategy': 'noauth', 'port': port, 'workers': 2})
    proc = _start('cyborg.cmd.api', conf_file, tmp_path / 'api.log')
    base = f'http://127.0.0.1:{port}/v2'
    try:
        _wait(lambda: _get(base) == 200, what='the API to answer')
        workers = _wait(lambda: len(_children(proc.pid)) == 2
                        and _children(proc.pid), what='two workers')
        for _ in range(10):
            assert _get(f'{base}/device_profiles', 'admin') == 200
        # A worker that dies is replaced; the service keeps answering.
        os.kill(workers[0], signal.SIGKILL)
        _wait(lambda: len(_children(proc.pid)) == 2
              and workers[0] not in _children(proc.pid),
              what='a new worker')
        assert _get(f'{base}/device_profiles', 'admin') == 200
        workers = _children(proc.pid)
    finally:
        code = _stop(proc)
    assert code == 0, (tmp_path / 'api.log').read_text()
    assert not [w for w in workers if _alive(w)], (
        'a worker outlived the launcher')
    # oslo.service's launcher (cotyledon) saw the worker die.
    assert 'killed by signal -9' in (tmp_path / 'api.log').read_text()


def _request(url, method='GET', body=None, token='admin'):
    request = urllib.request.Request(
        url, method=method, data=body,
        headers={'X-Auth-Token': token, 'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.read()


# What uwsgi logs when a worker has loaded the WSGI application.
READY = "WSGI app 0 (mountpoint='') ready"


@pytest.mark.parametrize('backend', ['mysql'], indirect=True)
def test_wsgi_module_under_uwsgi(tmp_path, rabbit_url, db_engine,
                                 empty_db_url):
    """The WSGI application as devstack and the install guide run it:
    uwsgi processes that load it after the fork, their configuration
    named by OS_CYBORG_CONFIG_FILES, writes going to a conductor."""
    port = gate_stack.free_port()
    conf_file = _uwsgi_conf(tmp_path, rabbit_url, empty_db_url)
    command = utils.uwsgi_command(str(tmp_path / 'api-uwsgi.ini'),
                                  conf_file, port, 2, 4)
    conftest.require_command('uwsgi', command)
    conductor = _start('cyborg.cmd.conductor', conf_file,
                       tmp_path / 'conductor.log')
    api = subprocess.Popen(command,
                           stdout=open(tmp_path / 'api.log', 'w'),
                           stderr=subprocess.STDOUT)
    base = f'http://127.0.0.1:{port}/v2'
    try:
        _wait(lambda: _get(base) == 200, what='uwsgi to answer')
        profile = json.dumps([{'name': 'uwsgi-dp',
                               'groups': [{'resources:FPGA': '1'}]}])
        status, _ = _request(f'{base}/device_profiles', 'POST',
                             profile.encode())
        assert status == 201
        # Every process answers, each with its own pool and transport.
        for _ in range(8):
            status, body = _request(f'{base}/device_profiles?name=uwsgi-dp')
            assert status == 200
            assert [p['name'] for p in json.loads(body)[
                'device_profiles']] == ['uwsgi-dp']
        for _ in range(4):
            status, body = _request(f'{base}/accelerator_requests', 'POST',
                                    b'{"device_profile_name": "uwsgi-dp"}')
            assert status == 201
        status, body = _request(f'{base}/accelerator_requests')
        assert len(json.loads(body)['arqs']) == 4
        # The first worker may answer everything while the second still
        # imports the app; a SIGTERM then would meet that import (and
        # uwsgi's 60 s wait for it), not a serving worker.
        _wait(lambda: (tmp_path / 'api.log').read_text().count(READY) == 2,
              what='both uwsgi workers to load the app')
    finally:
        try:
            api_code = _stop(api)
        finally:
            _stop(conductor)
    log = (tmp_path / 'api.log').read_text()
    assert api_code == 0, log
    assert 'Traceback' not in log, log
    assert log.count(READY) == 2, log
