"""Device health and usage: what drivers read, agents send, conductors keep.

A driver's ``health`` answers a :class:`Health` (a state and why); its
``usage`` a :class:`Usage` sample. The agent sends health changes to the
conductor, which stores them on the device; usage samples are published
(notifications, metrics) and never stored.
"""
import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import jsonschema

from cyborg.common import device_report

HEALTHY = 'healthy'
DEGRADED = 'degraded'
UNHEALTHY = 'unhealthy'
UNKNOWN = 'unknown'
# Best first; a device's state is the worst any of its readings gives,
# except that ``unknown`` only stands when nothing else is known.
HEALTH_STATES = (HEALTHY, DEGRADED, UNHEALTHY, UNKNOWN)
# Who set a device's health: its agent, or an operator through the API
# (kept until the operator clears it).
HEALTH_SOURCES = ('agent', 'operator')
# The reason column's width; longer reasons are cut.
MAX_REASON_LENGTH = 255

_RANK = {HEALTHY: 0, UNKNOWN: 1, DEGRADED: 2, UNHEALTHY: 3}


def reason_text(reason: str) -> str:
    """``reason`` cut to what the database keeps."""
    if len(reason) <= MAX_REASON_LENGTH:
        return reason
    return reason[:MAX_REASON_LENGTH - 3] + '...'


@dataclasses.dataclass(frozen=True)
class Health:
    """A device's health state and, unless healthy, why."""

    state: str
    reason: str = ''

    def __post_init__(self) -> None:
        if self.state not in HEALTH_STATES:
            raise ValueError(f'health state must be one of '
                             f'{", ".join(HEALTH_STATES)}, not '
                             f'{self.state!r}')

    def to_dict(self) -> dict[str, str]:
        return {'state': self.state, 'reason': reason_text(self.reason)}

    @classmethod
    def combine(cls, readings: Iterable['Health']) -> 'Health':
        """The worst of ``readings``, its reasons joined with ``; ``;
        healthy when there are none."""
        readings = list(readings)
        if not readings:
            return cls(HEALTHY)
        worst = max(_RANK[r.state] for r in readings)
        state = next(r.state for r in readings if _RANK[r.state] == worst)
        reasons = [r.reason for r in readings
                   if r.state == state and r.reason]
        return cls(state, '; '.join(dict.fromkeys(reasons)))


@dataclasses.dataclass
class Usage:
    """One sample of what a device is doing; any value may be unknown.

    ``counters`` are monotonic totals since the device or its driver
    started (error counts, bytes, packets), by name; ``gauges`` are other
    point values a family exposes beyond the common ones, by name.
    """

    temperature_celsius: float | None = None
    power_watts: float | None = None
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    counters: dict[str, int] = dataclasses.field(default_factory=dict)
    gauges: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def finite(value: float | None) -> float | None:
            return value if value is None or math.isfinite(value) else None

        return {'temperature_celsius': finite(self.temperature_celsius),
                'power_watts': finite(self.power_watts),
                'utilization_percent': finite(self.utilization_percent),
                'memory_used_bytes': self.memory_used_bytes,
                'memory_total_bytes': self.memory_total_bytes,
                'counters': dict(self.counters),
                'gauges': {k: v for k, v in self.gauges.items()
                           if math.isfinite(v)}}


# What an agent sends when health changes (conductor RPC 1.8): the new
# state of each device that changed, by its control path.
HEALTH_UPDATE_SCHEMA: dict[str, Any] = {
    'type': 'array',
    'maxItems': 65536,
    'items': {
        'type': 'object',
        'additionalProperties': False,
        'required': ['controlpath_id', 'state'],
        'properties': {
            'controlpath_id': {
                'type': 'object',
                'additionalProperties': False,
                'required': ['cpid_type', 'cpid_info'],
                'properties': {
                    'cpid_type': {'type': 'string', 'maxLength': 32},
                    'cpid_info': {
                        'type': 'object', 'minProperties': 1,
                        'additionalProperties': {'type': 'string',
                                                 'maxLength': 255}},
                },
            },
            'state': {'enum': list(HEALTH_STATES)},
            'reason': {'type': 'string', 'maxLength': 4096},
        },
    },
}

_VALIDATOR = jsonschema.Draft202012Validator(HEALTH_UPDATE_SCHEMA)


def validate_update(host: str, updates: Any) -> None:
    """Raise InvalidReport naming the first problem in ``updates``."""
    device_report.check_schema(_VALIDATOR, host, updates)


@dataclasses.dataclass
class DeviceSample:
    """What an agent's health pass learnt of one device, with the labels
    metrics and notifications name it by.

    ``device_uuid`` is None until the conductor has told the agent the
    uuid it gave the device; ``instances`` and ``projects`` hold whoever
    the device's bound accelerator requests belong to.
    """

    controlpath_id: dict[str, Any]
    type: str
    vendor: str
    model: str
    address: str
    driver_name: str
    health: Health
    usage: Usage | None = None
    device_uuid: str | None = None
    product_id: str = ''
    instances: list[str] = dataclasses.field(default_factory=list)
    projects: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {'controlpath_id': self.controlpath_id, 'type': self.type,
                'vendor': self.vendor, 'model': self.model,
                'product_id': self.product_id, 'address': self.address,
                'driver_name': self.driver_name,
                'device_uuid': self.device_uuid,
                'health': self.health.to_dict(),
                'usage': self.usage.to_dict() if self.usage else None,
                'instances': list(self.instances),
                'projects': list(self.projects)}
