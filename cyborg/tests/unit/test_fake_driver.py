"""The fake driver reports realistic, valid, distinct devices."""
import hashlib
import json
import re
import uuid

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import fake_health
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common.device_health import Health

TRAIT = re.compile(r'^CUSTOM_[A-Z0-9_]+$')


def test_default_is_one_fpga_with_sixteen_test_pci_handles(conf):
    conf.set_override('host', 'cmp1')
    devices = fake.FakeDriver(conf).discover()
    assert len(devices) == 1
    device = devices[0]
    assert device.type == 'FPGA'
    assert device.controlpath_id == {'domain': '0000', 'bus': '0c',
                                     'device': '00', 'function': '0'}
    [deployable] = device.deployables
    assert deployable.name == 'cmp1_0000:0c:00.0'
    assert deployable.num_accelerators == 16
    assert deployable.attributes['rc'] == 'FPGA'
    assert 'CUSTOM_FAKE_DEVICE' in deployable.attributes.values()
    infos = [h.attach_info for h in deployable.attach_handles]
    assert {h.attach_type for h in deployable.attach_handles} == {'TEST_PCI'}
    assert infos[0] == {'domain': '0000', 'bus': '0c', 'device': '00',
                        'function': '1'}
    assert infos[15] == {'domain': '0000', 'bus': '0c', 'device': '02',
                         'function': '0'}
    assert all(isinstance(v, str) for i in infos for v in i.values())


def test_count_and_hostname_are_configurable(conf):
    conf.set_override('host', 'agent-a')
    conf.set_override('hostname', 'node-a.example', 'agent')
    conf.set_override('device_count', 450, 'fake_driver')
    conf.set_override('accelerators_per_device', 248, 'fake_driver')
    devices = [d.to_dict() for d in fake.FakeDriver(conf).discover()]
    assert len(devices) == 450
    report = {'hostname': 'node-a.example', 'devices': devices}
    device_report.validate_report('agent-a', report)
    assert devices[449]['controlpath_id']['cpid_info']['domain'] == '0002'
    names = {d['deployables'][0]['name'] for d in devices}
    assert len(names) == 450
    assert all(n.startswith('node-a.example_') for n in names)


def _bitstream(**properties):
    return {'id': '6d6b1b6e-2b1f-4c1a-9a43-0c1d2e3f4a5b', 'name': 'bs',
            'properties': properties}


def _card(conf, index=0):
    device = fake.FakeDriver(conf).discover()[index]
    return device.controlpath_id, device.deployables[0].name


def test_program_records_the_call_and_reports_the_function(conf, tmp_path):
    conf.set_override('host', 'cmp1')
    conf.set_override('device_count', 2, 'fake_driver')
    log = tmp_path / 'program.log'
    conf.set_override('program_log', str(log), 'fake_driver')
    image = tmp_path / 'image.bin'
    image.write_bytes(b'bits')
    driver = fake.FakeDriver(conf)
    cpid, name = _card(conf, 1)

    driver.program(cpid, name, str(image),
                   _bitstream(**{'accel:function_id': 'a1b2-c3d4'}))

    [call] = driver.program_calls
    assert call['image_path'] == str(image)
    assert call['image_sha256'] == hashlib.sha256(b'bits').hexdigest()
    assert call['error'] is None
    assert fake.read_program_log(str(log)) == [call]
    first, second = driver.discover()
    assert 'trait_function' not in first.deployables[0].attributes
    trait = second.deployables[0].attributes['trait_function']
    assert trait == 'CUSTOM_FPGA_FUNCTION_ID_FAKE_A1B2C3D4'
    assert TRAIT.match(trait)
    report = {'hostname': 'cmp1',
              'devices': [d.to_dict() for d in (first, second)]}
    device_report.validate_report('cmp1', report)


def test_a_bitstream_without_function_is_named_by_its_image(conf, tmp_path):
    image = tmp_path / 'image.bin'
    image.write_bytes(b'')
    driver = fake.FakeDriver(conf)
    cpid, name = _card(conf)
    driver.program(cpid, name, str(image), _bitstream())
    trait = driver.discover()[0].deployables[0].attributes['trait_function']
    assert trait == ('CUSTOM_FPGA_BITSTREAM_FAKE_'
                     '6D6B1B6E2B1F4C1A9A430C1D2E3F4A5B')


@pytest.mark.parametrize('change, reason', [
    ({'cpid': {'domain': '0000', 'bus': '0d', 'device': '00',
               'function': '0'}}, 'no such fake FPGA'),
    ({'cpid': {'bus': '0c'}}, 'no such fake FPGA'),
    ({'name': 'other_0000:0c:00.0'}, 'has no deployable'),
    ({'path': '/nonexistent/image'}, 'cannot read'),
    ({'fail': True}, 'program_fail is set'),
])
def test_program_failures(conf, tmp_path, change, reason):
    image = tmp_path / 'image.bin'
    image.write_bytes(b'x')
    conf.set_override('program_fail', change.get('fail', False),
                      'fake_driver')
    driver = fake.FakeDriver(conf)
    cpid, name = _card(conf)
    with pytest.raises(exception.DeviceActionError) as err:
        driver.program(change.get('cpid', cpid), change.get('name', name),
                       change.get('path', str(image)), _bitstream())
    assert reason in str(err.value)
    assert driver.program_calls[0]['error'] == str(err.value)
    assert driver.loaded == {}
    assert 'trait_function' not in (
        driver.discover()[0].deployables[0].attributes)


def test_vgpu_devices(conf):
    conf.set_override('host', 'cmp1')
    conf.set_override('device_count', 1, 'fake_driver')
    conf.set_override('vgpu_device_count', 2, 'fake_driver')
    conf.set_override('vgpus_per_device', 3, 'fake_driver')
    devices = fake.FakeDriver(conf).discover()
    assert [d.type for d in devices] == ['FPGA', 'GPU', 'GPU']
    gpu = devices[1]
    assert gpu.model == 'fake-gpu'
    assert gpu.controlpath_id == {'domain': '1000', 'bus': '0c',
                                  'device': '00', 'function': '0'}
    [deployable] = gpu.deployables
    assert deployable.num_accelerators == 3
    assert deployable.attributes['rc'] == 'VGPU'
    assert {'OWNER_CYBORG', 'CUSTOM_FAKE_VGPU'} <= set(
        deployable.attributes.values())
    assert [h.attach_type for h in deployable.attach_handles] == ['MDEV'] * 3
    assert deployable.attach_handles[2].attach_info == {
        'domain': '1000', 'bus': '0c', 'device': '00', 'function': '0',
        'asked_type': 'fake-vgpu-1', 'vgpu_mark': 'fake-vgpu-1_2'}
    assert devices[2].controlpath_id['bus'] == '0d'
    report = {'hostname': 'cmp1', 'devices': [d.to_dict() for d in devices]}
    device_report.validate_report('cmp1', report)


def test_mdevs_are_created_and_removed(conf):
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('vgpus_per_device', 2, 'fake_driver')
    driver = fake.FakeDriver(conf)
    handles = driver.discover()[1].deployables[0].attach_handles
    info = handles[0].attach_info
    first, second, third = (str(uuid.uuid4()) for _ in range(3))

    driver.create_mdev(info, first)
    driver.create_mdev(handles[1].attach_info, second)
    assert driver.mdevs == {first: '1000:0c:00.0', second: '1000:0c:00.0'}
    with pytest.raises(exception.DeviceActionError, match='already exists'):
        driver.create_mdev(info, first)
    with pytest.raises(exception.DeviceActionError, match='in use'):
        driver.create_mdev(info, third)
    driver.remove_mdev(info, first)
    driver.remove_mdev(info, first)
    assert driver.mdevs == {second: '1000:0c:00.0'}

    fpga = dict(driver.discover()[0].controlpath_id, asked_type='fake-vgpu-1')
    for action in (driver.create_mdev, driver.remove_mdev):
        with pytest.raises(exception.DeviceActionError, match='no such'):
            action(fpga, third)
    with pytest.raises(exception.DeviceActionError, match='only offers'):
        driver.create_mdev(dict(info, asked_type='other'), third)


def test_a_driver_without_actions_says_so(conf):
    class Plain(base.AcceleratorDriver):
        driver_name = 'plain'

        def discover(self):
            return []

    driver = Plain(conf)
    with pytest.raises(exception.NotSupported, match='plain'):
        driver.program({'bus': '0c'}, 'd', '/tmp/x', {})
    with pytest.raises(exception.NotSupported):
        driver.create_mdev({}, str(uuid.uuid4()))
    with pytest.raises(exception.NotSupported):
        driver.remove_mdev({}, str(uuid.uuid4()))


@pytest.mark.parametrize('function_id, trait', [
    ('a1b2-c3d4', 'CUSTOM_FPGA_FUNCTION_ID_X_A1B2C3D4'),
    ('Fn.2 v1', 'CUSTOM_FPGA_FUNCTION_ID_X_FN_2_V1'),
])
def test_function_traits_are_valid_trait_names(function_id, trait):
    assert base.function_trait('x', function_id) == trait
    assert TRAIT.match(trait)


# The fake driver: faults by configuration, deterministic usage


@pytest.fixture
def fake_conf(conf):
    conf.set_override('host', 'cmp1')
    conf.set_override('device_count', 2, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    return conf


def _by_slot(devices):
    return {'{domain}:{bus}:{device}.{function}'.format(
        **d.controlpath_id): d for d in devices}


def test_fake_devices_are_healthy_without_faults(fake_conf):
    driver = fake.FakeDriver(fake_conf)
    assert {driver.health(d) for d in driver.discover()} == {
        Health('healthy')}


def test_fake_faults_option(fake_conf):
    fake_conf.set_override(
        'faults', ['0000:0d:00.0=unhealthy:ECC storm: card 2',
                   '1000:0c:00.0=degraded'], 'fake_driver')
    driver = fake.FakeDriver(fake_conf)
    devices = _by_slot(driver.discover())
    assert driver.health(devices['0000:0c:00.0']) == Health('healthy')
    assert driver.health(devices['0000:0d:00.0']) == Health(
        'unhealthy', 'ECC storm: card 2')
    assert driver.health(devices['1000:0c:00.0']) == Health('degraded')
    # Mutable: cleared while the agent runs.
    fake_conf.set_override('faults', [], 'fake_driver')
    assert driver.health(devices['0000:0d:00.0']) == Health('healthy')


@pytest.mark.parametrize('entry,problem', [
    ('0000:0c:00.0', 'expected <slot>=<state>'),
    ('0c:00.0=unhealthy', 'expected <slot>=<state>'),
    ('0000:0c:00.0=broken:x', "state 'broken' is not one of"),
    ('0000:0e:00.0=degraded', 'there is no fake device at 0000:0e:00.0')])
def test_fake_invalid_fault_fails_at_construction(fake_conf, entry,
                                                  problem):
    fake_conf.set_override('faults', [entry], 'fake_driver')
    with pytest.raises(exception.Invalid, match=problem):
        fake.FakeDriver(fake_conf)


def test_fake_fault_file_is_read_at_every_pass(fake_conf, tmp_path):
    path = tmp_path / 'faults.json'
    fake_conf.set_override('fault_file', str(path), 'fake_driver')
    fake_conf.set_override('faults', ['0000:0c:00.0=degraded:hot'],
                           'fake_driver')
    driver = fake.FakeDriver(fake_conf)
    devices = _by_slot(driver.discover())
    card, other = devices['0000:0c:00.0'], devices['0000:0d:00.0']
    assert driver.health(card) == Health('degraded', 'hot')
    path.write_text(json.dumps({
        '0000:0c:00.0': {'state': 'unhealthy', 'reason': 'dead'},
        '0000:0d:00.0': {'state': 'degraded', 'reason': 'slow'}}))
    assert driver.health(card) == Health('unhealthy', 'dead')
    assert driver.health(other) == Health('degraded', 'slow')
    path.write_text('{}')
    assert driver.health(other) == Health('healthy')
    path.unlink()
    assert driver.health(card) == Health('degraded', 'hot')


def test_fake_fault_file_problems_make_devices_unknown(fake_conf, tmp_path):
    path = tmp_path / 'faults.json'
    fake_conf.set_override('fault_file', str(path), 'fake_driver')
    driver = fake.FakeDriver(fake_conf)
    devices = _by_slot(driver.discover())
    path.write_text('{"0000:0c:00.0": ')
    for device in devices.values():
        health = driver.health(device)
        assert health.state == 'unknown'
        assert health.reason.startswith(f'fault file {path} is not valid '
                                        'JSON')
    path.write_text(json.dumps({'0000:0c:00.0': {'state': 'on fire'}}))
    assert driver.health(devices['0000:0c:00.0']).state == 'unknown'
    assert "entry '0000:0c:00.0'" in driver.health(
        devices['0000:0c:00.0']).reason
    assert driver.health(devices['0000:0d:00.0']) == Health('healthy')


def test_fake_usage_is_deterministic_and_follows_the_devices(fake_conf,
                                                             tmp_path):
    driver = fake.FakeDriver(fake_conf)
    devices = _by_slot(driver.discover())
    card, gpu = devices['0000:0d:00.0'], devices['1000:0c:00.0']
    first = driver.usage(card)
    assert first == fake.FakeDriver(fake_conf).usage(card)
    assert first.temperature_celsius == 41.0
    assert first.utilization_percent == 0.0
    assert driver.usage(gpu).utilization_percent == 0.0
    info = gpu.deployables[0].attach_handles[0].attach_info
    driver.create_mdev(info, '8a4b0b3e-2c11-4f5a-9d1e-3b8f6f2a0001')
    usage = driver.usage(gpu)
    assert usage.utilization_percent == 25.0
    assert usage.memory_used_bytes == fake_health.GPU_MEMORY_BYTES // 4
    image = tmp_path / 'image.bin'
    image.write_bytes(b'bits')
    driver.program(card.controlpath_id, card.deployables[0].name,
                   str(image), {'id': 'img-1', 'properties': {}})
    usage = driver.usage(card)
    assert usage.utilization_percent == 50.0
    assert usage.counters == {'programs': 1}
