"""A ConnectX-6 Dx port from whole to two VFs in switchdev mode, a VF bound,
released and reset, every service a process.

Placement, cyborg-api, a conductor and an agent with the ``nvidia_nic``
driver (``clean_after_use`` on) run as processes on real RabbitMQ; the
agent's sysfs is a fixture tree whose writes an emulated kernel, another
process, follows (``cyborg.tests.harness.sysfs_kernel``), and its
devlink the emulated one (``cyborg.tests.harness.devlink``). The port is
discovered and offered whole; a layout of 2 VFs in switchdev mode
(``openstack accelerator device layout set``) offers the VFs, each with
the port's physical network; an instance is bound a VF through the API as
Nova binds it, a layout change meanwhile is a 409 naming its request, and
once deleted the VF is reset (FLR) before it is offered again. A mode
change mlx5_core refuses (offloaded flows) is a 409 with the kernel's
words, and the port goes back to legacy once it may.
"""
import json

import pytest
import requests

from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.tests.harness import devlink
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'mlx5-node'
PORT = '0000:3b:00.0'
VFS = ['0000:3b:10.0', '0000:3b:10.1']
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}
PORT_TRAITS = {'OWNER_CYBORG', 'CUSTOM_NIC_NVIDIA_CONNECTX6_DX',
               'CUSTOM_PHYSNET1'}



def _put_layout(stack, device, layout):
    return requests.put(f'{stack.api_url}/devices/{device}/layout',
                        headers=HEADERS, json=layout, timeout=120)


def _layout(stack, device):
    shown = requests.get(f'{stack.api_url}/devices/{device}',
                         headers=HEADERS, timeout=10).json()
    return shown['layout'], shown['layout_state']


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
def test_connectx_vfs_switchdev_bind_and_clean(tmp_path, rabbit_url,
                                               db_engine, empty_db_url,
                                               fake_nova):
    tree = SysfsTree(tmp_path / 'host')
    devlink.add_mlx5_nic(tree, PORT, interface='ens1f0', sriov_totalvfs=4)
    program = devlink.install(tmp_path / 'bin', tree.root)
    with gate_stack.emulated_host(
            tmp_path, rabbit_url, empty_db_url, fake_nova, NODE, tree.root,
            {
            'agent': {'enabled_drivers': 'nvidia_nic'},
            'nvidia_nic_devices': {
                'devlink_command': program,
                'physical_device_mappings': 'physnet1:ens1f0',
                'clean_after_use': 'true'}}
    ) as (stack, placement, root):
        api = stack.api_url

        device = stack.first_device(NODE, 'the ConnectX port')['uuid']
        whole = [(f'{NODE}_{PORT}', {'CUSTOM_NIC': (1, 0)},
                  {*PORT_TRAITS, 'CUSTOM_PF'})]
        gate_stack.wait_for(lambda: placement.offered(root) == whole,
                            'placement offering the port', 30, interval=0.5)

        shown = json.loads(stack.openstack('device', 'layout', 'show',
                                           device, '-f', 'json'))
        # The table's cells are JSON text.
        assert json.loads(shown['options']) == {
            'vf_count': {'min': 0, 'max': 4},
            'eswitch_mode': {'legacy': 1, 'switchdev': 1}}

        # Two VFs in switchdev mode: when the command returns, placement
        # offers the VFs with the port's physical network, the port no
        # longer, and each VF has its representor.
        stack.openstack('device', 'layout', 'set', device, '--vf-count',
                        '2', '--eswitch-mode', 'switchdev')
        vfs = [(f'{NODE}_{vf}', {'CUSTOM_NIC': (1, 0)},
                {*PORT_TRAITS, 'CUSTOM_VF'}) for vf in VFS]
        assert placement.offered(root) == vfs
        assert devlink.eswitch_mode(tree.root, PORT) == 'switchdev'
        assert sorted(
            (p / 'phys_port_name').read_text().strip()
            for p in (tree.device_dir(PORT) / 'net').iterdir()
            if (p / 'phys_port_name').exists()) == ['pf0vf0', 'pf0vf1']
        assert _layout(stack, device) == (
            {'vf_count': 2, 'eswitch_mode': 'switchdev'}, 'applied')

        # An instance is bound a VF on physnet1, as Nova binds it.
        answer = requests.post(f'{api}/device_profiles', headers=HEADERS,
                               timeout=30, json=[{
                                   'name': 'physnet1-vf',
                                   'groups': [{
                                       'resources:CUSTOM_NIC': '1',
                                       'trait:CUSTOM_VF': 'required',
                                       'trait:CUSTOM_PHYSNET1':
                                           'required'}]}])
        assert answer.status_code == 201, answer.text
        rp = next(uuid for uuid, found in placement.tree(root).items()
                  if found['name'] == f'{NODE}_{VFS[1]}')
        instance, arq = stack.bind_new('physnet1-vf', NODE, rp)

        bound_arq = stack.wait_bound(arq)
        assert bound_arq['attach_handle_type'] == 'PCI'
        assert bound_arq['attach_handle_info'] == {
            'domain': '0000', 'bus': '3b', 'device': '10', 'function': '1',
            'physical_network': 'physnet1'}

        # While it holds the VF the layout stays: a 409 naming it.
        answer = _put_layout(stack, device, {'eswitch_mode': 'legacy'})
        assert answer.status_code == 409, answer.text
        assert arq in answer.text

        # Deleted: the VF is reset, then offered again.
        stack.delete_instance(instance)
        assert pci_lifecycle.wait_for(
            lambda: [e['device'] for e in sysfs_kernel.read_log(tree.root)
                     if e['event'] == 'reset'] == [VFS[1]], timeout=30)
        stack.wait_free(NODE)
        gate_stack.wait_for(lambda: placement.offered(root) == vfs,
                            'placement offering both VFs again', 30,
                            interval=0.5)

        # Flows offloaded on the eswitch: mlx5_core refuses the change,
        # and the operator reads why.
        devlink.write_state(tree.root, PORT, dict(
            devlink.read_state(tree.root, PORT), offloaded_flows=1))
        answer = _put_layout(stack, device,
                             {'vf_count': 0, 'eswitch_mode': 'legacy'})
        assert answer.status_code == 409, answer.text
        assert "Can't change mode, E-Switch is busy" in answer.text
        assert 'Device or resource busy' in answer.text
        # Refused before the VF count changed: the port is as it was.
        assert devlink.eswitch_mode(tree.root, PORT) == 'switchdev'
        assert len(list(tree.device_dir(PORT).glob('virtfn*'))) == 2
        assert _layout(stack, device)[1] == 'failed'

        # The flows gone, the same layout gives the port back whole.
        devlink.write_state(tree.root, PORT, dict(
            devlink.read_state(tree.root, PORT), offloaded_flows=0))
        answer = _put_layout(stack, device,
                             {'vf_count': 0, 'eswitch_mode': 'legacy'})
        assert answer.status_code == 200, answer.text
        assert devlink.eswitch_mode(tree.root, PORT) == 'legacy'
        assert placement.offered(root) == whole
        assert [p.name for p in (tree.device_dir(PORT) / 'net').iterdir()
                ] == ['ens1f0']
        sets = [e for e in devlink.read_log(tree.root)
                if e['argv'][:3] == ['dev', 'eswitch', 'set']]
        assert [(e['argv'][-1], 'error' in e) for e in sets] == [
            ('switchdev', False), ('legacy', True), ('legacy', False)]
