"""``openstack accelerator device profile set|unset`` and ``openstack
accelerator device profile access show``, run as a user runs them: the
real ``openstack`` program against the API on a port."""
from cyborg.api import versions
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.functional.clients.test_osc_plugin import _calls
from cyborg.tests.functional.clients.test_osc_plugin import _json
from cyborg.tests.functional.clients.test_osc_plugin import _run

PROJECT_A = '8f3c0e1d2b4a49c7a1e5d6f708192a3b'
PROJECT_B = '2c5e7a9b1d3f4e6a8b0c2d4e6f8a0b1c'


def _names(live_api, project):
    return [d['name'] for d in live_api.app.get(
        '/v2/device_profiles',
        headers=version('2.10', user(project))).json['device_profiles']]


def test_set_unset_and_access_show(live_api, tmp_path):
    dp = live_api.dp('fpga-dp')
    shown = _json(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'access', 'show', 'fpga-dp')
    assert shown == {'uuid': dp['uuid'], 'name': 'fpga-dp',
                     'is_public': True, 'projects': []}

    _run(live_api, tmp_path, 'accelerator', 'device', 'profile', 'set',
         '--private', '--project', PROJECT_A, '--project', PROJECT_B,
         'fpga-dp')
    shown = _json(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'access', 'show', dp['uuid'])
    assert (shown['is_public'], shown['projects']) == (
        False, sorted([PROJECT_A, PROJECT_B]))
    assert _names(live_api, PROJECT_B) == ['fpga-dp']

    _run(live_api, tmp_path, 'accelerator', 'device', 'profile', 'unset',
         '--project', PROJECT_B, 'fpga-dp')
    assert _names(live_api, PROJECT_A) == ['fpga-dp']
    assert _names(live_api, PROJECT_B) == []

    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'unset', '--project', PROJECT_B, 'fpga-dp', check=False)
    assert failed.returncode == 1
    assert (f'404: Project {PROJECT_B} is not in the access list of device '
            'profile fpga-dp.') in failed.stderr
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'set', '--project', 'not/an-id', 'fpga-dp', check=False)
    assert failed.returncode == 1
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'set', '--project', 'x' * 65, 'fpga-dp', check=False)
    assert failed.returncode == 1
    assert 'project_id must be a Keystone project ID' in failed.stderr
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'set', 'fpga-dp', check=False)
    assert failed.returncode == 1
    assert 'Give --private, --public or at least one --project' in (
        failed.stderr)
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'set', '--private', '--public', 'fpga-dp', check=False)
    assert failed.returncode == 2
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'unset', 'fpga-dp', check=False)
    assert failed.returncode == 2

    _run(live_api, tmp_path, 'accelerator', 'device', 'profile', 'set',
         '--public', 'fpga-dp')
    assert _names(live_api, PROJECT_B) == ['fpga-dp']

    calls = [(c.method, c.path, c.status) for c in _calls(live_api)]
    path = '/v2/device_profiles/fpga-dp'
    assert calls[:6] == [
        ('GET', path, 200),
        ('GET', f'/v2/device_profiles/{dp["uuid"]}/projects', 200),
        ('PUT', f'{path}/projects/{PROJECT_A}', 204),
        ('PUT', f'{path}/projects/{PROJECT_B}', 204),
        ('PATCH', path, 200),
        ('GET', f'/v2/device_profiles/{dp["uuid"]}', 200)]
    assert calls[-1] == ('PATCH', path, 200)
    assert {c.headers['openstack-api-version'] for c in _calls(live_api)
            if c.headers.get('openstack-api-version')} == {
        'accelerator 2.10'}


def test_an_older_service_is_refused_before_any_call(live_api, tmp_path,
                                                     monkeypatch):
    monkeypatch.setattr(versions, 'MAX_VERSION', (2, 9))
    live_api.dp('fpga-dp')
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'profile',
                  'set', '--private', 'fpga-dp', check=False)
    assert failed.returncode == 1
    assert ('needs accelerator API microversion 2.10; the accelerator '
            'service supports up to 2.9') in failed.stderr
    assert _calls(live_api) == []
