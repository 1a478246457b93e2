"""An AMD Instinct and an Intel Battlemage GPU from discovery to a bound,
released and cleaned VF each, every service a process.

Placement, cyborg-api, a conductor and an agent with the ``amd_gpu`` and
``intel_gpu`` drivers (``clean_after_use`` in both groups) run as
processes on real RabbitMQ; the agent's sysfs is a fixture tree whose
writes an emulated kernel, another process, follows
(``cyborg.tests.harness.sysfs_kernel``). The MI300X comes with the one VF
GIM enabled at load, so placement offers it as one VGPU; the Intel GPU
(xe as SR-IOV PF, max_vfs=2) is one PGPU until the operator sets two VFs
with ``openstack accelerator device layout set``. A VF of each is then
bound to an instance through the API, as Nova binds, and released: the
emulated kernel logs the function-level reset of exactly that VF.
"""
import json

import pytest
import requests

from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'gpu-node'
MI300X = '0000:15:00.0'
MI300X_VF = '0000:15:02.0'
B60 = '0000:4d:00.0'
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}


def _gpu_providers(placement, root):
    """{vendor trait: (provider uuid, resource class, total)}."""
    found = {}
    for rp in placement.tree(root):
        traits = placement.traits(rp)
        for trait in ('CUSTOM_GPU_AMD', 'CUSTOM_GPU_INTEL'):
            if trait in traits:
                [(rc, inventory)] = placement.inventories(rp).items()
                found[trait] = (rp, rc, inventory['total'])
    return found


def _address(handle):
    info = handle['attach_info']
    info = json.loads(info) if isinstance(info, str) else info
    return '{domain}:{bus}:{device}.{function}'.format(**info)


def _resets(root):
    return [e['device'] for e in sysfs_kernel.read_log(root)
            if e['event'] == 'reset']


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
def test_amd_and_intel_vfs_bound_released_and_cleaned(
        tmp_path, rabbit_url, db_engine, empty_db_url, fake_nova):
    tree = SysfsTree(tmp_path / 'host')
    tree.add_amd_instinct(MI300X, driver='gim', vfs=[MI300X_VF],
                          vf_driver='vfio-pci')
    tree.add_intel_gpu(B60, device=0xe211, class_code=0x030000,
                       sriov_totalvfs=2)
    with gate_stack.emulated_host(
            tmp_path, rabbit_url, empty_db_url, fake_nova, NODE, tree.root,
            {
            'agent': {'enabled_drivers': 'amd_gpu,intel_gpu'},
            'amd_gpu_devices': {'clean_after_use': 'true'},
            'intel_gpu_devices': {'clean_after_use': 'true'}}
    ) as (stack, placement, root):
        offered = gate_stack.wait_for(
            lambda: (lambda p: p if len(p) == 2 else None)(
                _gpu_providers(placement, root)),
            'both GPUs in placement', 60, interval=0.5)
        assert offered['CUSTOM_GPU_AMD'][1:] == ('VGPU', 1)
        assert offered['CUSTOM_GPU_INTEL'][1:] == ('PGPU', 1)

        stack.first_device(NODE, 'the GPUs')
        devices = requests.get(f'{stack.api_url}/devices?hostname={NODE}',
                               headers=HEADERS, timeout=10).json()
        [intel] = [d for d in devices['devices']
                   if d['vendor'] == '0x8086']
        [amd] = [d for d in devices['devices'] if d['vendor'] == '0x1002']
        # GIM sets the AMD GPU's VFs; xe's PF takes a VF count.
        shown = json.loads(stack.openstack(
            'device', 'layout', 'show', amd['uuid'], '-f', 'json'))
        assert json.loads(shown['options']) == {}
        shown = json.loads(stack.openstack(
            'device', 'layout', 'show', intel['uuid'], '-f', 'json'))
        assert json.loads(shown['options']) == {
            'vf_count': {'min': 0, 'max': 2}}
        stack.openstack('device', 'layout', 'set', intel['uuid'],
                        '--vf-count', '2')
        assert _gpu_providers(placement, root)['CUSTOM_GPU_INTEL'][1:] == (
            'VGPU', 2)
        assert len(list(tree.device_dir(B60).glob('virtfn*'))) == 2

        for vendor in ('AMD', 'INTEL'):
            answer = requests.post(
                f'{stack.api_url}/device_profiles', headers=HEADERS,
                timeout=30, json=[{'name': f'{vendor.lower()}-vf', 'groups': [
                    {'resources:VGPU': '1',
                     f'trait:CUSTOM_GPU_{vendor}': 'required'}]}])
            assert answer.status_code == 201, answer.text

        providers = _gpu_providers(placement, root)
        for vendor in ('AMD', 'INTEL'):
            rp = providers[f'CUSTOM_GPU_{vendor}'][0]
            instance, _ = stack.bind_new(f'{vendor.lower()}-vf', NODE, rp)
            [bound] = gate_stack.wait_for(
                lambda: [h for h in stack.attach_handles(NODE)
                         if h['in_use']] or None,
                f'the {vendor} VF bound', 30, interval=0.5)
            address = _address(bound)
            # A VF, never the GPU it belongs to.
            assert address not in (MI300X, B60)
            assert (address == MI300X_VF) == (vendor == 'AMD')
            answer = requests.delete(
                f'{stack.api_url}/accelerator_requests?instance={instance}',
                headers=HEADERS, timeout=30)
            assert answer.status_code == 204, answer.text
            gate_stack.wait_for(
                lambda address=address: address in _resets(tree.root),
                f'the FLR of {address}', 30, interval=0.5)
            stack.wait_free(NODE)
        assert sorted(_resets(tree.root)) == sorted(
            [MI300X_VF, address])
        assert placement.reserved(root) == 0
