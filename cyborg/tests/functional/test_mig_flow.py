"""An H100 split by MIG and lent as MIG-backed vGPUs through the API,
every service a process.

Placement, cyborg-api, a conductor and an agent with the ``nvidia_gpu``
driver run as processes on real RabbitMQ. The agent's sysfs is a fixture
tree of an H100 SXM5 on the ``nvidia`` driver whose VFs list the
time-sliced types and a MIG-backed one, ``NVIDIA H100XM-3-40C``; an
emulated kernel and vGPU manager, another process, follow its writes
(``harness/sysfs_kernel.py``, ``harness/nvidia_vgpu_host.py``). Its NVML
is the double (``harness/nvml_double.py``) over ``<sysfs root>/nvml.json``,
loaded through the shim (cyborg/tests/README), so the test reads the
GPU instances the agent made. The MIG-backed type is offered only as
many times as the partition has ``3g.40gb`` instances: none with MIG
disabled, two once the GPU is split into two. One is bound (its VF
given the type); the partition cannot change under it; deleting the
instance takes the type back. A partition NVML's placements cannot hold
is refused with nothing changed.
"""
import pytest
import requests

from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import nvidia_vgpu_host
from cyborg.tests.harness import nvml_double
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'mig-node'
H100 = '0000:3b:00.0'
HEADERS = gate_stack.API_HEADERS
# A MIG-backed C-series type of the H100 SXM5 on vGPU 17: one vGPU per
# 3g.40gb GPU instance (NVIDIA vGPU user guide, "Virtual GPU Types for
# Supported GPUs", NVIDIA H100 SXM5 80GB, MIG-backed types).
TYPE_3_40C = ('1062', 'NVIDIA H100XM-3-40C', 40)
TRAIT_3_40C = 'CUSTOM_NVIDIA_2330_H100XM_3_40C'
PARTITION = ['3g.40gb', '3g.40gb']
# NVML_GPU_INSTANCE_PROFILE_3_SLICE of an H100 80GB (nvidia-smi mig
# -lgip), placed at memory slices 0 and 4 (-lgipp).
PROFILE_3G = 9


def _instances(nvml_state):
    """(profile id, first memory slice) of the GPU's GPU instances."""
    found = nvml_double.read_state(nvml_state)['gpus'][H100]
    return sorted((i['profile'], i['start']) for i in found['instances'])


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_h100_mig_backed_vgpus_through_the_api(tmp_path, rabbit_url,
                                               db_engine, empty_db_url,
                                               fake_nova):
    tree = SysfsTree(tmp_path / 'host')
    nvidia_vgpu_host.add_gpu(tree, H100, types=(
        *nvidia_vgpu_host.H100_TYPES, TYPE_3_40C))
    nvml_state = f'{tree.root}/nvml.json'
    nvml_double.write_state(nvml_state,
                            {H100: nvml_double.gpu('H100-80GB')})
    with gate_stack.emulated_host(
            tmp_path, rabbit_url, empty_db_url, fake_nova, NODE, tree.root,
            {'agent': {'enabled_drivers': 'nvidia_gpu'}},
            env={'PYTHONPATH': nvml_double.SHIM_DIR,
                 nvml_double.ENV: nvml_state}
    ) as (stack, placement, root):
        api = stack.api_url
        device = stack.first_device(NODE, 'the H100')['uuid']
        provider = f'{NODE}_{H100}'
        gate_stack.wait_for(
            lambda: placement.inventory_below(root) == [
                (provider, 'PGPU', 1, 0)],
            'placement offering the whole H100', 30, interval=0.5)

        def put(layout):
            return requests.put(f'{api}/devices/{device}/layout',
                                headers=HEADERS, timeout=60, json=layout)

        def options():
            return requests.get(f'{api}/devices/{device}/layout',
                                headers=HEADERS,
                                timeout=30).json()['options']

        # The VFs list the MIG-backed type, but with MIG disabled no GPU
        # instance provides it: offered 0 times.
        answer = put({'vf_count': 16})
        assert answer.status_code == 200, answer.text
        offered = options()
        assert offered['vgpu_type'][TYPE_3_40C[0]] == 0
        assert offered['vgpu_type']['1010'] == 4
        assert offered['mig_mode'] == {'enabled': 1, 'disabled': 1}
        # NVML reads the profiles only with MIG enabled: until then the
        # partition is offered beside the mode that turns MIG on, and
        # checked once it is on.
        assert offered['mig_partition'] == {'after': ['mig_mode']}
        answer = put({'vf_count': 16, 'mig_partition': PARTITION})
        assert answer.status_code == 400, answer.text
        assert 'once mig_mode is applied' in answer.text
        answer = put({'vf_count': 16, 'mig_mode': 'enabled',
                      'mig_partition': PARTITION})
        assert answer.status_code == 200, answer.text
        assert options()['mig_partition']['profiles']['3g.40gb'] == 2
        assert _instances(nvml_state) == [(PROFILE_3G, 0), (PROFILE_3G, 4)]
        assert options()['vgpu_type'][TYPE_3_40C[0]] == 2
        assert placement.inventory_below(root) == []

        # A set each profile of which the GPU offers, but whose GPU
        # instances NVML cannot place side by side (a 7g.80gb takes all
        # 8 memory slices): refused by the agent before anything
        # changed; the layout stays the one applied.
        answer = put({'vf_count': 16, 'mig_mode': 'enabled',
                      'mig_partition': ['7g.80gb', '1g.10gb']})
        assert answer.status_code == 400, answer.text
        assert 'does not fit' in answer.text
        assert "'7g.80gb'" in answer.text
        assert _instances(nvml_state) == [(PROFILE_3G, 0), (PROFILE_3G, 4)]
        shown = requests.get(f'{api}/devices/{device}/layout',
                             headers=HEADERS, timeout=30).json()
        assert shown['layout']['mig_partition'] == PARTITION

        # The MIG-backed type, with the partition it lives on: placement
        # offers a vGPU per 3g.40gb instance.
        layout = {'vf_count': 16, 'mig_mode': 'enabled',
                  'mig_partition': PARTITION,
                  'vgpu_type': TYPE_3_40C[0], 'vgpu_count': 2}
        answer = put(layout)
        assert answer.status_code == 200, answer.text
        assert placement.inventory_below(root) == [(provider, 'VGPU', 2, 0)]
        [rp_uuid] = placement.tree(root)
        assert TRAIT_3_40C in placement.traits(rp_uuid)

        # An instance is bound one vGPU: its VF gets the type.
        answer = requests.post(f'{api}/device_profiles', headers=HEADERS,
                               timeout=30, json=[{
                                   'name': 'h100-3-40c',
                                   'groups': [{'resources:VGPU': '1',
                                               f'trait:{TRAIT_3_40C}':
                                                   'required'}]}])
        assert answer.status_code == 201, answer.text
        instance, arq = stack.bind_new('h100-3-40c', NODE, rp_uuid)

        bound_arq = stack.wait_bound(arq)
        info = bound_arq['attach_handle_info']
        assert (info['vgpu_type'], info['managed'], info['vfio_driver'],
                info['bus'], info['device'], info['function']) == (
            TYPE_3_40C[0], 'false', 'nvidia', '3b', '10', '0')
        assert nvidia_vgpu_host.current(tree, H100, 0) == f'{TYPE_3_40C[0]}\n'

        # While it holds a vGPU the partition stays.
        answer = put({'vf_count': 16, 'mig_mode': 'enabled',
                      'mig_partition': ['7g.80gb']})
        assert answer.status_code == 409, answer.text
        assert arq in answer.text
        assert _instances(nvml_state) == [(PROFILE_3G, 0), (PROFILE_3G, 4)]

        # Deleted: the VF's type is taken back and the handle is free;
        # the partition is as it was.
        stack.delete_instance(instance)
        assert pci_lifecycle.wait_for(
            lambda: nvidia_vgpu_host.current(tree, H100, 0) == '0\n')
        stack.wait_free(NODE)
        assert [(e['event'], e.get('type')) for e in
                sysfs_kernel.read_log(tree.root)
                if e['event'] == 'vgpu_type'] == [
            ('vgpu_type', TYPE_3_40C[0]), ('vgpu_type', '0')]
        assert _instances(nvml_state) == [(PROFILE_3G, 0), (PROFILE_3G, 4)]
        assert nvml_double.read_state(nvml_state)['gpus'][H100][
            'resets'] == 0
