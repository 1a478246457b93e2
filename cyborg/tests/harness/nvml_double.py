"""A double of NVIDIA's NVML binding (nvidia-ml-py's ``pynvml``) over GPUs
described in a JSON file, for hosts without an NVIDIA GPU.

``module(path)`` is a module object that behaves like ``pynvml`` for the
calls cyborg makes: the same function names and parameters (a unit test
holds them to the installed nvidia-ml-py's), the real module's constants,
ctypes structures and ``NVMLError`` subclasses, raised with the codes
nvml.h documents for each call (https://docs.nvidia.com/deploy/nvml-api/,
"Multi Instance GPU Management", "Device Queries", "Event Handling").
Every call reads the JSON file, and those that change a GPU write it back
under a file lock, so a test and an agent process it started share the
GPUs: an agent loads the double through ``SHIM_DIR`` (a ``pynvml.py``
put first on its PYTHONPATH, with ``CYBORG_NVML_DOUBLE`` naming the file;
cyborg/tests/README).

The boards' GPU instance profiles are NVIDIA's: ``nvidia-smi mig -lgip``
(id, instances, memory) and ``nvidia-smi mig -lgipp`` (placements) in
NVIDIA's MIG User Guide ("Getting Started with MIG", "Supported MIG
Profiles", https://docs.nvidia.com/datacenter/tesla/mig-user-guide/).
"""
import contextlib
import ctypes
import fcntl
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

#: The directory whose pynvml.py loads this double in another process.
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        'nvml_shim')
#: The environment variable naming the state file for the shim.
ENV = 'CYBORG_NVML_DOUBLE'


def _real_pynvml() -> types.ModuleType:
    """The installed nvidia-ml-py, also where the shim (named pynvml)
    is what ``import pynvml`` finds."""
    loaded = sys.modules.get('pynvml')
    shim = loaded is not None and os.path.dirname(
        os.path.abspath(getattr(loaded, '__file__', '') or '')) == SHIM_DIR
    if not shim:
        import pynvml
        if not getattr(pynvml, 'IS_NVML_DOUBLE', False):
            return pynvml
    path = [p for p in sys.path
            if os.path.abspath(p or os.curdir) != SHIM_DIR]
    spec = importlib.machinery.PathFinder.find_spec('pynvml', path)
    if spec is None or spec.loader is None:
        raise ImportError('nvidia-ml-py is not installed')
    real = importlib.util.module_from_spec(spec)
    # pynvml makes its NVMLError subclasses on sys.modules[__name__].
    sys.modules['pynvml'] = real
    try:
        spec.loader.exec_module(real)
    finally:
        if loaded is not None:
            sys.modules['pynvml'] = loaded
    return real


real = _real_pynvml()

# An NVIDIA board: its framebuffer in MiB, as nvidia-smi reports it; whether
# it switches MIG mode without a reset; and its GPU instance profiles by
# NVML_GPU_INSTANCE_PROFILE_<index>: (profile id, compute slices, most
# instances, memory MiB, placement starts, placement size in memory
# slices, NVIDIA's name). Memory is nvidia-smi mig -lgip's GiB (9.75 GiB
# = 9984 MiB).
BOARDS: dict[str, dict[str, Any]] = {
    # H100 80GB HBM3: lgip as printed at https://jbarrow.ai/field_notes/
    # nvidia-mig/ and in the MIG User Guide; placements as the A100's
    # (MIG User Guide, "Supported MIG Profiles", H100 diagram).
    'H100-80GB': {
        'memory_mib': 81559, 'resetless': True, 'ecc': True,
        'profiles': {
            '1_SLICE': (
                19, 1, 7, 9984, (0, 1, 2, 3, 4, 5, 6), 1, '1g.10gb'),
            '1_SLICE_REV1': (
                20, 1, 1, 9984, (0, 1, 2, 3, 4, 5, 6), 1, '1g.10gb+me'),
            '1_SLICE_REV2': (
                15, 1, 4, 20096, (0, 2, 4, 6), 2, '1g.20gb'),
            '2_SLICE': (
                14, 2, 3, 20096, (0, 2, 4), 2, '2g.20gb'),
            '3_SLICE': (
                9, 3, 2, 40448, (0, 4), 4, '3g.40gb'),
            '4_SLICE': (
                5, 4, 1, 40448, (0,), 4, '4g.40gb'),
            '7_SLICE': (
                0, 7, 1, 81152, (0,), 8, '7g.80gb'),
        }},
    # A100-SXM4-40GB: lgip and lgipp of the MIG User Guide's "Getting
    # Started with MIG"; a MIG mode switch resets the GPU.
    'A100-40GB': {
        'memory_mib': 40960, 'resetless': False, 'ecc': True,
        'profiles': {
            '1_SLICE': (
                19, 1, 7, 4864, (0, 1, 2, 3, 4, 5, 6), 1, '1g.5gb'),
            '1_SLICE_REV1': (
                20, 1, 1, 4864, (0, 1, 2, 3, 4, 5, 6), 1, '1g.5gb+me'),
            '1_SLICE_REV2': (
                15, 1, 4, 9856, (0, 2, 4, 6), 2, '1g.10gb'),
            '2_SLICE': (
                14, 2, 3, 9856, (0, 2, 4), 2, '2g.10gb'),
            '3_SLICE': (
                9, 3, 2, 20096, (0, 4), 4, '3g.20gb'),
            '4_SLICE': (
                5, 4, 1, 20096, (0,), 4, '4g.20gb'),
            '7_SLICE': (
                0, 7, 1, 40448, (0,), 8, '7g.40gb'),
        }},
    # Tesla T4 (Turing): no MIG, no ECC readings here.
    'T4': {'memory_mib': 15360, 'resetless': False, 'ecc': False,
           'profiles': None},
}

_DEVICE_BASE = 0x10000
_INSTANCE_BASE = 0x1000000
# nvmlDeviceGetComputeRunningProcesses: gpuInstanceId and
# computeInstanceId of a process outside MIG (nvml.h: 0xFFFFFFFF).
_NO_INSTANCE = 0xFFFFFFFF


def gpu(board: str, **state: Any) -> dict[str, Any]:
    """A GPU of ``board`` for the state file: MIG disabled, no GPU
    instances, idle and healthy unless ``state`` says otherwise."""
    found = {'board': board, 'mig': [0, 0], 'instances': [],
             'processes': [], 'reset_exposed': True, 'resets': 0,
             'ecc': 0, 'pending_pages': 0, 'xids': [], 'temperature': 41,
             'power_mw': 68_000, 'util': 0, 'memory_used_mib': 0,
             # nvmlVgpuTypeGetMaxInstances by vGPU type id; none: the
             # GPU runs no vGPU manager.
             'vgpu_max_instances': {}}
    found.update(state)
    return found


def write_state(path: str, gpus: dict[str, dict[str, Any]]) -> None:
    """Describe the host's NVIDIA GPUs, by PCI address, in ``path``."""
    with _locked(path):
        _write(path, {'gpus': gpus})


def read_state(path: str) -> dict[str, Any]:
    with _locked(path):
        with open(path, encoding='utf-8') as f:
            return json.load(f)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path + '.lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write(path: str, state: dict[str, Any]) -> None:
    temporary = f'{path}.{os.getpid()}.tmp'
    with open(temporary, 'w', encoding='utf-8') as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.replace(temporary, path)


def _fail(code: int) -> real.NVMLError:
    return real.NVMLError(code)


def _target(ref: Any) -> Any:
    """What a ctypes byref() or pointer() refers to."""
    if hasattr(ref, '_obj'):
        return ref._obj
    if hasattr(ref, 'contents'):
        return ref.contents
    return ref


def _address(value: Any) -> int:
    try:
        return ctypes.cast(value, ctypes.c_void_p).value or 0
    except (ctypes.ArgumentError, TypeError):
        raise _fail(real.NVML_ERROR_INVALID_ARGUMENT) from None


def _bus_id(text: bytes | str) -> str:
    value = text.decode() if isinstance(text, bytes) else str(text)
    domain, _, rest = value.strip().lower().partition(':')
    try:
        return f'{int(domain, 16):04x}:{rest}'
    except ValueError:
        raise _fail(real.NVML_ERROR_INVALID_ARGUMENT) from None


class Nvml:
    """NVML over the GPUs of one state file; its nvml* methods are the
    module's functions."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.initialised = False
        self.registered: set[str] = set()

    @contextlib.contextmanager
    def _gpus(self, write: bool = False
              ) -> Iterator[dict[str, dict[str, Any]]]:
        if not self.initialised:
            raise _fail(real.NVML_ERROR_UNINITIALIZED)
        with _locked(self.path):
            with open(self.path, encoding='utf-8') as f:
                state = json.load(f)
            yield state['gpus']
            if write:
                _write(self.path, state)

    def _gpu(self, gpus: dict[str, dict[str, Any]], handle: Any
             ) -> tuple[str, dict[str, Any]]:
        index = _address(handle) - _DEVICE_BASE
        addresses = sorted(gpus)
        if not 0 <= index < len(addresses):
            raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return addresses[index], gpus[addresses[index]]

    def _handle(self, gpus: dict[str, Any], address: str) -> Any:
        return ctypes.cast(ctypes.c_void_p(
            _DEVICE_BASE + sorted(gpus).index(address)), real.c_nvmlDevice_t)

    # Initialisation and device lookup

    def nvmlInit(self) -> None:
        if not os.path.exists(self.path):
            raise _fail(real.NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialised = True

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: Any) -> Any:
        address = _bus_id(pciBusId)
        with self._gpus() as gpus:
            if address not in gpus:
                raise _fail(real.NVML_ERROR_NOT_FOUND)
            return self._handle(gpus, address)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        with self._gpus() as gpus:
            address, _ = self._gpu(gpus, handle)
        domain, bus, rest = address.split(':')
        device, function = rest.split('.')
        # NVML_DEVICE_PCI_BUS_ID_FMT: "%08X:%02X:%02X.0".
        bus_id = f'{int(domain, 16):08X}:{int(bus, 16):02X}:' \
                 f'{int(device, 16):02X}.{function}'
        return real.nvmlPciInfo_t(
            busId=bus_id.encode(), domain=int(domain, 16), bus=int(bus, 16),
            device=int(device, 16))

    # Health and usage (nvml.Nvml)

    def nvmlEventSetCreate(self) -> Any:
        if not self.initialised:
            raise _fail(real.NVML_ERROR_UNINITIALIZED)
        return real.c_nvmlEventSet_t()

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int,
                                 eventSet: Any) -> None:
        with self._gpus() as gpus:
            address, _ = self._gpu(gpus, handle)
        self.registered.add(address)

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        with self._gpus(write=True) as gpus:
            for address in sorted(self.registered & set(gpus)):
                if gpus[address]['xids']:
                    xid = gpus[address]['xids'].pop(0)
                    return real.c_nvmlEventData_t(
                        device=self._handle(gpus, address),
                        eventType=real.nvmlEventTypeXidCriticalError,
                        eventData=xid)
        raise _fail(real.NVML_ERROR_TIMEOUT)

    def _reading(self, handle: Any, key: str) -> Any:
        with self._gpus() as gpus:
            _, found = self._gpu(gpus, handle)
            return found[key]

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if sensor != real.NVML_TEMPERATURE_GPU:
            raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._reading(handle, 'temperature'))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._reading(handle, 'power_mw'))

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return real.c_nvmlUtilization_t(
            gpu=int(self._reading(handle, 'util')), memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: Any,
                                version: Any = None) -> Any:
        with self._gpus() as gpus:
            _, found = self._gpu(gpus, handle)
        total = BOARDS[found['board']]['memory_mib'] << 20
        used = int(found['memory_used_mib']) << 20
        return real.c_nvmlMemory_t(total=total, free=total - used,
                                   used=used)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int,
                                    counterType: int) -> int:
        with self._gpus() as gpus:
            _, found = self._gpu(gpus, handle)
        if not BOARDS[found['board']]['ecc']:
            raise _fail(real.NVML_ERROR_NOT_SUPPORTED)
        return int(found['ecc'])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        pending = self._reading(device, 'pending_pages')
        return (real.NVML_FEATURE_ENABLED if pending
                else real.NVML_FEATURE_DISABLED)

    def nvmlVgpuTypeGetMaxInstances(self, handle: Any,
                                    vgpuTypeId: int) -> int:
        # nvml.h: NOT_SUPPORTED where vGPU is not, INVALID_ARGUMENT for a
        # type the GPU does not have.
        limits = self._reading(handle, 'vgpu_max_instances')
        if not limits:
            raise _fail(real.NVML_ERROR_NOT_SUPPORTED)
        if str(vgpuTypeId) not in limits:
            raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return int(limits[str(vgpuTypeId)])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any
                                             ) -> list[Any]:
        return [real.nvmlStructToFriendlyObject(real.c_nvmlProcessInfo_v3_t(
            pid=pid, usedGpuMemory=1 << 30, gpuInstanceId=_NO_INSTANCE,
            computeInstanceId=_NO_INSTANCE))
            for pid in self._reading(handle, 'processes')]

    def nvmlDeviceGetFieldValues(self, handle: Any,
                                 fieldIds: list[Any]) -> Any:
        with self._gpus() as gpus:
            _, found = self._gpu(gpus, handle)
        values = (real.c_nvmlFieldValue_t * len(fieldIds))()
        for value, field in zip(values, fieldIds, strict=True):
            value.fieldId = field
            if field == real.NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED:
                value.valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = int(BOARDS[found['board']]['resetless'])
                value.nvmlReturn = real.NVML_SUCCESS
            else:
                value.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return values

    # MIG

    def _mig(self, gpus: dict[str, Any], handle: Any, enabled: bool = True
             ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """(address, GPU, board) of a GPU with MIG, enabled if asked:
        NVML_ERROR_NOT_SUPPORTED otherwise."""
        address, found = self._gpu(gpus, handle)
        board = BOARDS[found['board']]
        if board['profiles'] is None or (
                enabled and found['mig'][0] != real.NVML_DEVICE_MIG_ENABLE):
            raise _fail(real.NVML_ERROR_NOT_SUPPORTED)
        return address, found, board

    @staticmethod
    def _profile(board: dict[str, Any], profile_id: int) -> tuple[Any, ...]:
        for row in board['profiles'].values():
            if row[0] == profile_id:
                return row
        raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        with self._gpus() as gpus:
            _, found, _ = self._mig(gpus, device, enabled=False)
            return list(found['mig'])

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        """The activation status: NVML_SUCCESS once the mode is active;
        NVML_ERROR_IN_USE (the GPU is not idle, or holds GPU instances)
        or NVML_ERROR_RESET_REQUIRED (the platform exposes no reset),
        the mode then pending (nvml.h, nvmlDeviceSetMigMode). A board
        that needs a reset is reset by NVML, which ``resets`` counts."""
        if mode not in (real.NVML_DEVICE_MIG_DISABLE,
                        real.NVML_DEVICE_MIG_ENABLE):
            raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)
        with self._gpus(write=True) as gpus:
            _, found, board = self._mig(gpus, device, enabled=False)
            found['mig'][1] = mode
            if found['mig'][0] == mode:
                return real.NVML_SUCCESS
            if found['processes'] or found['instances']:
                return real.NVML_ERROR_IN_USE
            if not board['resetless']:
                if not found['reset_exposed']:
                    return real.NVML_ERROR_RESET_REQUIRED
                found['resets'] += 1
            found['mig'][0] = mode
            return real.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, profile: int,
                                            version: int = 2) -> Any:
        names = {getattr(real, f'NVML_GPU_INSTANCE_PROFILE_{n}'): n
                 for n in BOARDS['H100-80GB']['profiles']}
        if not 0 <= profile < real.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)
        with self._gpus() as gpus:
            _, _, board = self._mig(gpus, device)
        row = board['profiles'].get(names.get(profile))
        if row is None:
            raise _fail(real.NVML_ERROR_NOT_SUPPORTED)
        profile_id, slices, count, memory, _, _, name = row
        if version == 1:
            info = real.c_nvmlGpuInstanceProfileInfo_t()
        elif version == 2:
            info = real.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f'MIG {name}'.encode()
        else:
            raise _fail(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = profile_id
        info.sliceCount = slices
        info.instanceCount = count
        info.memorySizeMB = memory
        info.multiprocessorCount = 16 * slices
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(
            self, device: Any, profileId: int, placementsRef: Any,
            countRef: Any) -> int:
        # Regardless of the MIG mode; placementsRef None asks the count.
        with self._gpus() as gpus:
            _, _, board = self._mig(gpus, device, enabled=False)
        _, _, _, _, starts, size, _ = self._profile(board, profileId)
        count = _target(countRef)
        if placementsRef is not None:
            if count.value < len(starts):
                raise _fail(real.NVML_ERROR_INSUFFICIENT_SIZE)
            for i, start in enumerate(starts):
                placementsRef[i].start = start
                placementsRef[i].size = size
        count.value = len(starts)
        return real.NVML_SUCCESS

    def _instance(self, gpus: dict[str, Any], gpuInstance: Any
                  ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        key = _address(gpuInstance) - _INSTANCE_BASE
        addresses = sorted(gpus)
        index, instance_id = divmod(key, 4096)
        if 0 <= index < len(addresses):
            found = gpus[addresses[index]]
            for instance in found['instances']:
                if instance['id'] == instance_id:
                    return addresses[index], found, instance
        raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)

    def _instance_handle(self, gpus: dict[str, Any], address: str,
                         instance: dict[str, Any]) -> Any:
        key = (_INSTANCE_BASE + sorted(gpus).index(address) * 4096
               + instance['id'])
        return ctypes.cast(ctypes.c_void_p(key), real.c_nvmlGpuInstance_t)

    def nvmlDeviceGetGpuInstances(self, device: Any, profileId: int,
                                  gpuInstancesRef: Any,
                                  countRef: Any) -> int:
        with self._gpus() as gpus:
            address, found, board = self._mig(gpus, device)
            self._profile(board, profileId)
            mine = [i for i in found['instances']
                    if i['profile'] == profileId]
            count = _target(countRef)
            if count.value < len(mine):
                raise _fail(real.NVML_ERROR_INSUFFICIENT_SIZE)
            for n, instance in enumerate(mine):
                gpuInstancesRef[n] = self._instance_handle(gpus, address,
                                                           instance)
            count.value = len(mine)
        return real.NVML_SUCCESS

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        with self._gpus() as gpus:
            address, _, instance = self._instance(gpus, gpuInstance)
            info = real.c_nvmlGpuInstanceInfo_t()
            info.device = self._handle(gpus, address)
        info.id = instance['id']
        info.profileId = instance['profile']
        info.placement.start = instance['start']
        info.placement.size = instance['size']
        return info

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device: Any,
                                                 profileId: int,
                                                 placement: Any) -> Any:
        wanted = _target(placement)
        with self._gpus(write=True) as gpus:
            address, found, board = self._mig(gpus, device)
            _, _, most, _, starts, size, _ = self._profile(board, profileId)
            start = int(wanted.start)
            if start not in starts or int(wanted.size) != size:
                raise _fail(real.NVML_ERROR_INVALID_ARGUMENT)
            slices = set(range(start, start + size))
            taken = {s for i in found['instances']
                     for s in range(i['start'], i['start'] + i['size'])}
            same = [i for i in found['instances']
                    if i['profile'] == profileId]
            if slices & taken or len(same) >= most:
                raise _fail(real.NVML_ERROR_INSUFFICIENT_RESOURCES)
            ids = {i['id'] for i in found['instances']}
            instance = {'id': min(set(range(1, 64)) - ids),
                        'profile': profileId, 'start': start, 'size': size,
                        'in_use': False}
            found['instances'].append(instance)
            return self._instance_handle(gpus, address, instance)

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        with self._gpus(write=True) as gpus:
            _, found, instance = self._instance(gpus, gpuInstance)
            if instance['in_use']:
                # Compute instances or a vGPU on it.
                raise _fail(real.NVML_ERROR_IN_USE)
            found['instances'].remove(instance)
        return real.NVML_SUCCESS


#: The pynvml functions the double has.
FUNCTIONS = tuple(sorted(n for n in vars(Nvml) if n.startswith('nvml')))


def module(path: str) -> types.ModuleType:
    """A ``pynvml`` over the GPUs of the state file ``path``."""
    double = Nvml(path)
    found = types.ModuleType('pynvml', __doc__)
    for name, value in vars(real).items():
        if (name.startswith(('NVML_', 'NVMLError', 'c_nvml'))
                or name == 'nvmlPciInfo_t'
                or (name.startswith('nvml') and isinstance(value, int))):
            setattr(found, name, value)
    for name in FUNCTIONS:
        setattr(found, name, getattr(double, name))
    found.IS_NVML_DOUBLE = True
    found.double = double
    return found
