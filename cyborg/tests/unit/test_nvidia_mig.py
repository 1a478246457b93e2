"""MIG partitioning of NVIDIA GPUs (nvidia_mig) and its layouts on the
nvidia_gpu driver, over the NVML double (the test hosts have neither GPU
nor NVML)."""
import sys

import pytest

from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.accelerator.drivers import nvidia_mig
from cyborg.accelerator.drivers import nvml
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.tests.harness import nvidia_vgpu_host
from cyborg.tests.harness import nvml_double
from cyborg.tests.harness.sysfs import vf_addresses
from cyborg.tests.unit.test_device_health import _one

GPU = '0000:3b:00.0'
OTHER = '0000:5e:00.0'
H100_PROFILES = {'1g.10gb': 7, '1g.10gb+me': 1, '1g.20gb': 4, '2g.20gb': 3,
                 '3g.40gb': 2, '4g.40gb': 1, '7g.80gb': 1}


@pytest.fixture
def state(tree, monkeypatch):
    """The NVML double over an idle H100 80GB at GPU, with MIG disabled,
    its state at <sysfs root>/nvml.json."""
    path = f'{tree.root}/nvml.json'
    nvml_double.write_state(path, {GPU: nvml_double.gpu('H100-80GB')})
    monkeypatch.setitem(sys.modules, 'pynvml', nvml_double.module(path))
    return path


def _set(path, address=GPU, **changes):
    gpus = nvml_double.read_state(path)['gpus']
    gpus[address].update(changes)
    nvml_double.write_state(path, gpus)


def _gpu(path, address=GPU):
    return nvml_double.read_state(path)['gpus'][address]


def _layout(path):
    """(MIG mode, [(profile id, first memory slice)]) of the GPU."""
    found = _gpu(path)
    return found['mig'], sorted((i['profile'], i['start'])
                                for i in found['instances'])


def test_profile_names_are_nvidias(state):
    mig = nvidia_mig.Mig(nvml.Nvml())
    for board, data in nvml_double.BOARDS.items():
        if data['profiles'] is None:
            continue
        nvml_double.write_state(state, {GPU: nvml_double.gpu(
            board, mig=[1, 1])})
        options = mig.layout_options(GPU)
        assert options['mig_mode'] == {'enabled': 1, 'disabled': 1}
        assert options['mig_partition']['profiles'] == {
            row[6]: row[2] for row in data['profiles'].values()}, board
    assert options['mig_partition']['profiles']['3g.20gb'] == 2


def test_h200_profile_names():
    # An H200's 143771 MiB (141 GiB rounded up); a GPU instance holds a
    # little less than its eighths of it. 4/8 of 141 is 70.5: NVIDIA
    # rounds half up, to 3g.71gb.
    total = 143771 << 20
    names = [nvidia_mig.profile_name(slices, eighths * 143771 // 8 - 300,
                                     total, suffix)
             for slices, eighths, suffix in (
                 (1, 1, ''), (1, 1, '+me'), (1, 2, ''), (2, 2, ''),
                 (3, 4, ''), (4, 4, ''), (7, 8, ''))]
    assert names == ['1g.18gb', '1g.18gb+me', '1g.35gb', '2g.35gb',
                     '3g.71gb', '4g.71gb', '7g.141gb']


def test_options_without_mig(state, monkeypatch):
    mig = nvidia_mig.Mig(nvml.Nvml())
    # MIG disabled: its profiles cannot be read; the partition is offered
    # with the mode turning MIG on.
    assert mig.layout_options(GPU) == {
        'mig_mode': {'enabled': 1, 'disabled': 1},
        'mig_partition': {'after': ['mig_mode']}}
    assert mig.layout_options(OTHER) == {}
    assert mig.instances(GPU) == []
    nvml_double.write_state(state, {GPU: nvml_double.gpu('T4')})
    assert mig.layout_options(GPU) == {}
    monkeypatch.setitem(sys.modules, 'pynvml', None)
    assert nvidia_mig.Mig(nvml.Nvml()).layout_options(GPU) == {}


def test_mode_on_and_off(state):
    mig = nvidia_mig.Mig(nvml.Nvml())
    mig.apply(GPU, {'mig_mode': 'enabled'}, [])
    assert _layout(state) == ([1, 1], [])
    assert mig.layout_options(GPU)['mig_partition'] == {
        'profiles': H100_PROFILES}
    # Again: nothing to do, even with the GPU in use.
    mig.apply(GPU, {'mig_mode': 'enabled'}, ['compute process 7'])
    mig.apply(GPU, {'mig_partition': ['3g.40gb']}, [])
    # Disabling destroys the GPU instances first, which NVML requires.
    mig.apply(GPU, {'mig_mode': 'disabled'}, [])
    assert _layout(state) == ([0, 0], [])
    assert _gpu(state)['resets'] == 0


def test_partition_create_keep_and_replace(state):
    mig = nvidia_mig.Mig(nvml.Nvml())
    mig.apply(GPU, {'mig_mode': 'enabled',
                    'mig_partition': ['3g.40gb', '3g.40gb']}, [])
    assert _layout(state) == ([1, 1], [(9, 0), (9, 4)])
    assert mig.instances(GPU) == ['3g.40gb', '3g.40gb']
    ids = [i['id'] for i in _gpu(state)['instances']]
    # What exists is kept: nothing changes, so being in use is no matter.
    mig.apply(GPU, {'mig_partition': ['3g.40gb', '3g.40gb']}, ['vGPU'])
    assert [i['id'] for i in _gpu(state)['instances']] == ids
    # 3+2+1+1 fits only with the 3g instance at slice 4: the one there is
    # kept, the other replaced.
    mig.apply(GPU, {'mig_partition': ['1g.10gb', '3g.40gb', '2g.20gb',
                                      '1g.10gb']}, [])
    assert _layout(state) == ([1, 1], [(9, 4), (14, 0), (19, 2), (19, 3)])
    assert [i['id'] for i in _gpu(state)['instances']
            if i['profile'] == 9] == ids[1:]
    assert sorted(mig.instances(GPU)) == ['1g.10gb', '1g.10gb', '2g.20gb',
                                          '3g.40gb']
    mig.apply(GPU, {'mig_partition': []}, [])
    assert _layout(state) == ([1, 1], [])


def test_partition_refusals_change_nothing(state):
    mig = nvidia_mig.Mig(nvml.Nvml())
    with pytest.raises(exception.Invalid, match='needs MIG mode enabled'):
        mig.apply(GPU, {'mig_partition': ['3g.40gb']}, [])
    mig.apply(GPU, {'mig_mode': 'enabled', 'mig_partition': ['4g.40gb']},
              [])
    before = _layout(state)
    with pytest.raises(exception.Invalid, match='does not fit'):
        mig.apply(GPU, {'mig_partition': ['7g.80gb', '1g.10gb']}, [])
    with pytest.raises(exception.Invalid, match='at most 1 GPU instance'):
        mig.apply(GPU, {'mig_partition': ['4g.40gb', '4g.40gb']}, [])
    with pytest.raises(exception.Invalid, match="'5g.50gb' is not one of "
                       'the GPU instance profiles.*3g.40gb'):
        mig.apply(GPU, {'mig_partition': ['5g.50gb']}, [])
    with pytest.raises(exception.Invalid, match="mig_mode 'on'"):
        mig.apply(GPU, {'mig_mode': 'on'}, [])
    with pytest.raises(exception.Invalid, match='needs mig_mode enabled'):
        mig.apply(GPU, {'mig_mode': 'disabled',
                        'mig_partition': ['3g.40gb']}, [])
    with pytest.raises(exception.DeviceActionError,
                       match=r'in use \(compute process 4242\)'):
        mig.apply(GPU, {'mig_partition': ['3g.40gb']},
                  ['compute process 4242'])
    with pytest.raises(exception.DeviceActionError, match='in use'):
        mig.apply(GPU, {'mig_mode': 'disabled'}, ['vGPUs of type x'])
    assert _layout(state) == before


def test_instance_in_use_is_not_destroyed(state):
    mig = nvidia_mig.Mig(nvml.Nvml())
    mig.apply(GPU, {'mig_mode': 'enabled', 'mig_partition': ['7g.80gb']},
              [])
    found = _gpu(state)
    found['instances'][0]['in_use'] = True
    _set(state, instances=found['instances'])
    with pytest.raises(exception.DeviceActionError,
                       match=r'did not destroy GPU instance 1 \(7g.80gb\)'):
        mig.apply(GPU, {'mig_partition': ['3g.40gb']}, [])


def test_a100_mode_switch_needs_a_reset_cyborg_never_does(state):
    nvml_double.write_state(state, {GPU: nvml_double.gpu('A100-40GB')})
    mig = nvidia_mig.Mig(nvml.Nvml())
    with pytest.raises(exception.DeviceActionError,
                       match='only with a GPU reset.*never resets a GPU '
                             'itself.*nvidia-smi -i 0000:3b:00.0 -mig 1'):
        mig.apply(GPU, {'mig_mode': 'enabled'}, [])
    assert _gpu(state)['mig'] == [0, 0]
    assert _gpu(state)['resets'] == 0
    # Switched by an operator, waiting for the reset: still refused.
    _set(state, mig=[0, 1])
    with pytest.raises(exception.DeviceActionError, match='GPU reset'):
        mig.apply(GPU, {'mig_mode': 'enabled'}, [])
    # After the reset the layout applies.
    _set(state, mig=[1, 1])
    mig.apply(GPU, {'mig_mode': 'enabled', 'mig_partition': ['3g.20gb']},
              [])
    assert _layout(state) == ([1, 1], [(9, 0)])


def test_nvml_activation_in_use(state):
    # A process NVML sees that the caller did not name: NVML's activation
    # status says so and the mode stays.
    _set(state, processes=[4242])
    mig = nvidia_mig.Mig(nvml.Nvml())
    assert mig.processes(GPU) == ['compute process 4242']
    with pytest.raises(exception.DeviceActionError,
                       match='NVML_ERROR_IN_USE'):
        mig.apply(GPU, {'mig_mode': 'enabled'}, [])
    assert _gpu(state)['mig'][0] == 0


def test_apply_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, 'pynvml', None)
    with pytest.raises(exception.DeviceActionError,
                       match='NVML does not see the GPU'):
        nvidia_mig.Mig(nvml.Nvml()).apply(GPU, {'mig_mode': 'enabled'}, [])


def test_mig_backed_vgpu_types():
    assert nvidia_mig.vgpu_profile('NVIDIA H100-3-40C') == '3g.40gb'
    assert nvidia_mig.vgpu_profile('NVIDIA H100-7-80C') == '7g.80gb'
    assert nvidia_mig.vgpu_profile('GRID A100-1-5CME') == '1g.5gb+me'
    assert nvidia_mig.vgpu_profile('NVIDIA H200-3-71C') == '3g.71gb'
    assert nvidia_mig.vgpu_profile('NVIDIA H100-10C') is None
    assert nvidia_mig.vgpu_profile('NVIDIA A40-8Q') is None
    assert nvidia_mig.vgpu_profile('GRID T4-1B') is None


def test_check_layout_of_profiles():
    options = {'mig_mode': {'enabled': 1, 'disabled': 1},
               'mig_partition': {'profiles': {'3g.40gb': 2, '7g.80gb': 1}}}
    device_report.check_layout(options, {'mig_partition': ['3g.40gb'] * 2})
    device_report.check_layout(options, {'mig_partition': []})
    device_report.check_layout(options, {'mig_mode': 'enabled'})
    with pytest.raises(exception.Invalid,
                       match=r'asks for 3 of 3g.40gb; allowed: 3g.40gb '
                             r'\(at most 2\), 7g.80gb \(at most 1\)'):
        device_report.check_layout(options,
                                   {'mig_partition': ['3g.40gb'] * 3})
    with pytest.raises(exception.Invalid, match=r'1g.5gb \(not offered\)'):
        device_report.check_layout(options, {'mig_partition': ['1g.5gb']})
    with pytest.raises(exception.Invalid, match='is not a list of'):
        device_report.check_layout(options, {'mig_partition': '3g.40gb'})


# The driver

def _driver(tree, conf):
    tree.add_function(GPU, 0x10de, 0x2330, 0x030200, driver='nvidia')
    tree.set_link(GPU, '2.5 GT/s PCIe', 16, max_speed='32.0 GT/s PCIe')
    tree.add_aer(GPU)
    driver = nvidia_gpu.NvidiaGpuDriver(conf)
    return driver, _one(driver)


def test_driver_layout_options_and_apply(state, tree, host_conf):
    driver, device = _driver(tree, host_conf)
    options = driver.layout_options(device)
    assert options == {'mig_mode': {'enabled': 1, 'disabled': 1},
                       'mig_partition': {'after': ['mig_mode']}}
    # Checked up front only with the mode that makes the profiles known.
    with pytest.raises(exception.Invalid, match='once mig_mode is applied'):
        device_report.check_layout(options, {'mig_partition': ['2g.20gb']})
    layout = {'mig_mode': 'enabled', 'mig_partition': ['2g.20gb'] * 3}
    device_report.check_layout(options, layout)
    driver.apply_layout(device, layout)
    options = driver.layout_options(device)
    assert options['mig_partition'] == {'profiles': H100_PROFILES}
    device_report.check_layout(options, {'mig_partition': ['3g.40gb'] * 2})
    assert driver.mig.instances(GPU) == ['2g.20gb'] * 3
    # The GPU's compute processes hold it.
    _set(state, processes=[31337])
    with pytest.raises(exception.DeviceActionError,
                       match=r'compute process 31337'):
        driver.apply_layout(device, {'mig_partition': ['7g.80gb']})
    assert driver.mig.instances(GPU) == ['2g.20gb'] * 3
    # A layout without MIG keys is the mdev driver's, as before.
    with pytest.raises(exception.Invalid, match='mdev_type'):
        driver.apply_layout(device, {'mdev_type': 'nvidia-1',
                                     'mdev_count': 1})


def test_driver_refuses_mig_while_vgpus_exist(state, tree, host_conf):
    driver, device = _driver(tree, host_conf)
    tree.add_mdev_type(GPU, 'nvidia-1', 'NVIDIA H100-10C', 8,
                       devices=['c0a3a5a7-6f2d-4b4e-9d27-1f4f3a0e2b10'])
    with pytest.raises(exception.DeviceActionError,
                       match='vGPUs of type nvidia-1'):
        driver.apply_layout(device, {'mig_mode': 'enabled'})
    assert _gpu(state)['mig'] == [0, 0]


def test_unhealthy_gpu_takes_its_mig_instances_with_it(state, tree,
                                                       host_conf):
    """Health is the device's: every handle of the GPU, those its GPU
    instances back included, is in the one device whose health NVML's
    readings of the whole GPU decide, and placement reserves an unhealthy
    device's inventory (db/api/devices.py, bind_decision.py)."""
    driver, device = _driver(tree, host_conf)
    driver.apply_layout(device, {'mig_mode': 'enabled',
                                 'mig_partition': ['3g.40gb', '3g.40gb']})
    [device] = driver.discover()
    assert driver.health(device) == Health('healthy')
    _set(state, ecc=3)
    assert driver.health(device) == Health(
        'unhealthy', '3 uncorrected ECC error(s) since the driver loaded')
    _set(state, ecc=0, xids=[79])
    assert driver.health(device) == Health('unhealthy',
                                           'critical XID event(s) 79')
    # The GPU instances are still there: health changes no partition.
    assert driver.mig.instances(GPU) == ['3g.40gb', '3g.40gb']


def test_instances_stay_where_they_are(state):
    # A 1g.10gb at memory slice 6, where a fresh layout would not put it:
    # kept as it is.
    _set(state, mig=[1, 1], instances=[
        {'id': 5, 'profile': 19, 'start': 6, 'size': 1, 'in_use': False}])
    mig = nvidia_mig.Mig(nvml.Nvml())
    mig.apply(GPU, {'mig_partition': ['1g.10gb', '3g.40gb']}, [])
    assert _layout(state) == ([1, 1], [(9, 0), (19, 6)])
    assert 5 in [i['id'] for i in _gpu(state)['instances']]


def test_driver_refuses_mig_while_a_vf_is_a_vgpu(state, tree, host_conf):
    # An H100 whose SR-IOV VFs are vGPUs (vGPU software 17 and later): a
    # VF given a type holds the GPU.
    nvidia_vgpu_host.add_gpu(tree, GPU, vfs=2)
    vf = vf_addresses(GPU, 2)[1]
    tree.write(f'{tree.device_dir(vf).relative_to(tree.base)}/'
               f'{nvidia_vgpu_host.CURRENT}', '1008\n')
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    [device] = driver.discover()
    assert driver.layout_options(device)['mig_mode'] == {'enabled': 1,
                                                         'disabled': 1}
    with pytest.raises(exception.DeviceActionError,
                       match=rf'VF {vf} \(vGPU type 1008\)'):
        driver.apply_layout(device, {'mig_mode': 'enabled'})
    assert _gpu(state)['mig'] == [0, 0]


def test_mig_backed_vgpu_types_are_offered_as_the_partition_provides(
        state, tree, host_conf):
    # The VFs list a MIG-backed type; only GPU instances of its profile
    # make it a vGPU to offer.
    nvidia_vgpu_host.add_gpu(tree, GPU, vfs=4, types=(
        *nvidia_vgpu_host.H100_TYPES, ('1062', 'NVIDIA H100XM-3-40C', 40)))
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    [device] = driver.discover()
    assert driver.layout_options(device)['vgpu_type']['1062'] == 0
    driver.apply_layout(device, {'mig_mode': 'enabled',
                                 'mig_partition': ['3g.40gb', '1g.10gb']})
    assert driver.layout_options(device)['vgpu_type']['1062'] == 1
    driver.apply_layout(device, {'mig_partition': ['3g.40gb'] * 2})
    driver.apply_layout(device, {'vgpu_type': '1062', 'vgpu_count': 2})
    [device] = driver.discover()
    assert [h.attach_info['vgpu_type'] for h in
            device.deployables[0].attach_handles] == ['1062', '1062']
