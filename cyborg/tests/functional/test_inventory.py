"""The conductor's report diff, on SQLite, MariaDB and PostgreSQL."""
import copy

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import models
from cyborg.db.api import inventory
from cyborg.tests.utils import count_writes


def _report(conf, count=2, host='cmp1'):
    conf.set_override('host', host)
    conf.set_override('device_count', count, 'fake_driver')
    conf.set_override('accelerators_per_device', 4, 'fake_driver')
    return {'hostname': f'{host}.example',
            'devices': [d.to_dict()
                        for d in fake.FakeDriver(conf).discover()]}


def _ctx():
    return cyborg_context.get_admin_context()


def _count(engine, model):
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.count()).select_from(model))


def test_first_report_creates_every_row(conf, db_engine):
    result = inventory.apply_report(_ctx(), 'cmp1', _report(conf))
    assert result.devices_added == 2
    assert _count(db_engine, models.Device) == 2
    assert _count(db_engine, models.ControlpathID) == 2
    assert _count(db_engine, models.Deployable) == 2
    assert _count(db_engine, models.Attribute) == 6
    assert _count(db_engine, models.AttachHandle) == 8
    [device] = [d for d in inventory.get_host_devices(_ctx(), 'cmp1')
                if d['controlpath_id']['cpid_info']['bus'] == '0c']
    assert device['hostname'] == 'cmp1.example'
    dep = device['deployables'][0]
    assert dep['rp_uuid'] == inventory.resource_provider_uuid(
        'cmp1.example', device['controlpath_id']['cpid_info'], dep['name'])


def test_unchanged_report_writes_nothing(conf, db_engine):
    report = _report(conf)
    inventory.apply_report(_ctx(), 'cmp1', report)
    with count_writes(db_engine) as writes:
        result = inventory.apply_report(_ctx(), 'cmp1',
                                        copy.deepcopy(report))
    assert writes == []
    assert result.writes == 0
    assert result.devices_updated == 0


def test_changes_write_only_the_difference(conf, db_engine):
    report = _report(conf)
    inventory.apply_report(_ctx(), 'cmp1', report)
    changed = copy.deepcopy(report)
    dep = changed['devices'][0]['deployables'][0]
    dep['attributes']['trait0'] = 'CUSTOM_OTHER'
    del dep['attributes']['trait1']
    dep['attach_handles'].pop()
    dep['num_accelerators'] = 3
    changed['devices'][0]['model'] = 'fake-fpga-v2'
    with count_writes(db_engine) as writes:
        result = inventory.apply_report(_ctx(), 'cmp1', changed)
    # model, num_accelerators, trait0: updates; trait1 and a handle: deletes
    assert len(writes) == 5, writes
    assert result.devices_updated == 1
    assert result.devices_added == result.devices_removed == 0
    device = inventory.get_host_devices(_ctx(), 'cmp1')[0]
    assert device['model'] == 'fake-fpga-v2'
    assert device['deployables'][0]['attributes'] == {
        'rc': 'FPGA', 'trait0': 'CUSTOM_OTHER'}
    assert len(device['deployables'][0]['attach_handles']) == 3


def test_removed_device_disappears_and_other_hosts_stay(conf, db_engine):
    inventory.apply_report(_ctx(), 'cmp2', _report(conf, host='cmp2'))
    inventory.apply_report(_ctx(), 'cmp1', _report(conf, count=3))
    result = inventory.apply_report(_ctx(), 'cmp1', _report(conf, count=1))
    assert result.devices_removed == 2
    assert len(inventory.get_host_devices(_ctx(), 'cmp1')) == 1
    assert len(inventory.get_host_devices(_ctx(), 'cmp2')) == 2
    assert _count(db_engine, models.AttachHandle) == 3 * 4
    result = inventory.apply_report(_ctx(), 'cmp1',
                                    {'hostname': 'cmp1.example',
                                     'devices': []})
    assert result.devices_removed == 1
    assert inventory.get_host_devices(_ctx(), 'cmp1') == []


def test_device_in_use_is_kept_until_released(conf, db_engine):
    inventory.apply_report(_ctx(), 'cmp1', _report(conf, count=1))
    with db_engine.begin() as conn:
        handle_id, dep_id = conn.execute(
            sa.select(models.AttachHandle.id,
                      models.AttachHandle.deployable_id)).first()
        conn.execute(sa.update(models.AttachHandle)
                     .where(models.AttachHandle.id == handle_id)
                     .values(in_use=True))
    empty = {'hostname': 'cmp1.example', 'devices': []}
    result = inventory.apply_report(_ctx(), 'cmp1', empty)
    assert result.kept_in_use == 1
    assert result.devices_removed == 0
    assert len(inventory.get_host_devices(_ctx(), 'cmp1')) == 1
    with db_engine.begin() as conn:
        conn.execute(sa.update(models.AttachHandle).values(in_use=False))
    result = inventory.apply_report(_ctx(), 'cmp1', empty)
    assert result.devices_removed == 1
    assert dep_id is not None


def test_hostname_change_moves_resource_providers(conf, db_engine):
    report = _report(conf, count=1)
    inventory.apply_report(_ctx(), 'cmp1', report)
    before = inventory.get_host_devices(_ctx(), 'cmp1')[0]
    report['hostname'] = 'renamed.example'
    result = inventory.apply_report(_ctx(), 'cmp1', report)
    after = inventory.get_host_devices(_ctx(), 'cmp1')[0]
    assert result.devices_updated == 1
    assert after['uuid'] == before['uuid']
    assert after['hostname'] == 'renamed.example'
    assert (after['deployables'][0]['rp_uuid']
            != before['deployables'][0]['rp_uuid'])


def _set_deployable(engine, **values):
    with engine.begin() as conn:
        conn.execute(sa.update(models.Deployable).values(**values))


def test_provider_uuid_of_another_scheme_is_kept(conf, db_engine):
    # As a deployment cyborg took over left it: Nova's allocations name
    # this uuid, so the next report must not replace the provider.
    report = _report(conf, count=1)
    inventory.apply_report(_ctx(), 'cmp1', report)
    adopted = '11111111-2222-3333-4444-555555555555'
    _set_deployable(db_engine, rp_uuid=adopted, rp_synced='synced')
    with count_writes(db_engine) as writes:
        result = inventory.apply_report(_ctx(), 'cmp1',
                                        copy.deepcopy(report))
    assert writes == [] and result.devices_updated == 0
    dep = inventory.get_host_devices(_ctx(), 'cmp1')[0]['deployables'][0]
    assert dep['rp_uuid'] == adopted
    with db_engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(
            models.ProviderRemoval)) == 0


def test_deployable_named_otherwise_is_matched_by_its_handles(conf,
                                                              db_engine):
    report = _report(conf, count=1)
    inventory.apply_report(_ctx(), 'cmp1', report)
    before = inventory.get_host_devices(_ctx(), 'cmp1')[0]['deployables'][0]
    _set_deployable(db_engine, name='cmp1_FakeDevice')
    result = inventory.apply_report(_ctx(), 'cmp1', copy.deepcopy(report))
    [after] = inventory.get_host_devices(_ctx(), 'cmp1')[0]['deployables']
    assert result.devices_updated == 1
    assert result.devices_added == result.devices_removed == 0
    assert after['uuid'] == before['uuid']
    assert after['rp_uuid'] == before['rp_uuid']
    assert after['name'] == before['name']
    assert {h['uuid'] for h in after['attach_handles']} == {
        h['uuid'] for h in before['attach_handles']}


def test_deployable_sharing_no_handle_is_replaced(conf, db_engine):
    report = _report(conf, count=1)
    inventory.apply_report(_ctx(), 'cmp1', report)
    before = inventory.get_host_devices(_ctx(), 'cmp1')[0]['deployables'][0]
    changed = copy.deepcopy(report)
    dep = changed['devices'][0]['deployables'][0]
    dep['name'] = 'other'
    for handle in dep['attach_handles']:
        info = handle['attach_info']
        bus = f"{int(info['bus'], 16) + 1:02x}"
        handle['attach_info'] = dict(info, bus=bus)
    inventory.apply_report(_ctx(), 'cmp1', changed)
    [after] = inventory.get_host_devices(_ctx(), 'cmp1')[0]['deployables']
    assert after['name'] == 'other'
    assert after['uuid'] != before['uuid']
