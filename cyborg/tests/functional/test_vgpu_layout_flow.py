"""A T4 from a whole GPU to 4 vGPUs and back, through the CLI, every
service a process.

Placement, cyborg-api, a conductor and an agent with the ``nvidia_gpu``
driver run as processes on real RabbitMQ and on each database; the
agent's sysfs is a fixture tree of a T4 on the vGPU host driver, whose
mdev writes an emulated kernel, another process, follows
(``cyborg.tests.harness.sysfs_kernel``). The operator sets the T4 to 4 vGPUs of
one type with ``openstack accelerator device layout set``: when the
command returns, placement offers 4 VGPU with the type's trait and no
longer the PGPU. An instance is bound one vGPU (its mdev created on the
T4); while it holds it a layout change is a 409 naming its request. Once
it is deleted (the mdev removed), ``--mdev-count 0`` gives the T4 back
whole.
"""
import json

import pytest
import requests

from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'vgpu-node'
T4 = '0000:af:00.0'
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}
# (type, name, max_instance, framebuffer) as a T4 on the vGPU host driver
# offers them.
T4_TYPES = [('nvidia-222', 'GRID T4-1B', 16, '1024M'),
            ('nvidia-223', 'GRID T4-2B', 8, '2048M'),
            ('nvidia-230', 'GRID T4-2Q', 8, '2048M')]
VGPU_TYPE = 'nvidia-223'
VGPU_TRAIT = 'CUSTOM_NVIDIA_1EB8_T4_2B'


def _add_t4(tree):
    tree.add_function(T4, 0x10de, 0x1eb8, 0x030200, driver='nvidia',
                      subsystem_vendor=0x10de, subsystem_device=0x12a2)
    for type_id, name, instances, framebuffer in T4_TYPES:
        type_dir = tree.add_mdev_type(T4, type_id, name, instances,
                                      device_api='vfio-pci')
        (type_dir / 'description').write_text(
            f'num_heads=1, frl_config=45, framebuffer={framebuffer}, '
            f'max_resolution=5120x2880, max_instance={instances}\n')



def _put_layout(stack, device, layout):
    return requests.put(f'{stack.api_url}/devices/{device}/layout',
                        headers=HEADERS, json=layout, timeout=60)


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
def test_t4_vgpus_through_the_cli(tmp_path, rabbit_url, db_engine,
                                  empty_db_url, fake_nova):
    tree = SysfsTree(tmp_path / 'host')
    _add_t4(tree)
    with gate_stack.emulated_host(
            tmp_path, rabbit_url, empty_db_url, fake_nova, NODE, tree.root,
            {'agent': {'enabled_drivers': 'nvidia_gpu'}}
    ) as (stack, placement, root):
        api = stack.api_url

        device = stack.first_device(NODE, 'the T4')['uuid']
        provider = f'{NODE}_{T4}'
        whole = (provider, {'PGPU': (1, 0)},
                 {'OWNER_CYBORG', 'CUSTOM_GPU_NVIDIA', 'CUSTOM_NVIDIA_1EB8'})
        gate_stack.wait_for(lambda: placement.offered(root) == [whole],
                            'placement offering the whole T4', 30,
                            interval=0.5)

        shown = json.loads(stack.openstack('device', 'layout', 'show',
                                           device, '-f', 'json'))
        # The table's cells are JSON text.
        assert json.loads(shown['options']) == {
            'mdev_type': {'nvidia-222': 16, 'nvidia-223': 8,
                          'nvidia-230': 8},
            'mdev_count': {'min': 0, 'max': 16}}

        stack.openstack('device', 'layout', 'set', device, '--mdev-type',
                        VGPU_TYPE, '--mdev-count', '4')
        # When the command returns: four vGPUs on the T4's provider, with
        # the type's trait, and the PGPU gone.
        vgpus = (provider, {'VGPU': (4, 0)},
                 {'OWNER_CYBORG', 'CUSTOM_GPU_NVIDIA', VGPU_TRAIT})
        assert placement.offered(root) == [vgpus]
        handles = requests.get(f'{api}/attach_handles?device_uuid={device}',
                               headers=HEADERS, timeout=10).json()[
                                   'attach_handles']
        assert sorted(h['attach_info']['vgpu_mark'] for h in handles) == [
            f'{VGPU_TYPE}_{n}' for n in range(4)]
        assert {(h['attach_type'], h['attach_info']['asked_type'],
                 h['attach_info']['bus']) for h in handles} == {
            ('MDEV', VGPU_TYPE, 'af')}

        # Refused values name what is allowed, and change nothing: a type
        # the T4 does not offer, more vGPUs than any type allows, and
        # more than this type allows (which only the agent knows).
        for layout, allowed in [
                ({'mdev_type': 'nvidia-999', 'mdev_count': 1},
                 'nvidia-222, nvidia-223, nvidia-230'),
                ({'mdev_type': VGPU_TYPE, 'mdev_count': 17},
                 'from 0 to 16'),
                ({'mdev_type': VGPU_TYPE, 'mdev_count': 9},
                 f'above the 8 vGPUs of type {VGPU_TYPE}')]:
            answer = _put_layout(stack, device, layout)
            assert answer.status_code == 400, answer.text
            assert allowed in answer.text
        shown = requests.get(f'{api}/devices/{device}', headers=HEADERS,
                             timeout=10).json()
        assert (shown['layout'], shown['layout_state']) == (
            {'mdev_type': VGPU_TYPE, 'mdev_count': 4}, 'applied')
        assert placement.offered(root) == [vgpus]

        # An instance is bound one vGPU: its mdev is created on the T4.
        stack.create_profile('t4-2b', {'resources:VGPU': '1',
                                       f'trait:{VGPU_TRAIT}': 'required'})
        [rp] = placement.tree(root)
        instance, arq = stack.bind_new('t4-2b', NODE, rp)
        bound_arq = stack.wait_bound(arq)
        assert bound_arq['attach_handle_type'] == 'MDEV'
        assert bound_arq['attach_handle_info']['asked_type'] == VGPU_TYPE
        mdevs = tree.device_dir(T4) / 'mdev_supported_types' / VGPU_TYPE / (
            'devices')
        assert pci_lifecycle.wait_for(lambda: len(list(mdevs.iterdir())) == 1)

        # While it holds the vGPU the layout stays: a 409 naming it.
        answer = _put_layout(stack, device,
                             {'mdev_type': VGPU_TYPE, 'mdev_count': 0})
        assert answer.status_code == 409, answer.text
        assert arq in answer.text

        # Deleted, its mdev removed: the T4 goes back whole.
        stack.delete_instance(instance)
        assert pci_lifecycle.wait_for(lambda: not list(mdevs.iterdir()))
        stack.wait_free(NODE)
        stack.openstack('device', 'layout', 'set', device, '--mdev-type',
                        VGPU_TYPE, '--mdev-count', '0')
        assert placement.offered(root) == [whole]
        shown = requests.get(f'{api}/devices/{device}', headers=HEADERS,
                             timeout=10).json()
        assert (shown['layout'], shown['layout_state']) == (
            {'mdev_type': VGPU_TYPE, 'mdev_count': 0}, 'applied')
        assert [e['event'] for e in sysfs_kernel.read_log(tree.root)] == [
            'mdev_create', 'mdev_remove']
