"""PUT, GET and DELETE /v2/devices/{uuid}/layout and the enable that
prepares (2.8), through the WSGI app, a real conductor and the host's
agent (fake driver) over the fake transport."""
import json

import pytest

from cyborg.accelerator.drivers import fake
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

V28 = version('2.8')
VGPUS = {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2}


@pytest.fixture
def gpu(api):
    api.conf.set_override('vgpu_device_count', 1, 'fake_driver')
    api.conf.set_override('vgpus_per_device', 4, 'fake_driver')
    api.conf.set_override('bind_timeout', 5, 'conductor')
    seeded = api.seed('cmp1', count=1)
    return next(d for d in seeded if d['type'] == 'GPU')


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def test_layout_round_trip(api, gpu):
    uuid = gpu['uuid']
    shown = api.app.get(f'/v2/devices/{uuid}/layout', headers=V28).json
    assert shown == {'device_uuid': uuid, 'layout': None,
                     'layout_state': None, 'layout_reason': None,
                     'options': {'mdev_type': {fake.VGPU_TYPE: 4},
                                 'mdev_count': {'min': 0, 'max': 4}}}
    device = api.app.put_json(f'/v2/devices/{uuid}/layout', VGPUS,
                              headers=V28).json
    assert (device['layout'], device['layout_state'],
            device['layout_reason'], device['status_reason']) == (
        VGPUS, 'applied', None, None)
    assert device['layout_changed_at'] is not None
    # The agent reported the device as it now is: two vGPU handles.
    agent = api.start_agent('cmp1')
    assert agent.tracker.cache.layouts[0]['layout'] == VGPUS
    shown = api.app.get(f'/v2/devices/{uuid}', headers=V28).json
    assert shown['layout'] == VGPUS
    # Below 2.8 the fields are not shown and the path does not exist.
    old = api.app.get(f'/v2/devices/{uuid}', headers=version('2.7')).json
    assert 'layout' not in old and 'status_reason' not in old
    api.app.get(f'/v2/devices/{uuid}/layout', headers=version('2.7'),
                status=404)

    cleared = api.app.delete(f'/v2/devices/{uuid}/layout',
                             headers=V28).json
    assert (cleared['layout'], cleared['layout_state']) == (None, None)
    assert agent.tracker.cache.layouts == []


@pytest.mark.parametrize('body, says', [
    ({'mdev_type': 'nvidia-999', 'mdev_count': 2}, fake.VGPU_TYPE),
    ({'mdev_type': fake.VGPU_TYPE, 'mdev_count': 9}, 'from 0 to 4'),
    ({'vf_count': 4}, 'mdev_count, mdev_type'),
    ({'vf_count': True}, 'vf_count (int)'),
    ({'mdev_count': 2}, 'set together'),
    ({'vgpu_type': '1145'}, 'vgpu_type and vgpu_count are set together'),
    ({'mig_partition': '3g.40gb'}, 'mig_partition (list)'),
    ({'mig_partition': [3]}, 'a list holds strings'),
    ({'eswitch_mode': 'switchdev'}, 'eswitch_mode'),
    ([], 'non-empty object'),
])
def test_bad_layouts_are_400_listing_what_is_allowed(api, gpu, body, says):
    response = api.app.put_json(f'/v2/devices/{gpu["uuid"]}/layout', body,
                                headers=V28, status=400)
    assert says in _fault(response)
    assert api.app.get(f'/v2/devices/{gpu["uuid"]}',
                       headers=V28).json['layout'] is None


def test_agent_down_is_503(api, gpu):
    api.stop_agents()
    response = api.app.put_json(f'/v2/devices/{gpu["uuid"]}/layout', VGPUS,
                                headers=V28, status=503)
    assert 'cmp1' in _fault(response)
    shown = api.app.get(f'/v2/devices/{gpu["uuid"]}', headers=V28).json
    assert (shown['layout'], shown['layout_state']) == (None, None)


def test_only_admins_change_layouts(api, gpu):
    api.app.put_json(f'/v2/devices/{gpu["uuid"]}/layout', VGPUS,
                     headers=version('2.8', user()), status=403)
    api.app.get(f'/v2/devices/{gpu["uuid"]}/layout',
                headers=version('2.8', user()), status=403)


def test_enable_prepares_and_a_failure_is_409_from_2_8(api, gpu):
    uuid = gpu['uuid']
    api.app.post(f'/v2/devices/{uuid}/disable', headers=ADMIN, status=200)
    api.conf.set_override('prepare_fail', True, 'fake_driver')
    response = api.app.post(f'/v2/devices/{uuid}/enable', headers=V28,
                            status=409)
    assert 'prepare_fail' in _fault(response)
    shown = api.app.get(f'/v2/devices/{uuid}', headers=V28).json
    assert shown['status'] == 'error'
    assert 'prepare_fail' in shown['status_reason']
    # Below 2.8 the answer stays the empty 200 it always was.
    response = api.app.post(f'/v2/devices/{uuid}/enable', headers=ADMIN,
                            status=200)
    assert response.body == b''
    api.conf.set_override('prepare_fail', False, 'fake_driver')
    api.app.post(f'/v2/devices/{uuid}/enable', headers=V28, status=200)
    shown = api.app.get(f'/v2/devices/{uuid}', headers=V28).json
    assert (shown['status'], shown['status_reason']) == ('enabled', None)


def test_a_layout_set_while_disabled_is_applied_by_enable(api, gpu):
    uuid = gpu['uuid']
    api.app.post(f'/v2/devices/{uuid}/disable', headers=ADMIN, status=200)
    device = api.app.put_json(f'/v2/devices/{uuid}/layout', VGPUS,
                              headers=V28).json
    assert (device['status'], device['layout'], device['layout_state']) == (
        'maintaining', VGPUS, 'pending')
    agent = api.start_agent('cmp1')
    assert agent.tracker.cache.layouts == []
    api.app.post(f'/v2/devices/{uuid}/enable', headers=V28, status=200)
    shown = api.app.get(f'/v2/devices/{uuid}', headers=V28).json
    assert (shown['status'], shown['layout_state']) == ('enabled', 'applied')
    assert agent.tracker.cache.layouts[0]['layout'] == VGPUS
