"""vGPU requests whose mdevs nova-compute creates (``[gpu_devices]
mdev_creator = nova``) through HTTP on every database: bound in the
PATCH, with no agent to ask, and their handles free again the moment
they are unbound or deleted. The same GPU in ``cyborg`` mode still waits
for the agent."""
import pytest

from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.harness.sysfs import SysfsTree

T4 = '0000:3b:00.0'
INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'
OTHER = '7f3c1f5b-2a10-4d2e-9a39-0d3b4a1c7c41'
V28 = version('2.8')


def add_t4(tree: SysfsTree, address: str = T4) -> None:
    """A T4 on the vGPU host driver offering two of its types."""
    tree.add_function(address, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    for type_id, name, instances in (('nvidia-222', 'GRID T4-1B', 4),
                                     ('nvidia-223', 'GRID T4-2B', 2)):
        type_dir = tree.add_mdev_type(address, type_id, name, instances)
        (type_dir / 'description').write_text(
            f'num_heads=1, max_instance={instances}')


def nvidia_driver(conf, root, creator: str) -> nvidia_gpu.NvidiaGpuDriver:
    """The nvidia_gpu driver over the tree at ``root``, its T4 serving
    nvidia-222, the mdevs created by ``creator``."""
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', str(root), 'agent')
    conf.set_override('enabled_vgpu_types', ['nvidia-222'], 'gpu_devices')
    conf.set_override('vgpu_type_addresses', [f'nvidia-222:{T4}'],
                      'gpu_devices')
    conf.set_override('mdev_creator', creator, 'gpu_devices')
    return nvidia_gpu.NvidiaGpuDriver(conf)


@pytest.fixture
def seed_vgpus(api_all_dbs, tmp_path):
    """``seed_vgpus(creator)``: the T4 of host cmp1 (hypervisor node1) as
    four vGPUs, and profile vgpu asking for one; its deployable."""
    api = api_all_dbs

    def seed(creator: str):
        tree = SysfsTree(tmp_path / creator)
        add_t4(tree)
        [device] = api.seed_driver(
            'cmp1', 'node1', nvidia_driver(api.conf, tree.root, creator))
        api.dp('vgpu', [{'resources:VGPU': '1',
                         'trait:CUSTOM_NVIDIA_1EB8_T4_1B': 'required'}])
        return device['deployables'][0]

    return seed


def _create(api):
    [arq] = api.app.post_json('/v2/accelerator_requests',
                              {'device_profile_name': 'vgpu'},
                              headers=ADMIN, status=201).json['arqs']
    return arq['uuid']


def _bind(api, uuid, rp_uuid, instance=INSTANCE):
    api.app.patch_json('/v2/accelerator_requests', {uuid: [
        {'path': '/hostname', 'op': 'add', 'value': 'node1'},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]},
        headers=SERVICE, status=202)
    return api.app.get(f'/v2/accelerator_requests/{uuid}',
                       headers=SERVICE).json


def _in_use(api):
    handles = api.app.get('/v2/attach_handles', headers=V28).json[
        'attach_handles']
    return sorted(h['uuid'] for h in handles if h['in_use'])


def test_nova_mode_binds_unbinds_and_deletes_at_once(api_all_dbs,
                                                     seed_vgpus):
    api = api_all_dbs
    deployable = seed_vgpus('nova')
    assert api.agents == {}  # nothing on cmp1 could answer an RPC
    uuid = _create(api)
    arq = _bind(api, uuid, deployable['rp_uuid'])
    # Bound when the PATCH answered: nothing waits for an agent.
    assert arq['state'] == 'Bound'
    assert arq['attach_handle_type'] == 'MDEV'
    info = arq['attach_handle_info']
    assert {k: info[k] for k in ('asked_type', 'domain', 'bus', 'device',
                                 'function')} == {
        'asked_type': 'nvidia-222', 'domain': '0000', 'bus': '3b',
        'device': '00', 'function': '0'}
    assert info['mdev_creator'] == 'nova'
    handle = arq['attach_handle_uuid']
    assert _in_use(api) == [handle]

    # Unbound: the handle is free at once (Nova removed the mdev).
    api.app.patch_json('/v2/accelerator_requests', {uuid: [
        {'op': 'remove', 'path': p}
        for p in ('/hostname', '/instance_uuid', '/device_rp_uuid')]},
        headers=SERVICE, status=202)
    unbound = api.app.get(f'/v2/accelerator_requests/{uuid}',
                          headers=ADMIN).json
    assert unbound['state'] == 'Unbound'
    assert _in_use(api) == []

    # Bound again, then deleted with its instance: free at once too.
    again = _bind(api, uuid, deployable['rp_uuid'], OTHER)
    assert again['state'] == 'Bound'
    assert _in_use(api) == [again['attach_handle_uuid']]
    api.app.delete(f'/v2/accelerator_requests?instance={OTHER}',
                   headers=SERVICE, status=204)
    assert _in_use(api) == []

    # Every handle can be bound, each at once, and no more.
    arqs = [_bind(api, _create(api), deployable['rp_uuid'],
                  f'00000000-0000-4000-8000-{n:012d}') for n in range(4)]
    assert [a['state'] for a in arqs] == ['Bound'] * 4
    late = _create(api)
    api.app.patch_json('/v2/accelerator_requests', {late: [
        {'path': '/hostname', 'op': 'add', 'value': 'node1'},
        {'path': '/device_rp_uuid', 'op': 'add',
         'value': deployable['rp_uuid']},
        {'path': '/instance_uuid', 'op': 'add',
         'value': '00000000-0000-4000-8000-000000000004'}]},
        headers=SERVICE, status=409)
    assert api.app.get(f'/v2/accelerator_requests/{late}',
                       headers=SERVICE).json['state'] == 'Initial'
    assert len(_in_use(api)) == 4


def test_cyborg_mode_still_asks_the_agent(api_all_dbs, seed_vgpus):
    api = api_all_dbs
    # No agent answers: the worker's RPC call waits at most this long.
    api.conf.set_override('bind_timeout', 1, 'conductor')
    deployable = seed_vgpus('cyborg')
    arq = _bind(api, _create(api), deployable['rp_uuid'])
    assert arq['state'] == 'BindStarted'
    assert 'mdev_creator' not in arq['attach_handle_info']
