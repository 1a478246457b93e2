"""The fake driver's layouts, preparation and cleaning, all in memory."""
import pytest

from cyborg.accelerator.drivers import fake
from cyborg.common import exception

CARD = {'domain': '0000', 'bus': '0c', 'device': '00', 'function': '0'}
GPU = {'domain': '1000', 'bus': '0c', 'device': '00', 'function': '0'}


@pytest.fixture
def driver(conf, tmp_path):
    conf.set_override('host', 'cmp1')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('clean_log', str(tmp_path / 'clean.log'),
                      'fake_driver')
    return fake.FakeDriver(conf)


def by_kind(driver):
    card, gpu = driver.discover()
    return card, gpu


def test_discovery_is_unchanged_by_prepare_and_clean(driver):
    before = [d.to_dict() for d in driver.discover()]
    card, gpu = by_kind(driver)
    driver.prepare(card)
    driver.clean(card.deployables[0].attach_handles[0])
    driver.clean(gpu.deployables[0].attach_handles[0])
    assert [d.to_dict() for d in driver.discover()] == before
    assert [c['action'] for c in driver.lifecycle_calls] == [
        'prepare', 'clean', 'clean']


def test_layout_options(driver):
    card, gpu = by_kind(driver)
    assert driver.layout_options(card) == {
        'region_image': {'deployables': ['cmp1_0000:0c:00.0']}}
    assert driver.layout_options(gpu) == {
        'mdev_type': {fake.VGPU_TYPE: 4},
        'mdev_count': {'min': 0, 'max': 4}}


def test_gpu_mdev_count_changes_the_handles_discovered(driver):
    _, gpu = by_kind(driver)
    driver.apply_layout(gpu, {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2})
    _, gpu = by_kind(driver)
    assert gpu.deployables[0].num_accelerators == 2
    assert len(gpu.deployables[0].attach_handles) == 2
    with pytest.raises(exception.Invalid, match='from 0 to 4'):
        driver.apply_layout(gpu, {'mdev_count': 5})
    with pytest.raises(exception.Invalid, match=f'one of {fake.VGPU_TYPE}'):
        driver.apply_layout(gpu, {'mdev_type': 'other'})



def test_gpu_mdev_count_zero_gives_the_whole_gpu_back(driver):
    _, whole = by_kind(driver)
    driver.apply_layout(whole, {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2})
    _, gpu = by_kind(driver)
    mdev = '8a4b0b3e-2c11-4f5a-9d1e-3b8f6f2a0002'
    driver.create_mdev(gpu.deployables[0].attach_handles[0].attach_info,
                       mdev)
    with pytest.raises(exception.DeviceActionError,
                       match='1 mdevs still exist on it'):
        driver.apply_layout(gpu, {'mdev_type': fake.VGPU_TYPE,
                                  'mdev_count': 0})
    _, still = by_kind(driver)
    assert still.deployables[0].num_accelerators == 2
    assert driver.lifecycle_calls[-1]['error'] is not None
    driver.remove_mdev(gpu.deployables[0].attach_handles[0].attach_info,
                       mdev)
    driver.apply_layout(gpu, {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 0})
    _, back = by_kind(driver)
    assert back.to_dict() == whole.to_dict()
    assert driver.mdev_counts == {}

def test_card_region_image_reprograms(driver, tmp_path):
    image = tmp_path / 'image.gbs'
    image.write_bytes(b'bits')
    card, _ = by_kind(driver)
    driver.apply_layout(card, {
        'region_image': 'img-1', 'image_path': str(image),
        'bitstream': {'id': 'img-1',
                      'properties': {'accel:function_id': 'f1'}}})
    card, _ = by_kind(driver)
    assert 'CUSTOM_FPGA_FUNCTION_ID_FAKE_F1' in (
        card.deployables[0].attributes.values())
    with pytest.raises(exception.Invalid, match='not one of region_image'):
        driver.apply_layout(card, {'mdev_count': 1})


@pytest.mark.parametrize('option, call', [
    ('layout_fail', lambda d, dev, h: d.apply_layout(
        dev, {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 1})),
    ('prepare_fail', lambda d, dev, h: d.prepare(dev)),
    ('clean_fail', lambda d, dev, h: d.clean(h)),
])
def test_failures_are_device_action_errors_and_logged(driver, conf, option,
                                                      call):
    _, gpu = by_kind(driver)
    conf.set_override(option, True, 'fake_driver')
    with pytest.raises(exception.DeviceActionError,
                       match=f'{option} is set'):
        call(driver, gpu, gpu.deployables[0].attach_handles[0])
    [entry] = fake.read_program_log(conf.fake_driver.clean_log)
    assert f'{option} is set' in entry['error']
    assert entry['target'] in (GPU, dict(
        GPU, asked_type=fake.VGPU_TYPE, vgpu_mark=f'{fake.VGPU_TYPE}_0'))
    # The layout that failed changed nothing.
    assert len(by_kind(driver)[1].deployables[0].attach_handles) == 4


def test_clean_log_is_readable_from_another_process(driver, conf):
    card, _ = by_kind(driver)
    handle = card.deployables[0].attach_handles[3]
    driver.clean(handle)
    assert fake.read_program_log(conf.fake_driver.clean_log) == [{
        'action': 'clean', 'attach_type': 'TEST_PCI',
        'target': handle.attach_info, 'error': None}]


def test_cleans_after_use_reads_the_option(driver, conf):
    assert not driver.cleans_after_use
    conf.set_override('clean_after_use', True, 'fake_driver')
    assert driver.cleans_after_use
