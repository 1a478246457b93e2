"""An H100 on vGPU software 17: VFs enabled and a vGPU type chosen through
the API, a VF bound and released, every service a process.

Placement, cyborg-api, a conductor and an agent with the ``nvidia_gpu``
driver run as processes on real RabbitMQ; the agent's sysfs is a fixture
tree of an H100 SXM5 on the ``nvidia`` driver, and an emulated kernel and
vGPU manager, another process, follow its writes (``sriov_numvfs``,
``current_vgpu_type``: ``harness/sysfs_kernel.py`` and
``harness/nvidia_vgpu_host.py``). One layout enables 16 VFs and gives
the GPU 4 vGPUs of 20 GB (the type is checked once the VFs list theirs);
an instance is bound one (its VF given the type), and deleting it takes
the type back.
"""

import pytest
import requests

from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import nvidia_vgpu_host
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'h100-node'
H100 = '0000:3b:00.0'
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}
TYPE_20C = '1010'
TRAIT_20C = 'CUSTOM_NVIDIA_2330_H100XM_20C'


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_h100_vgpus_on_vfs_through_the_api(tmp_path, rabbit_url,
                                           db_engine, empty_db_url,
                                           fake_nova):
    tree = SysfsTree(tmp_path / 'host')
    nvidia_vgpu_host.add_gpu(tree, H100)
    with gate_stack.emulated_host(
            tmp_path, rabbit_url, empty_db_url, fake_nova, NODE, tree.root,
            {'agent': {'enabled_drivers': 'nvidia_gpu'}}
    ) as (stack, placement, root):
        api = stack.api_url
        device = stack.first_device(NODE, 'the H100')['uuid']
        provider = f'{NODE}_{H100}'
        gate_stack.wait_for(
            lambda: placement.inventory_below(root) == [
                (provider, 'PGPU', 1, 0)],
            'placement offering the whole H100', 30, interval=0.5)

        # The VFs and a type in one layout (the type is checked once the
        # VFs list theirs): when the answer comes, placement offers 4
        # vGPUs of it on the GPU's provider, and no longer the PGPU.
        answer = requests.put(
            f'{api}/devices/{device}/layout', headers=HEADERS, timeout=60,
            json={'vf_count': 16, 'vgpu_type': TYPE_20C, 'vgpu_count': 4})
        assert answer.status_code == 200, answer.text
        assert placement.inventory_below(root) == [(provider, 'VGPU', 4, 0)]
        [rp_uuid] = placement.tree(root)
        assert TRAIT_20C in placement.traits(rp_uuid)
        options = requests.get(f'{api}/devices/{device}/layout',
                               headers=HEADERS, timeout=30).json()['options']
        assert options['vgpu_type'] == {'1008': 8, '1009': 5, '1010': 4,
                                        '1011': 2, '1012': 1}

        # An instance is bound one vGPU: its VF gets the type.
        stack.create_profile('h100-20c', {'resources:VGPU': '1',
                                          f'trait:{TRAIT_20C}': 'required'})
        instance, arq = stack.bind_new('h100-20c', NODE, rp_uuid)
        bound_arq = stack.wait_bound(arq)
        info = bound_arq['attach_handle_info']
        assert bound_arq['attach_handle_type'] == 'PCI'
        assert (info['vgpu_type'], info['managed'], info['vfio_driver'],
                info['bus'], info['device'], info['function']) == (
            TYPE_20C, 'false', 'nvidia', '3b', '10', '0')
        assert nvidia_vgpu_host.current(tree, H100, 0) == f'{TYPE_20C}\n'

        # While it holds the vGPU the layout stays.
        answer = requests.put(
            f'{api}/devices/{device}/layout', headers=HEADERS, timeout=60,
            json={'vf_count': 16, 'vgpu_type': TYPE_20C, 'vgpu_count': 2})
        assert answer.status_code == 409, answer.text
        assert arq in answer.text

        # Deleted: the VF's type is taken back and the handle is free.
        stack.delete_instance(instance)
        assert pci_lifecycle.wait_for(
            lambda: nvidia_vgpu_host.current(tree, H100, 0) == '0\n')
        stack.wait_free(NODE)
        assert [(e['event'], e.get('type')) for e in
                sysfs_kernel.read_log(tree.root)
                if e['event'] == 'vgpu_type'] == [
            ('vgpu_type', TYPE_20C), ('vgpu_type', '0')]
