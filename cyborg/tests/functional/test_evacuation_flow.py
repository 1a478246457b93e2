"""Evacuation from a lost host, end to end, every service a process.

Placement, cyborg-api, a conductor and two agents (the fake driver with
one vGPU each) run as processes on real RabbitMQ. An instance is bound a
vGPU on host A through HTTP, as Nova binds it; host A's agent is killed
(SIGKILL); Nova's evacuation deletes the instance's requests, which
answers without waiting for host A, and binds new ones on host B. Host A's
handle stays taken and reserved in placement until its agent starts again
and removes the mdev, and is offered again then.
"""

import pytest
import requests

from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server

NODES = {'agent-a': 'evac-node-a', 'agent-b': 'evac-node-b'}
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}


def _state(api, arq):
    return requests.get(f'{api}/accelerator_requests/{arq}',
                        headers=HEADERS, timeout=10).json()['state']


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_evacuation_from_a_killed_host(tmp_path, rabbit_url, db_engine,
                                       empty_db_url, fake_nova):
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    stack.add_placement()
    stack.add_api()
    # A worker asking host A before its service is known down gives up
    # after this.
    stack.add_conductor('conductor1', extra={
        'conductor': {'bind_timeout': 5}})
    for host, node in NODES.items():
        stack.add_agent(host, node, 0, 1, extra={'fake_driver': {
            'vgpu_device_count': 1, 'vgpus_per_device': 1}})
    placement = placement_server.Placement(stack.placement_url)
    api = stack.api_url
    a, b = NODES.values()
    with stack.running():
        roots = stack.bring_up(placement, NODES)
        gate_stack.wait_for(
            lambda: all(placement.tree(r) for r in roots.values()),
            'both hosts in placement', 60, interval=0.5)
        rps = {node: next(iter(placement.tree(root)))
               for node, root in roots.items()}
        answer = requests.post(f'{api}/device_profiles', headers=HEADERS,
                               timeout=30, json=[{
                                   'name': 'evac-vgpu',
                                   'groups': [{'resources:VGPU': '1'}]}])
        assert answer.status_code == 201, answer.text

        instance, arq = stack.bind_new('evac-vgpu', a, rps[a])
        gate_stack.wait_for(lambda: _state(api, arq) == 'Bound',
                            'the vGPU bound on host A', 30, interval=0.5)
        [taken] = stack.attach_handles(a)
        assert taken['in_use']

        stack.processes['agent-a'].kill()
        # Nova evacuates: it deletes the instance's requests...
        stack.delete_instance(instance)
        answer = requests.get(f'{api}/accelerator_requests/{arq}',
                              headers=HEADERS, timeout=10)
        assert answer.status_code == 404
        # ... and binds new ones on host B, which work.
        _, moved = stack.bind_new('evac-vgpu', b, rps[b])
        gate_stack.wait_for(lambda: _state(api, moved) == 'Bound',
                            'the vGPU bound on host B', 30, interval=0.5)
        # Host A's vGPU may still exist: not offered, not bindable.
        [held] = stack.attach_handles(a)
        assert held['in_use']
        assert placement.reserved(roots[a]) == 1
        _, refused = stack.bind_new('evac-vgpu', a, rps[a], status=409)
        assert _state(api, refused) == 'Initial'
        answer = requests.delete(
            f'{api}/accelerator_requests?arqs={refused}', headers=HEADERS,
            timeout=30)
        assert answer.status_code == 204, answer.text

        # Host A's agent starts again: it removes the mdev, and the
        # handle is back in service.
        stack.start('agent-a')
        stack.ready('agent-a')
        gate_stack.wait_for(
            lambda: not any(h['in_use'] for h in stack.attach_handles(a)),
            'host A\'s handle to be free', 60, interval=0.5)
        gate_stack.wait_for(
            lambda: placement.reserved(roots[a]) == 0,
            'placement to offer host A\'s handle', 30, interval=0.5)
        _, again = stack.bind_new('evac-vgpu', a, rps[a])
        gate_stack.wait_for(lambda: _state(api, again) == 'Bound',
                            'the vGPU bound on host A again', 30,
                            interval=0.5)
