"""A driver disabled and enabled again on one host, end to end.

Placement, cyborg-api, a conductor and an agent run as processes on real
RabbitMQ and on each database. Through the ``openstack`` command an
operator disables ``fake_driver`` on the agent's host: refused with the
request that holds a device named, then, once it is gone, the devices
stay with their uuids and an operator's health override, and their
providers stay in placement, reserved whole; the agent, restarted, keeps
the driver disabled; enabled again, the same devices and providers are
offered again, but the one an operator marked unhealthy.
"""
import json
import os
import subprocess
import sys

import pytest
import requests

from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server

NODE = 'driver-node'
HOST = 'agent1'
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'accelerator 2.8'}
INSTANCE = '5b0f3a4e-2c1d-4e6f-9a8b-7c6d5e4f3a2b'


def _openstack(stack, *args):
    """``openstack accelerator <args>``, with an admin token and no
    Keystone."""
    openstack = os.path.join(os.path.dirname(sys.executable), 'openstack')
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    return subprocess.run(
        [openstack, '--os-auth-type', 'admin_token', '--os-endpoint',
         stack.api_url, '--os-token', 'admin', 'accelerator', *args],
        env=env, capture_output=True, text=True, timeout=120)


def _api(stack, method, path, **kwargs):
    return requests.request(method, f'{stack.api_url}{path}',
                            headers=HEADERS, timeout=30, **kwargs)


def _devices(stack):
    return _api(stack, 'GET', f'/devices?hostname={NODE}').json()['devices']


def _identity(stack):
    """uuid -> health of each device of the node."""
    return {d['uuid']: (d['health'], d['health_source'])
            for d in _devices(stack)}


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_disable_and_enable_a_driver(tmp_path, rabbit_url, db_engine,
                                     empty_db_url, fake_nova):
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    stack.add_placement()
    stack.add_api()
    stack.add_conductor('conductor1')
    stack.add_agent(HOST, NODE, 2, 1)
    placement = placement_server.Placement(stack.placement_url)
    try:
        stack.start('placement', 'conductor1', 'api')
        gate_stack.wait_for(stack.placement_up, 'placement to answer', 60)
        root = placement.create_compute_node(NODE)['uuid']
        stack.ready('conductor1')
        stack.start(HOST)
        gate_stack.wait_for(stack.api_up, 'the API to answer', 60)
        gate_stack.wait_for(lambda: len(placement.tree(root)) == 2,
                            'two device providers in placement', 60,
                            interval=0.5)
        providers = set(placement.tree(root))

        # A request bound to one of the devices: the disable is refused,
        # naming it, and nothing changes.
        assert _api(stack, 'POST', '/device_profiles', json=[{
            'name': 'dp1',
            'groups': [{'resources:FPGA': '1'}]}]).status_code == 201
        [arq] = _api(stack, 'POST', '/accelerator_requests',
                     json={'device_profile_name': 'dp1'}).json()['arqs']
        assert _api(stack, 'PATCH', '/accelerator_requests', json={
            arq['uuid']: [
                {'path': '/hostname', 'op': 'add', 'value': NODE},
                {'path': '/device_rp_uuid', 'op': 'add',
                 'value': sorted(providers)[0]},
                {'path': '/instance_uuid', 'op': 'add',
                 'value': INSTANCE}]}).status_code == 202
        gate_stack.wait_for(
            lambda: _api(stack, 'GET', f'/accelerator_requests/'
                         f'{arq["uuid"]}').json()['state'] == 'Bound',
            'the request bound', 30)
        refused = _openstack(stack, 'host', 'driver', 'disable', HOST,
                             'fake_driver')
        assert refused.returncode == 1
        assert '409' in refused.stderr and arq['uuid'] in refused.stderr
        assert set(placement.tree(root)) == providers
        assert _api(stack, 'DELETE', f'/accelerator_requests?arqs='
                    f'{arq["uuid"]}').status_code == 204
        sick = _devices(stack)[0]['uuid']
        assert _api(stack, 'PUT', f'/devices/{sick}/health', json={
            'state': 'unhealthy', 'reason': 'fan failure'}).status_code == 200
        gate_stack.wait_for(lambda: placement.reserved(root) == 1,
                            'the unhealthy device reserved', 30)
        devices = _identity(stack)
        assert len(devices) == 2

        shown = _openstack(stack, 'host', 'driver', 'disable', HOST,
                           'fake_driver', '-f', 'json')
        assert shown.returncode == 0, shown.stderr
        change = json.loads(shown.stdout)
        assert (change['enabled'], change['state'], change['reported']) == (
            False, 'disabled', True)
        # The agent reported before the command returned: the devices
        # stay as they were, their providers reserved whole.
        assert _identity(stack) == devices
        gate_stack.wait_for(lambda: placement.reserved(root) == 2,
                            'the providers reserved in placement', 30)
        assert set(placement.tree(root)) == providers

        # Restarted, the agent keeps the operator's choice over its
        # config file (enabled_drivers = fake_driver).
        stack.stop(HOST)
        stack.start(HOST)
        stack.ready(HOST)
        listed = _openstack(stack, 'host', 'driver', 'list', HOST,
                            '-f', 'json')
        assert listed.returncode == 0, listed.stderr
        rows = {r['Name']: r for r in json.loads(listed.stdout)}
        assert (rows['fake_driver']['Enabled'],
                rows['fake_driver']['State']) == (False, 'disabled')
        assert _identity(stack) == devices
        assert placement.reserved(root) == 2
        drivers = _api(stack, 'GET', f'/drivers?host={HOST}').json()[
            'drivers']
        assert [(d['driver_name'], d['state']) for d in drivers] == [
            ('fake', 'disabled')]
        assert drivers[0]['version']

        shown = _openstack(stack, 'host', 'driver', 'enable', HOST,
                           'fake_driver', '-f', 'json')
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)['state'] == 'ok'
        assert _identity(stack) == devices
        assert set(placement.tree(root)) == providers
        gate_stack.wait_for(lambda: placement.reserved(root) == 1,
                            'all but the unhealthy device offered', 30)
    except Exception:
        print(stack.tails())
        raise
    finally:
        stack.stop_all()
