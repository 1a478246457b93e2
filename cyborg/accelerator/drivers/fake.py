"""A driver for devices that do not exist: FPGA-like, for tests and demos.

Its lifecycle (layouts, preparation, cleaning) is in memory too; each
call is recorded in ``[fake_driver] clean_log`` for tests in other
processes (read with :func:`read_program_log`, the same JSON lines).
"""
import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from oslo_config import cfg

from cyborg.accelerator.drivers import fake_health
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.accelerator.drivers.base import bitstream_trait
from cyborg.accelerator.drivers.base import function_trait
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import VGPU_TYPE as VGPU_TYPE_KEY
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDeployable
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import canonical_json
from cyborg.common.device_report import check_layout
from cyborg.common.device_report import pci_address

VENDOR_ID = '0xabcd'
PRODUCT_ID = '0xfa4e'
GPU_PRODUCT_ID = '0x6a11'
VGPU_TYPE = 'fake-vgpu-1'
# Up to 200 fake cards per PCI domain, from bus 0x0c upwards.
_BUSES_PER_DOMAIN = 200
_FIRST_BUS = 0x0c
# FPGA cards from domain 0000 upwards, GPUs from domain 1000 upwards.
_FIRST_FPGA_DOMAIN = 0x0000
_FIRST_GPU_DOMAIN = 0x1000
_PCI_KEYS = ('domain', 'bus', 'device', 'function')


def _address(index: int, first_domain: int) -> dict[str, str]:
    domain, bus = divmod(index, _BUSES_PER_DOMAIN)
    return pci_address(f'{first_domain + domain:04x}',
                       f'{_FIRST_BUS + bus:02x}', '00', '0')


def _index(address: dict[str, str], first_domain: int, count: int
           ) -> int | None:
    """The index of the fake device at PCI ``address``, if there is one."""
    try:
        wanted = pci_address(*(address[k] for k in _PCI_KEYS))
        domain, bus = int(wanted['domain'], 16), int(wanted['bus'], 16)
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    index = ((domain - first_domain) * _BUSES_PER_DOMAIN
             + bus - _FIRST_BUS)
    if 0 <= index < count and _address(index, first_domain) == wanted:
        return index
    return None


def _slot(address: dict[str, str]) -> str:
    return '{domain}:{bus}:{device}.{function}'.format(**address)


def _kind(slot: str, cards: int, gpus: int) -> tuple[str, int] | None:
    """('card'|'gpu', index) of the fake device at ``slot``, if any."""
    domain, bus, rest = slot.split(':')
    device, function = rest.split('.')
    address = pci_address(domain, bus, device, function)
    for kind, first, count in (('card', _FIRST_FPGA_DOMAIN, cards),
                               ('gpu', _FIRST_GPU_DOMAIN, gpus)):
        index = _index(address, first, count)
        if index is not None:
            return kind, index
    return None


def read_program_log(path: str) -> list[dict[str, Any]]:
    """The calls recorded in a ``[fake_driver] program_log`` file."""
    try:
        with open(path, encoding='utf-8') as log:
            return [json.loads(line) for line in log if line.strip()]
    except FileNotFoundError:
        return []


class FakeDriver(AcceleratorDriver):
    """Reports ``[fake_driver] device_count`` FPGA-like cards and
    ``[fake_driver] vgpu_device_count`` GPUs offering vGPUs.

    Each card is one device with one deployable whose accelerators are
    TEST_PCI functions 1..N of the card's slot; Nova ignores TEST_PCI
    handles, so fake devices can be bound but are never passed through.
    A card can be programmed: from then on it reports the function of its
    bitstream as a trait. Each GPU is one device with one deployable whose
    accelerators are MDEV attach handles, or, with ``[fake_driver]
    vgpu_handles = sriov``, PCI handles of VFs given a vGPU type at bind;
    either is created and removed in memory.

    What the device-side actions did is kept on the instance for tests:
    ``program_calls`` (every call to ``program``, oldest first),
    ``loaded`` (bitstream per card slot) and ``mdevs`` (mdev uuid → parent
    GPU slot).
    """

    driver_name = 'fake'
    conf_group = 'fake_driver'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self._lock = threading.Lock()
        self.program_calls: list[dict[str, Any]] = []
        self.loaded: dict[str, dict[str, Any]] = {}
        self.mdevs: dict[str, str] = {}
        # vGPUs offered per GPU slot by a layout; the others offer
        # [fake_driver] vgpus_per_device.
        self.mdev_counts: dict[str, int] = {}
        #: Every prepare, clean and layout call, oldest first.
        self.lifecycle_calls: list[dict[str, Any]] = []
        # Programs and mdev creations under way (see [fake_driver]
        # action_seconds).
        self.busy = 0
        # Successful programs per card slot, for usage counters.
        self.programs: dict[str, int] = {}
        fake_health.parse_faults(conf.fake_driver.faults, self._is_fake)

    def _deployable_name(self, address: dict[str, str]) -> str:
        return f'{self.hostname}_{_slot(address)}'

    def _card(self, index: int) -> DriverDevice:
        options = self.conf.fake_driver
        address = _address(index, _FIRST_FPGA_DOMAIN)
        handles = []
        for function_number in range(1, options.accelerators_per_device + 1):
            device, function = divmod(function_number, 8)
            handles.append(DriverAttachHandle(
                attach_type='TEST_PCI',
                attach_info=pci_address(address['domain'], address['bus'],
                                        f'{device:02x}', f'{function:x}')))
        attributes = {'rc': 'FPGA',
                      'trait0': 'CUSTOM_FAKE_DEVICE',
                      'trait1': 'OWNER_CYBORG'}
        bitstream = self.loaded.get(_slot(address))
        if bitstream is not None:
            attributes['trait_function'] = self._function_trait(bitstream)
        deployable = DriverDeployable(
            name=self._deployable_name(address),
            num_accelerators=len(handles),
            driver_name=self.driver_name,
            attributes=attributes,
            attach_handles=handles)
        return DriverDevice(
            type='FPGA', vendor=VENDOR_ID, model='fake-fpga',
            controlpath_id=address,
            std_board_info={'product_id': PRODUCT_ID,
                            'controller': 'Processing accelerators'},
            vendor_board_info={'firmware': 'fake-1.0'},
            deployables=[deployable])

    def _gpu(self, index: int) -> DriverDevice:
        address = _address(index, _FIRST_GPU_DOMAIN)
        # A VF handle names the vGPU type a bind gives it.
        sriov = ({VGPU_TYPE_KEY: VGPU_TYPE}
                 if self.conf.fake_driver.vgpu_handles == 'sriov' else None)
        handles = [
            DriverAttachHandle(
                attach_type='PCI' if sriov else 'MDEV',
                attach_info=dict(address, asked_type=VGPU_TYPE,
                                 vgpu_mark=f'{VGPU_TYPE}_{n}',
                                 **(sriov or {})))
            for n in range(self.mdev_counts.get(
                _slot(address), self.conf.fake_driver.vgpus_per_device))]
        deployable = DriverDeployable(
            name=self._deployable_name(address),
            num_accelerators=len(handles),
            driver_name=self.driver_name,
            attributes={'rc': 'VGPU',
                        'trait0': 'OWNER_CYBORG',
                        'trait1': 'CUSTOM_FAKE_VGPU'},
            attach_handles=handles)
        return DriverDevice(
            type='GPU', vendor=VENDOR_ID, model='fake-gpu',
            controlpath_id=address,
            std_board_info={'product_id': GPU_PRODUCT_ID,
                            'controller': 'VGA compatible controller'},
            vendor_board_info={'firmware': 'fake-1.0'},
            deployables=[deployable])

    def discover(self) -> list[DriverDevice]:
        options = self.conf.fake_driver
        with self._lock:
            return ([self._card(i) for i in range(options.device_count)]
                    + [self._gpu(i)
                       for i in range(options.vgpu_device_count)])

    @staticmethod
    def _function_trait(bitstream: dict[str, Any]) -> str:
        function_id = bitstream.get('properties', {}).get(
            'accel:function_id')
        if function_id:
            return function_trait('fake', function_id)
        return bitstream_trait('fake', bitstream['id'])

    def program(self, controlpath_id: dict[str, str], deployable_name: str,
                image_path: str, bitstream: dict[str, Any]) -> None:
        call: dict[str, Any] = {
            'controlpath_id': dict(controlpath_id),
            'deployable_name': deployable_name,
            'image_path': image_path,
            'bitstream': dict(bitstream),
            'error': None}
        try:
            self._program(call)
        except exception.DeviceActionError as exc:
            call['error'] = str(exc)
            raise
        finally:
            self._record(call)

    def _program(self, call: dict[str, Any]) -> None:
        def fail(reason: str) -> exception.DeviceActionError:
            return exception.DeviceActionError(
                action='program', reason=reason,
                device=canonical_json(call['controlpath_id']))

        index = _index(call['controlpath_id'], _FIRST_FPGA_DOMAIN,
                       self.conf.fake_driver.device_count)
        if index is None:
            raise fail('no such fake FPGA')
        address = _address(index, _FIRST_FPGA_DOMAIN)
        if call['deployable_name'] != self._deployable_name(address):
            raise fail(f'it has no deployable {call["deployable_name"]}')
        self._take_time()
        if self.conf.fake_driver.program_fail:
            raise fail('[fake_driver] program_fail is set')
        # A real driver hands the file to the vendor tool; reading it
        # makes a missing or unreadable file fail here too.
        digest = hashlib.sha256()
        try:
            with open(call['image_path'], 'rb') as image:
                for chunk in iter(lambda: image.read(1 << 20), b''):
                    digest.update(chunk)
        except OSError as exc:
            raise fail(f'cannot read {call["image_path"]}: {exc}') from exc
        call['image_sha256'] = digest.hexdigest()
        with self._lock:
            self.loaded[_slot(address)] = call['bitstream']
            self.programs[_slot(address)] = (
                self.programs.get(_slot(address), 0) + 1)

    def _record(self, call: dict[str, Any]) -> None:
        with self._lock:
            self.program_calls.append(call)
            path = self.conf.fake_driver.program_log
            if path:
                with open(path, 'a', encoding='utf-8') as log:
                    log.write(json.dumps(call, sort_keys=True) + '\n')

    def _take_time(self) -> None:
        if self.conf.fake_driver.action_seconds:
            with self._lock:
                self.busy += 1
            try:
                time.sleep(self.conf.fake_driver.action_seconds)
            finally:
                with self._lock:
                    self.busy -= 1

    def _gpu_slot(self, action: str, attach_info: dict[str, str]) -> str:
        index = _index(attach_info, _FIRST_GPU_DOMAIN,
                       self.conf.fake_driver.vgpu_device_count)
        if index is None:
            raise exception.DeviceActionError(
                action=action, device=canonical_json(attach_info),
                reason='no such fake GPU')
        if attach_info.get('asked_type') != VGPU_TYPE:
            raise exception.DeviceActionError(
                action=action, device=canonical_json(attach_info),
                reason=f'the fake GPU only offers type {VGPU_TYPE}')
        return _slot(_address(index, _FIRST_GPU_DOMAIN))

    def create_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        parent = self._gpu_slot('create mdev', attach_info)
        self._take_time()
        with self._lock:
            if mdev_uuid in self.mdevs:
                raise exception.DeviceActionError(
                    action='create mdev', device=parent,
                    reason=f'mdev {mdev_uuid} already exists on '
                           f'{self.mdevs[mdev_uuid]}')
            used = self._mdevs_on(parent)
            if used >= self.conf.fake_driver.vgpus_per_device:
                raise exception.DeviceActionError(
                    action='create mdev', device=parent,
                    reason=f'all {used} vGPUs are in use')
            self.mdevs[mdev_uuid] = parent

    def remove_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        parent = self._gpu_slot('remove mdev', attach_info)
        with self._lock:
            if self.mdevs.get(mdev_uuid) == parent:
                del self.mdevs[mdev_uuid]

    # Lifecycle

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        kind = self._device_kind(device)
        if kind is None:
            return {}
        if kind[1] == 'card':
            return {'region_image': {
                'deployables': [d.name for d in device.deployables]}}
        most = self.conf.fake_driver.vgpus_per_device
        return {'mdev_type': {VGPU_TYPE: most},
                'mdev_count': {'min': 0, 'max': most}}

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """A card loads ``region_image`` (the agent adds ``image_path``
        and ``bitstream`` as for real FPGAs); a GPU offers ``mdev_count``
        vGPUs from the next discovery on, and with 0 is the whole GPU
        again: reported as before any layout, once its mdevs are gone."""
        wanted = {k: v for k, v in layout.items()
                  if k not in ('image_path', 'bitstream')}
        with self._recorded('layout', device.controlpath_id, layout=wanted):
            check_layout(self.layout_options(device), wanted)
            if self.conf.fake_driver.layout_fail:
                raise self._failure('apply a layout', device.controlpath_id,
                                    '[fake_driver] layout_fail is set')
            slot, kind, _ = self._device_kind(device) or ('', '', 0)
            if kind == 'gpu' and 'mdev_count' in wanted:
                self._set_mdev_count(device, slot, wanted['mdev_count'])
            if kind == 'card' and 'region_image' in wanted:
                for deployable in device.deployables:
                    self.program(device.controlpath_id, deployable.name,
                                 str(layout.get('image_path')),
                                 dict(layout.get('bitstream') or {}))

    def _set_mdev_count(self, device: DriverDevice, slot: str,
                        count: int) -> None:
        with self._lock:
            if count:
                self.mdev_counts[slot] = count
                return
            # A GPU given back whole must not keep vGPUs a guest may use.
            used = self._mdevs_on(slot)
            if used:
                raise self._failure(
                    'apply a layout', device.controlpath_id,
                    f'{used} mdevs still exist on it')
            self.mdev_counts.pop(slot, None)

    def prepare(self, device: DriverDevice) -> None:
        with self._recorded('prepare', device.controlpath_id):
            if self.conf.fake_driver.prepare_fail:
                raise self._failure('prepare', device.controlpath_id,
                                    '[fake_driver] prepare_fail is set')

    def clean(self, handle: DriverAttachHandle) -> None:
        with self._recorded('clean', handle.attach_info,
                            attach_type=handle.attach_type):
            if self.conf.fake_driver.clean_fail:
                raise self._failure('clean', handle.attach_info,
                                    '[fake_driver] clean_fail is set')
            self._take_time()

    @staticmethod
    def _failure(action: str, where: dict[str, str], reason: str
                 ) -> exception.DeviceActionError:
        return exception.DeviceActionError(
            action=action, device=canonical_json(where), reason=reason)

    @contextlib.contextmanager
    def _recorded(self, action: str, where: dict[str, str],
                  **details: Any) -> Iterator[None]:
        """Record the call in ``lifecycle_calls`` and the clean_log, with
        the error it raised, if any."""
        call: dict[str, Any] = {'action': action, 'target': dict(where),
                                **details, 'error': None}
        try:
            yield
        except exception.CyborgException as exc:
            call['error'] = str(exc)
            raise
        finally:
            with self._lock:
                self.lifecycle_calls.append(call)
                path = self.conf.fake_driver.clean_log
                if path:
                    with open(path, 'a', encoding='utf-8') as log:
                        log.write(json.dumps(call, sort_keys=True) + '\n')

    def _device_kind(self, device: DriverDevice
                     ) -> tuple[str, str, int] | None:
        options = self.conf.fake_driver
        try:
            slot = _slot(pci_address(*(device.controlpath_id[k]
                                       for k in _PCI_KEYS)))
        except (KeyError, TypeError, AttributeError):
            return None
        kind = _kind(slot, options.device_count, options.vgpu_device_count)
        return None if kind is None else (slot, *kind)

    def _is_fake(self, slot: str) -> bool:
        options = self.conf.fake_driver
        return _kind(slot, options.device_count,
                     options.vgpu_device_count) is not None

    def _mdevs_on(self, slot: str) -> int:
        """The mdevs that exist on the GPU at ``slot``; hold the lock."""
        return sum(1 for p in self.mdevs.values() if p == slot)

    # Monitoring: faults from configuration, plausible numbers otherwise.

    def health(self, device: DriverDevice) -> Health | None:
        """See :func:`fake_health.health`; an option changed into an
        invalid one raises, making every device ``unknown``."""
        found = self._device_kind(device)
        if found is None:
            return None
        return fake_health.health(found[0], self.conf.fake_driver,
                                  self._is_fake)

    def usage(self, device: DriverDevice) -> Usage | None:
        """Deterministic numbers that follow what was done to the device
        (see :mod:`fake_health`)."""
        found = self._device_kind(device)
        if found is None:
            return None
        slot, kind, index = found
        with self._lock:
            if kind == 'card':
                return fake_health.card_usage(
                    index, slot in self.loaded, self.programs.get(slot, 0))
            return fake_health.gpu_usage(
                index, self._mdevs_on(slot),
                self.conf.fake_driver.vgpus_per_device)
