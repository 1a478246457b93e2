"""A device layout, end to end, with every service a process.

Placement, cyborg-api, a conductor and an agent (fake driver with one
GPU of 4 vGPUs) run as processes on real RabbitMQ and on each database.
Over HTTP at 2.8: the GPU is set to 2 vGPUs and placement's inventory
follows before the answer; the agent restarts (its driver forgets, as a
reboot loses mdevs) and applies the kept layout again before reporting,
so placement stays at 2; with the agent down a change is a 503 and nothing
is written; cleared and set back to 4, placement follows again.
"""
import pytest
import requests
import sqlalchemy as sa

from cyborg.accelerator.drivers import fake
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server

NODE = 'layout-node'
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}


def _inventory(placement, rp):
    inventories = placement.inventories(rp)
    assert len(inventories) == 1, inventories
    inventory = next(iter(inventories.values()))
    return inventory['total'], inventory['reserved']


def _published(placement, rp):
    """The inventory once the conductor has written the provider."""
    try:
        return _inventory(placement, rp)
    except AssertionError:
        return None


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_vgpu_layout_through_the_api_and_a_restart(
        tmp_path, rabbit_url, db_engine, empty_db_url, fake_nova):
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    stack.add_placement()
    stack.add_api()
    stack.add_conductor('conductor1',
                        extra={'conductor': {'bind_timeout': 20}})
    stack.add_agent('agent1', NODE, 1, 4, extra={
        'fake_driver': {'vgpu_device_count': 1, 'vgpus_per_device': 4}})
    placement = placement_server.Placement(stack.placement_url)
    api = stack.api_url
    with stack.running():
        stack.bring_up(placement, {'agent1': NODE})

        device = stack.first_device(NODE, 'the GPU', '&type=GPU')
        uuid = device['uuid']
        # The GPU's provider; the API shows no link to it.
        with db_engine.connect() as connection:
            rp = connection.execute(sa.text(
                'SELECT deployables.rp_uuid FROM deployables JOIN devices '
                'ON deployables.device_id = devices.id '
                'WHERE devices.uuid = :uuid'), {'uuid': uuid}).scalar_one()
        gate_stack.wait_for(lambda: _published(placement, rp) == (4, 0),
                            'placement offering 4 vGPUs', 30, interval=0.5)

        layout = requests.get(f'{api}/devices/{uuid}/layout',
                              headers=HEADERS, timeout=30).json()
        assert layout['options'] == {
            'mdev_type': {fake.VGPU_TYPE: 4},
            'mdev_count': {'min': 0, 'max': 4}}
        answer = requests.put(
            f'{api}/devices/{uuid}/layout', headers=HEADERS, timeout=60,
            json={'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2})
        assert answer.status_code == 200, answer.text
        assert answer.json()['layout_state'] == 'applied'
        # Before the answer: the new inventory, no longer reserved.
        assert _inventory(placement, rp) == (2, 0)

        # A refused value lists what is allowed and writes nothing.
        answer = requests.put(
            f'{api}/devices/{uuid}/layout', headers=HEADERS, timeout=60,
            json={'mdev_type': 'nvidia-999', 'mdev_count': 2})
        assert answer.status_code == 400
        assert fake.VGPU_TYPE in answer.text

        # The agent restarts: its driver offers 4 again until the agent
        # applies the kept layout, which it does before its first report.
        stack.stop('agent1')
        stack.start('agent1')
        stack.ready('agent1')
        gate_stack.wait_for(
            lambda: 'again on' in stack.processes['agent1'].log(),
            'the agent to apply the layout again', 30, interval=0.5)
        assert _inventory(placement, rp) == (2, 0)

        # The agent down: a 503 and nothing written.
        stack.stop('agent1')
        answer = requests.put(
            f'{api}/devices/{uuid}/layout', headers=HEADERS, timeout=120,
            json={'mdev_type': fake.VGPU_TYPE, 'mdev_count': 4})
        assert answer.status_code == 503, answer.text
        shown = requests.get(f'{api}/devices/{uuid}', headers=HEADERS,
                             timeout=10).json()
        assert (shown['layout']['mdev_count'], shown['layout_state']) == (
            2, 'applied')
        assert _inventory(placement, rp) == (2, 0)

        stack.start('agent1')
        stack.ready('agent1')
        answer = requests.delete(f'{api}/devices/{uuid}/layout',
                                 headers=HEADERS, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()['layout'] is None
        answer = requests.put(
            f'{api}/devices/{uuid}/layout', headers=HEADERS, timeout=60,
            json={'mdev_type': fake.VGPU_TYPE, 'mdev_count': 4})
        assert answer.status_code == 200, answer.text
        assert _inventory(placement, rp) == (4, 0)

