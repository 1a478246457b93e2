"""NVIDIA GPU health and usage: the PCI layer's readings, and NVML's
through a fake ``pynvml`` module (the test hosts have neither GPU nor
NVML)."""
import logging
import sys
import types

from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.accelerator.drivers import nvml
from cyborg.common.device_health import Health
from cyborg.tests.unit.test_device_health import _one

GPU = '0000:3b:00.0'




def _gpu(tree, conf):
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    tree.set_link(GPU, '2.5 GT/s PCIe', 16, max_speed='8.0 GT/s PCIe')
    tree.add_aer(GPU)
    driver = nvidia_gpu.NvidiaGpuDriver(conf)
    return driver, _one(driver)


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f'NVML error {value}')
        self.value = value


def fake_pynvml(**state):
    """A pynvml module over one GPU whose readings ``state`` sets; an
    exception class as a value is raised by that call."""
    gpu = {'temperature': 61, 'power_mw': 70_500, 'util': 37,
           'memory': (6 << 30, 16 << 30), 'ecc': 0, 'pending': 0,
           'events': [], 'bus_id': b'00000000:3B:00.0'}
    gpu.update(state)
    module = types.ModuleType('pynvml')
    module.NVMLError = NVMLError
    module.NVML_ERROR_NOT_SUPPORTED = 3
    module.NVML_ERROR_TIMEOUT = 10
    module.NVML_ERROR_GPU_IS_LOST = 15
    module.NVML_FEATURE_ENABLED = 1
    module.NVML_TEMPERATURE_GPU = 0
    module.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    module.NVML_VOLATILE_ECC = 0
    module.nvmlEventTypeXidCriticalError = 8
    module.calls = []

    def reading(name):
        def call(*args):
            module.calls.append(name)
            if name in gpu.get('errors', {}):
                raise NVMLError(gpu['errors'][name])
            return gpu[name]
        return call

    def get_handle(bus_id):
        if bus_id.lower() != GPU:
            raise NVMLError(6)   # NVML_ERROR_NOT_FOUND
        return 'handle-0'

    def wait(event_set, timeout):
        assert timeout == 0
        if not gpu['events']:
            raise NVMLError(module.NVML_ERROR_TIMEOUT)
        return types.SimpleNamespace(device='handle-0',
                                     eventData=gpu['events'].pop(0))

    module.nvmlInit = lambda: module.calls.append('init')
    module.nvmlEventSetCreate = lambda: 'events'
    module.nvmlDeviceRegisterEvents = lambda h, t, s: None
    module.nvmlEventSetWait = wait
    module.nvmlDeviceGetHandleByPciBusId = get_handle
    module.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(
        busId=gpu['bus_id'])
    module.nvmlDeviceGetTemperature = reading('temperature')
    module.nvmlDeviceGetPowerUsage = reading('power_mw')
    util = reading('util')
    module.nvmlDeviceGetUtilizationRates = (
        lambda h: types.SimpleNamespace(gpu=util(h)))
    memory = reading('memory')
    module.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        used=memory(h)[0], total=memory(h)[1])
    module.nvmlDeviceGetTotalEccErrors = reading('ecc')
    module.nvmlDeviceGetRetiredPagesPendingStatus = reading('pending')
    module.gpu = gpu
    return module


def test_gpu_without_nvml_reads_the_pci_layer_only(tree, host_conf,
                                                   monkeypatch):
    # None in sys.modules makes ``import pynvml`` fail.
    monkeypatch.setitem(sys.modules, 'pynvml', None)
    driver, device = _gpu(tree, host_conf)
    # An idle GPU's link runs at 2.5 GT/s: not a degraded link.
    assert driver.health(device) == Health('healthy')
    usage = driver.usage(device)
    assert usage.utilization_percent is None
    assert usage.counters == {'aer_correctable': 0, 'aer_nonfatal': 0,
                              'aer_fatal': 0}
    tree.set_link(GPU, '8.0 GT/s PCIe', 8, max_width=16)
    assert driver.health(device).reason == (
        f'PCIe link degraded: width x8 of x16 on {GPU}')


def test_nvml_init_failure_is_retried_later(monkeypatch):
    module = fake_pynvml()

    def fail():
        raise NVMLError(9)   # NVML_ERROR_DRIVER_NOT_LOADED

    module.nvmlInit = fail
    monkeypatch.setitem(sys.modules, 'pynvml', module)
    now = [1000.0]
    reader = nvml.Nvml(clock=lambda: now[0])
    assert reader.health(GPU) == []
    module.nvmlInit = lambda: None
    now[0] += nvml.RETRY_SECONDS - 1
    assert reader.usage(GPU) is None
    now[0] += 1
    assert reader.usage(GPU).temperature_celsius == 61.0


def test_nvml_usage(tree, host_conf, monkeypatch):
    monkeypatch.setitem(sys.modules, 'pynvml', fake_pynvml())
    driver, device = _gpu(tree, host_conf)
    usage = driver.usage(device)
    assert usage.temperature_celsius == 61.0
    assert usage.power_watts == 70.5
    assert usage.utilization_percent == 37.0
    assert (usage.memory_used_bytes, usage.memory_total_bytes) == (
        6 << 30, 16 << 30)
    assert usage.counters['ecc_uncorrected_volatile'] == 0
    assert usage.counters['aer_fatal'] == 0
    assert driver.health(device) == Health('healthy')


def test_nvml_unsupported_readings_are_left_out(tree, host_conf,
                                                monkeypatch):
    module = fake_pynvml(errors={'ecc': 3, 'pending': 3, 'power_mw': 3})
    monkeypatch.setitem(sys.modules, 'pynvml', module)
    driver, device = _gpu(tree, host_conf)
    assert driver.health(device) == Health('healthy')
    usage = driver.usage(device)
    assert usage.power_watts is None
    assert 'ecc_uncorrected_volatile' not in usage.counters


def test_nvml_ecc_and_retired_pages(tree, host_conf, monkeypatch):
    module = fake_pynvml(ecc=2, pending=1)
    monkeypatch.setitem(sys.modules, 'pynvml', module)
    driver, device = _gpu(tree, host_conf)
    assert driver.health(device) == Health(
        'unhealthy', '2 uncorrected ECC error(s) since the driver loaded')
    module.gpu['ecc'] = 0
    assert driver.health(device) == Health(
        'degraded', 'retired memory pages pending: reset the GPU')


def test_nvml_gpu_lost_is_unhealthy(tree, host_conf, monkeypatch):
    module = fake_pynvml(errors={'ecc': 15})
    monkeypatch.setitem(sys.modules, 'pynvml', module)
    driver, device = _gpu(tree, host_conf)
    assert driver.health(device) == Health('unhealthy',
                                           'NVML: the GPU is lost')


def test_critical_xids_stick_and_application_xids_do_not(
        tree, host_conf, monkeypatch):
    module = fake_pynvml(events=[13, 43])
    monkeypatch.setitem(sys.modules, 'pynvml', module)
    driver, device = _gpu(tree, host_conf)
    assert driver.health(device) == Health('healthy')
    module.gpu['events'] = [79]
    assert driver.health(device) == Health('unhealthy',
                                           'critical XID event(s) 79')
    # Still unhealthy at the next pass: the GPU needs a reset.
    assert driver.health(device).state == 'unhealthy'
    assert driver.usage(device).counters['xid_critical'] == 1


def test_gpu_nvml_does_not_see_is_left_to_sysfs(tree, host_conf,
                                                monkeypatch):
    module = fake_pynvml()
    monkeypatch.setitem(sys.modules, 'pynvml', module)
    tree.add_function('0000:5e:00.0', 0x10de, 0x1eb8, 0x030200,
                      driver='vfio-pci')
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    device = _one(driver)
    assert driver.health(device) == Health('healthy')
    usage = driver.usage(device)
    assert usage.temperature_celsius is None
    assert usage.counters == {}
    assert 'temperature' not in module.calls


def test_nvml_bus_id_is_normalised():
    assert nvml.bus_id(b'00000000:3B:00.0') == '0000:3b:00.0'
    assert nvml.bus_id('0001:AF:00.1') == '0001:af:00.1'


def test_real_nvml_without_a_gpu_driver_leaves_gpus_to_sysfs(
        tree, host_conf, caplog):
    # The real nvidia-ml-py (a test requirement): installed, but this
    # machine has no libnvidia-ml, so nvmlInit fails as it does on a host
    # whose nvidia module is not loaded.
    import pynvml
    assert pynvml.__name__ == 'pynvml'
    caplog.set_level(logging.INFO, nvml.__name__)
    driver, device = _gpu(tree, host_conf)
    assert driver.health(device) == Health('healthy')
    assert driver.usage(device).utilization_percent is None
    assert 'NVML' in caplog.text
