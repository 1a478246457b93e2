"""The shape of a device layout, as the API, conductor and agent check it
before any driver sees it (what a device offers is the driver's
``layout_options``, checked by ``device_report.check_layout``)."""
from typing import Any

from cyborg.common import exception

# The keys a layout may hold, and the type of each value.
LAYOUT_KEYS: dict[str, type] = {'vf_count': int, 'mdev_type': str,
                                'mdev_count': int, 'region_image': str}


def check_shape(layout: Any) -> dict[str, Any]:
    """``layout`` if it is a non-empty map of known keys to values of
    their type; Invalid naming the allowed keys otherwise."""
    allowed = ', '.join(f'{k} ({t.__name__})' for k, t in LAYOUT_KEYS.items())
    if not isinstance(layout, dict) or not layout:
        raise exception.Invalid(
            reason=f'a layout is a non-empty object with some of: '
                   f'{allowed}; not {layout!r}')
    for key, value in layout.items():
        kind = LAYOUT_KEYS.get(key)
        if kind is None or not isinstance(value, kind) or isinstance(
                value, bool):
            raise exception.Invalid(
                reason=f'layout key {key!r} with value {value!r} is not '
                       f'one of: {allowed}')
    if ('mdev_count' in layout) != ('mdev_type' in layout):
        raise exception.Invalid(
            reason='mdev_type and mdev_count are set together')
    return layout
