"""NVIDIA GPU health and usage through NVML (``nvidia-ml-py``, ``import
pynvml``), when it is installed and NVML initialises.

NVML sees only the GPUs the ``nvidia`` kernel driver drives: a GPU bound
to ``vfio-pci`` (passed through to an instance) is not found, and is left
to the PCI layer's readings, as is every GPU on a host without NVML.

What makes a GPU unhealthy or degraded:

* volatile uncorrected ECC errors (since the driver loaded): what the
  GPU computed may be wrong — unhealthy;
* pages waiting to be retired: the GPU needs a reset before the bad
  memory stops being used — degraded;
* a critical XID event (``nvmlEventTypeXidCriticalError``) other than
  those an application causes alone — unhealthy, until the agent
  restarts, as the GPU needs a reset or a reboot. This is the rule of
  NVIDIA's Kubernetes device plugin (``internal/rm/health.go``), whose
  list of application XIDs is used here: 13 (graphics engine
  exception), 31 (memory page fault), 43 (GPU stopped processing), 45
  (pre-emptive clean-up), 68 (video processor exception) and 109
  (context switch timeout). XIDs 48 (double-bit ECC error), 79 (fallen
  off the bus), 94/95 (contained/uncontained ECC error) and the others
  are critical.
"""
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from typing import TypeVar

from cyborg.common import device_health
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage

LOG = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# Seconds between two attempts to initialise NVML after one failed: the
# agent may start before the nvidia module loads, and a failed nvmlInit
# costs ~100 ms of library loading, too much for every pass.
RETRY_SECONDS = 300.0
T = TypeVar('T')


def bus_id(value: bytes | str) -> str:
    """NVML's ``00000000:3B:00.0`` as sysfs writes it: ``0000:3b:00.0``."""
    text = value.decode() if isinstance(value, bytes) else value
    domain, _, rest = text.strip().lower().partition(':')
    return f'{int(domain, 16):04x}:{rest}'


class Nvml:
    """NVML for one driver: initialised on first use, retried every
    RETRY_SECONDS while it fails, shut down never (the agent's process
    holds it)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._lib: Any = None
        self._failed_at: float | None = None
        self._events: Any = None
        self._registered: set[str] = set()
        # Critical XIDs seen per GPU address, oldest first.
        self.xids: dict[str, list[int]] = {}

    def _load(self) -> Any:
        """pynvml, initialised; None while it cannot be."""
        if self._lib is not None:
            return self._lib
        now = self._clock()
        if (self._failed_at is not None
                and now - self._failed_at < RETRY_SECONDS):
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:
            # No nvidia-ml-py, no libnvidia-ml, no nvidia module.
            if self._failed_at is None:
                LOG.info('NVIDIA GPU health is read from sysfs only: NVML '
                         'is not available (%s).', exc)
            self._failed_at = now
            return None
        self._lib = pynvml
        try:
            self._events = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            LOG.info('NVML cannot report XID events (%s).', exc)
        return pynvml

    def _handle(self, lib: Any, address: str) -> Any:
        """The GPU's NVML handle, registered for XID events; None when
        NVML does not see it."""
        try:
            handle = lib.nvmlDeviceGetHandleByPciBusId(address)
        except lib.NVMLError as exc:
            LOG.debug('NVML does not see GPU %s: %s', address, exc)
            return None
        if self._events is not None and address not in self._registered:
            self._registered.add(address)
            try:
                lib.nvmlDeviceRegisterEvents(
                    handle, lib.nvmlEventTypeXidCriticalError, self._events)
            except lib.NVMLError as exc:
                LOG.debug('GPU %s reports no XID events: %s', address, exc)
        return handle

    def _drain(self, lib: Any) -> None:
        """Record the XID events NVML holds, for every GPU, without
        waiting for more."""
        if self._events is None:
            return
        while True:
            try:
                event = lib.nvmlEventSetWait(self._events, 0)
            except lib.NVMLError as exc:
                if getattr(exc, 'value', None) != lib.NVML_ERROR_TIMEOUT:
                    LOG.debug('Reading XID events failed: %s', exc)
                return
            xid = int(event.eventData)
            if xid in APPLICATION_XIDS:
                continue
            try:
                info = lib.nvmlDeviceGetPciInfo(event.device)
                address = bus_id(info.busId)
            except (lib.NVMLError, ValueError) as exc:
                LOG.debug('XID %d on a GPU NVML cannot name: %s', xid, exc)
                continue
            LOG.warning('NVIDIA GPU %s reported critical XID %d.', address,
                        xid)
            self.xids.setdefault(address, []).append(xid)

    def call(self, address: str, action: Callable[[Any, Any], T]
             ) -> T | None:
        """``action(pynvml, handle)`` for the GPU at ``address``, with
        NVML's lock held: the one NVML of the driver serves health, usage
        and MIG alike. None when NVML is unavailable or does not see the
        GPU."""
        with self._lock:
            lib = self._load()
            if lib is None:
                return None
            handle = self._handle(lib, address)
            if handle is None:
                return None
            return action(lib, handle)

    def health(self, address: str) -> list[Health]:
        """What NVML says of the GPU at ``address``; nothing when NVML
        is unavailable or does not see it."""
        with self._lock:
            lib = self._load()
            if lib is None:
                return []
            handle = self._handle(lib, address)
            self._drain(lib)
            found = []
            if self.xids.get(address):
                xids = ', '.join(str(x) for x in self.xids[address][-5:])
                found.append(Health(device_health.UNHEALTHY,
                                    f'critical XID event(s) {xids}'))
            if handle is None:
                return found
            try:
                ecc = _optional(lib, lib.nvmlDeviceGetTotalEccErrors, handle,
                                lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                lib.NVML_VOLATILE_ECC)
                pending = _optional(
                    lib, lib.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            except lib.NVMLError as exc:
                if getattr(exc, 'value', None) != lib.NVML_ERROR_GPU_IS_LOST:
                    raise
                found.append(Health(device_health.UNHEALTHY,
                                    'NVML: the GPU is lost'))
                return found
            if ecc:
                found.append(Health(
                    device_health.UNHEALTHY,
                    f'{ecc} uncorrected ECC error(s) since the driver '
                    'loaded'))
            if pending == lib.NVML_FEATURE_ENABLED:
                found.append(Health(
                    device_health.DEGRADED,
                    'retired memory pages pending: reset the GPU'))
            return found

    def vgpu_max_instances(self, address: str, type_id: str) -> int | None:
        """How many vGPUs of type ``type_id`` the GPU at ``address`` holds
        (``nvmlVgpuTypeGetMaxInstances``, the board's limit, used or not);
        None when NVML cannot say."""
        def read(lib: Any, handle: Any) -> int | None:
            try:
                return int(lib.nvmlVgpuTypeGetMaxInstances(handle,
                                                           int(type_id)))
            except lib.NVMLError as exc:
                LOG.debug('NVML has no vGPU limit of type %s on GPU %s: %s',
                          type_id, address, exc)
                return None
        return self.call(address, read)

    def usage(self, address: str) -> Usage | None:
        """NVML's temperature, power, utilisation and memory of the GPU
        at ``address``; None when NVML is unavailable or does not see it.
        """
        return self.call(address, lambda lib, handle: self._usage(
            lib, handle, address))

    def _usage(self, lib: Any, handle: Any, address: str) -> Usage:
        usage = Usage()
        temperature = _optional(lib, lib.nvmlDeviceGetTemperature, handle,
                                lib.NVML_TEMPERATURE_GPU)
        if temperature is not None:
            usage.temperature_celsius = float(temperature)
        milliwatts = _optional(lib, lib.nvmlDeviceGetPowerUsage, handle)
        if milliwatts is not None:
            usage.power_watts = milliwatts / 1000
        rates = _optional(lib, lib.nvmlDeviceGetUtilizationRates, handle)
        if rates is not None:
            usage.utilization_percent = float(rates.gpu)
        memory = _optional(lib, lib.nvmlDeviceGetMemoryInfo, handle)
        if memory is not None:
            usage.memory_used_bytes = int(memory.used)
            usage.memory_total_bytes = int(memory.total)
        ecc = _optional(lib, lib.nvmlDeviceGetTotalEccErrors, handle,
                        lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        lib.NVML_VOLATILE_ECC)
        if ecc is not None:
            usage.counters['ecc_uncorrected_volatile'] = int(ecc)
        usage.counters['xid_critical'] = len(self.xids.get(address, []))
        return usage


def _optional(lib: Any, call: Any, *args: Any) -> Any:
    """``call(*args)``, or None when the GPU does not support it (ECC off,
    a consumer board). Other NVML errors (the GPU is lost) raise."""
    try:
        return call(*args)
    except lib.NVMLError as exc:
        if getattr(exc, 'value', None) == lib.NVML_ERROR_NOT_SUPPORTED:
            return None
        raise
