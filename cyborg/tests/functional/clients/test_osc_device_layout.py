"""``openstack accelerator device layout show|set|clear``, run as a user
runs them: the real ``openstack`` program against the API on a port, a
conductor and the host's agent (fake driver)."""
import json

from cyborg.accelerator.drivers import fake
from cyborg.tests.functional.clients.test_osc_plugin import _calls
from cyborg.tests.functional.clients.test_osc_plugin import _json
from cyborg.tests.functional.clients.test_osc_plugin import _run


def test_layout_show_set_and_clear(live_api, tmp_path):
    live_api.conf.set_override('vgpu_device_count', 1, 'fake_driver')
    live_api.conf.set_override('vgpus_per_device', 4, 'fake_driver')
    live_api.conf.set_override('bind_timeout', 10, 'conductor')
    gpu = next(d for d in live_api.seed('cmp1', count=1)
               if d['type'] == 'GPU')
    uuid = gpu['uuid']
    shown = _json(live_api, tmp_path, 'accelerator', 'device', 'layout',
                  'show', uuid)
    assert shown['layout'] is None
    assert json.loads(shown['options']) == {
        'mdev_type': {fake.VGPU_TYPE: 4}, 'mdev_count': {'min': 0, 'max': 4}}

    shown = _json(live_api, tmp_path, 'accelerator', 'device', 'layout',
                  'set', uuid, '--mdev-type', fake.VGPU_TYPE,
                  '--mdev-count', '2')
    assert (json.loads(shown['layout']), shown['layout_state']) == (
        {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2}, 'applied')

    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'layout',
                  'set', uuid, '--mdev-type', 'nvidia-999', '--mdev-count',
                  '2', check=False)
    assert failed.returncode == 1
    assert '400: ' in failed.stderr and fake.VGPU_TYPE in failed.stderr
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'layout',
                  'set', uuid, '--mdev-type', fake.VGPU_TYPE, check=False)
    assert failed.returncode == 1
    assert 'together' in failed.stderr
    failed = _run(live_api, tmp_path, 'accelerator', 'device', 'layout',
                  'set', uuid, '--vf-count', '2', '--region-image', 'x',
                  check=False)
    assert failed.returncode == 2

    shown = _json(live_api, tmp_path, 'accelerator', 'device', 'layout',
                  'clear', uuid)
    assert (shown['layout'], shown['layout_state']) == (None, None)

    calls = _calls(live_api)
    assert [(c.method, c.path, c.status) for c in calls] == [
        ('GET', f'/v2/devices/{uuid}/layout', 200),
        ('PUT', f'/v2/devices/{uuid}/layout', 200),
        ('PUT', f'/v2/devices/{uuid}/layout', 400),
        ('DELETE', f'/v2/devices/{uuid}/layout', 200)]
    assert {c.headers['openstack-api-version'] for c in calls} == {
        'accelerator 2.8'}
