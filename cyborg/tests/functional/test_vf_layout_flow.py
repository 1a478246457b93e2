"""An E810 from 0 to 8 VFs and back, through the CLI, every service a
process.

Placement, cyborg-api, a conductor and an agent with the ``intel_nic``
driver run as processes on real RabbitMQ and on each database; the
agent's sysfs is a fixture tree whose writes an emulated kernel, another
process, follows as the kernel does
(``cyborg.tests.harness.sysfs_kernel``). The
operator sets the NIC's VF count with ``openstack accelerator device
layout set``: when the command returns, placement offers the eight VFs and
no longer the PF, and back at 0 the PF alone again.
"""
import json

import pytest
import requests

from cyborg.tests.harness import gate_stack
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'vf-node'
E810 = '0000:3b:00.0'
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}


def _offered(placement, root):
    """(total, reserved) of every provider below the compute node."""
    return sorted(
        (inventory['total'], inventory['reserved'])
        for rp in placement.tree(root)
        for inventory in placement.inventories(rp).values())


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
def test_e810_vfs_through_the_cli(tmp_path, rabbit_url, db_engine,
                                  empty_db_url, fake_nova):
    tree = SysfsTree(tmp_path / 'host')
    tree.add_function(E810, 0x8086, 0x1593, 0x020000, driver='ice',
                      sriov_totalvfs=8)
    (tree.device_dir(E810) / 'sriov_vf_device').write_text('1889\n')
    with gate_stack.emulated_host(
            tmp_path, rabbit_url, empty_db_url, fake_nova, NODE, tree.root,
            {'agent': {'enabled_drivers': 'intel_nic'}},
            vf_drivers={'ice': 'iavf'}
    ) as (stack, placement, root):
        uuid = stack.first_device(NODE, 'the NIC')['uuid']
        gate_stack.wait_for(lambda: _offered(placement, root) == [(1, 0)],
                            'placement offering the PF', 30, interval=0.5)

        shown = json.loads(stack.openstack('device', 'layout', 'show', uuid,
                                           '-f', 'json'))
        # The table's cells are JSON text.
        assert json.loads(shown['options']) == {
            'vf_count': {'min': 0, 'max': 8}}

        stack.openstack('device', 'layout', 'set', uuid, '--vf-count', '8')
        # When the command returns: eight VFs offered, the PF gone.
        assert _offered(placement, root) == [(1, 0)] * 8
        assert len(list((tree.device_dir(E810)).glob('virtfn*'))) == 8
        shown = requests.get(f'{stack.api_url}/devices/{uuid}',
                             headers=HEADERS, timeout=10).json()
        assert (shown['layout'], shown['layout_state']) == (
            {'vf_count': 8}, 'applied')

        stack.openstack('device', 'layout', 'set', uuid, '--vf-count', '0')
        assert _offered(placement, root) == [(1, 0)]
        assert list(tree.device_dir(E810).glob('virtfn*')) == []
