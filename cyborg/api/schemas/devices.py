"""Validation of the device health PUT and the health filter."""
from typing import Any

from cyborg.api import schemas
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.db.api import devices

# {"state": "unhealthy", "reason": "fan failure"}; reason optional.
HEALTH_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'state': {'enum': list(device_health.HEALTH_STATES)},
        'reason': schemas.column(devices.Device.health_reason, null=True),
    },
    'required': ['state'],
    'additionalProperties': False,
}


def validate_health(body: Any) -> tuple[str, str | None]:
    """The state and reason of a health PUT body; Invalid (400) naming
    what is wrong, the allowed states included."""
    schemas.validate(HEALTH_SCHEMA, body, 'Device health')
    return body['state'], body.get('reason') or None


def health_filter(value: str | None) -> str | None:
    """The ``health`` query parameter of a device list, or None when
    absent; Invalid for a state that is none of the allowed ones."""
    if value is not None and value not in device_health.HEALTH_STATES:
        raise exception.Invalid(
            reason=f'health must be one of '
                   f'{", ".join(device_health.HEALTH_STATES)}, not '
                   f'{schemas.shown(value)}.')
    return value
