"""Binds never hand a tenant a function it must not have.

A management function (an Alveo card's ``xclmgmt`` function, which
programs the card) and a physical function whose SR-IOV virtual functions
are enabled (its host driver serves the VFs) are never attach handles,
whatever order the binding code searches handles in. Each driver runs its
discovery over a fake sysfs tree; its report goes through the conductor's
inventory code into a real database, and ARQs are bound and deleted there
many times over, so that the handle search cycles through every handle.
"""
import collections
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator import pci
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import generic_pci
from cyborg.accelerator.drivers import huawei_ascend
from cyborg.accelerator.drivers import inspur_fpga
from cyborg.accelerator.drivers import inspur_nvme_ssd
from cyborg.accelerator.drivers import intel_fpga
from cyborg.accelerator.drivers import intel_nic
from cyborg.accelerator.drivers import intel_qat
from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.accelerator.drivers import nvidia_nic
from cyborg.accelerator.drivers import xilinx_fpga
from cyborg.common import device_report
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import attach_handles
from cyborg.db.api import bind_ends
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.tests.harness import fpga_hosts
from cyborg.tests.harness.sysfs import SysfsTree

HOST = 'cmp1'
NODE = 'node1'
CYCLES = 25
ACCELERATOR = 0x120000


def _address(info: dict[str, str]) -> str:
    return '{domain}:{bus}:{device}.{function}'.format(**info)


# Host trees, one per driver family. Each adds, next to what the driver
# may hand out, functions it must not.

def _xilinx(tree: SysfsTree) -> None:
    fpga_hosts.add_u250(tree)
    # A card whose management function is not the slot's first.
    tree.add_function('0000:d8:00.0', 0x10ee, 0x500d, ACCELERATOR,
                      driver='xocl')
    tree.add_function('0000:d8:00.1', 0x10ee, 0x500c, ACCELERATOR,
                      driver='xclmgmt')


def _intel_fpga(tree: SysfsTree) -> None:
    fpga_hosts.add_n3000(tree)
    fpga_hosts.add_arria10(tree)


def _gone_vfs(tree: SysfsTree, pf: str, vfs: list[str], vendor: int,
              device: int) -> None:
    """VFs enabled on ``pf`` whose entries have gone (their virtfn links
    dangle), as while VFs are being torn down or after a failed probe."""
    tree.add_vfs(pf, vfs, vendor, device, driver='vfio-pci')
    for vf in vfs:
        tree.remove_function(vf)


def _intel_nic(tree: SysfsTree) -> None:
    tree.add_function('0000:af:00.0', 0x8086, 0x1593, 0x020000,
                      driver='ice', sriov_totalvfs=128)
    tree.add_vfs('0000:af:00.0', ['0000:af:01.0', '0000:af:01.1'], 0x8086,
                 0x1889, driver='vfio-pci')
    tree.add_function('0000:af:00.1', 0x8086, 0x1593, 0x020000,
                      driver='ice')
    tree.add_function('0000:3b:00.0', 0x8086, 0x1572, 0x020000,
                      driver='i40e', sriov_totalvfs=64)
    _gone_vfs(tree, '0000:3b:00.0', ['0000:3b:02.0', '0000:3b:02.1'],
              0x8086, 0x154c)


def _intel_qat(tree: SysfsTree) -> None:
    tree.add_function('0000:3d:00.0', 0x8086, 0x37c8, 0x0b4000,
                      driver='c6xx', sriov_totalvfs=16)
    tree.add_vfs('0000:3d:00.0', ['0000:3d:01.0', '0000:3d:01.1',
                                  '0000:3d:01.2'], 0x8086, 0x37c9,
                 driver='vfio-pci')
    tree.add_function('0000:3f:00.0', 0x8086, 0x37c8, 0x0b4000,
                      driver='c6xx', sriov_totalvfs=16)
    tree.add_function('0000:da:00.0', 0x8086, 0x37c8, 0x0b4000,
                      driver='c6xx', sriov_totalvfs=16)
    _gone_vfs(tree, '0000:da:00.0', ['0000:da:01.0'], 0x8086, 0x37c9)


A100_VGPU = '0000:ca:00.0'
A100_WHOLE = '0000:cb:00.0'
VGPU_TYPE = 'nvidia-474'


def _nvidia(tree: SysfsTree) -> None:
    # A T4 passed through whole.
    tree.add_function('0000:3b:00.0', 0x10de, 0x1eb8, 0x030200,
                      driver='nvidia')
    # An A100 serving vGPUs through its VFs (up to 4 of this type).
    vfs = [f'0000:ca:00.{n}' for n in range(4, 8)]
    tree.add_function(A100_VGPU, 0x10de, 0x20f1, 0x030200, driver='nvidia',
                      sriov_totalvfs=16)
    tree.add_vfs(A100_VGPU, vfs, 0x10de, 0x20f1, driver='nvidia')
    for vf in vfs:
        type_dir = tree.add_mdev_type(vf, VGPU_TYPE, 'GRID A100-10C', 1)
        (type_dir / 'description').write_text('max_instance=4\n')
    # An A100 with its VFs enabled but no vGPU type configured: with its
    # host driver serving the VFs it is not a whole GPU to pass through.
    tree.add_function(A100_WHOLE, 0x10de, 0x20f1, 0x030200, driver='nvidia',
                      sriov_totalvfs=16)
    tree.add_vfs(A100_WHOLE, ['0000:cb:00.4', '0000:cb:00.5'], 0x10de,
                 0x20f1, driver='nvidia')


def _nvidia_conf(conf) -> None:
    conf.set_override('enabled_vgpu_types', [VGPU_TYPE], 'gpu_devices')
    conf.set_override('vgpu_type_addresses', [f'{VGPU_TYPE}:{A100_VGPU}'],
                      'gpu_devices')


def _generic(tree: SysfsTree) -> None:
    tree.add_function('0000:3b:00.0', 0x10de, 0x1eb8, 0x030200,
                      driver='vfio-pci', sriov_totalvfs=16)
    tree.add_vfs('0000:3b:00.0', ['0000:3b:00.4', '0000:3b:00.5'], 0x10de,
                 0x1eb9, driver='vfio-pci')
    tree.add_function('0000:5e:00.0', 0x10de, 0x1eb8, 0x030200,
                      driver='vfio-pci')


def _generic_conf(conf) -> None:
    conf.set_override('device_specs', [json.dumps(
        {'class': '0x0302', 'type': 'GPU'})], 'generic_pci')


def _with_vfs(vendor: int, device: int, class_code: int, driver: str,
              pf: str, vfs: list[str], whole: str
              ) -> Callable[[SysfsTree], None]:
    """A PF with VFs of the same ids, and one without VFs."""
    def build(tree: SysfsTree) -> None:
        tree.add_function(pf, vendor, device, class_code, driver=driver,
                          sriov_totalvfs=8)
        tree.add_vfs(pf, vfs, vendor, device, driver='vfio-pci')
        tree.add_function(whole, vendor, device, class_code, driver=driver)
    return build


def _none(conf) -> None:
    pass


# name: (driver class, tree builder, extra configuration)
FAMILIES: dict[str, tuple[type, Callable[[SysfsTree], None],
                          Callable[[Any], None]]] = {
    'xilinx_fpga': (xilinx_fpga.XilinxFpgaDriver, _xilinx, _none),
    'intel_fpga': (intel_fpga.IntelFpgaDriver, _intel_fpga, _none),
    'intel_nic': (intel_nic.IntelNicDriver, _intel_nic, _none),
    'intel_qat': (intel_qat.IntelQatDriver, _intel_qat, _none),
    'nvidia_gpu': (nvidia_gpu.NvidiaGpuDriver, _nvidia, _nvidia_conf),
    'nvidia_nic': (nvidia_nic.NvidiaNicDriver, _with_vfs(
        0x15b3, 0x101d, 0x020000, 'mlx5_core', '0000:3b:00.0',
        ['0000:3b:00.2', '0000:3b:00.3'], '0000:3c:00.0'), _none),
    'generic_pci': (generic_pci.GenericPciDriver, _generic, _generic_conf),
    'huawei_ascend': (huawei_ascend.HuaweiAscendDriver, _with_vfs(
        0x19e5, 0xd500, ACCELERATOR, 'devdrv_device_driver', '0000:01:00.0',
        ['0000:01:00.1', '0000:01:00.2'], '0000:02:00.0'), _none),
    'inspur_nvme_ssd': (inspur_nvme_ssd.InspurNvmeSsdDriver, _with_vfs(
        0x1bd4, 0x1001, 0x010802, 'nvme', '0000:d8:00.0',
        ['0000:d8:00.1', '0000:d8:00.2'], '0000:d9:00.0'), _none),
    'inspur_fpga': (inspur_fpga.InspurFpgaDriver, _with_vfs(
        0x1bd4, 0xa115, ACCELERATOR, 'inspur-fpga', '0000:86:00.0',
        ['0000:86:00.1', '0000:86:00.2'], '0000:87:00.0'), _none),
}


def kept_from_tenants(root: str) -> set[str]:
    """Addresses of the functions no tenant may get: management functions
    and PFs with VFs enabled, read from the tree as sysfs shows them."""
    return {f.address for f in pci.PciBus(root).functions()
            if f.driver == xilinx_fpga.MANAGEMENT_DRIVER
            or f.virtfns or f.sriov_numvfs}


def _report(devices) -> dict[str, Any]:
    report = {'hostname': NODE, 'devices': [d.to_dict() for d in devices]}
    device_report.validate_report(HOST, report)
    return report


def _handle_rows(engine) -> list[sa.engine.Row]:
    ah = models.AttachHandle
    with engine.connect() as conn:
        return conn.execute(sa.select(ah.id, ah.attach_info, ah.in_use,
                                      ah.missing_since)
                            .order_by(ah.id)).all()


class Binder:
    """Binds and deletes ARQs as Nova's create and delete would."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.ctx = cyborg_context.get_admin_context()
        device_profiles.create(self.ctx, {'name': 'dp', 'groups': [
            {'resources:CUSTOM_ANY': '1'}]})

    def bind(self, rp_uuid: str) -> tuple[str, dict[str, str] | None]:
        """Bind one new ARQ; (its uuid, its handle's attach info)."""
        arq = arqs.create(self.ctx, 'dp', 'project')[0]['uuid']
        batch = arq_bindings.apply_patch(self.ctx, {arq: {
            'hostname': NODE, 'device_rp_uuid': rp_uuid,
            'instance_uuid': str(uuid.uuid4())}}, [])
        if batch.states[arq] == 'BindStarted':
            # A device-side step (an mdev to create) that succeeded.
            bind_ends.finish_binds(self.ctx, batch.jobs, [])
        with self.engine.connect() as conn:
            info = conn.scalar(
                sa.select(models.AttachHandle.attach_info)
                .join(models.AcceleratorRequest,
                      models.AcceleratorRequest.attach_handle_id
                      == models.AttachHandle.id)
                .where(models.AcceleratorRequest.uuid == arq))
        return arq, None if info is None else json.loads(info)

    def delete(self, arq: str) -> None:
        batch = arq_bindings.delete(self.ctx, uuids=[arq])
        # The agent confirms the mdevs it was asked to remove gone.
        attach_handles.free_released(
            self.ctx, [r['attach_handle_id'] for r in batch.released])


def cycle(binder: Binder, rp_uuid: str, accelerators: int,
          forbidden: set[str], cycles: int = CYCLES) -> collections.Counter:
    """Bind ``cycles`` ARQs to the deployable, deleting the oldest whenever
    all its accelerators are taken; every bind must get a handle that is
    not ``forbidden`` and not held by another live ARQ. Returns how often
    each address was handed out."""
    live: collections.deque[tuple[str, str]] = collections.deque()
    given: collections.Counter = collections.Counter()
    for n in range(cycles):
        if len(live) == accelerators:
            binder.delete(live.popleft()[0])
        arq, info = binder.bind(rp_uuid)
        assert info is not None, f'bind {n} found no free handle'
        address = _address(info)
        assert address not in forbidden, (
            f'bind {n} handed out {address}, which no tenant may have')
        key = device_report.canonical_json(info)
        assert key not in {k for _, k in live}, f'{key} handed out twice'
        live.append((arq, key))
        given[address] += 1
    for arq, _ in live:
        binder.delete(arq)
    return given


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_binds_never_hand_out_a_function_kept_from_tenants(
        conf, db_engine, tmp_path, family):
    driver_class, build, configure = FAMILIES[family]
    tree = SysfsTree(tmp_path / 'host')
    build(tree)
    conf.set_override('host', HOST)
    conf.set_override('hostname', NODE, 'agent')
    conf.set_override('sysfs_root', tree.root, 'agent')
    configure(conf)
    forbidden = kept_from_tenants(tree.root)
    assert forbidden
    devices = driver_class(conf).discover()
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, _report(devices))
    binder = Binder(db_engine)
    for device in inventory.get_host_devices(ctx, HOST):
        for deployable in device['deployables']:
            handles = {_address(h['attach_info'])
                       for h in deployable['attach_handles']}
            if not handles:
                continue
            given = cycle(binder, deployable['rp_uuid'],
                          deployable['num_accelerators'], forbidden)
            assert sum(given.values()) == CYCLES
            assert set(given) <= handles
    rows = _handle_rows(db_engine)
    assert not any(r.in_use for r in rows)
    # Whatever the search order: such a function is no handle at all.
    offered = {_address(json.loads(r.attach_info)) for r in rows}
    assert offered and not offered & forbidden


def test_fake_driver_hands_out_neither_control_path(conf, db_engine):
    conf.set_override('host', HOST)
    conf.set_override('hostname', NODE, 'agent')
    conf.set_override('device_count', 2, 'fake_driver')
    conf.set_override('accelerators_per_device', 9, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('vgpus_per_device', 3, 'fake_driver')
    devices = fake.FakeDriver(conf).discover()
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, _report(devices))
    binder = Binder(db_engine)
    for device in inventory.get_host_devices(ctx, HOST):
        control = _address(device['controlpath_id']['cpid_info'])
        # A vGPU names its GPU as its parent; a card's control path is no
        # function to pass through.
        forbidden = set() if device['type'] == 'GPU' else {control}
        [deployable] = device['deployables']
        given = cycle(binder, deployable['rp_uuid'],
                      deployable['num_accelerators'], forbidden)
        assert sum(given.values()) == CYCLES


# Upgrade: a database written by an agent that offered the management
# function.

def _u250(conf, tmp_path):
    tree = SysfsTree(tmp_path / 'host')
    fpga_hosts.add_u250(tree)
    conf.set_override('host', HOST)
    conf.set_override('hostname', NODE, 'agent')
    conf.set_override('sysfs_root', tree.root, 'agent')
    report = _report(xilinx_fpga.XilinxFpgaDriver(conf).discover())
    old = json.loads(json.dumps(report))
    [deployable] = old['devices'][0]['deployables']
    handles = deployable['attach_handles']
    mgmt = fpga_hosts.pci(fpga_hosts.U250_MGMT)
    if mgmt not in [h['attach_info'] for h in handles]:
        handles.append({'attach_type': 'PCI', 'attach_info': mgmt})
    return old, report


def _mgmt_rows(engine) -> list[sa.engine.Row]:
    return [r for r in _handle_rows(engine)
            if _address(json.loads(r.attach_info)) == fpga_hosts.U250_MGMT]


def _rp_uuid(ctx) -> str:
    [device] = inventory.get_host_devices(ctx, HOST)
    return device['deployables'][0]['rp_uuid']


def test_upgrade_drops_a_free_management_handle(conf, db_engine, tmp_path):
    old, new = _u250(conf, tmp_path)
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, old)
    assert len(_mgmt_rows(db_engine)) == 1
    result = inventory.apply_report(ctx, HOST, new)
    assert result.kept_in_use == 0
    assert _mgmt_rows(db_engine) == []
    given = cycle(Binder(db_engine), _rp_uuid(ctx), 1,
                  {fpga_hosts.U250_MGMT})
    assert set(given) == {fpga_hosts.U250_USER}


def _hold_mgmt(engine, binder: Binder, rp_uuid: str) -> str:
    """An ARQ bound to the management handle of the old database (the
    binding code takes handles in id order until its search wraps)."""
    first, info = binder.bind(rp_uuid)
    assert _address(info) == fpga_hosts.U250_USER
    second, info = binder.bind(rp_uuid)
    assert _address(info) == fpga_hosts.U250_MGMT
    binder.delete(first)
    return second


def test_upgrade_keeps_a_held_management_handle_until_freed(
        conf, db_engine, tmp_path):
    old, new = _u250(conf, tmp_path)
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, old)
    binder = Binder(db_engine)
    rp_uuid = _rp_uuid(ctx)
    holder = _hold_mgmt(db_engine, binder, rp_uuid)
    # The instance holding it keeps it: its handle stays while it is held.
    result = inventory.apply_report(ctx, HOST, new)
    assert result.kept_in_use == 1
    [row] = _mgmt_rows(db_engine)
    assert row.in_use
    binder.delete(holder)
    # The next report, the periodic full one at the latest, removes it.
    result = inventory.apply_report(ctx, HOST, new)
    assert result.kept_in_use == 0
    assert _mgmt_rows(db_engine) == []
    given = cycle(binder, rp_uuid, 1, {fpga_hosts.U250_MGMT})
    assert set(given) == {fpga_hosts.U250_USER}


def test_a_freed_management_handle_is_not_bindable_before_the_next_report(
        conf, sqlite_engine, tmp_path):
    old, new = _u250(conf, tmp_path)
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, old)
    binder = Binder(sqlite_engine)
    holder = _hold_mgmt(sqlite_engine, binder, _rp_uuid(ctx))
    inventory.apply_report(ctx, HOST, new)
    binder.delete(holder)
    # Freed, it is still a row until the next report; no bind takes it.
    [row] = _mgmt_rows(sqlite_engine)
    assert not row.in_use and row.missing_since is not None
    given = cycle(binder, _rp_uuid(ctx), 1, {fpga_hosts.U250_MGMT})
    assert set(given) == {fpga_hosts.U250_USER}
