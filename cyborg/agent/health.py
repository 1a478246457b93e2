"""Health passes: each device's health and usage, read from its driver.

A pass asks every driver for the health of each device its last discovery
found (``ResourceTracker.discovered``): no second scan of the bus. Health
changes go to the conductor in the same pass, and only changes: an
unchanged host costs no RPC call, no database write and no placement
call. Every ``[agent] usage_interval`` seconds the pass also takes a usage
sample of each device; samples are never stored: they go out as one
``accelerator.device.usage`` notification and as the agent's Prometheus
metrics.
"""
import logging
import time
from collections.abc import Callable
from typing import Any
from typing import Protocol

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import resource_tracker
from cyborg.common import device_health
from cyborg.common.device_health import DeviceSample
from cyborg.common.device_health import Health
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import canonical_json
from cyborg.conductor import rpcapi as conductor_rpcapi

LOG = logging.getLogger(__name__)

# Seconds between two look-ups of who holds each device of the host
# (device uuids and the instances and projects metrics are labelled
# with); a report the conductor accepted makes the next pass look again.
# One indexed read per host a minute costs the conductors ~0.1 ms a host.
BINDINGS_INTERVAL = 60.0
# Seconds a pass waits before sending health again to conductors that do
# not take RPC 1.8 yet (an upgrade under way): one refused call a second
# from every agent would be wasted on them.
OLDER_CONDUCTOR_WAIT = 300.0


def _refused_as_unknown(exc: Exception) -> bool:
    """Whether a conductor refused the call for its version."""
    return (isinstance(exc, messaging.UnsupportedVersion)
            or getattr(exc, 'exc_type', None) == 'UnsupportedVersion')


class SampleSink(Protocol):
    """Where a pass's samples go besides the conductor: the metrics."""

    def update(self, samples: list[DeviceSample]) -> None: ...


class UsageNotifier(Protocol):
    """What publishes a pass's usage samples on the message bus."""

    @property
    def enabled(self) -> bool: ...

    def device_usage(self, context: cyborg_context.RequestContext,
                     host: str, samples: list[DeviceSample]) -> None: ...


def _address(device: DriverDevice) -> str:
    info = device.controlpath_id
    try:
        return '{domain}:{bus}:{device}.{function}'.format(**info)
    except KeyError:
        return canonical_json(info)


class HealthMonitor:
    """Runs health passes for one agent (``run``, a periodic task)."""

    def __init__(self, conf: cfg.ConfigOpts,
                 tracker: resource_tracker.ResourceTracker,
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 metrics: SampleSink | None = None,
                 notifier: UsageNotifier | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conf = conf
        self.tracker = tracker
        self.conductor_api = conductor_api
        self.metrics = metrics
        self.notifier = notifier
        self.clock = clock
        # Control path key -> the (state, reason) the conductor has.
        self._sent: dict[str, tuple[str, str]] = {}
        self._accepted_seen = -1
        self._bindings: dict[str, dict[str, Any]] = {}
        self._bindings_at: float | None = None
        # The last error logged per driver, so a failing read is logged
        # once and not at every pass.
        self._errors: dict[str, str] = {}
        self._send_failing = False
        self._send_after: float | None = None
        # Control path key -> the last usage sample, shown by the metrics
        # until the next sample is due.
        self._usage: dict[str, device_health.Usage | None] = {}
        self._usage_at: float | None = None

    @property
    def host(self) -> str:
        return self.conf.host

    def _read(self, driver: AcceleratorDriver, device: DriverDevice,
              sample_usage: bool
              ) -> tuple[Health, device_health.Usage | None]:
        name = type(driver).driver_name
        key = canonical_json(device.controlpath_id)
        try:
            health = driver.health(device)
            if sample_usage:
                self._usage[key] = driver.usage(device)
            usage = self._usage.get(key)
        except Exception as exc:
            error = f'{type(exc).__name__}: {exc}'
            key = f'{name} {_address(device)}'
            if self._errors.get(key) != error:
                LOG.warning('Driver %s could not read the health of %s: '
                            '%s', name, _address(device), error,
                            exc_info=exc)
                self._errors[key] = error
            return Health(device_health.UNKNOWN,
                          f'driver {name} could not read it: {error}'), None
        self._errors.pop(f'{name} {_address(device)}', None)
        if health is None:
            health = Health(device_health.UNKNOWN,
                            f'driver {name} does not read device health')
        return health, usage

    def collect(self, sample_usage: bool = True) -> list[DeviceSample]:
        """Every discovered device's health, and its usage (the last
        sample unless ``sample_usage``), without labels from the
        conductor."""
        samples = []
        for driver in self.tracker.drivers:
            name = type(driver).driver_name
            for device in self.tracker.discovered.get(name, []):
                health, usage = self._read(driver, device, sample_usage)
                samples.append(DeviceSample(
                    controlpath_id={'cpid_type': device.cpid_type,
                                    'cpid_info': dict(device.controlpath_id)},
                    type=device.type, vendor=device.vendor,
                    model=device.model, address=_address(device),
                    driver_name=name, health=health, usage=usage,
                    product_id=str(device.std_board_info.get(
                        'product_id', ''))))
        return samples

    def run(self) -> list[DeviceSample]:
        """One pass: read, send changes, label, publish."""
        now = self.clock()
        usage_due = (self._usage_at is None or now - self._usage_at
                     >= self.conf.agent.usage_interval)
        if usage_due:
            self._usage_at = now
        samples = self.collect(usage_due)
        if self.tracker.accepted != self._accepted_seen:
            # New devices may have reached the conductor: they have no
            # health there yet, and may hold other uuids.
            self._accepted_seen = self.tracker.accepted
            self._sent.clear()
            self._bindings_at = None
        self._send(samples)
        if self.metrics is not None or (self.notifier is not None
                                        and self.notifier.enabled):
            self._label(samples)
            if self.metrics is not None:
                self.metrics.update(samples)
            if (usage_due and self.notifier is not None
                    and self.notifier.enabled):
                self.notifier.device_usage(
                    cyborg_context.get_admin_context(), self.host, samples)
        return samples

    def _send(self, samples: list[DeviceSample]) -> None:
        current = {canonical_json(s.controlpath_id): s for s in samples}
        changed = {key: s for key, s in current.items()
                   if self._sent.get(key) != (s.health.state,
                                              s.health.reason)}
        if not changed or (self._send_after is not None
                           and self.clock() < self._send_after):
            return
        updates = [dict(s.health.to_dict(), controlpath_id=s.controlpath_id)
                   for s in changed.values()]
        try:
            count = self.conductor_api.device_health_update(
                cyborg_context.get_admin_context(), self.host, updates)
        except Exception as exc:
            # Kept unsent: a next pass sends them again.
            older = _refused_as_unknown(exc)
            if older:
                self._send_after = self.clock() + OLDER_CONDUCTOR_WAIT
            log = LOG.debug if self._send_failing else LOG.warning
            log('No conductor took %d device health change(s) (%s); %s.',
                len(updates), exc,
                f'sending again in {OLDER_CONDUCTOR_WAIT:.0f} s, as '
                'conductors before RPC 1.8 keep no health' if older
                else 'the next health pass sends them again')
            self._send_failing = True
            return
        self._send_after = None
        self._send_failing = False
        for key, sample in changed.items():
            self._sent[key] = (sample.health.state, sample.health.reason)
        LOG.debug('Sent %d health reading(s); %d device(s) changed.',
                  len(updates), count)

    def _label(self, samples: list[DeviceSample]) -> None:
        """Give samples the uuids and holders the conductor knows."""
        now = self.clock()
        if (self._bindings_at is None
                or now - self._bindings_at >= BINDINGS_INTERVAL):
            try:
                found = self.conductor_api.host_bindings(
                    cyborg_context.get_admin_context(), self.host)
            except Exception as exc:
                LOG.debug('Cannot learn who holds the devices of %s (%s); '
                          'metrics keep the last labels.', self.host, exc)
            else:
                self._bindings = {canonical_json(b['controlpath_id']): b
                                  for b in found}
            self._bindings_at = now
        for sample in samples:
            held = self._bindings.get(canonical_json(sample.controlpath_id))
            if held is not None:
                sample.device_uuid = held['uuid']
                sample.instances = list(held['instances'])
                sample.projects = list(held['projects'])
