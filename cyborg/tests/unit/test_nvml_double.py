"""The NVML double (harness/nvml_double) against the installed
nvidia-ml-py: the same functions, parameters and constants, so that it
cannot drift from what cyborg calls on a real host."""
import inspect
import pathlib
import re
import subprocess
import sys

import pytest

from cyborg.accelerator.drivers import nvml
from cyborg.tests.harness import nvml_double

real = nvml_double.real


def _parameters(function):
    return [(p.name, p.kind, p.default)
            for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize('name', nvml_double.FUNCTIONS)
def test_functions_have_pynvmls_signatures(name, tmp_path):
    module = nvml_double.module(str(tmp_path / 'nvml.json'))
    assert _parameters(getattr(module, name)) == _parameters(
        getattr(real, name))


def test_the_double_covers_what_cyborg_calls():
    drivers = pathlib.Path(nvml.__file__).parent
    called = set()
    for name in ('nvml.py', 'nvidia_mig.py'):
        called |= set(re.findall(r'\blib\.(nvml[A-Za-z_0-9]+)\(',
                                 (drivers / name).read_text('utf-8')))
    assert called and called <= set(nvml_double.FUNCTIONS)


def test_constants_are_pynvmls(tmp_path):
    module = nvml_double.module(str(tmp_path / 'nvml.json'))
    with open(nvml_double.__file__, encoding='utf-8') as f:
        used = set(re.findall(r'\breal\.([A-Za-z_][A-Za-z_0-9]*)', f.read()))
    assert 'NVML_ERROR_RESET_REQUIRED' in used
    for name in sorted(used):
        assert hasattr(real, name), name
    for name, value in vars(module).items():
        if name.startswith(('NVML_', 'nvml')) and not callable(value):
            assert getattr(real, name) == value, name
    # NVML's documented codes, as nvml.h numbers them.
    assert (real.NVML_ERROR_NOT_SUPPORTED, real.NVML_ERROR_RESET_REQUIRED,
            real.NVML_ERROR_IN_USE,
            real.NVML_ERROR_INSUFFICIENT_RESOURCES) == (3, 16, 19, 23)


def test_errors_are_pynvmls_classes(tmp_path):
    path = str(tmp_path / 'nvml.json')
    nvml_double.write_state(path, {})
    module = nvml_double.module(path)
    module.nvmlInit()
    with pytest.raises(real.NVMLError_NotFound):
        module.nvmlDeviceGetHandleByPciBusId(b'00000000:3B:00.0')


def test_uninitialised_and_missing_state(tmp_path):
    module = nvml_double.module(str(tmp_path / 'nvml.json'))
    with pytest.raises(real.NVMLError_Uninitialized):
        module.nvmlDeviceGetHandleByPciBusId('0000:3b:00.0')
    with pytest.raises(real.NVMLError_DriverNotLoaded):
        module.nvmlInit()


def test_shim_loads_the_double_in_another_process(tmp_path):
    path = str(tmp_path / 'nvml.json')
    nvml_double.write_state(path, {'0000:3b:00.0': nvml_double.gpu(
        'H100-80GB')})
    code = ('import pynvml\n'
            'pynvml.nvmlInit()\n'
            'h = pynvml.nvmlDeviceGetHandleByPciBusId("0000:3b:00.0")\n'
            'print(pynvml.IS_NVML_DOUBLE, pynvml.nvmlDeviceSetMigMode(h, 1),'
            ' isinstance(pynvml.NVMLError(3), pynvml.NVMLError_NotSupported))'
            '\n')
    done = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True,
        env={'PYTHONPATH': ':'.join([nvml_double.SHIM_DIR, *sys.path]),
             nvml_double.ENV: path}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ['True', '0', 'True']
    assert nvml_double.read_state(path)['gpus']['0000:3b:00.0']['mig'] == [
        1, 1]
