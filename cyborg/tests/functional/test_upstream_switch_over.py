"""Switching a cloud over from the real OpenStack Cyborg 17.0.0.

Upstream's own services fill its database (``upstream_cyborg``: fake
driver, profiles, requests in every state, Nova's allocations in a real
placement); ``cyborg-dbsync adopt`` takes it over; then cyborg's API,
conductor and agent run on the result, with the same placement, and
Nova's own client finds the bound requests as they were, unbinds and
deletes them, and binds an adopted request again.
"""
import json
import uuid

import pytest
import requests

from cyborg.db import migration
from cyborg.db import upstream
from cyborg.tests import utils
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import upstream_fill
from cyborg.tests.harness.nova_side import NovaError
from cyborg.tests.harness.placement_server import Placement
from cyborg.tests.harness.upstream_cyborg import upstream_venv  # noqa: F401

pytestmark = [pytest.mark.usefixtures('upstream_venv'), pytest.mark.flow]

HEADERS = {'X-Auth-Token': 'admin'}
# Cyborg's fake driver reports the device upstream's fake driver did: one
# FPGA at 0000:0c:00.0, its accelerators at functions 1 to 16.
ACCELERATORS = upstream_fill.FAKE_HANDLES


def _pci(info: str | dict) -> tuple[int, ...]:
    """A PCI address as numbers, however its parts were written."""
    if isinstance(info, str):
        info = json.loads(info)
    return tuple(int(str(info[k]), 16)
                 for k in ('domain', 'bus', 'device', 'function'))


def _adopt(stack: gate_stack.Stack, *args: str) -> str:
    done = utils.dbsync(stack.workdir, stack.database_url, 'adopt', *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _get(stack: gate_stack.Stack, path: str) -> dict:
    response = requests.get(stack.api_url + path, headers=HEADERS,
                            timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _start_ours(stack: gate_stack.Stack, host: str) -> None:
    stack.add_conductor('conductor1')
    stack.add_api()
    stack.add_agent(host, host, devices=1, accelerators=ACCELERATORS)
    stack.start('conductor1', 'api')
    stack.ready('conductor1')
    stack.start(host)
    stack.ready(host)
    gate_stack.wait_for(stack.api_up, 'the API to answer', 60)


def _reported_and_synced(stack: gate_stack.Stack, host: str,
                         filled: upstream_fill.Filled) -> list[dict]:
    """The adopted deployables, once the agent's report has matched them
    (renamed as cyborg's fake driver names them) and the conductor has
    published them to placement."""
    wanted = {d.uuid for d in filled.deployables}

    def done() -> list[dict] | None:
        rows = utils.query(stack.database_url,
                           'SELECT uuid, name, rp_uuid, rp_synced FROM '
                           'deployables')
        if ({r['uuid'] for r in rows} == wanted
                and all(r['name'].startswith(f'{host}_0000:0c')
                        and r['rp_synced'] for r in rows)):
            return rows
        return None

    return gate_stack.wait_for(done, 'the report to match the adopted '
                               'deployables and placement to be synced',
                               90)


@pytest.mark.parametrize('backend', gate_stack.backends(
    'mysql', ('mysql', 'postgresql')), indirect=True)
def test_switch_over(tmp_path, rabbit_url, empty_db_url, fake_nova):
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    stack.add_placement()
    stack.start('placement')
    gate_stack.wait_for(stack.placement_up, 'placement to answer', 60)
    placement = Placement(stack.placement_url)
    nova = None
    with stack.running(), upstream_fill.upstream_database(
            empty_db_url, stack.placement_url, rabbit_url,
            tmp_path / 'upstream') as filled:
        bound = filled.arqs_in('Bound')
        instances = sorted({a.instance_uuid for a in bound})
        assert len(instances) >= 2 and filled.arqs_in('Initial'), filled
        providers_before = {p['uuid'] for p in placement.get(
            f'/resource_providers?in_tree={filled.compute_node_uuid}'
        )['resource_providers']}

        dry = _adopt(stack, '--dry-run')
        assert f'accelerator_requests: {len(filled.arqs)}' in dry, dry
        assert 'Dry run: nothing was changed.' in dry
        assert migration.recognise(empty_db_url).kind is \
            upstream.Kind.UPSTREAM
        _adopt(stack)
        assert migration.version(empty_db_url) == migration.head()

        _start_ours(stack, filled.host)
        deployables = _reported_and_synced(stack, filled.host, filled)
        # The providers Nova's allocations name are kept; no new ones.
        assert {d['rp_uuid'] for d in deployables} == {
            d.rp_uuid for d in filled.deployables}
        tree = placement.get(
            f'/resource_providers?in_tree={filled.compute_node_uuid}'
        )['resource_providers']
        assert {p['uuid'] for p in tree} == providers_before
        for allocation in filled.allocations:
            held = placement.get(
                f'/allocations/{allocation.consumer_uuid}')['allocations']
            assert {rp: a['resources'] for rp, a in held.items()} == \
                allocation.resources
        devices = _get(stack, f'/devices?hostname={filled.host}')['devices']
        assert [d['uuid'] for d in devices] == [
            d.uuid for d in filled.devices]
        handles = utils.query(empty_db_url,
                              'SELECT uuid, in_use FROM attach_handles')
        assert {h['uuid'] for h in handles} == {
            h.uuid for h in filled.handles}

        nova = stack.nova_client()
        by_uuid = {a.uuid: a for a in filled.arqs}
        for instance in instances:
            resolved = nova('get_arqs_for_instance', instance, True)
            mine = [a for a in bound if a.instance_uuid == instance]
            assert sorted(a['uuid'] for a in resolved) == sorted(
                a.uuid for a in mine)
            for arq in resolved:
                was = by_uuid[arq['uuid']]
                assert (arq['state'], arq['hostname'], arq['device_rp_uuid'],
                        arq['attach_handle_uuid']) == (
                    'Bound', was.hostname, was.device_rp_uuid,
                    was.attach_handle_uuid)
                assert _pci(arq['attach_handle_info']) == _pci(
                    was.attach_info)

        # Unbind the first instance's requests, as a PATCH does.
        first = [a.uuid for a in bound if a.instance_uuid == instances[0]]
        response = requests.patch(
            stack.api_url + '/accelerator_requests', headers=HEADERS,
            json={u: [{'op': 'remove', 'path': '/hostname'},
                      {'op': 'remove', 'path': '/device_rp_uuid'},
                      {'op': 'remove', 'path': '/instance_uuid'}]
                  for u in first}, timeout=30)
        assert response.status_code == 202, response.text
        states = {a['uuid']: a['state'] for a in _get(
            stack, '/accelerator_requests')['arqs']}
        assert {states[u] for u in first} == {'Unbound'}
        for instance in instances[:1]:
            with pytest.raises(NovaError, match='returned no accelerator '
                                                'requests for instance'):
                nova('get_arqs_for_instance', instance, True)
        nova('delete_arqs_by_uuid', first)
        # Nova deletes the second instance's requests with it.
        nova('delete_arqs_for_instance', instances[1])
        with pytest.raises(NovaError, match='returned no accelerator'):
            nova('get_arqs_for_instance', instances[1])
        left = {a['uuid'] for a in _get(stack,
                                        '/accelerator_requests')['arqs']}
        assert not left & {a.uuid for a in bound
                           if a.instance_uuid in instances[:2]}
        freed = {a.attach_handle_uuid for a in bound
                 if a.instance_uuid in instances[:2]}
        gate_stack.wait_for(lambda: not [
            h for h in utils.query(empty_db_url,
                                   'SELECT uuid, in_use FROM attach_handles')
            if h['uuid'] in freed and h['in_use']],
            'the released handles to be free', 60)

        # An adopted request binds to an adopted provider.
        arq = filled.arqs_in('Initial')[0]
        instance = str(uuid.uuid4())
        nova('bind_arqs', {arq.uuid: {
            'hostname': filled.host,
            'device_rp_uuid': filled.deployables[0].rp_uuid,
            'instance_uuid': instance}})
        rebound = gate_stack.wait_for(
            lambda: nova('get_arqs_for_instance', instance, True),
            'the adopted request to bind', 60)
        assert rebound[0]['state'] == 'Bound', rebound
        nova('delete_arqs_for_instance', instance)
    if nova is not None:
        nova.close()
