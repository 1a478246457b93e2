"""The agent's local cache: what it found and did, kept across restarts.

The cache is one JSON file, ``<[DEFAULT] state_path>/agent-cache.json``,
rewritten atomically (temporary file, fsync, rename, fsync of the
directory) after every change, and read once when the agent starts. It
holds:

``report``
    The last report a discovery pass produced, and its content hash. It is
    written before the report is sent, so after a failed send it is the
    report still waiting for a conductor.
``accepted``
    The hash of the last report a conductor accepted, and to whom it was
    sent (the agent's host name and its messaging transport and exchange).
    A restarted agent reads it, so an unchanged inventory is not sent again
    (the periodic full report, ``[agent] full_report_interval``, counts from
    the start of the agent). Sent elsewhere, the hash does not count.
``bitstreams``
    For each deployable the agent programmed: its control path, name,
    driver and the bitstream (Glance image) last loaded. Kept as a record;
    the agent never reprograms a device by itself.
``layouts``
    For each device an operator partitioned (``PUT /devices/{uuid}/
    layout``): its control path, driver and desired layout, written before
    the layout is applied. The agent applies each again when it starts,
    before its first report: a reboot resets ``sriov_numvfs`` and loses
    mdevs, and an agent that died mid-change finishes it.
``prepared``
    The control paths of the devices the agent has prepared (driver
    ``prepare``) at discovery, so a restart does not prepare them again.
``mdevs``
    For each mediated device the agent created for a bound request: its
    uuid, driver and attach info. The agent creates them again when it
    starts, before its first report, because a host reboot loses them while
    the requests they belong to stay bound. Removing an mdev drops it.
``drivers``
    The operator's choices of drivers on this host (``POST
    /v2/hosts/{host}/drivers/{name}/enable`` and ``disable``): entry-point
    name -> enabled. They override ``[agent] enabled_drivers``, which stays
    the default for every driver the operator never chose for (absent from
    caches written before it).

What "the conductor is unreachable" means here: the cache never stands in
for a discovery pass. Every report is the result of a pass that has just
run; when no conductor answers (``ServiceUnavailable``, or the messaging
timeout and undeliverable errors behind it) the report stays in the cache
as pending, the accepted hash stays what it was, and the next pass (every
``[agent] periodic_interval`` seconds, or at once on a PCI hot-plug event)
sends its fresh report as soon as a conductor answers. Within a pass, a
driver that fails - at start or later - contributes the devices the cached
report holds for it, marked as its last known ones by the driver's
``failed`` state in the report (see ``resource_tracker``): a driver's
failure must not make the conductor delete devices that are probably still
there.

A cache file that cannot be read, is not JSON or does not have the shape
below is renamed ``agent-cache.json.corrupt-<UTC timestamp>`` with a
warning and the agent starts with an empty cache. A failed write is logged
and the agent goes on; the next change writes everything again.
"""
import contextlib
import copy
import json
import logging
import os
import tempfile
import threading
import time
from typing import Any

import jsonschema
from oslo_config import cfg

from cyborg.common.device_report import canonical_json

LOG = logging.getLogger(__name__)

FILE_NAME = 'agent-cache.json'
FORMAT_VERSION = 1

_STRING = {'type': 'string', 'minLength': 1}
_STRING_MAP = {'type': 'object', 'additionalProperties': {'type': 'string'}}
_UUID = {'pattern': '^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$'}


def _entry(**properties: Any) -> dict[str, Any]:
    return {'type': 'object', 'required': sorted(properties),
            'properties': properties}


SCHEMA: dict[str, Any] = {
    'type': 'object',
    'required': ['version', 'report', 'accepted', 'bitstreams', 'mdevs'],
    'properties': {
        'version': {'const': FORMAT_VERSION},
        'report': {'oneOf': [
            {'type': 'null'},
            _entry(hash=_STRING, body={'type': 'object'})]},
        'accepted': {'oneOf': [
            {'type': 'null'},
            _entry(hash=_STRING, recipient=_STRING)]},
        'bitstreams': {
            'type': 'object',
            'additionalProperties': _entry(
                controlpath_id=_STRING_MAP, deployable_name=_STRING,
                driver_name=_STRING, bitstream_id=_STRING)},
        'mdevs': {
            'type': 'object',
            'propertyNames': _UUID,
            'additionalProperties': _entry(driver_name=_STRING,
                                           attach_info=_STRING_MAP)},
        # Optional: caches written by agents before API 2.8 lack them.
        'layouts': {
            'type': 'object',
            'additionalProperties': _entry(
                controlpath_id=_STRING_MAP, driver_name=_STRING,
                layout={'type': 'object'})},
        'prepared': {'type': 'array', 'items': _STRING},
        'drivers': {'type': 'object',
                    'additionalProperties': {'type': 'boolean'}},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def cache_path(conf: cfg.ConfigOpts) -> str:
    return os.path.join(conf.state_path, FILE_NAME)


def _empty() -> dict[str, Any]:
    return {'version': FORMAT_VERSION, 'report': None, 'accepted': None,
            'bitstreams': {}, 'mdevs': {}}


def _write_atomically(path: str, text: str) -> None:
    """Replace ``path`` with ``text``: readers see the old or the new
    content, never a part of it, even after a crash."""
    directory = os.path.dirname(path) or '.'
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f'.{os.path.basename(path)}.',
                               suffix='.tmp', dir=directory)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The rename itself must reach the disk for the new file to survive.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read(path: str) -> dict[str, Any] | None:
    """The cache at ``path``; None if there is none. A file that is not a
    valid cache is set aside."""
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
        error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(data))
        if error is not None:
            where = '/'.join(str(p) for p in error.absolute_path) or '(top)'
            raise ValueError(f'{where}: {error.message}')
    except FileNotFoundError:
        LOG.debug('No agent cache at %s; starting with an empty one.', path)
        return None
    except (OSError, ValueError) as exc:
        # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
        _set_aside(path, exc)
        return None
    return data


def _set_aside(path: str, reason: Exception) -> None:
    aside = f'{path}.corrupt-{time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())}'
    try:
        os.replace(path, aside)
    except OSError as exc:
        LOG.warning('The agent cache %s is unusable (%s) and cannot be '
                    'moved aside (%s); starting with an empty cache, which '
                    'replaces it at the next change.', path, reason, exc)
        return
    LOG.warning('The agent cache %s is unusable (%s); moved it to %s and '
                'started with an empty cache. Mediated devices it recorded '
                'are not re-created.', path, reason, aside)


def _bitstream_key(controlpath_id: dict[str, str],
                   deployable_name: str) -> str:
    return canonical_json([controlpath_id, deployable_name])


class AgentCache:
    """The cache's content in memory, written through to ``path``.

    With ``path`` None nothing is written: an agent assembled without a
    state directory (a test, a tool) behaves the same, without memory
    across restarts. Every method is safe to call from several threads.
    """

    def __init__(self, path: str | None = None,
                 data: dict[str, Any] | None = None) -> None:
        self.path = path
        self._data = data or _empty()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str) -> 'AgentCache':
        """The cache kept at ``path``, or an empty one (see module doc)."""
        data = _read(path)
        cache = cls(path, data)
        if data is not None:
            LOG.debug('Read the agent cache %s: %d mdev(s), %d programmed '
                      'deployable(s).', path, len(data['mdevs']),
                      len(data['bitstreams']))
        return cache

    def _save(self) -> None:
        """Write the cache; the caller holds the lock."""
        if self.path is None:
            return
        text = json.dumps(self._data, sort_keys=True, indent=1)
        try:
            _write_atomically(self.path, text)
        except OSError as exc:
            LOG.error('Could not write the agent cache %s: %s. What it '
                      'should now hold is kept in memory and written with '
                      'the next change.', self.path, exc)

    # Reports.

    @property
    def report(self) -> dict[str, Any] | None:
        """The last report discovery produced, sent or not."""
        with self._lock:
            entry = self._data['report']
            return copy.deepcopy(entry['body']) if entry else None

    @property
    def report_hash(self) -> str | None:
        with self._lock:
            entry = self._data['report']
            return entry['hash'] if entry else None

    def accepted_hash(self, recipient: str) -> str | None:
        """The hash of the last report ``recipient`` accepted, if the last
        accepted report went to ``recipient``."""
        with self._lock:
            accepted = self._data['accepted']
            if accepted and accepted['recipient'] == recipient:
                return accepted['hash']
            return None

    def record_report(self, report: dict[str, Any], digest: str) -> None:
        with self._lock:
            current = self._data['report']
            if current and current['hash'] == digest:
                return
            self._data['report'] = {'hash': digest,
                                    'body': copy.deepcopy(report)}
            self._save()

    def record_accepted(self, recipient: str, digest: str) -> None:
        with self._lock:
            entry = {'recipient': recipient, 'hash': digest}
            if self._data['accepted'] == entry:
                return
            self._data['accepted'] = entry
            self._save()

    # Device-side actions.

    @property
    def bitstreams(self) -> list[dict[str, Any]]:
        """What the agent last loaded onto each deployable it programmed."""
        with self._lock:
            return copy.deepcopy(list(self._data['bitstreams'].values()))

    def record_bitstream(self, controlpath_id: dict[str, str],
                         deployable_name: str, driver_name: str,
                         bitstream_id: str) -> None:
        with self._lock:
            self._data['bitstreams'][
                _bitstream_key(controlpath_id, deployable_name)] = {
                    'controlpath_id': dict(controlpath_id),
                    'deployable_name': deployable_name,
                    'driver_name': driver_name,
                    'bitstream_id': bitstream_id}
            self._save()

    @property
    def mdevs(self) -> dict[str, dict[str, Any]]:
        """mdev uuid -> ``{'driver_name': ..., 'attach_info': {...}}``."""
        with self._lock:
            return copy.deepcopy(self._data['mdevs'])

    def record_mdev(self, mdev_uuid: str, driver_name: str,
                    attach_info: dict[str, str]) -> None:
        with self._lock:
            self._data['mdevs'][mdev_uuid] = {
                'driver_name': driver_name, 'attach_info': dict(attach_info)}
            self._save()

    def forget_mdev(self, mdev_uuid: str) -> None:
        with self._lock:
            if self._data['mdevs'].pop(mdev_uuid, None) is not None:
                self._save()

    # Drivers.

    @property
    def driver_choices(self) -> dict[str, bool]:
        """Entry-point name -> enabled, for the drivers an operator
        enabled or disabled on this host."""
        with self._lock:
            return dict(self._data.get('drivers', {}))

    def record_driver_choice(self, name: str, enabled: bool) -> None:
        with self._lock:
            choices = self._data.setdefault('drivers', {})
            if choices.get(name) is enabled:
                return
            choices[name] = enabled
            self._save()

    # Layouts and preparation.

    @property
    def layouts(self) -> list[dict[str, Any]]:
        """``{'controlpath_id', 'driver_name', 'layout'}`` per device."""
        with self._lock:
            return copy.deepcopy(list(
                self._data.get('layouts', {}).values()))

    def record_layout(self, controlpath_id: dict[str, str],
                      driver_name: str,
                      layout: dict[str, Any] | None) -> None:
        """Keep ``layout`` as the device's desired one; None forgets it."""
        key = canonical_json(controlpath_id)
        with self._lock:
            layouts = self._data.setdefault('layouts', {})
            if layout is None:
                if layouts.pop(key, None) is None:
                    return
            else:
                layouts[key] = {'controlpath_id': dict(controlpath_id),
                                'driver_name': driver_name,
                                'layout': dict(layout)}
            self._save()

    def prepared(self, controlpath_id: dict[str, str]) -> bool:
        with self._lock:
            return canonical_json(controlpath_id) in self._data.get(
                'prepared', [])

    def record_prepared(self, controlpath_id: dict[str, str]) -> None:
        key = canonical_json(controlpath_id)
        with self._lock:
            prepared = self._data.setdefault('prepared', [])
            if key not in prepared:
                prepared.append(key)
                self._save()
