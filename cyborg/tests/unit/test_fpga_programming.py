"""Programming FPGAs through fake vendor tools, and the [fpga] options."""
import logging
import shlex

import pytest

from cyborg.accelerator import drivers
from cyborg.accelerator.drivers import intel_fpga
from cyborg.accelerator.drivers import xilinx_fpga
from cyborg.common import exception
from cyborg.tests.harness.fpga_hosts import ARRIA10
from cyborg.tests.harness.fpga_hosts import DMA_AFU
from cyborg.tests.harness.fpga_hosts import HOST
from cyborg.tests.harness.fpga_hosts import N3000
from cyborg.tests.harness.fpga_hosts import N3000_VFS
from cyborg.tests.harness.fpga_hosts import NLB0_AFU
from cyborg.tests.harness.fpga_hosts import U250_MGMT
from cyborg.tests.harness.fpga_hosts import by_address
from cyborg.tests.harness.fpga_hosts import configure
from cyborg.tests.harness.fpga_hosts import fpga_host
from cyborg.tests.harness.fpga_hosts import pci


@pytest.fixture
def tree(tmp_path):
    return fpga_host(tmp_path / 'host')


def fake_tool(tmp_path, name, exit_code=0, stderr='', then=''):
    """An executable that records its arguments, one a line, in
    ``<name>.argv``, writes ``stderr``, runs ``then`` and exits with
    ``exit_code``."""
    log = tmp_path / f'{name}.argv'
    script = tmp_path / name
    script.write_text(
        '#!/bin/sh\n'
        f'printf "%s\\n" "$@" > {shlex.quote(str(log))}\n'
        f'printf "%s" {shlex.quote(stderr)} >&2\n'
        f'{then}\n'
        f'exit {exit_code}\n')
    script.chmod(0o755)
    return str(script), log


# Programming

@pytest.fixture
def image(tmp_path):
    path = tmp_path / 'bitstream.gbs'
    path.write_bytes(b'\x00bitstream')
    return str(path)


def test_intel_program_runs_fpgaconf_on_the_pf(conf, tree, tmp_path, image):
    # The fake fpgaconf loads the DMA AFU: the port shows its id.
    afu_id = tree.path(
        'sys/class/fpga/intel-fpga-dev.0/intel-fpga-port.0/afu_id')
    tool, log = fake_tool(
        tmp_path, 'fpgaconf',
        then=f'echo {DMA_AFU} > {shlex.quote(str(afu_id))}')
    configure(conf, tree.root, fpgaconf_path=tool)
    driver = intel_fpga.IntelFpgaDriver(conf)
    driver.program(pci(ARRIA10), f'{HOST}_{ARRIA10}', image,
                   {'id': 'b1', 'properties': {}})
    assert log.read_text().splitlines() == [
        '--bus', '0x3b', '--device', '0x00', '--function', '0x0', image]
    arria10 = by_address(driver.discover())[ARRIA10]
    traits = list(arria10.deployables[0].attributes.values())
    assert f'CUSTOM_FPGA_FUNCTION_ID_INTEL_{DMA_AFU.upper()}' in traits
    assert f'CUSTOM_FPGA_FUNCTION_ID_INTEL_{NLB0_AFU.upper()}' not in traits


def test_intel_program_of_a_card_with_vfs_targets_the_pf(conf, tree,
                                                         tmp_path, image):
    tool, log = fake_tool(tmp_path, 'fpgaconf')
    configure(conf, tree.root, fpgaconf_path=tool,
              fpgaconf_args=['--segment', '0x{domain}', '-B', '0x{bus}',
                             '-D', '0x{device}', '-F', '0x{function}',
                             '{image}'])
    intel_fpga.IntelFpgaDriver(conf).program(
        pci(N3000), f'{HOST}_{N3000}', image, {})
    assert log.read_text().splitlines() == [
        '--segment', '0x0000', '-B', '0x5e', '-D', '0x00', '-F', '0x0',
        image]


def test_intel_program_failure_carries_the_tool_stderr(conf, tree, tmp_path,
                                                       image):
    tool, _ = fake_tool(
        tmp_path, 'fpgaconf', exit_code=1,
        stderr='Error: Bitstream interface ID does not match FPGA')
    configure(conf, tree.root, fpgaconf_path=tool)
    with pytest.raises(exception.DeviceActionError) as err:
        intel_fpga.IntelFpgaDriver(conf).program(
            pci(ARRIA10), f'{HOST}_{ARRIA10}', image, {})
    assert 'Bitstream interface ID does not match FPGA' in str(err.value)
    assert ARRIA10 in str(err.value)


def test_program_without_the_tool_fails(conf, tree, tmp_path, image, caplog):
    missing = str(tmp_path / 'opae' / 'fpgaconf')
    configure(conf, tree.root, fpgaconf_path=missing)
    with caplog.at_level(logging.WARNING):
        driver = intel_fpga.IntelFpgaDriver(conf)
    assert any(missing in r.getMessage() for r in caplog.records)
    with pytest.raises(exception.DeviceActionError,
                       match=f'cannot run {missing}'):
        driver.program(pci(ARRIA10), f'{HOST}_{ARRIA10}', image, {})


@pytest.mark.parametrize('controlpath, name, message', [
    (pci(N3000_VFS[0]), f'{HOST}_{N3000}', 'reports no such device'),
    (pci(U250_MGMT), f'{HOST}_{U250_MGMT}', 'reports no such device'),
    ({'bus': '3b'}, f'{HOST}_{ARRIA10}', 'not a PCI address'),
    (pci(ARRIA10), f'{HOST}_{N3000}', f'no deployable {HOST}_{N3000}'),
    (pci(ARRIA10), f'other_{ARRIA10}', 'no deployable'),
], ids=['vf', 'other vendor', 'not pci', 'other deployable', 'other host'])
def test_program_refuses_what_the_driver_does_not_report(
        conf, tree, tmp_path, image, controlpath, name, message):
    tool, log = fake_tool(tmp_path, 'fpgaconf')
    configure(conf, tree.root, fpgaconf_path=tool)
    with pytest.raises(exception.DeviceActionError, match=message):
        intel_fpga.IntelFpgaDriver(conf).program(controlpath, name, image,
                                                 {})
    assert not log.exists()


def test_program_refuses_a_missing_image(conf, tree, tmp_path):
    tool, log = fake_tool(tmp_path, 'fpgaconf')
    configure(conf, tree.root, fpgaconf_path=tool)
    with pytest.raises(exception.DeviceActionError, match='no bitstream'):
        intel_fpga.IntelFpgaDriver(conf).program(
            pci(ARRIA10), f'{HOST}_{ARRIA10}', str(tmp_path / 'gone'), {})
    assert not log.exists()


def test_xilinx_program_runs_xbmgmt_on_the_management_function(
        conf, tree, tmp_path, image):
    tool, log = fake_tool(tmp_path, 'xbmgmt')
    configure(conf, tree.root, xbmgmt_path=tool)
    driver = xilinx_fpga.XilinxFpgaDriver(conf)
    # As the conductor asks: the control path and the deployable reported.
    [u250] = driver.discover()
    driver.program(u250.controlpath_id, u250.deployables[0].name, image, {})
    assert log.read_text().splitlines() == [
        'program', '--device', '0000:af:00.0', '--user', image]


def test_xilinx_program_argv_is_configurable(conf, tree, tmp_path, image):
    tool, log = fake_tool(tmp_path, 'xbmgmt')
    configure(conf, tree.root, xbmgmt_path=tool,
              xbmgmt_args=['program', '--device', '{address}', '--shell',
                           '{image}', '--force'])
    xilinx_fpga.XilinxFpgaDriver(conf).program(
        pci(U250_MGMT), f'{HOST}_{U250_MGMT}', image, {})
    assert log.read_text().splitlines() == [
        'program', '--device', U250_MGMT, '--shell', image, '--force']


def test_xilinx_program_failure_carries_the_tool_stderr(conf, tree, tmp_path,
                                                        image):
    tool, _ = fake_tool(tmp_path, 'xbmgmt', exit_code=2,
                        stderr='ERROR: Failed to program the user partition')
    configure(conf, tree.root, xbmgmt_path=tool)
    with pytest.raises(exception.DeviceActionError,
                       match='Failed to program the user partition'):
        xilinx_fpga.XilinxFpgaDriver(conf).program(
            pci(U250_MGMT), f'{HOST}_{U250_MGMT}', image, {})


def test_program_runs_behind_the_root_helper(conf, tree, tmp_path, image,
                                             monkeypatch):
    tool, log = fake_tool(tmp_path, 'fpgaconf')
    helper, helper_log = fake_tool(tmp_path, 'helper', then='exec "$@"')
    configure(conf, tree.root, fpgaconf_path=tool)
    conf.set_override('root_helper', helper, 'agent')
    monkeypatch.setattr('os.geteuid', lambda: 1000)
    intel_fpga.IntelFpgaDriver(conf).program(
        pci(ARRIA10), f'{HOST}_{ARRIA10}', image, {})
    assert helper_log.read_text().splitlines()[0] == tool
    assert log.read_text().splitlines()[-1] == image


def test_program_time_limit(conf, tree, tmp_path, image):
    tool, _ = fake_tool(tmp_path, 'fpgaconf', then='exec sleep 30')
    configure(conf, tree.root, fpgaconf_path=tool, program_timeout=1)
    with pytest.raises(exception.DeviceActionError,
                       match='did not finish within 1 seconds'):
        intel_fpga.IntelFpgaDriver(conf).program(
            pci(ARRIA10), f'{HOST}_{ARRIA10}', image, {})


# Configuration

@pytest.mark.parametrize('option, value, message', [
    ('fpgaconf_args', ['--bus', '0x{bus}'], 'add {image}'),
    ('fpgaconf_args', ['--slot', '{slot}', '{image}'],
     "unknown placeholder(s) slot"),
    ('fpgaconf_args', ['{image', '--x'], "'{image'"),
    ('fpgaconf_args', ['{image.name}'], 'image.name'),
    ('fpgaconf_path', ' ', 'fpgaconf_path is empty'),
], ids=['no image', 'unknown', 'unbalanced', 'attribute', 'empty path'])
def test_bad_tool_options_fail_at_construction(conf, tree, option, value,
                                               message):
    configure(conf, tree.root, **{option: value})
    with pytest.raises(exception.Invalid) as err:
        intel_fpga.IntelFpgaDriver(conf)
    assert f'[fpga] {option}' in str(err.value)
    assert message in str(err.value)


def test_bad_tool_options_stop_driver_loading(conf, tree):
    configure(conf, tree.root, xbmgmt_args=['program', '{bdf}', '{image}'])
    conf.set_override('enabled_drivers', ['xilinx_fpga'], 'agent')
    with pytest.raises(exception.DriverError) as err:
        drivers.load_drivers(conf)
    assert '[fpga] xbmgmt_args' in str(err.value)
    assert 'bdf' in str(err.value)
