"""Nova's own Cyborg client (``nova.accelerator.cyborg``) against the API.

Nova's side runs in a child process (``harness/nova_side.py`` says why);
each test drives it step by step as Nova's conductor and compute do.
"""
from collections.abc import Iterator
from typing import Any

import pytest

from cyborg.tests.functional.clients.conftest import SERVICE_TOKEN
from cyborg.tests.harness import nova_side
from cyborg.tests.harness.nova_side import NovaError

INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'
GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]


@pytest.fixture
def start_nova(live_api, tmp_path) -> Iterator[Any]:
    """Starts Nova's side; ``start_nova(service_token=False)`` leaves out
    ``[service_user]`` so that Nova sends only the user's token."""
    started = []

    def start(service_token: bool = True) -> nova_side.NovaSide:
        config = tmp_path / f'nova-{len(started)}.conf'
        lines = ['[cyborg]', f'endpoint_override = {live_api.url}',
                 'timeout = 30']
        if service_token:
            lines += ['[service_user]', 'send_service_user_token = true',
                      'auth_type = admin_token',
                      f'endpoint = {live_api.url}',
                      f'token = {SERVICE_TOKEN}']
        config.write_text('\n'.join(lines) + '\n')
        started.append(nova_side.start(
            config, tmp_path / f'nova-{len(started)}.log'))
        return started[-1]

    yield start
    for side in started:
        side.close()


@pytest.fixture
def rp_uuid(live_api) -> str:
    """Host cmp1 (hypervisor node1) with one fake FPGA, and device profile
    dp1 asking for one; the resource provider Placement would pick."""
    [device] = live_api.seed('cmp1', hostname='node1')
    live_api.dp('dp1', GROUPS)
    return device['deployables'][0]['rp_uuid']


def _calls(live_api) -> list[Any]:
    """The requests after each version discovery."""
    return [s for s in live_api.seen if s.path not in ('/v2', '/v2/')]


def test_boot_flow(live_api, start_nova, rp_uuid):
    nova = start_nova()
    # nova-api: the flavor's accel:device_profile=dp1.
    [group] = nova('get_device_profile_request_groups', 'dp1')
    assert group == {'requester_id': 'device_profile_0',
                     'resources': {'FPGA': 1},
                     'required_traits': ['CUSTOM_FAKE_DEVICE'],
                     'forbidden_traits': []}
    get = _calls(live_api)[-1]
    assert (get.path, get.query, get.status) == ('/v2/device_profiles',
                                                 'name=dp1', 200)

    # nova-conductor, once Placement has picked rp_uuid for the group.
    [arq] = nova('create_arqs_and_match_resource_providers', 'dp1',
                 {'device_profile_0': [rp_uuid]})
    assert arq['state'] == 'Initial'
    assert arq['device_profile_group_id'] == 0
    assert arq['device_rp_uuid'] == rp_uuid
    nova('bind_arqs', {arq['uuid']: {'hostname': 'node1',
                                     'device_rp_uuid': rp_uuid,
                                     'instance_uuid': INSTANCE}})
    patch = _calls(live_api)[-1]
    assert (patch.method, patch.path, patch.status) == (
        'PATCH', '/v2/accelerator_requests', 202)
    assert 'openstack-api-version' not in patch.headers
    assert patch.headers['x-auth-token'] == 'admin'
    assert patch.headers['x-service-token']

    # nova-compute, waiting for the binding, then building the guest.
    [bound] = nova('get_arqs_for_instance', INSTANCE, True)
    assert bound['uuid'] == arq['uuid']
    assert bound['state'] == 'Bound'
    assert (bound['hostname'], bound['device_rp_uuid'],
            bound['instance_uuid']) == ('node1', rp_uuid, INSTANCE)
    assert bound['attach_handle_type'] == 'TEST_PCI'
    info = bound['attach_handle_info']
    assert info == {'domain': '0000', 'bus': '0c', 'device': '00',
                    'function': '1'}
    assert all(isinstance(v, str) for v in info.values())
    assert nova('get_arq_uuids_for_instance', INSTANCE) == [arq['uuid']]
    assert nova('get_arq_by_uuid', arq['uuid']) == bound

    # Server delete, and Nova's cleanup doing it again.
    assert nova('delete_arqs_for_instance', INSTANCE) is None
    assert nova('delete_arqs_for_instance', INSTANCE) is None
    delete = _calls(live_api)[-1]
    assert (delete.method, delete.query, delete.status) == (
        'DELETE', f'instance={INSTANCE}', 204)
    with pytest.raises(NovaError, match='no accelerator requests'):
        nova('get_arqs_for_instance', INSTANCE)
    with pytest.raises(NovaError) as raised:
        nova('get_arq_by_uuid', arq['uuid'])
    assert raised.value.name == 'AcceleratorRequestOpFailed'
    assert '404' in raised.value.message


def test_every_call_discovers_the_version_first(live_api, start_nova, rp_uuid):
    nova = start_nova()
    nova('create_arqs', 'dp1')
    nova('get_device_profile_request_groups', 'dp1')
    # A new client per operation, each with an unauthenticated GET /v2.
    assert [(s.method, s.path, 'x-auth-token' in s.headers)
            for s in live_api.seen] == [
        ('GET', '/v2', False),
        ('POST', '/v2/accelerator_requests', True),
        ('GET', '/v2', False),
        ('GET', '/v2/device_profiles', True)]


def test_cleanup_after_a_failed_bind(live_api, start_nova, rp_uuid):
    nova = start_nova()
    arqs = nova('create_arqs', 'dp1') + nova('create_arqs', 'dp1')
    uuids = [a['uuid'] for a in arqs]
    nova('delete_arqs_by_uuid', uuids)
    delete = _calls(live_api)[-1]
    # The comma travels encoded.
    assert delete.query == f'arqs={uuids[0]}%2C{uuids[1]}'
    assert delete.status == 204
    for uuid in uuids:
        with pytest.raises(NovaError, match='AcceleratorRequestOpFailed'):
            nova('get_arq_by_uuid', uuid)
    # Again: the 404 is only logged.
    assert nova('delete_arqs_by_uuid', uuids) is None
    assert _calls(live_api)[-1].status == 404


def _refused_then_cleaned_up(live_api, nova, arqs, bindings):
    """Nova's conductor after a PATCH its client says failed: the
    requests are left as they were, and it deletes them."""
    with pytest.raises(NovaError) as raised:
        nova('bind_arqs', bindings)
    assert raised.value.name == 'AcceleratorRequestBindingFailed'
    patch = _calls(live_api)[-1]
    assert (patch.method, patch.status) == ('PATCH', 409)
    for arq in arqs:
        left = nova('get_arq_by_uuid', arq['uuid'])
        assert (left['state'], left['instance_uuid']) == ('Initial', None)
    uuids = [a['uuid'] for a in arqs]
    assert nova('delete_arqs_by_uuid', uuids) is None
    assert _calls(live_api)[-1].status == 204


def test_a_function_no_image_provides_fails_the_bind(live_api, start_nova,
                                                     rp_uuid, fake_glance):
    from cyborg.tests.fakes.fixtures import glance_conf
    glance_conf(live_api.conf, fake_glance)
    live_api.dp('fn', [{'resources:FPGA': '1',
                        'trait:CUSTOM_FAKE_DEVICE': 'required',
                        'accel:function_id': 'no-such-function'}])
    nova = start_nova()
    [arq] = nova('create_arqs', 'fn')
    _refused_then_cleaned_up(live_api, nova, [arq], {arq['uuid']: {
        'hostname': 'node1', 'device_rp_uuid': rp_uuid,
        'instance_uuid': INSTANCE}})


def test_a_device_without_a_free_handle_fails_the_bind(live_api,
                                                       start_nova):
    live_api.conf.set_override('accelerators_per_device', 1, 'fake_driver')
    [device] = live_api.seed('cmp1', hostname='node1')
    live_api.dp('dp1', GROUPS)
    rp = device['deployables'][0]['rp_uuid']
    nova = start_nova()
    [first] = nova('create_arqs', 'dp1')
    nova('bind_arqs', {first['uuid']: {
        'hostname': 'node1', 'device_rp_uuid': rp,
        'instance_uuid': INSTANCE}})
    # Placement's view was stale: a second server on the same device.
    other = '3f2ad7e1-5b5e-4a7f-8a3f-1b2c3d4e5f61'
    arqs = nova('create_arqs', 'dp1') + nova('create_arqs', 'dp1')
    _refused_then_cleaned_up(live_api, nova, arqs, {a['uuid']: {
        'hostname': 'node1', 'device_rp_uuid': rp,
        'instance_uuid': other} for a in arqs})
    [bound] = nova('get_arqs_for_instance', INSTANCE, True)
    assert bound['state'] == 'Bound'


def test_bind_without_a_service_token(live_api, start_nova, rp_uuid):
    nova = start_nova(service_token=False)
    [arq] = nova('create_arqs', 'dp1')
    bindings = {arq['uuid']: {'hostname': 'node1', 'device_rp_uuid': rp_uuid,
                              'instance_uuid': INSTANCE}}
    with pytest.raises(NovaError) as raised:
        nova('bind_arqs', bindings)
    assert raised.value.name == 'AcceleratorRequestBindingFailed'
    assert _calls(live_api)[-1].status == 403
    with pytest.raises(NovaError, match='AcceleratorRequestOpFailed'):
        nova('delete_arqs_for_instance', INSTANCE)

    # A deployment that does not ask for service tokens.
    live_api.conf.set_override('require_service_token', False, 'api')
    nova('bind_arqs', bindings)
    [bound] = nova('get_arqs_for_instance', INSTANCE, True)
    assert bound['state'] == 'Bound'
    nova('delete_arqs_for_instance', INSTANCE)


def test_device_profile_errors(live_api, start_nova, rp_uuid):
    nova = start_nova()
    live_api.dp('dp2', GROUPS)
    with pytest.raises(NovaError, match='Expected 1 device profile but got '
                                        'nothing'):
        nova('get_device_profile_request_groups', 'missing')
    # The name filter works on the server: one of two profiles.
    assert len(nova('get_device_profile_request_groups', 'dp2')) == 1
    with pytest.raises(NovaError) as raised:
        nova('create_arqs', 'missing')
    assert raised.value.name == 'AcceleratorRequestOpFailed'
    assert _calls(live_api)[-1].status == 404


def test_groups_map_to_their_providers(live_api, start_nova, rp_uuid):
    nova = start_nova()
    live_api.dp('multi', [{'resources:FPGA': '2',
                           'trait:CUSTOM_FAKE_DEVICE': 'required'},
                          {'resources:CUSTOM_GPU': '1',
                           'trait:CUSTOM_X': 'forbidden',
                           'accel:bitstream_id':
                               'f0e3a7a4-1a3b-4c5d-8e9f-0a1b2c3d4e5f'}])
    groups = nova('get_device_profile_request_groups', 'multi')
    assert [(g['requester_id'], g['resources'], g['forbidden_traits'])
            for g in groups] == [
        ('device_profile_0', {'FPGA': 2}, []),
        ('device_profile_1', {'CUSTOM_GPU': 1}, ['CUSTOM_X'])]
    other = '0d3b4a1c-7c41-4d2e-9a39-7f3c1f5b2a10'
    arqs = nova('create_arqs_and_match_resource_providers', 'multi',
                {'device_profile_0': [rp_uuid],
                 'device_profile_1': [other]})
    assert sorted((a['device_profile_group_id'], a['device_rp_uuid'])
                  for a in arqs) == [(0, rp_uuid), (0, rp_uuid),
                                     (1, other)]


def test_vgpu_whose_mdev_nova_creates(live_api, start_nova, tmp_path):
    # Here, not at module level: the child must not load cyborg.
    from oslo_utils import uuidutils

    from cyborg.tests.functional.api import test_nova_created_mdevs as vgpu
    from cyborg.tests.functional.api.fixtures import version
    from cyborg.tests.harness.sysfs import SysfsTree
    tree = SysfsTree(tmp_path / 'host')
    vgpu.add_t4(tree)
    [device] = live_api.seed_driver(
        'cmp1', 'node1', vgpu.nvidia_driver(live_api.conf, tree.root,
                                            'nova'))
    rp_uuid = device['deployables'][0]['rp_uuid']
    live_api.dp('vgpu', [{'resources:VGPU': '1',
                          'trait:CUSTOM_NVIDIA_1EB8_T4_1B': 'required'}])
    nova = start_nova()
    [group] = nova('get_device_profile_request_groups', 'vgpu')
    assert group['resources'] == {'VGPU': 1}
    [arq] = nova('create_arqs_and_match_resource_providers', 'vgpu',
                 {'device_profile_0': [rp_uuid]})
    nova('bind_arqs', {arq['uuid']: {'hostname': 'node1',
                                     'device_rp_uuid': rp_uuid,
                                     'instance_uuid': INSTANCE}})
    # No agent serves cmp1: the bind was done when the PATCH answered,
    # so the first read finds it Bound, without waiting.
    assert live_api.agents == {}
    [bound] = nova('get_arqs_for_instance', INSTANCE)
    assert bound['state'] == 'Bound'
    # What nova-compute creates the persistent mdev from.
    assert bound['attach_handle_type'] == 'MDEV'
    assert uuidutils.is_uuid_like(bound['attach_handle_uuid'])
    info = bound['attach_handle_info']
    assert {k: info[k] for k in ('asked_type', 'domain', 'bus', 'device',
                                 'function')} == {
        'asked_type': 'nvidia-222', 'domain': '0000', 'bus': '3b',
        'device': '00', 'function': '0'}
    assert all(isinstance(v, str) for v in info.values())
    assert nova('get_arqs_for_instance', INSTANCE, True) == [bound]

    # Server delete: the handle is free for the next instance at once.
    nova('delete_arqs_for_instance', INSTANCE)
    handles = live_api.app.get(
        '/v2/attach_handles', headers=version('2.8')).json['attach_handles']
    assert [h['uuid'] for h in handles if h['in_use']] == []
