"""``openstack accelerator attach handle list|clean|release``, run as an
operator runs them: the real ``openstack`` program against the API on a
port; the handles go to maintenance through a real failed clean (see
test_attach_handles)."""
from cyborg.api import versions
from cyborg.tests.functional.api.test_attach_handles import _in_use
from cyborg.tests.functional.api.test_attach_handles import _into_maintenance
from cyborg.tests.functional.api.test_attach_handles import _seed
from cyborg.tests.functional.clients.test_osc_plugin import _calls
from cyborg.tests.functional.clients.test_osc_plugin import _json
from cyborg.tests.functional.clients.test_osc_plugin import _run
from cyborg.tests.utils import wait_for

MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
HEADINGS = ['UUID', 'Type', 'Info', 'In Use', 'Clean State', 'Clean Reason',
            'Clean Since', 'Device', 'Hostname']


def _info(attach_info):
    return ', '.join(f'{k}={v}' for k, v in sorted(attach_info.items()))


def test_list_clean_and_release(live_api, tmp_path):
    first, second = _seed(live_api)
    handle = _into_maintenance(live_api, first)
    rows = _json(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                 'list')
    assert list(rows[0]) == HEADINGS
    assert {r['Device'] for r in rows} == {first['uuid'], second['uuid']}
    rows = _json(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                 'list', '--clean-state', 'maintenance')
    assert [(r['UUID'], r['Type'], r['Info'], r['In Use'], r['Clean State'],
             r['Clean Since'], r['Device'], r['Hostname']) for r in rows] == [
        (handle['uuid'], handle['attach_type'], _info(handle['attach_info']),
         True, 'maintenance', handle['clean_since'], first['uuid'],
         'node1')]
    assert '[fake_driver] clean_fail is set' in rows[0]['Clean Reason']
    rows = _json(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                 'list', '--device', second['uuid'], '--clean-state', 'none')
    assert rows and {r['Device'] for r in rows} == {second['uuid']}

    shown = _json(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                  'clean', handle['uuid'])
    assert (shown['UUID'], shown['In Use'], shown['Clean State']) == (
        handle['uuid'], True, 'cleaning')
    wait_for(lambda: not _in_use(live_api), 'the clean')

    again = _into_maintenance(live_api, first)
    shown = _json(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                  'release', again['uuid'])
    assert (shown['UUID'], shown['In Use'], shown['Clean State'],
            shown['Clean Reason']) == (again['uuid'], False, None, None)
    assert _json(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                 'list', '--clean-state', 'maintenance') == []

    calls = _calls(live_api)
    assert [(c.method, c.path, c.query) for c in calls] == [
        ('GET', '/v2/attach_handles', ''),
        ('GET', '/v2/attach_handles', 'clean_state=maintenance'),
        ('GET', '/v2/attach_handles',
         f'device_uuid={second["uuid"]}&clean_state=none'),
        ('POST', f'/v2/attach_handles/{handle["uuid"]}/clean', ''),
        ('POST', f'/v2/attach_handles/{again["uuid"]}/release', ''),
        ('GET', '/v2/attach_handles', 'clean_state=maintenance')]
    assert {c.headers['openstack-api-version'] for c in calls} == {
        'accelerator 2.8'}


def test_errors(live_api, tmp_path):
    _seed(live_api)
    free = live_api.app.get('/v2/attach_handles', headers={
        'X-Auth-Token': 'admin',
        'OpenStack-API-Version': 'accelerator 2.8'}).json[
        'attach_handles'][0]['uuid']
    # The argument parser refuses an unknown state; the API a handle not
    # in maintenance and a missing one.
    failed = _run(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                  'list', '--clean-state', 'dirty', check=False)
    assert failed.returncode == 2
    assert "invalid choice: 'dirty'" in failed.stderr
    failed = _run(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                  'list', '--device', 'not-a-uuid', check=False)
    assert failed.returncode == 1
    assert '400: ' in failed.stderr and 'device_uuid' in failed.stderr
    for action in ('clean', 'release'):
        failed = _run(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                      action, free, check=False)
        assert failed.returncode == 1
        assert '409: ' in failed.stderr
        assert 'only a handle in maintenance' in failed.stderr
        failed = _run(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                      action, MISSING, check=False)
        assert failed.returncode == 1
        assert '404: ' in failed.stderr


def test_needs_2_8(live_api, tmp_path, monkeypatch):
    """A service whose maximum is 2.7 gets no attach handle request."""
    monkeypatch.setattr(versions, 'MAX_VERSION', (2, 7))
    for args in (('list',), ('clean', MISSING), ('release', MISSING)):
        failed = _run(live_api, tmp_path, 'accelerator', 'attach', 'handle',
                      *args, check=False)
        assert failed.returncode == 1
        assert ('needs accelerator API microversion 2.8; the accelerator '
                'service supports up to 2.7') in failed.stderr
    assert _calls(live_api) == []
