"""plug and unplug of all of an instance's requests: checks, rollback, and
the public functions."""
import json

import pytest

from cyborg import os_acc
from cyborg.accelerator import pci as pci_lib
from cyborg.os_acc import base
from cyborg.os_acc import exception
from cyborg.os_acc import manager
from cyborg.os_acc import objects
from cyborg.os_acc.drivers import fake_pci
from cyborg.os_acc.drivers import mdev
from cyborg.os_acc.drivers import pci
from cyborg.os_acc.plugins import libvirt
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.unit.os_acc import fakes

NIC = '0000:af:00.0'
VFS = ['0000:af:01.0', '0000:af:01.1', '0000:af:01.2']
GPU = '0000:3b:00.0'
INSTANCE = objects.InstanceInfo(fakes.INSTANCE, 'vm1')


@pytest.fixture
def kernel(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function(NIC, 0x8086, 0x1593, 0x020000, driver='ice')
    tree.add_vfs(NIC, VFS, 0x8086, 0x1889, driver='iavf')
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    tree.add_mdev_type(GPU, 'nvidia-223', 'GRID T4-2B', 8)
    kernel = fakes.FakeKernel(tree)
    kernel.load_driver('vfio-pci')
    return kernel


class Recorder(fake_pci.FakePciDriver):
    """TEST_PCI, recording each call in ``calls``; ``fail[(step, arq)]``
    makes that step fail."""

    def __init__(self, sysfs):
        super().__init__(sysfs)
        self.calls = []
        self.fail = {}

    def _step(self, step, arq_uuid):
        self.calls.append((step, arq_uuid))
        if (step, arq_uuid) in self.fail:
            raise self.fail[(step, arq_uuid)]

    def prepare_van(self, arq):
        self._step('prepare', arq.uuid)
        return super().prepare_van(arq)

    def post_plug(self, van):
        self._step('post_plug', van.arq_uuid)

    def unprepare_van(self, van):
        self._step('unprepare', van.arq_uuid)


class FailingPlugin(libvirt.LibvirtPlugin):
    """libvirt, refusing the ARQs in ``refuse``."""

    def __init__(self):
        self.refuse = set()
        self.unplugged = []

    def plug(self, instance, van):
        if van.arq_uuid in self.refuse:
            raise RuntimeError('the hypervisor said no')
        return super().plug(instance, van)

    def unplug(self, instance, van):
        self.unplugged.append(van.arq_uuid)


@pytest.fixture
def host(kernel):
    """A Manager with every driver on the fake kernel, TEST_PCI recorded.
    """
    return manager.Manager(
        [pci.PciDriver(kernel), mdev.MdevDriver(kernel), Recorder(kernel)],
        [FailingPlugin()])


def _driver_of(kernel, address):
    return pci_lib.PciBus(kernel.root).get(address).driver


def _unmanaged(address, **fields):
    request = fakes.arq('PCI', address=address, **fields)
    request['attach_handle_info']['managed'] = 'false'
    return request


def test_plug_and_unplug(host, kernel):
    arqs = [_unmanaged(VFS[0]), fakes.arq('PCI', address=VFS[1]),
            fakes.arq('MDEV', info={'domain': '0000', 'bus': '3b',
                                    'device': '00', 'function': '0',
                                    'asked_type': 'nvidia-223'}),
            fakes.arq('TEST_PCI')]
    vans = host.plug(INSTANCE, arqs, 'libvirt')
    assert [v.arq_uuid for v in vans] == [a['uuid'] for a in arqs]
    assert [v.driver for v in vans] == ['pci', 'pci', 'mdev', 'test_pci']
    assert all(v.plugin == 'libvirt' for v in vans)
    assert all(v.device_state == objects.DeviceState.PLUGGED for v in vans)
    assert 'managed="no"' in vans[0].config
    assert 'slot="0x01" function="0x1"' in vans[1].config
    assert arqs[2]['attach_handle_uuid'] in vans[2].config
    assert vans[3].config is None
    assert _driver_of(kernel, VFS[0]) == 'vfio-pci'

    # nova-compute keeps them as JSON, and unplugs after a restart.
    kept = json.loads(json.dumps([v.to_dict() for v in vans]))
    vans = [objects.VAN.from_dict(v) for v in kept]
    host.unplug(INSTANCE, vans)
    assert all(v.device_state == objects.DeviceState.RELEASED for v in vans)
    assert _driver_of(kernel, VFS[0]) == 'iavf'
    gpu = pci_lib.PciBus(kernel.root).get(GPU)
    assert gpu.mdev_types[0].devices == ()
    assert host.plugins['libvirt'].unplugged == [a['uuid']
                                                 for a in reversed(arqs)]


def test_third_device_half_fails_and_the_first_two_are_undone(host, kernel):
    arqs = [_unmanaged(VFS[0]), _unmanaged(VFS[1]),
            _unmanaged('0000:af:01.7')]
    with pytest.raises(exception.PlugFailed) as raised:
        host.plug(INSTANCE, arqs, 'libvirt')
    third = arqs[2]['uuid']
    assert raised.value.arq == third
    assert str(raised.value) == (
        f'Plugging accelerator request {third} into instance '
        f'{fakes.INSTANCE} failed at the device half (driver pci): PCI '
        'function 0000:af:01.7 does not exist on this host. Everything '
        'prepared for the instance was undone.')
    assert isinstance(raised.value.__cause__, exception.DeviceError)
    # Both functions are back on their driver, the second first.
    assert [_driver_of(kernel, a) for a in VFS[:2]] == ['iavf', 'iavf']
    unbinds = [(path, value) for path, value in kernel.writes
               if path.endswith('/unbind')]
    assert unbinds == [('/sys/bus/pci/drivers/iavf/unbind', VFS[0]),
                       ('/sys/bus/pci/drivers/iavf/unbind', VFS[1]),
                       ('/sys/bus/pci/drivers/vfio-pci/unbind', VFS[1]),
                       ('/sys/bus/pci/drivers/vfio-pci/unbind', VFS[0])]
    assert host.plugins['libvirt'].unplugged == [a['uuid']
                                                 for a in arqs[1::-1]]


def test_third_device_half_fails_recorded(host):
    recorder = host.drivers['test_pci']
    arqs = [fakes.arq('TEST_PCI') for _ in range(3)]
    uuids = [a['uuid'] for a in arqs]
    recorder.fail[('prepare', uuids[2])] = OSError('device on fire')
    with pytest.raises(exception.PlugFailed, match='device on fire') as r:
        host.plug(INSTANCE, arqs, 'libvirt')
    assert r.value.arq == uuids[2]
    assert recorder.calls == [('prepare', uuids[0]), ('prepare', uuids[1]),
                              ('prepare', uuids[2]),
                              ('unprepare', uuids[1]),
                              ('unprepare', uuids[0])]


def test_instance_half_failure_undoes_its_device_half(host):
    recorder = host.drivers['test_pci']
    plugin = host.plugins['libvirt']
    arqs = [fakes.arq('TEST_PCI') for _ in range(2)]
    uuids = [a['uuid'] for a in arqs]
    plugin.refuse.add(uuids[1])
    with pytest.raises(exception.PlugFailed) as raised:
        host.plug(INSTANCE, arqs, 'libvirt')
    assert raised.value.arq == uuids[1]
    assert 'at the instance half (plugin libvirt): the hypervisor said ' \
           'no' in str(raised.value)
    assert recorder.calls[-2:] == [('unprepare', uuids[1]),
                                   ('unprepare', uuids[0])]
    # Only the first got an instance half to undo.
    assert plugin.unplugged == [uuids[0]]


def test_post_plug_failure_undoes_everything(host):
    recorder = host.drivers['test_pci']
    arqs = [fakes.arq('TEST_PCI') for _ in range(2)]
    uuids = [a['uuid'] for a in arqs]
    recorder.fail[('post_plug', uuids[1])] = exception.DeviceError(
        reason='group not viable')
    with pytest.raises(exception.PlugFailed,
                       match='post-plug check .*group not viable'):
        host.plug(INSTANCE, arqs, 'libvirt')
    assert recorder.calls == [
        ('prepare', uuids[0]), ('prepare', uuids[1]),
        ('post_plug', uuids[0]), ('post_plug', uuids[1]),
        ('unprepare', uuids[1]), ('unprepare', uuids[0])]


def test_a_failed_undo_is_named(host):
    recorder = host.drivers['test_pci']
    arqs = [fakes.arq('TEST_PCI') for _ in range(3)]
    uuids = [a['uuid'] for a in arqs]
    recorder.fail[('prepare', uuids[2])] = OSError('gone')
    recorder.fail[('unprepare', uuids[0])] = OSError('stuck')
    with pytest.raises(exception.PlugFailed) as raised:
        host.plug(INSTANCE, arqs, 'libvirt')
    assert str(raised.value).endswith(
        f'was undone, except for {uuids[0]} (stuck).')
    assert recorder.calls[-2:] == [('unprepare', uuids[1]),
                                   ('unprepare', uuids[0])]


def _bad(change):
    arq = fakes.arq('PCI', address=VFS[1])
    change(arq)
    return arq


@pytest.mark.parametrize('change, message', [
    (lambda a: a.update(state='BindFailed'), 'it is BindFailed, not Bound'),
    (lambda a: a.update(state='Initial', attach_handle_type='',
                        attach_handle_info={}, instance_uuid=None),
     'it is Initial, not Bound'),
    (lambda a: a.update(attach_handle_type='AICHIP'),
     "no os-acc driver handles attach handle type 'AICHIP' (loaded: mdev, "
     'pci, test_pci)'),
    (lambda a: a['attach_handle_info'].pop('function'),
     "attach_handle_info has no 'function'"),
    (lambda a: a['attach_handle_info'].update(bus=12),
     "attach_handle_info 'bus' is 12 (int), not a string"),
    (lambda a: a['attach_handle_info'].update(domain='0000:af'),
     "'domain' is '0000:af', not a string of hex digits"),
    (lambda a: a.update(attach_handle_type='MDEV'),
     'no asked_type'),
    (lambda a: a.update(instance_uuid='5b0b0a67-2f1c-4bde-9a33-1d8a0f6c1a2e'),
     'it is bound to instance 5b0b0a67-2f1c-4bde-9a33-1d8a0f6c1a2e, not '
     f'{fakes.INSTANCE}'),
    (lambda a: a.update(uuid=12), 'its uuid is 12'),
    (lambda a: a.update(attach_handle_info=['0000', '0c']),
     "attach_handle_info is ['0000', '0c'], not a mapping"),
])
def test_bad_input_is_refused_before_anything_is_prepared(
        host, kernel, change, message):
    recorder = host.drivers['test_pci']
    good = fakes.arq('TEST_PCI')
    unmanaged = _unmanaged(VFS[0])
    bad = _bad(change)
    with pytest.raises(exception.InvalidARQ) as raised:
        host.plug(INSTANCE, [good, unmanaged, bad], 'libvirt')
    assert message in str(raised.value)
    assert str(raised.value).endswith('. Nothing was prepared.')
    label = bad['uuid'] if isinstance(bad['uuid'], str) else 'at index 2'
    assert raised.value.arq == label
    assert str(raised.value).startswith(
        f'Accelerator request {label} cannot be plugged: ')
    assert recorder.calls == []
    assert kernel.writes == []


def test_the_same_request_twice(host):
    arq = fakes.arq('TEST_PCI')
    with pytest.raises(exception.InvalidARQ, match='it is given twice'):
        host.plug(INSTANCE, [arq, dict(arq)], 'libvirt')


def test_a_type_the_plugin_cannot_attach(kernel):
    class PciOnly(libvirt.LibvirtPlugin):
        name = 'pci-only'
        attach_handle_types = frozenset({'PCI'})

    host = manager.Manager([Recorder(kernel)], [PciOnly()])
    with pytest.raises(exception.InvalidARQ,
                       match='instance plugin pci-only cannot attach '
                             'TEST_PCI handles'):
        host.plug(INSTANCE, [fakes.arq('TEST_PCI')], 'pci-only')


def test_unknown_plugin(host):
    with pytest.raises(exception.NoSuchPlugin,
                       match='called powervm; loaded: libvirt'):
        host.plug(INSTANCE, [fakes.arq('TEST_PCI')], 'powervm')


def test_no_requests(host):
    assert host.plug(INSTANCE, [], 'libvirt') == []


def test_unplug_tries_every_van(host):
    recorder = host.drivers['test_pci']
    arqs = [fakes.arq('TEST_PCI') for _ in range(3)]
    uuids = [a['uuid'] for a in arqs]
    vans = host.plug(INSTANCE, arqs, 'libvirt')
    recorder.fail[('unprepare', uuids[1])] = OSError('busy')
    with pytest.raises(exception.UnplugFailed) as raised:
        host.unplug(INSTANCE, vans)
    assert str(raised.value) == (
        f'Releasing accelerator request(s) {uuids[1]} of instance '
        f'{fakes.INSTANCE} failed: {uuids[1]}: busy')
    assert [v.device_state.value for v in vans] == [
        'released', 'plugged', 'released']
    # Again: only the one left is tried.
    recorder.calls.clear()
    recorder.fail.clear()
    host.unplug(INSTANCE, vans)
    assert recorder.calls == [('unprepare', uuids[1])]


def test_unplug_checks_the_vans_first(host):
    [van] = host.plug(INSTANCE, [fakes.arq('TEST_PCI')], 'libvirt')
    other = objects.InstanceInfo('0a6c6d84-9c39-4f63-a2c3-1f0b8f4c2d10')
    with pytest.raises(exception.InvalidVAN, match='belongs to instance'):
        host.unplug(other, [van])
    van.driver = 'fpga'
    with pytest.raises(exception.InvalidVAN,
                       match='its driver fpga is not loaded'):
        host.unplug(INSTANCE, [van])
    assert host.drivers['test_pci'].calls == [('prepare', van.arq_uuid),
                                              ('post_plug', van.arq_uuid)]


# The public functions, with the drivers and plugins of the entry points.

@pytest.fixture
def library(kernel):
    """os-acc initialized on the fake tree (plain files, no kernel)."""
    os_acc.initialize(reset=True, sysfs_root=kernel.root)
    yield os_acc
    os_acc._manager = None


def test_not_initialized():
    with pytest.raises(exception.NotInitialized):
        os_acc.plug(INSTANCE, [])
    with pytest.raises(exception.NotInitialized):
        os_acc.host_info()


def test_host_info(library):
    info = library.host_info()
    assert [(d.name, d.attach_handle_types) for d in info.drivers] == [
        ('mdev', ('MDEV',)), ('pci', ('PCI',)),
        ('test_pci', ('TEST_PCI',))]
    assert [(p.name, p.attach_handle_types) for p in info.plugins] == [
        ('libvirt', ('MDEV', 'PCI', 'TEST_PCI'))]
    assert info.to_dict()['drivers'][1] == {
        'name': 'pci', 'attach_handle_types': ('PCI',),
        'description': 'Whole PCI functions, bound to vfio-pci when not '
                       'managed by libvirt.'}


def test_public_plug_and_unplug(library, kernel):
    arqs = [fakes.arq('PCI', address=VFS[2]), fakes.arq('TEST_PCI')]
    vans = library.plug(INSTANCE, arqs)
    assert [v.driver for v in vans] == ['pci', 'test_pci']
    assert ('<address domain="0x0000" bus="0xaf" slot="0x01" '
            'function="0x2" />') in vans[0].config
    library.unplug(INSTANCE, vans)
    assert kernel.writes == []  # the library wrote through plain Sysfs


def test_initialize_loads_only_the_named_extensions(library, kernel):
    library.initialize(reset=True, sysfs_root=kernel.root,
                       drivers=['test_pci'])
    assert [d.name for d in library.host_info().drivers] == ['test_pci']
    with pytest.raises(exception.InvalidARQ, match="type 'PCI'"):
        library.plug(INSTANCE, [fakes.arq('PCI', address=VFS[2])])
    # Without reset, a second call changes nothing.
    library.initialize()
    assert [d.name for d in library.host_info().drivers] == ['test_pci']


def test_initialize_refuses_an_unknown_driver(library):
    with pytest.raises(exception.LoadFailed,
                       match='driver fpga: no such entry point in '
                             'cyborg.os_acc.driver'):
        library.initialize(reset=True, drivers=['fpga'])


def test_plug_needs_requests_or_a_client(library):
    with pytest.raises(TypeError):
        library.plug(INSTANCE)


def test_extension_bases_are_abstract():
    with pytest.raises(TypeError):
        base.DeviceDriver(None)
    with pytest.raises(TypeError):
        base.InstancePlugin()


def test_a_write_the_kernel_refuses(kernel):
    sysfs = os_acc.sysfs.Sysfs(kernel.root)
    with pytest.raises(exception.DeviceError,
                       match='writing .x. to .*/sys/no/such/file failed: '
                             'No such file or directory'):
        sysfs.write('/sys/no/such/file', 'x')
