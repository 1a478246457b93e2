"""The fake driver's health and usage: faults from configuration or a
file, and plausible numbers that follow what was done to a device."""
import json
from collections.abc import Callable
from typing import Any

from cyborg.accelerator import pci
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage

FAULTS_OPTION = '[fake_driver] faults'
# What a fake GPU's usage says: 16 GiB of memory, shared by its vGPUs.
GPU_MEMORY_BYTES = 16 << 30


def parse_faults(entries: list[str], is_fake: Callable[[str], bool]
                 ) -> dict[str, Health]:
    """``[fake_driver] faults`` as {slot: health}; Invalid naming the
    entry when one is not ``<slot>=<state>[:<reason>]`` of a slot
    ``is_fake`` accepts.
    """
    faults = {}
    for entry in entries:
        slot, sep, rest = entry.strip().partition('=')
        slot = slot.strip().lower()
        state, _, reason = rest.partition(':')
        problem = None
        if not sep or not pci.ADDRESS_RE.match(slot):
            problem = ('expected <slot>=<state>[:<reason>] with a slot such '
                       'as 0000:0c:00.0')
        elif state.strip() not in device_health.HEALTH_STATES:
            problem = (f'state {state.strip()!r} is not one of '
                       f'{", ".join(device_health.HEALTH_STATES)}')
        elif not is_fake(slot):
            problem = f'there is no fake device at {slot}'
        if problem is not None:
            raise exception.Invalid(
                reason=f'{FAULTS_OPTION} entry {entry!r}: {problem}')
        faults[slot] = Health(state.strip(), reason.strip())
    return faults


def read_fault_file(path: str) -> tuple[dict[str, Health], str | None]:
    """The faults in ``path`` by slot, and a problem with the whole file
    (None when there is none). A missing or empty file (a writer caught
    half-way) holds no faults; an entry that is not {"state", "reason"}
    makes its slot ``unknown``."""
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as exc:
        return {}, f'fault file {path} cannot be read: {exc}'
    if not text.strip():
        return {}, None
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {}, f'fault file {path} is not valid JSON: {exc}'
    if not isinstance(data, dict):
        return {}, f'fault file {path} is not a JSON object of slots'
    faults = {}
    for slot, entry in data.items():
        state = entry.get('state') if isinstance(entry, dict) else None
        reason = entry.get('reason', '') if isinstance(entry, dict) else None
        if (state not in device_health.HEALTH_STATES
                or not isinstance(reason, str)):
            faults[slot.strip().lower()] = Health(
                device_health.UNKNOWN,
                f'fault file {path}: entry {slot!r} is not '
                '{"state": <healthy|degraded|unhealthy|unknown>, '
                '"reason": <text>}')
        else:
            faults[slot.strip().lower()] = Health(state, reason)
    return faults, None


def health(slot: str, options: Any, is_fake: Callable[[str], bool]
           ) -> Health:
    """Healthy, unless ``[fake_driver] faults`` or ``fault_file`` (in
    ``options``) give ``slot`` a fault (both: the worse). An option
    changed into an invalid one raises."""
    faults = parse_faults(options.faults, is_fake)
    readings = [faults[slot]] if slot in faults else []
    if options.fault_file:
        from_file, problem = read_fault_file(options.fault_file)
        if problem is not None:
            return Health(device_health.UNKNOWN, problem)
        if slot in from_file:
            readings.append(from_file[slot])
    return Health.combine(readings)


def card_usage(index: int, loaded: bool, programs: int) -> Usage:
    """A card with a bitstream loaded is busy and warmer."""
    return Usage(
        temperature_celsius=40.0 + index % 30 + 10 * loaded,
        power_watts=25.0 + 20 * loaded,
        utilization_percent=50.0 if loaded else 0.0,
        counters={'programs': programs})


def gpu_usage(index: int, mdevs: int, vgpus: int) -> Usage:
    """A GPU is as busy, hot and full as the share of its ``vgpus`` that
    exist as mdevs."""
    share = mdevs / vgpus
    return Usage(
        temperature_celsius=40.0 + index % 30 + 20 * share,
        power_watts=30.0 + 40 * share,
        utilization_percent=100 * share,
        memory_used_bytes=int(GPU_MEMORY_BYTES * share),
        memory_total_bytes=GPU_MEMORY_BYTES,
        counters={'mdevs': mdevs})
