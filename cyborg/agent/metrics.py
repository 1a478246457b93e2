"""An agent's Prometheus metrics: each device's health and usage.

What is served is the last list of samples the health pass gave
(``update``), rendered at scrape time: a device that is removed, or whose
labels change (bound, unbound), loses its old series at once instead of
leaving a stale one behind, as labelled gauges kept between passes would.

Every device series has the labels of :data:`LABELS`. A device bound to
several instances (several accelerators of one card, vGPUs) has them all
in one series, their uuids sorted and joined with commas (projects too):
one series per instance would count the device's temperature, power and
errors once per instance in every ``sum``.
"""
import threading
import time
from collections.abc import Iterator

from oslo_config import cfg
from prometheus_client import core
from prometheus_client import registry as prom_registry

from cyborg.common import device_health
from cyborg.common import metrics_server
from cyborg.common import probes

# ``instance`` and ``project`` would clash with the ``instance`` label
# Prometheus gives every target (it renames ours to ``exported_instance``).
LABELS = ('host', 'device_uuid', 'type', 'vendor', 'product', 'model',
          'address', 'driver', 'instance_uuid', 'project_id')

# Usage fields exposed as one gauge each: (field, metric, help, scale).
_GAUGES = (
    ('temperature_celsius', 'cyborg_device_temperature_celsius',
     'Temperature of the device, in degrees Celsius.', 1.0),
    ('power_watts', 'cyborg_device_power_watts',
     'Power the device draws, in watts.', 1.0),
    # Prometheus keeps ratios in 0..1; drivers report percents.
    ('utilization_percent', 'cyborg_device_utilization_ratio',
     'Share of the time the device was busy, from 0 to 1.', 0.01),
    ('memory_used_bytes', 'cyborg_device_memory_used_bytes',
     'Device memory in use, in bytes.', 1.0),
    ('memory_total_bytes', 'cyborg_device_memory_total_bytes',
     'Device memory in all, in bytes.', 1.0),
)


def _joined(values: list[str]) -> str:
    return ','.join(sorted(set(values)))


def label_values(host: str, sample: device_health.DeviceSample
                 ) -> list[str]:
    """The values of :data:`LABELS` for ``sample``'s device on ``host``."""
    return [host, sample.device_uuid or '', sample.type, sample.vendor,
            sample.product_id, sample.model, sample.address,
            sample.driver_name, _joined(sample.instances),
            _joined(sample.projects)]


class DeviceCollector(prom_registry.Collector):
    """Renders the samples last given to ``update`` at each scrape."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._lock = threading.Lock()
        self._samples: list[device_health.DeviceSample] = []
        self._updated: float | None = None

    def update(self, samples: list[device_health.DeviceSample]) -> None:
        with self._lock:
            self._samples = list(samples)
            self._updated = time.time()

    def collect(self) -> Iterator[core.Metric]:
        with self._lock:
            samples, updated = self._samples, self._updated
        health = core.GaugeMetricFamily(
            'cyborg_device_health',
            'Health state of the device: 1 for the state it is in, 0 for '
            'the others.', labels=[*LABELS, 'state'])
        gauges = {field: core.GaugeMetricFamily(name, text, labels=LABELS)
                  for field, name, text, _ in _GAUGES}
        counters = core.CounterMetricFamily(
            'cyborg_device_counter',
            'Monotonic totals the driver reads from the device (errors, '
            'bytes, packets), by the driver\'s name for them.',
            labels=[*LABELS, 'counter'])
        others = core.GaugeMetricFamily(
            'cyborg_device_gauge',
            'Other point values the driver reads from the device, by the '
            'driver\'s name for them.', labels=[*LABELS, 'gauge'])
        for sample in samples:
            labels = label_values(self.host, sample)
            for state in device_health.HEALTH_STATES:
                health.add_metric([*labels, state],
                                  float(sample.health.state == state))
            if sample.usage is None:
                continue
            # to_dict leaves out what is not finite: an unknown reading.
            usage = sample.usage.to_dict()
            for field, _, _, scale in _GAUGES:
                if usage[field] is not None:
                    gauges[field].add_metric(labels, usage[field] * scale)
            for name, value in sorted(usage['counters'].items()):
                counters.add_metric([*labels, name], value)
            for name, value in sorted(usage['gauges'].items()):
                others.add_metric([*labels, name], value)
        yield health
        yield from gauges.values()
        yield counters
        yield others
        if updated is not None:
            # A health pass that is stuck leaves the samples above as they
            # were; this lets an alert see how old they are.
            passed = core.GaugeMetricFamily(
                'cyborg_agent_health_pass_timestamp_seconds',
                'When the agent last read its devices\' health, in seconds '
                'since the epoch: the device series are that old.',
                labels=['host'])
            passed.add_metric([self.host], updated)
            yield passed


class AgentMetrics:
    """The agent's metrics, served on ``[agent] metrics_host`` and
    ``metrics_port`` between ``start()`` and ``stop()``, with ``health``
    at ``probes.PATHS``."""

    def __init__(self, conf: cfg.ConfigOpts,
                 health: probes.Health | None = None) -> None:
        self.conf = conf
        # A registry of our own: the default one would also serve the
        # process and platform collectors prometheus_client registers.
        self.registry = prom_registry.CollectorRegistry()
        self.devices = DeviceCollector(conf.agent.hostname or conf.host)
        self.registry.register(self.devices)
        self.server = metrics_server.MetricsServer(
            conf.agent.metrics_host, conf.agent.metrics_port, self.registry,
            health)

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def update(self, samples: list[device_health.DeviceSample]) -> None:
        """Serve ``samples`` from now on, in place of those before."""
        self.devices.update(samples)
