"""The shape of a device layout, as the API, conductor and agent check it
before any driver sees it (what a device offers is the driver's
``layout_options``, checked by ``device_report.check_layout``)."""
from typing import Any

from cyborg.common import exception

# The keys a layout may hold, and the type of each value: the SR-IOV VF
# count; an mdev type and how many mdevs of it; an FPGA's image; the
# vGPU type of an SR-IOV GPU's VFs and how many of them; a GPU's MIG mode
# and its MIG partition (GPU instance profiles such as ``3g.40gb``); a
# NIC's eswitch mode.
LAYOUT_KEYS: dict[str, type] = {
    'vf_count': int, 'mdev_type': str, 'mdev_count': int,
    'region_image': str, 'vgpu_type': str, 'vgpu_count': int,
    'mig_mode': str, 'mig_partition': list, 'eswitch_mode': str}
# Keys given together or not at all.
PAIRS = (('mdev_type', 'mdev_count'), ('vgpu_type', 'vgpu_count'))


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
        if (kind is None or not isinstance(value, kind)
                or isinstance(value, bool)
                or (isinstance(value, list) and not all(
                    isinstance(item, str) for item in value))):
            raise exception.Invalid(
                reason=f'layout key {key!r} with value {value!r} is not '
                       f'one of: {allowed} (a list holds strings)')
    for first, second in PAIRS:
        if (first in layout) != (second in layout):
            raise exception.Invalid(
                reason=f'{first} and {second} are set together')
    return layout
