"""The fake driver reports realistic, valid, distinct devices."""
from cyborg.accelerator.drivers import fake
from cyborg.common import device_report


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
