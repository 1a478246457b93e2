"""``openstack accelerator device health`` and ``device impact``, run as a
user runs them: the real ``openstack`` program against the API on a
port."""
from cyborg.api import versions
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.clients.test_osc_plugin import _calls
from cyborg.tests.functional.clients.test_osc_plugin import _json
from cyborg.tests.functional.clients.test_osc_plugin import _run

INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'
MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'


def test_health_list_set_and_clear(live_api, tmp_path):
    first, second = live_api.seed('cmp1', count=2, hostname='node1')
    live_api.seed('cmp2', count=1, hostname='node2')
    rows = _json(live_api, tmp_path, 'accelerator', 'device', 'health',
                 'list', '--hostname', 'node1')
    assert set(rows[0]) == {'UUID', 'Hostname', 'Type', 'Vendor', 'Status',
                            'Health', 'Reason', 'Source'}
    assert sorted((r['UUID'], r['Health'], r['Source']) for r in rows) == (
        sorted((d['uuid'], 'unknown', 'agent') for d in (first, second)))

    shown = _json(live_api, tmp_path, 'accelerator', 'device', 'health',
                  'set', first['uuid'], '--state', 'unhealthy', '--reason',
                  'fan failure')
    assert {k: shown[k] for k in ('uuid', 'health', 'health_reason',
                                  'health_source')} == {
        'uuid': first['uuid'], 'health': 'unhealthy',
        'health_reason': 'fan failure', 'health_source': 'operator'}
    rows = _json(live_api, tmp_path, 'accelerator', 'device', 'health',
                 'list', '--health', 'unhealthy')
    assert [(r['UUID'], r['Hostname'], r['Type'], r['Status'], r['Reason'])
            for r in rows] == [
        (first['uuid'], 'node1', 'FPGA', 'enabled', 'fan failure')]

    shown = _json(live_api, tmp_path, 'accelerator', 'device', 'health',
                  'clear', first['uuid'])
    assert (shown['health'], shown['health_source']) == ('unknown', 'agent')
    assert _json(live_api, tmp_path, 'accelerator', 'device', 'health',
                 'list', '--health', 'unhealthy') == []

    calls = _calls(live_api)
    assert [(c.method, c.path, c.query) for c in calls] == [
        ('GET', '/v2/devices', 'hostname=node1'),
        ('PUT', f'/v2/devices/{first["uuid"]}/health', ''),
        ('GET', '/v2/devices', 'health=unhealthy'),
        ('DELETE', f'/v2/devices/{first["uuid"]}/health', ''),
        ('GET', '/v2/devices', 'health=unhealthy')]
    assert {c.headers['openstack-api-version'] for c in calls} == {
        'accelerator 2.6'}

    # The argument parser refuses an unknown state; the API a long reason
    # and a missing device.
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'health',
                  'set', first['uuid'], '--state', 'sick', check=False)
    assert failed.returncode == 2
    assert "invalid choice: 'sick'" in failed.stderr
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'health',
                  'set', first['uuid'], '--state', 'degraded', '--reason',
                  'x' * 256, check=False)
    assert failed.returncode == 1
    assert '400: ' in failed.stderr
    assert 'longer than 255 characters' in failed.stderr
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'health',
                  'clear', MISSING, check=False)
    assert failed.returncode == 1
    assert '404: ' in failed.stderr


def test_impact(live_api, tmp_path):
    device = live_api.seed('cmp1', count=1, hostname='node1')[0]
    deployable = device['deployables'][0]
    live_api.dp('dp1')
    app = live_api.app
    [arq] = app.post_json('/v2/accelerator_requests',
                          {'device_profile_name': 'dp1'},
                          headers=user('p1')).json['arqs']
    assert _json(live_api, tmp_path, 'accelerator', 'device', 'impact',
                 device['uuid']) == []
    app.patch_json('/v2/accelerator_requests', {arq['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': 'node1'},
        {'path': '/device_rp_uuid', 'op': 'add',
         'value': deployable['rp_uuid']},
        {'path': '/instance_uuid', 'op': 'add', 'value': INSTANCE}]},
        headers=SERVICE, status=202)
    rows = _json(live_api, tmp_path, 'accelerator', 'device', 'impact',
                 device['uuid'])
    assert rows == [{'ARQ UUID': arq['uuid'], 'State': 'Bound',
                     'Instance UUID': INSTANCE, 'Project ID': 'p1',
                     'Device Profile': 'dp1',
                     'Deployable UUID': deployable['uuid']}]
    calls = [c for c in _calls(live_api) if c.path.endswith('/impact')]
    assert len(calls) == 2
    assert {c.headers['openstack-api-version'] for c in calls} == {
        'accelerator 2.6'}


def test_health_needs_2_6(live_api, tmp_path, monkeypatch):
    """A service whose maximum is 2.5 gets no health request."""
    monkeypatch.setattr(versions, 'MAX_VERSION', (2, 5))
    for args in (('health', 'list'), ('impact', MISSING)):
        failed = _run(live_api, tmp_path, 'accelerator', 'device', *args,
                      check=False)
        assert failed.returncode == 1
        assert ('needs accelerator API microversion 2.6; the accelerator '
                'service supports up to 2.5') in failed.stderr
    assert _calls(live_api) == []
