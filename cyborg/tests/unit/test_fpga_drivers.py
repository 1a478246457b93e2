"""The Intel, Xilinx and Inspur FPGA drivers on fake sysfs trees."""
import logging

import pytest

from cyborg.accelerator import drivers
from cyborg.accelerator.drivers import inspur_fpga
from cyborg.accelerator.drivers import intel_fpga
from cyborg.accelerator.drivers import xilinx_fpga
from cyborg.common import exception
from cyborg.tests.harness.fpga_hosts import ARRIA10
from cyborg.tests.harness.fpga_hosts import ARRIA10_INTERFACE
from cyborg.tests.harness.fpga_hosts import F10A
from cyborg.tests.harness.fpga_hosts import HOST
from cyborg.tests.harness.fpga_hosts import HOST_BRIDGE
from cyborg.tests.harness.fpga_hosts import N3000
from cyborg.tests.harness.fpga_hosts import N3000_INTERFACE
from cyborg.tests.harness.fpga_hosts import N3000_VFS
from cyborg.tests.harness.fpga_hosts import NLB0_AFU
from cyborg.tests.harness.fpga_hosts import PROCESSING_ACCELERATOR
from cyborg.tests.harness.fpga_hosts import U250_MGMT
from cyborg.tests.harness.fpga_hosts import U250_USER
from cyborg.tests.harness.fpga_hosts import add_f10a
from cyborg.tests.harness.fpga_hosts import add_u250
from cyborg.tests.harness.fpga_hosts import by_address
from cyborg.tests.harness.fpga_hosts import check_report
from cyborg.tests.harness.fpga_hosts import configure
from cyborg.tests.harness.fpga_hosts import fpga_host
from cyborg.tests.harness.fpga_hosts import pci
from cyborg.tests.harness.sysfs import SysfsTree


@pytest.fixture
def tree(tmp_path):
    return fpga_host(tmp_path / 'host')


# Intel

def test_intel_pf_with_vfs_lends_its_vfs(conf, tree):
    configure(conf, tree.root)
    devices = by_address(intel_fpga.IntelFpgaDriver(conf).discover())
    assert sorted(devices) == [ARRIA10, N3000]
    n3000 = devices[N3000]
    assert (n3000.type, n3000.vendor, n3000.model) == ('FPGA', '0x8086',
                                                       '0x0b30')
    assert n3000.controlpath_id == pci(N3000)
    assert n3000.std_board_info == {
        'product_id': '0x0b30', 'class_code': '0x120000', 'numa_node': 0,
        'kernel_driver': 'dfl-pci', 'product': 'PAC_N3000',
        'virtual_functions': 2}
    assert n3000.vendor_board_info == {
        'interface_ids': [N3000_INTERFACE.replace('-', '')]}
    [deployable] = n3000.deployables
    # Named after the PF, not after its last VF.
    assert deployable.name == f'{HOST}_{N3000}'
    assert deployable.driver_name == 'intel_fpga'
    assert deployable.num_accelerators == 2
    assert deployable.attributes == {
        'rc': 'FPGA',
        'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_FPGA_INTEL',
        'trait2': 'CUSTOM_FPGA_INTEL_PAC_N3000',
        'trait3': 'CUSTOM_FPGA_REGION_INTEL_9346116DA52D5CA8B06AA9A389EF7C8D'}
    assert [(h.attach_type, h.attach_info)
            for h in deployable.attach_handles] == [
        ('PCI', pci(N3000_VFS[0])), ('PCI', pci(N3000_VFS[1]))]
    check_report(list(devices.values()))


def test_intel_pf_without_vfs_lends_itself_and_reports_its_afu(conf, tree):
    configure(conf, tree.root)
    arria10 = by_address(
        intel_fpga.IntelFpgaDriver(conf).discover())[ARRIA10]
    assert arria10.model == '0x09c4'
    assert arria10.std_board_info['product'] == 'PAC_ARRIA10'
    assert arria10.std_board_info['virtual_functions'] == 0
    assert arria10.vendor_board_info == {
        'interface_ids': [ARRIA10_INTERFACE], 'afu_ids': [NLB0_AFU]}
    [deployable] = arria10.deployables
    assert deployable.name == f'{HOST}_{ARRIA10}'
    assert deployable.num_accelerators == 1
    assert deployable.attributes == {
        'rc': 'FPGA',
        'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_FPGA_INTEL',
        'trait2': 'CUSTOM_FPGA_INTEL_PAC_ARRIA10',
        'trait3': 'CUSTOM_FPGA_REGION_INTEL_CE48969398F05F33946D560708BE108A',
        'trait4': 'CUSTOM_FPGA_FUNCTION_ID_INTEL_'
                  'D8424DC4A4A3C413F89E433683F9040B'}
    [handle] = deployable.attach_handles
    assert (handle.attach_type, handle.attach_info) == ('PCI', pci(ARRIA10))


def test_intel_ofs_card_is_named_by_its_subsystem(conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function('0000:b1:00.0', 0x8086, 0xbcce, PROCESSING_ACCELERATOR,
                      driver='dfl-pci', subsystem_vendor=0x8086,
                      subsystem_device=0x1771)
    tree.add_function('0000:b2:00.0', 0x8086, 0xbcce, PROCESSING_ACCELERATOR,
                      driver='dfl-pci', subsystem_vendor=0x8086,
                      subsystem_device=0x0001)
    configure(conf, tree.root)
    devices = by_address(intel_fpga.IntelFpgaDriver(conf).discover())
    assert devices['0000:b1:00.0'].deployables[0].attributes['trait2'] == (
        'CUSTOM_FPGA_INTEL_N6001')
    assert devices['0000:b2:00.0'].deployables[0].attributes['trait2'] == (
        'CUSTOM_FPGA_INTEL_OFS')


def test_intel_dangling_vf_link_skips_that_vf(conf, tree, caplog):
    tree.remove_function(N3000_VFS[1])
    configure(conf, tree.root)
    with caplog.at_level(logging.WARNING):
        devices = by_address(intel_fpga.IntelFpgaDriver(conf).discover())
    [deployable] = devices[N3000].deployables
    assert deployable.num_accelerators == 1
    assert [h.attach_info for h in deployable.attach_handles] == [
        pci(N3000_VFS[0])]
    assert any(N3000 in r.getMessage() and 'virtfn1' in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)
    assert ARRIA10 in devices


def test_intel_unreadable_vf_is_skipped(conf, tree, caplog):
    tree.write(f'{tree.device_dir(N3000_VFS[0]).relative_to(tree.base)}'
               '/vendor', 'zzzz')
    configure(conf, tree.root)
    with caplog.at_level(logging.WARNING):
        devices = by_address(intel_fpga.IntelFpgaDriver(conf).discover())
    assert [h.attach_info for h in devices[N3000].deployables[0]
            .attach_handles] == [pci(N3000_VFS[1])]
    assert any(N3000_VFS[0] in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


def test_intel_pf_whose_vfs_are_all_gone_is_skipped(conf, tree, caplog):
    for vf in N3000_VFS:
        tree.remove_function(vf)
    configure(conf, tree.root)
    with caplog.at_level(logging.WARNING):
        devices = by_address(intel_fpga.IntelFpgaDriver(conf).discover())
    assert sorted(devices) == [ARRIA10]
    assert any(f'Skipping Intel FPGA {N3000}' in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)


def test_intel_malformed_afu_id_is_ignored_with_a_warning(conf, tree, caplog):
    add_afu = tree.path('sys/class/fpga/intel-fpga-dev.0/intel-fpga-port.0/'
                        'afu_id')
    add_afu.write_text('not-an-id\n')
    configure(conf, tree.root)
    with caplog.at_level(logging.WARNING):
        arria10 = by_address(
            intel_fpga.IntelFpgaDriver(conf).discover())[ARRIA10]
    traits = arria10.deployables[0].attributes.values()
    assert not any(t.startswith('CUSTOM_FPGA_FUNCTION_ID') for t in traits)
    assert any(ARRIA10 in r.getMessage() and 'not-an-id' in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)


def test_intel_ignores_other_devices(conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function(HOST_BRIDGE, 0x8086, 0x2020, 0x060000)
    tree.add_function('0000:60:00.0', 0x8086, 0x0d58, 0x020000,
                      driver='i40e')
    add_u250(tree)
    configure(conf, tree.root)
    assert intel_fpga.IntelFpgaDriver(conf).discover() == []


# Xilinx

def test_xilinx_slot_is_one_device_lending_its_user_function(conf, tree):
    configure(conf, tree.root)
    [u250] = xilinx_fpga.XilinxFpgaDriver(conf).discover()
    assert (u250.type, u250.vendor, u250.model) == ('FPGA', '0x10ee',
                                                    '0x5004')
    assert u250.controlpath_id == pci(U250_MGMT)
    assert u250.std_board_info == {
        'product_id': '0x5004', 'class_code': '0x120000',
        'subsystem_vendor_id': '0x10ee', 'subsystem_device_id': '0x000e',
        'numa_node': 1, 'kernel_driver': 'xclmgmt',
        'management_function': U250_MGMT, 'user_functions': [U250_USER],
        'user_product_id': '0x5005'}
    [deployable] = u250.deployables
    assert deployable.name == f'{HOST}_{U250_MGMT}'
    assert deployable.driver_name == 'xilinx_fpga'
    assert deployable.num_accelerators == 1
    assert deployable.attributes == {
        'rc': 'FPGA', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_FPGA_XILINX',
        'trait2': 'CUSTOM_FPGA_PRODUCT_ID_5004'}
    # The management function is the control path only, never handed out.
    assert [(h.attach_type, h.attach_info)
            for h in deployable.attach_handles] == [('PCI', pci(U250_USER))]
    check_report([u250])


def test_xilinx_management_function_found_by_its_driver(conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function('0000:d8:00.0', 0x10ee, 0x500d, PROCESSING_ACCELERATOR,
                      driver='xocl')
    tree.add_function('0000:d8:00.1', 0x10ee, 0x500c, PROCESSING_ACCELERATOR,
                      driver='xclmgmt')
    configure(conf, tree.root)
    [card] = xilinx_fpga.XilinxFpgaDriver(conf).discover()
    assert card.controlpath_id == pci('0000:d8:00.1')
    assert card.deployables[0].attributes['trait2'] == (
        'CUSTOM_FPGA_PRODUCT_ID_500C')
    assert [h.attach_info for h in card.deployables[0].attach_handles] == [
        pci('0000:d8:00.0')]


def test_xilinx_card_without_a_user_function_offers_nothing(conf, tmp_path,
                                                            caplog):
    tree = SysfsTree(tmp_path)
    tree.add_function(U250_MGMT, 0x10ee, 0x5004, PROCESSING_ACCELERATOR,
                      driver='xclmgmt')
    configure(conf, tree.root)
    with caplog.at_level(logging.WARNING):
        [card] = xilinx_fpga.XilinxFpgaDriver(conf).discover()
    # Still a device, so that it can be programmed through its management
    # function, but with nothing to hand out.
    assert card.controlpath_id == pci(U250_MGMT)
    [deployable] = card.deployables
    assert (deployable.num_accelerators, deployable.attach_handles) == (0, [])
    assert f'Xilinx card {U250_MGMT} shows no user function' in caplog.text
    check_report([card])


def test_xilinx_ignores_other_devices(conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function(HOST_BRIDGE, 0x8086, 0x2020, 0x060000)
    # A Xilinx PCIe development design that is not a processing
    # accelerator.
    tree.add_function('0000:65:00.0', 0x10ee, 0x7024, 0x058000)
    add_f10a(tree)
    configure(conf, tree.root)
    assert xilinx_fpga.XilinxFpgaDriver(conf).discover() == []


# Inspur

def test_inspur_card_is_one_deployable(conf, tree):
    configure(conf, tree.root)
    [f10a] = inspur_fpga.InspurFpgaDriver(conf).discover()
    assert (f10a.type, f10a.vendor, f10a.model) == ('FPGA', '0x1bd4',
                                                    '0xa115')
    assert f10a.controlpath_id == pci(F10A)
    assert f10a.std_board_info == {'product_id': '0xa115',
                                   'class_code': '0x120000', 'numa_node': 0}
    [deployable] = f10a.deployables
    assert deployable.name == f'{HOST}_{F10A}'
    assert deployable.driver_name == 'inspur_fpga'
    assert deployable.num_accelerators == 1
    assert deployable.attributes == {
        'rc': 'FPGA', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_FPGA_INSPUR',
        'trait2': 'CUSTOM_FPGA_PRODUCT_ID_A115'}
    assert [(h.attach_type, h.attach_info)
            for h in deployable.attach_handles] == [('PCI', pci(F10A))]
    check_report([f10a])


def test_inspur_ignores_its_storage_and_other_devices(conf, tmp_path):
    tree = SysfsTree(tmp_path)
    # An Inspur NVMe drive, and an Inspur-branded SmartRAID controller.
    tree.add_function('0000:d8:00.0', 0x1bd4, 0x1001, 0x010802,
                      driver='nvme')
    tree.add_function('0000:18:00.0', 0x9005, 0x028f, 0x010700,
                      driver='smartpqi', subsystem_vendor=0x1bd4,
                      subsystem_device=0x0072)
    add_u250(tree)
    configure(conf, tree.root)
    assert inspur_fpga.InspurFpgaDriver(conf).discover() == []


def test_inspur_cannot_program(conf, tree, tmp_path):
    configure(conf, tree.root)
    image = tmp_path / 'image.bin'
    image.write_bytes(b'bits')
    with pytest.raises(exception.NotSupported, match='inspur_fpga'):
        inspur_fpga.InspurFpgaDriver(conf).program(
            pci(F10A), f'{HOST}_{F10A}', str(image), {})


# All three together

def test_loaded_by_name_and_reporting_together(conf, tree):
    configure(conf, tree.root)
    conf.set_override('enabled_drivers',
                      ['intel_fpga', 'xilinx_fpga', 'inspur_fpga'], 'agent')
    loaded = drivers.load_drivers(conf)
    assert [type(d) for d in loaded] == [intel_fpga.IntelFpgaDriver,
                                         xilinx_fpga.XilinxFpgaDriver,
                                         inspur_fpga.InspurFpgaDriver]
    devices = [device for d in loaded for device in d.discover()]
    assert sorted(by_address(devices)) == sorted(
        [N3000, ARRIA10, U250_MGMT, F10A])
    # The agent finds the driver to program with by the deployable's
    # driver_name: it must be the loaded driver's own.
    for driver in loaded:
        for device in driver.discover():
            assert device.deployables[0].driver_name == type(
                driver).driver_name
    check_report(devices)


def test_nothing_on_a_host_without_fpgas(conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function(HOST_BRIDGE, 0x8086, 0x2020, 0x060000)
    configure(conf, tree.root)
    for cls in (intel_fpga.IntelFpgaDriver, xilinx_fpga.XilinxFpgaDriver,
                inspur_fpga.InspurFpgaDriver):
        assert cls(conf).discover() == []
