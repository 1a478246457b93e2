"""Cleaning after use, end to end, every service a process.

Placement, cyborg-api, a conductor and two agents (the fake driver with
``clean_after_use``; the second one's cleans fail) run as processes on
real RabbitMQ and on each database. An instance on each host is bound one
FPGA through HTTP, as Nova binds it, and deleted. On the first host the
handle is cleaned by the agent and offered again; on the second the
failed clean holds it in maintenance, reserved in placement, until the
operator releases it with ``openstack accelerator attach handle release``.
"""

import pytest
import requests

from cyborg.accelerator.drivers import fake
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server

NODES = {'agent1': 'clean-node-1', 'agent2': 'clean-node-2'}
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_handle_cleaned_after_delete_or_held(tmp_path, rabbit_url,
                                             db_engine, empty_db_url,
                                             fake_nova):
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    clean_log = tmp_path / 'cleans.log'
    stack.add_placement()
    stack.add_api()
    stack.add_conductor('conductor1')
    for host, node in NODES.items():
        stack.add_agent(host, node, 1, 2, extra={'fake_driver': {
            'clean_after_use': 'true', 'clean_log': str(clean_log),
            'clean_fail': str(host == 'agent2').lower()}})
    placement = placement_server.Placement(stack.placement_url)
    api = stack.api_url
    with stack.running():
        roots = stack.bring_up(placement, NODES)
        gate_stack.wait_for(
            lambda: all(placement.tree(r) for r in roots.values()),
            'both hosts in placement', 60, interval=0.5)
        answer = requests.post(f'{api}/device_profiles', headers=HEADERS,
                               timeout=30, json=[{
                                   'name': 'clean-fpga',
                                   'groups': [{
                                       'resources:FPGA': '1',
                                       'accel:clean_after_use': 'true'}]}])
        assert answer.status_code == 201, answer.text

        for node, root in roots.items():
            (rp,) = placement.tree(root)
            instance, _ = stack.bind_new('clean-fpga', node, rp)
            assert [h['in_use'] for h in stack.attach_handles(node)].count(
                True) == 1
            answer = requests.delete(
                f'{api}/accelerator_requests?instance={instance}',
                headers=HEADERS, timeout=30)
            assert answer.status_code == 204, answer.text

        good, bad = NODES.values()
        # Cleaned by the first agent: free again, nothing reserved.
        gate_stack.wait_for(
            lambda: not any(h['in_use'] for h in stack.attach_handles(good)),
            'the cleaned handle to be free', 30, interval=0.5)
        assert placement.reserved(roots[good]) == 0
        cleaned = fake.read_program_log(str(clean_log))
        assert any(c.get('error') is None for c in cleaned)
        # The failed clean: in maintenance, with why, and reserved.
        held = gate_stack.wait_for(
            lambda: [h for h in stack.attach_handles(bad)
                     if h['clean_state'] == 'maintenance'],
            'the failed clean held in maintenance', 30, interval=0.5)[0]
        assert held['clean_reason']
        gate_stack.wait_for(
            lambda: placement.reserved(roots[bad]) == 1,
            'placement to reserve the held handle', 10, interval=0.2)

        stack.openstack('attach', 'handle', 'release', held['uuid'])
        assert not any(h['in_use'] for h in stack.attach_handles(bad))
        gate_stack.wait_for(
            lambda: placement.reserved(roots[bad]) == 0,
            'placement to offer the released handle', 10, interval=0.2)
