"""The ``openstack accelerator`` commands of cyborg.osc, run as a user
runs them: the real ``openstack`` program against the API on a port."""
import json
import os
import subprocess
import sys

from cyborg import context as cyborg_context
from cyborg.api import versions
from cyborg.db.api import services
from cyborg.tests.functional.api.test_hosts import HOST
from cyborg.tests.functional.api.test_hosts import agent  # noqa: F401

OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')


def _run(live_api, tmp_path, *args: str, check: bool = True
         ) -> subprocess.CompletedProcess:
    """``openstack <args>`` without Keystone; no clouds.yaml or OS_*
    variable of the caller's reaches it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env['HOME'] = str(tmp_path)
    return subprocess.run(
        [OPENSTACK, '--os-auth-type', 'admin_token', '--os-endpoint',
         live_api.url, '--os-token', 'admin', *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=check)


def _json(live_api, tmp_path, *args: str):
    return json.loads(_run(live_api, tmp_path, *args, '-f', 'json').stdout)


def _calls(live_api):
    """The API calls, past version discovery."""
    return [s for s in live_api.seen if s.path.rstrip('/') != '/v2']


def test_service_list(live_api, tmp_path):
    ctx = cyborg_context.get_admin_context()
    services.heartbeat(ctx, 'ctl1', 'cyborg-conductor', '0.1.0')
    services.heartbeat(ctx, 'cmp1', 'cyborg-agent', '0.1.0', 'node1')
    rows = _json(live_api, tmp_path, 'accelerator', 'service', 'list')
    assert [{k: r[k] for k in ('Host', 'Binary', 'Hostname', 'State')}
            for r in rows] == [
        {'Host': 'ctl1', 'Binary': 'cyborg-conductor', 'Hostname': None,
         'State': 'up'},
        {'Host': 'cmp1', 'Binary': 'cyborg-agent', 'Hostname': 'node1',
         'State': 'up'}]
    assert set(rows[0]) == {'ID', 'Host', 'Binary', 'Hostname', 'Version',
                            'State', 'Last Seen At'}
    agents = _json(live_api, tmp_path, 'accelerator', 'service', 'list',
                   '--binary', 'cyborg-agent')
    assert [r['Host'] for r in agents] == ['cmp1']
    page = _json(live_api, tmp_path, 'accelerator', 'service', 'list',
                 '--limit', '1', '--marker', str(rows[0]['ID']))
    assert [r['Host'] for r in page] == ['cmp1']
    calls = _calls(live_api)
    assert [c.path for c in calls] == ['/v2/services'] * 3
    assert calls[2].query == f'limit=1&marker={rows[0]["ID"]}'
    assert {c.headers['openstack-api-version'] for c in calls} == {
        'accelerator 2.5'}


def test_driver_list(live_api, tmp_path):
    live_api.seed('cmp1', count=2, hostname='node1')
    rows = _json(live_api, tmp_path, 'accelerator', 'driver', 'list')
    per_card = live_api.conf.fake_driver.accelerators_per_device
    assert rows == [{'Host': 'cmp1', 'Hostname': 'node1',
                     'Driver Name': 'fake', 'Devices': 2,
                     'Deployables': 2, 'Accelerators': 2 * per_card,
                     'State': None, 'Since': None, 'Error': None,
                     'Agent State': None}]
    assert _json(live_api, tmp_path, 'accelerator', 'driver', 'list',
                 '--host', 'cmp2') == []
    assert _calls(live_api)[-1].query == 'host=cmp2'
    assert _json(live_api, tmp_path, 'accelerator', 'driver', 'list',
                 '--state', 'no devices') == []
    assert _calls(live_api)[-1].query == 'state=no+devices'


def test_host_discover(live_api, agent, tmp_path):  # noqa: F811
    shown = _json(live_api, tmp_path, 'accelerator', 'host', 'discover',
                  HOST)
    assert shown == {'host': HOST, 'devices_added': 2, 'devices_updated': 0,
                     'devices_removed': 0, 'kept_in_use': 0,
                     'placement_pending': 0}
    [call] = _calls(live_api)
    assert (call.method, call.path, call.status) == (
        'POST', f'/v2/hosts/{HOST}/discover', 200)
    failed = _run(live_api, tmp_path, 'accelerator', 'host', 'discover',
                  'cmp-unknown', check=False)
    assert failed.returncode == 1
    assert 'No cyborg-agent has registered on host cmp-unknown' in (
        failed.stderr)


def test_in_tree_commands_still_work(live_api, tmp_path):
    live_api.seed('cmp1', hostname='node1')
    [device] = _json(live_api, tmp_path, 'accelerator', 'device', 'list')
    assert device['hostname'] == 'node1'


def test_older_service_is_refused_before_any_call(live_api, tmp_path,
                                                  monkeypatch):
    """A service whose maximum is below 2.5 gets no request at all."""
    monkeypatch.setattr(versions, 'MAX_VERSION', (2, 4))
    failed = _run(live_api, tmp_path, 'accelerator', 'service', 'list',
                  check=False)
    assert failed.returncode == 1
    assert ('needs accelerator API microversion 2.5; the accelerator '
            'service supports up to 2.4') in failed.stderr
    assert _calls(live_api) == []


def test_capacity_list(live_api, tmp_path):
    live_api.conf.set_override('vgpu_device_count', 1, 'fake_driver')
    live_api.conf.set_override('vgpus_per_device', 2, 'fake_driver')
    live_api.seed('cmp1', count=2, hostname='node1')
    per_card = live_api.conf.fake_driver.accelerators_per_device
    fpga = 2 * per_card
    assert _json(live_api, tmp_path, 'accelerator', 'capacity',
                 'list') == [
        {'Hostname': 'node1', 'Total': fpga + 2, 'Used': 0, 'Reserved': 0,
         'Unhealthy': 0, 'Available': fpga + 2}]
    rows = _json(live_api, tmp_path, 'accelerator', 'capacity', 'list',
                 '--group-by', 'resource-class', '--hostname', 'node1',
                 '--type', 'FPGA')
    assert rows == [{'Resource Class': 'FPGA', 'Total': fpga, 'Used': 0,
                     'Reserved': 0, 'Unhealthy': 0, 'Available': fpga}]
    rows = _json(live_api, tmp_path, 'accelerator', 'capacity', 'list',
                 '--group-by', 'trait', '--resource-class', 'VGPU')
    assert [(r['Trait'], r['Total']) for r in rows] == [
        ('CUSTOM_FAKE_VGPU', 2), ('OWNER_CYBORG', 2)]
    calls = _calls(live_api)
    assert [c.query for c in calls] == [
        'group_by=host',
        'group_by=resource_class&hostname=node1&type=FPGA',
        'group_by=trait&resource_class=VGPU']
    assert {c.headers['openstack-api-version'] for c in calls} == {
        'accelerator 2.7'}
    failed = _run(live_api, tmp_path, 'accelerator', 'capacity', 'list',
                  '--type', 'TPU', check=False)
    assert failed.returncode == 1
    assert 'type must be one of' in failed.stderr


def test_capacity_needs_2_7(live_api, tmp_path, monkeypatch):
    """A service whose maximum is 2.6 gets no capacity request; the 2.5
    commands still run against it."""
    monkeypatch.setattr(versions, 'MAX_VERSION', (2, 6))
    failed = _run(live_api, tmp_path, 'accelerator', 'capacity', 'list',
                  check=False)
    assert failed.returncode == 1
    assert ('needs accelerator API microversion 2.7; the accelerator '
            'service supports up to 2.6') in failed.stderr
    assert _calls(live_api) == []
    assert _json(live_api, tmp_path, 'accelerator', 'driver', 'list') == []
