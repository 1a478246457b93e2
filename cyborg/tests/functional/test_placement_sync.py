"""Publishing deployables to a real placement, on every database."""
import datetime
import logging
import time
import uuid

import pytest
import sqlalchemy as sa
from prometheus_client import registry as prom_registry

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import metrics as conductor_metrics
from cyborg.conductor import placement_client
from cyborg.conductor import placement_sync
from cyborg.conductor import service as conductor_service
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import Clock
from cyborg.tests.utils import InProcess


@pytest.fixture
def node(placement):
    return placement.create_compute_node()


@pytest.fixture
def sync(conf, placement_url, db_engine):
    placement_server.point_at(conf, placement_url)
    return placement_sync.PlacementSync(conf, clock=Clock())


def _report(conf, hostname, devices=2, per_device=4):
    conf.set_override('host', f'agent-{hostname}')
    conf.set_override('hostname', hostname, 'agent')
    conf.set_override('device_count', devices, 'fake_driver')
    conf.set_override('accelerators_per_device', per_device, 'fake_driver')
    return {'hostname': hostname,
            'devices': [d.to_dict() for d in fake.FakeDriver(conf).discover()]}


def _apply(conf, report):
    ctx = cyborg_context.get_admin_context()
    return inventory.apply_report(ctx, conf.host, report)


def _wanted(hostname):
    return providers.host_providers(cyborg_context.get_admin_context(),
                                    hostname)


def test_tree_appears_under_the_compute_node(conf, sync, placement, node):
    _apply(conf, _report(conf, node['name']))
    result = sync.sync_host(node['name'])
    assert (result.written, result.pending) == (2, 0)
    tree = placement.tree(node['uuid'])
    wanted = _wanted(node['name'])
    assert set(tree) == {p.uuid for p in wanted}
    for provider in wanted:
        assert tree[provider.uuid]['parent_provider_uuid'] == node['uuid']
        assert tree[provider.uuid]['name'] == provider.name
        inventory_ = placement.inventories(provider.uuid)
        assert inventory_['FPGA']['total'] == 4
        assert inventory_['FPGA']['max_unit'] == 4
        assert inventory_['FPGA']['reserved'] == 0
        assert placement.traits(provider.uuid) == {
            'CUSTOM_FAKE_DEVICE', 'OWNER_CYBORG'}
        assert provider.in_sync


def test_new_devices_cost_few_calls_and_unchanged_ones_none(
        conf, sync, node):
    _apply(conf, _report(conf, node['name'], devices=10))
    sync.sync_host(node['name'])
    # One lookup of the compute node, one custom trait, and per provider
    # a create, an inventory and a traits write.
    assert sync.client.calls == 2 + 3 * 10
    before = sync.client.calls
    result = _apply(conf, _report(conf, node['name'], devices=10))
    assert result.writes == 0
    assert sync.sync_host(node['name']).written == 0
    assert sync.client.calls == before


def test_allocation_candidates_find_our_providers(conf, sync, placement,
                                                  node):
    _apply(conf, _report(conf, node['name'], devices=1))
    sync.sync_host(node['name'])
    ctx = cyborg_context.get_admin_context()
    device_profiles.create(ctx, {'name': f'dp-{node["name"]}', 'groups': [
        {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]})
    # The query Nova builds for that profile: one suffixed group per
    # profile group, COMPUTE_ACCELERATORS required on the root.
    answer = placement.get(
        '/allocation_candidates?resources_device_profile_0=FPGA:1'
        '&required_device_profile_0=CUSTOM_FAKE_DEVICE'
        '&root_required=COMPUTE_ACCELERATORS&group_policy=none',
        version='1.36')
    provider = _wanted(node['name'])[0]
    mappings = [c['mappings'] for c in answer['allocation_requests']]
    assert {'_device_profile_0': [provider.uuid]} in mappings


def test_disable_and_enable_set_reserved(conf, placement_url, db_engine,
                                         placement, node):
    placement_server.point_at(conf, placement_url)
    conductor = InProcess(conductor_manager.ConductorManager(conf))
    ctx = cyborg_context.get_admin_context()
    answer = conductor.report_data(ctx, f'agent-{node["name"]}',
                                   _report(conf, node['name'], devices=1))
    assert answer['placement_pending'] == 0
    device = inventory.get_host_devices(ctx, conf.host)[0]
    rp_uuid = device['deployables'][0]['rp_uuid']
    conductor.device_set_status(ctx, device['uuid'], 'maintaining')
    assert placement.inventories(rp_uuid)['FPGA']['reserved'] == 4
    conductor.device_set_status(ctx, device['uuid'], 'enabled')
    assert placement.inventories(rp_uuid)['FPGA']['reserved'] == 0


def test_generation_conflict_is_reread_and_retried(conf, sync, placement,
                                                   node):
    _apply(conf, _report(conf, node['name'], devices=1))
    sync.sync_host(node['name'])
    provider = _wanted(node['name'])[0]
    # Someone else writes the provider: our recorded generation is stale.
    generation, _ = sync.client.get_traits(provider.uuid)
    placement.request('PUT', '/traits/CUSTOM_ADDED_BY_HAND')
    response = placement.request(
        'PUT', f'/resource_providers/{provider.uuid}/traits',
        json={'resource_provider_generation': generation,
              'traits': ['OWNER_CYBORG', 'CUSTOM_FAKE_DEVICE',
                         'CUSTOM_ADDED_BY_HAND']})
    assert response.status_code == 200
    _apply(conf, _report(conf, node['name'], devices=1, per_device=6))
    before = sync.client.calls
    result = sync.sync_host(node['name'])
    assert (result.written, result.failed) == (1, 0)
    # The refused write, a read of the generation, the write again, then
    # the traits.
    assert sync.client.calls - before == 4
    assert placement.inventories(provider.uuid)['FPGA']['total'] == 6
    assert 'CUSTOM_ADDED_BY_HAND' not in placement.traits(provider.uuid)


def test_conflicts_give_up_after_the_configured_retries(conf, sync, node):
    conf.set_override('conflict_retries', 2, 'placement')
    _apply(conf, _report(conf, node['name'], devices=1))
    sync.sync_host(node['name'])
    provider = _wanted(node['name'])[0]
    client = sync.client
    real_request = client._request

    def always_stale(method, url, microversion, expected, json=None):
        if method == 'PUT' and url.endswith('/inventories'):
            json = dict(json, resource_provider_generation=12345)
        return real_request(method, url, microversion, expected, json)

    client._request = always_stale
    _apply(conf, _report(conf, node['name'], devices=1, per_device=2))
    result = sync.sync_host(node['name'])
    assert (result.written, result.failed, result.pending) == (0, 1, 1)
    assert _wanted(node['name'])[0].synced is None
    client._request = real_request
    sync._delay.clear()
    sync._retry_at.clear()
    sync.sync_pending()
    assert _wanted(node['name'])[0].in_sync
    assert provider.uuid


def _allocate(placement, rp_uuid, amount=1):
    consumer = str(uuid.uuid4())
    response = placement.request(
        'PUT', f'/allocations/{consumer}', version='1.28',
        json={'allocations': {rp_uuid: {'resources': {'FPGA': amount}}},
              'project_id': str(uuid.uuid4()), 'user_id': str(uuid.uuid4()),
              'consumer_generation': None})
    assert response.status_code == 204, response.text
    return consumer


def test_removed_device_with_allocations_stays_reserved(conf, sync,
                                                        placement, node):
    _apply(conf, _report(conf, node['name'], devices=2))
    sync.sync_host(node['name'])
    kept, gone = sorted(_wanted(node['name']), key=lambda p: p.name)
    consumer = _allocate(placement, gone.uuid)
    # The host reports the first device only.
    report = _report(conf, node['name'], devices=1)
    _apply(conf, report)
    result = sync.sync_host(node['name'])
    assert (result.removed, result.pending) == (0, 1)
    assert gone.uuid in placement.tree(node['uuid'])
    assert placement.inventories(gone.uuid)['FPGA']['reserved'] == 4
    # Nothing changes while the allocation lasts.
    sync.sync_pending()
    assert gone.uuid in placement.tree(node['uuid'])
    response = placement.request('DELETE', f'/allocations/{consumer}')
    assert response.status_code == 204
    sync._retry_at.clear()
    sync.sync_pending()
    assert set(placement.tree(node['uuid'])) == {kept.uuid}
    assert providers.removals(cyborg_context.get_admin_context(),
                              node['name']) == []


def test_missing_device_held_by_a_request_is_reserved_then_removed(
        conf, sync, placement, node):
    _apply(conf, _report(conf, node['name'], devices=1))
    sync.sync_host(node['name'])
    provider = _wanted(node['name'])[0]
    ctx = cyborg_context.get_admin_context()
    device_profiles.create(ctx, {'name': f'dp-{node["name"]}',
                                 'groups': [{'resources:FPGA': '1'}]})
    arq = arqs.create(ctx, f'dp-{node["name"]}', 'p1')[0]
    batch = arq_bindings.apply_patch(ctx, {arq['uuid']: {
        'hostname': node['name'], 'device_rp_uuid': provider.uuid,
        'instance_uuid': str(uuid.uuid4())}}, [])
    assert batch.states[arq['uuid']] == 'Bound'
    _apply(conf, _report(conf, node['name'], devices=0))
    sync.sync_host(node['name'])
    assert placement.inventories(provider.uuid)['FPGA']['reserved'] == 4
    # Released: the periodic pass drops the device and its provider.
    arq_bindings.delete(ctx, [arq['uuid']])
    sync.sync_pending()
    assert placement.tree(node['uuid']) == {}
    assert inventory.get_host_devices(ctx, conf.host) == []


def test_compute_node_created_late_is_retried_with_backoff(
        conf, sync, placement):
    name = f'late-{uuid.uuid4().hex[:8]}'
    _apply(conf, _report(conf, name, devices=1))
    result = sync.sync_host(name)
    assert result.compute_node_missing and result.pending == 1
    sync._track(name, result)
    calls = sync.client.calls
    sync.sync_pending()
    assert sync.client.calls == calls, 'retried before its backoff'
    node = placement.create_compute_node(name)
    sync.clock.now += placement_sync.TICK
    sync.sync_pending()
    assert set(placement.tree(node['uuid'])) == {
        p.uuid for p in _wanted(name)}
    assert all(p.in_sync for p in _wanted(name))


def _wait_for(predicate, seconds, what):
    """Poll ``predicate`` until it holds; the seconds it took."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < seconds, what
        time.sleep(0.05)
    return time.monotonic() - start


def test_pending_hosts_reach_placement_soon_after_an_outage(
        conf, placement_url, db_engine, placement, node, caplog):
    """A device reported while placement is down reaches it within
    seconds of its return, with one warning for the outage and probes,
    not syncs, while it lasts."""
    caplog.set_level(logging.INFO, logger='cyborg')
    relay = placement_server.Relay(placement_url)
    relay.open()
    placement_server.point_at(conf, relay.url)
    svc = conductor_service.build(conf)
    conductor = InProcess(svc.conductor, svc.endpoints)
    ctx = cyborg_context.get_admin_context()
    report = _report(conf, node['name'], devices=1)
    assert conductor.report_data(ctx, conf.host, report)[
        'placement_pending'] == 0
    relay.close()
    outage_start = len(caplog.records)
    report = _report(conf, node['name'], devices=2)
    assert conductor.report_data(ctx, conf.host, report)[
        'placement_pending'] == 1
    calls = conductor.placement.client.calls
    # Not the bus probe: no RPC server runs here to answer its pings.
    tasks = [task for task in svc.tasks
             if not task.name.endswith('-bus-probe')]
    for task in tasks:
        task.start()
    try:
        # Long enough for a backoff that doubles from a few seconds to
        # have grown well past the deadline below.
        outage = 20
        time.sleep(outage)
        probes = conductor.placement.client.calls - calls
        relay.open()
        wanted = {p.uuid for p in _wanted(node['name'])}
        took = _wait_for(lambda: set(placement.tree(node['uuid'])) == wanted,
                         5, 'the new device is not in placement 5 s after '
                            'placement came back')
        _wait_for(lambda: any('answers again' in r.getMessage()
                              for r in caplog.records), 5,
                  'no log line says placement is back')
    finally:
        for task in tasks:
            task.stop()
        relay.close()
    logging.getLogger(__name__).info(
        'Caught up %.2f s after placement came back; %d probe(s) in %d s.',
        took, probes, outage)
    assert probes <= 2 * outage
    records = [r for r in caplog.records[outage_start:]
               if r.name.startswith('cyborg')]
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert not any(r.exc_info for r in records)
    back = [r.getMessage() for r in records
            if 'answers again' in r.getMessage()]
    assert len(back) == 1 and '1 host(s) caught up' in back[0], back


def test_while_placement_is_away_only_due_probes_call_it(
        conf, placement_url, db_engine, placement, node):
    relay = placement_server.Relay(placement_url)
    relay.open()
    placement_server.point_at(conf, relay.url)
    sync = placement_sync.PlacementSync(conf, clock=Clock())
    registry = prom_registry.CollectorRegistry()
    registry.register(conductor_metrics.PlacementCollector(sync))

    def away_metric() -> float | None:
        return registry.get_sample_value('cyborg_placement_away')

    assert away_metric() == 0
    other = placement.create_compute_node()
    relay.close()
    try:
        _apply(conf, _report(conf, node['name'], devices=2))
        result = sync.sync_host(node['name'])
        assert result.placement_away and result.pending == 2
        # The compute node lookup found placement away; nothing else was
        # tried.
        assert sync.client.calls == 1
        _apply(conf, _report(conf, other['name'], devices=1))
        assert sync.sync_host(other['name']).placement_away
        sync.sync_pending()
        sync.reconcile()
        sync.probe()
        assert sync.client.calls == 1, 'called before a probe was due'
        for _ in range(5):
            sync.clock.now += placement_sync.PROBE_MAX
            sync.probe()
            sync.probe()
        assert sync.client.calls == 1 + 5, 'more than one probe when due'
        assert sync.placement_away
        assert sync._retry_at == {}, 'the outage counted against hosts'
        assert away_metric() == 1
    finally:
        relay.open()
    sync.clock.now += placement_sync.PROBE_MAX
    sync.probe()
    assert not sync.placement_away
    assert away_metric() == 0
    for host in (node, other):
        assert set(placement.tree(host['uuid'])) == {
            p.uuid for p in _wanted(host['name'])}
        assert all(p.in_sync for p in _wanted(host['name']))


def test_one_failing_provider_does_not_block_the_others(conf, sync,
                                                        placement, node):
    report = _report(conf, node['name'], devices=3)
    # A trait name placement refuses, on the second device only.
    report['devices'][1]['deployables'][0]['attributes']['trait5'] = (
        'CUSTOM_lower_case_is_invalid')
    _apply(conf, report)
    result = sync.sync_host(node['name'])
    assert (result.written, result.failed) == (2, 1)
    assert len(placement.tree(node['uuid'])) == 2
    synced = [p.in_sync for p in sorted(_wanted(node['name']),
                                        key=lambda p: p.name)]
    assert synced == [True, False, True]


def test_reconcile_repairs_drift(conf, sync, placement, node):
    _apply(conf, _report(conf, node['name'], devices=2))
    sync.sync_host(node['name'])
    first, second = sorted(_wanted(node['name']), key=lambda p: p.name)
    # A provider deleted by hand, another one's inventory changed, and a
    # stray provider of ours that no deployable has.
    assert placement.request(
        'DELETE', f'/resource_providers/{first.uuid}').status_code == 204
    generation = placement.get(
        f'/resource_providers/{second.uuid}')['generation']
    placement.request(
        'PUT', f'/resource_providers/{second.uuid}/inventories',
        json={'resource_provider_generation': generation, 'inventories': {
            'FPGA': {'total': 99, 'max_unit': 99}}})
    stray = str(uuid.uuid4())
    response = placement.request('POST', '/resource_providers', json={
        'uuid': stray, 'name': f'stray-{stray}',
        'parent_provider_uuid': node['uuid']})
    assert response.status_code == 200
    response = placement.request(
        'PUT', f'/resource_providers/{stray}/traits',
        json={'resource_provider_generation': 0,
              'traits': ['OWNER_CYBORG']})
    assert response.status_code == 200
    sync.reconcile()
    assert set(placement.tree(node['uuid'])) == {first.uuid, second.uuid}
    for provider in (first, second):
        assert placement.inventories(provider.uuid)['FPGA']['total'] == 4
    # A second pass finds nothing to do beyond reading.
    before = sync.client.calls
    sync.reconcile()
    assert sync.client.calls - before == 2


def test_allocations_alone_need_no_write_on_reconcile(conf, sync, placement,
                                                      node):
    _apply(conf, _report(conf, node['name'], devices=1))
    sync.sync_host(node['name'])
    provider = _wanted(node['name'])[0]
    _allocate(placement, provider.uuid)
    before = sync.client.calls
    sync.reconcile()
    # Root, tree, then inventories and traits compared: no write.
    assert sync.client.calls - before == 4
    assert _wanted(node['name'])[0].generation == placement.get(
        f'/resource_providers/{provider.uuid}')['generation']


def test_custom_resource_class_is_created(conf, sync, placement, node):
    report = _report(conf, node['name'], devices=1)
    report['devices'][0]['deployables'][0]['attributes']['rc'] = (
        'CUSTOM_ACCEL_TEST')
    _apply(conf, report)
    assert sync.sync_host(node['name']).written == 1
    provider = _wanted(node['name'])[0]
    assert placement.inventories(provider.uuid)['CUSTOM_ACCEL_TEST'][
        'total'] == 4


def test_client_is_pinned_and_reads_error_codes(conf, placement_url,
                                                placement, node):
    placement_server.point_at(conf, placement_url)
    client = placement_client.PlacementClient(conf)
    assert client.find_provider(node['name'])['uuid'] == node['uuid']
    assert client.find_provider('no-such-node') is None
    child = str(uuid.uuid4())
    created = client.create_provider(child, f'c-{child}', node['uuid'])
    # Creating it again answers the existing provider.
    assert client.create_provider(child, f'c-{child}', node['uuid'])[
        'uuid'] == created['uuid']
    # A stale generation is re-read and the write retried...
    assert client.set_traits(child, {'OWNER_CYBORG'}, generation=42) == 1
    # ...as many times as configured.
    conf.set_override('conflict_retries', 0, 'placement')
    with pytest.raises(placement_client.exception.PlacementGenerationConflict):
        client.set_traits(child, set(), generation=42)
    grandchild = str(uuid.uuid4())
    client.create_provider(grandchild, f'g-{grandchild}', child)
    # A parent goes after its children.
    assert client.delete_provider(child)
    assert placement.tree(node['uuid']) == {}
    assert client.delete_provider(child) is False


def test_periodic_pass_leaves_fresh_rows_to_their_writer(conf, sync,
                                                         placement, node,
                                                         db_engine):
    """With ``settle``, rows just written are the writing request's to
    sync (another conductor's pass would double its placement calls);
    once older, the pass takes them."""
    _apply(conf, _report(conf, node['name'], devices=1))
    calls = sync.client.calls
    sync.sync_pending(settle=placement_sync.SETTLE)
    assert sync.client.calls == calls
    assert not _wanted(node['name'])[0].in_sync
    long_ago = datetime.datetime(2020, 1, 1)
    with db_engine.begin() as conn:
        conn.execute(sa.update(models.Deployable).values(
            created_at=long_ago, updated_at=long_ago))
    sync.sync_pending(settle=placement_sync.SETTLE)
    assert _wanted(node['name'])[0].in_sync
