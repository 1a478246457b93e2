"""A host's devices and their parts, kept equal to what its agent reports.

``apply_report`` reads the host's rows (a fixed number of queries, whatever
the number of devices), compares them with the report and writes only the
difference, in one transaction: an unchanged report writes nothing, and new
rows are inserted a table at a time. Rows are matched by identity (see
``host_rows``). Parts that an accelerator request still uses are never
deleted; they stay until the request lets go of them. Nor are the devices
of a driver an operator turned off on the host (the report says
``disabled``): they keep their rows, reserved in placement, and come back
as they were when the driver reports them again.
"""
import collections
import dataclasses
import json
import logging
import uuid
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common.device_report import canonical_json
from cyborg.db import models
from cyborg.db.api import devices as devices_api
from cyborg.db.api import host_rows
from cyborg.db.api import providers
from cyborg.db.api import reader
from cyborg.db.api import writer
from cyborg.db.api.host_rows import DeployableRows
from cyborg.db.api.host_rows import DeviceRows
from cyborg.db.api.host_rows import HostRows
from cyborg.db.api.host_rows import Row

LOG = logging.getLogger(__name__)

# Namespace of resource-provider uuids: uuid5(RP_NAMESPACE,
# "<hostname>/<control path address>/<deployable name>").
RP_NAMESPACE = uuid.UUID('4a1f2b8e-6c3d-5e7f-9a0b-1c2d3e4f5a6b')

# Values per IN (...) clause when reading back inserted ids.
_IN_BATCH = 500
Report = dict[str, Any]


def control_path_address(cpid_info: dict[str, str]) -> str:
    """``dddd:bb:dd.f`` for a PCI address, canonical JSON otherwise."""
    keys = ('domain', 'bus', 'device', 'function')
    if set(cpid_info) >= set(keys):
        return '{domain}:{bus}:{device}.{function}'.format(**cpid_info)
    return canonical_json(cpid_info)


def resource_provider_uuid(hostname: str, cpid_info: dict[str, str],
                           deployable_name: str) -> str:
    """Stable across restarts, unique across hosts."""
    name = (f'{hostname}/{control_path_address(cpid_info)}/'
            f'{deployable_name}')
    return str(uuid.uuid5(RP_NAMESPACE, name))


@dataclasses.dataclass
class ReportResult:
    """What one report changed; ``writes`` counts rows written.

    ``added``, ``updated`` and ``removed`` are those devices as
    ``devices.to_dict`` gives them, for notifications; not sent back.
    """

    devices_added: int = 0
    devices_updated: int = 0
    devices_removed: int = 0
    kept_in_use: int = 0
    writes: int = 0
    added: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    updated: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    removed: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name)
                for f in dataclasses.fields(self) if f.type is int}


class _Writer:
    """Sends updates as they come, deletes and inserts in batches."""

    def __init__(self, session: sa.orm.Session, result: ReportResult
                 ) -> None:
        self.session = session
        self.result = result
        self.deletes: dict[type, list[int]] = collections.defaultdict(list)
        # Providers to delete from placement: rp uuid -> compute node name.
        self.removals: dict[str, str] = {}

    def update(self, model: type[models.Base], row: Row,
               values: dict[str, Any]) -> bool:
        changed = {k: v for k, v in values.items()
                   if getattr(row, k) != v}
        if changed:
            self.session.execute(
                sa.update(model).where(model.id == row.id).values(**changed))
            self.result.writes += 1
        return bool(changed)

    def delete(self, model: type[models.Base], row: Row) -> None:
        self.deletes[model].append(row.id)

    def flush_deletes(self) -> None:
        providers.add_removals(self.session, self.removals)
        self.removals = {}
        # Children before parents, so foreign keys never see an orphan.
        order = (models.AttachHandle, models.Attribute, models.Deployable,
                 models.ControlpathID, models.Device)
        for model in order:
            ids = self.deletes.pop(model, [])
            if ids:
                self.session.execute(
                    sa.delete(model).where(model.id.in_(ids)))
                self.result.writes += len(ids)

    def insert(self, model: type[models.Base], rows: list[dict[str, Any]],
               returning: bool = False) -> list[int]:
        """Insert ``rows``; with ``returning``, their ids in row order."""
        if not rows:
            return []
        for row in rows:
            row.setdefault('uuid', str(uuid.uuid4()))
        self.result.writes += len(rows)
        # One executemany per table; ids are read back by uuid, which
        # batches on every database (INSERT .. RETURNING in parameter order
        # does not, on SQLite and MariaDB).
        self.session.execute(sa.insert(model), rows)
        if not returning:
            return []
        ids: dict[str, int] = {}
        uuids = [row['uuid'] for row in rows]
        # Every table written here has a uuid column; Base does not.
        uuid_column = model.__table__.c.uuid
        for start in range(0, len(uuids), _IN_BATCH):
            ids.update(self.session.execute(
                sa.select(uuid_column, model.id).where(
                    uuid_column.in_(uuids[start:start + _IN_BATCH]))).all())
        return [ids[u] for u in uuids]


def _device_values(report: Report, hostname: str) -> dict[str, Any]:
    return {'type': report['type'], 'vendor': report['vendor'],
            'model': report['model'], 'hostname': hostname,
            'std_board_info': canonical_json(
                report.get('std_board_info', {})),
            'vendor_board_info': canonical_json(
                report.get('vendor_board_info', {}))}


def _deployable_values(report: Report, hostname: str,
                       cpid_info: dict[str, str]) -> dict[str, Any]:
    return {'num_accelerators': report['num_accelerators'],
            'driver_name': report['driver_name'],
            'rp_uuid': resource_provider_uuid(hostname, cpid_info,
                                              report['name']),
            'missing_since': None, 'driver_disabled_since': None}


def _attribute_rows(deployable_id: int, attributes: dict[str, str]
                    ) -> list[dict[str, Any]]:
    return [{'deployable_id': deployable_id, 'key': key, 'value': value}
            for key, value in sorted(attributes.items())]


def _handle_rows(deployable_id: int, cpid_id: int,
                 handles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{'deployable_id': deployable_id, 'cpid_id': cpid_id,
             'in_use': False, 'attach_type': h['attach_type'],
             'attach_info': canonical_json(h['attach_info'])}
            for h in handles]


def _add_deployables(w: _Writer, hostname: str,
                     new: list[tuple[int, int, dict[str, str], Report]]
                     ) -> None:
    """Insert deployables given as (device id, cpid id, cpid info, report)."""
    ids = w.insert(models.Deployable, [
        dict(name=dep['name'], device_id=device_id,
             **_deployable_values(dep, hostname, cpid_info))
        for device_id, _, cpid_info, dep in new], returning=True)
    attributes: list[dict[str, Any]] = []
    handles: list[dict[str, Any]] = []
    for dep_id, (_, cpid_id, _, dep) in zip(ids, new, strict=True):
        attributes.extend(_attribute_rows(dep_id, dep.get('attributes', {})))
        handles.extend(_handle_rows(dep_id, cpid_id, dep['attach_handles']))
    w.insert(models.Attribute, attributes)
    w.insert(models.AttachHandle, handles)


def _add_devices(w: _Writer, host: str, hostname: str, status: str,
                 reports: list[Report]) -> list[tuple[int, int,
                                                      dict[str, str],
                                                      Report]]:
    """Insert devices with ``status`` and their control paths; return
    their deployables to add."""
    # Whole seconds: what is notified is what MySQL keeps.
    now = timeutils.utcnow().replace(microsecond=0)
    # A device the agent failed to prepare comes in ``error``.
    rows = [dict(host=host, status=dev.get('status', status),
                 status_reason=dev.get('status_reason'), created_at=now,
                 **_device_values(dev, hostname)) for dev in reports]
    device_ids = w.insert(models.Device, rows, returning=True)
    w.result.added.extend(dict(row, id=device_id, updated_at=None)
                          for device_id, row in zip(device_ids, rows,
                                                    strict=True))
    cpid_ids = w.insert(models.ControlpathID, [
        {'device_id': device_id,
         'cpid_type': dev['controlpath_id']['cpid_type'],
         'cpid_info': canonical_json(dev['controlpath_id']['cpid_info'])}
        for device_id, dev in zip(device_ids, reports, strict=True)],
        returning=True)
    w.result.devices_added += len(reports)
    return [(device_id, cpid_id, dev['controlpath_id']['cpid_info'], dep)
            for device_id, cpid_id, dev in zip(device_ids, cpid_ids,
                                               reports, strict=True)
            for dep in dev['deployables']]


def _sync_deployable(w: _Writer, existing: DeployableRows, report: Report,
                     cpid_id: int, busy_handles: set[int]) -> bool:
    changed = False
    dep_id = existing.row.id
    # An attribute an operator set wins over the driver's of that key.
    attributes = {k: v for k, v in report.get('attributes', {}).items()
                  if k not in existing.operator_attributes}
    new_attrs = {}
    for key, value in attributes.items():
        row = existing.attributes.get(key)
        if row is None:
            new_attrs[key] = value
        else:
            changed |= w.update(models.Attribute, row, {'value': value})
    for key, row in existing.attributes.items():
        if key not in attributes:
            w.delete(models.Attribute, row)
            changed = True
    handles = {canonical_json(h['attach_info']): h
               for h in report['attach_handles']}
    new_handles = []
    for info, handle in handles.items():
        row = existing.handles.get(info)
        if row is None:
            new_handles.append(handle)
        else:
            changed |= w.update(models.AttachHandle, row,
                                {'attach_type': handle['attach_type'],
                                 'missing_since': None})
    for info, row in existing.handles.items():
        if info in handles:
            continue
        if row.id in busy_handles:
            LOG.warning('Attach handle %s of deployable %s is gone from the '
                        'host but still in use; keeping it, never to be '
                        'handed out again.', row.attach_info,
                        existing.row.name)
            if row.missing_since is None:
                w.update(models.AttachHandle, row,
                         {'missing_since': timeutils.utcnow()})
            w.result.kept_in_use += 1
            continue
        w.delete(models.AttachHandle, row)
        changed = True
    w.insert(models.Attribute, _attribute_rows(dep_id, new_attrs))
    w.insert(models.AttachHandle,
             _handle_rows(dep_id, cpid_id, new_handles))
    return changed or bool(new_attrs or new_handles)


def _delete_deployable(w: _Writer, dep: DeployableRows,
                       hostname: str) -> None:
    if dep.row.rp_uuid:
        w.removals[dep.row.rp_uuid] = hostname
    for row in [*dep.attributes.values(), *dep.operator_attributes.values()]:
        w.delete(models.Attribute, row)
    for row in dep.handles.values():
        w.delete(models.AttachHandle, row)
    w.delete(models.Deployable, dep.row)


def _sync_device(w: _Writer, existing: DeviceRows, report: Report,
                 hostname: str, rows: HostRows, disabled: set[str]
                 ) -> list[tuple[int, int, dict[str, str], Report]]:
    """Update a known device; return its new deployables to add."""
    changed = w.update(models.Device, existing.row,
                       _device_values(report, hostname))
    cpid_info = report['controlpath_id']['cpid_info']
    reported = {dep['name']: dep for dep in report['deployables']}
    known = dict(existing.deployables, **_renamed(existing, reported))
    added = []
    for name, dep in reported.items():
        dep_rows = known.get(name)
        if dep_rows is None:
            added.append((existing.row.id, existing.cpid.id, cpid_info, dep))
            continue
        values = dict(_deployable_values(dep, hostname, cpid_info),
                      name=name)
        old_rp = dep_rows.row.rp_uuid
        if old_rp and existing.row.hostname == hostname:
            # Kept while the host keeps its name: a provider made before
            # (by an adopted deployment, under another uuid scheme) is
            # what Nova's allocations name.
            values['rp_uuid'] = old_rp
        elif old_rp and old_rp != values['rp_uuid']:
            # The host's node name changed: a new provider replaces it.
            w.removals[old_rp] = existing.row.hostname
        dep_changed = w.update(models.Deployable, dep_rows.row, values)
        dep_changed |= _sync_deployable(w, dep_rows, dep, existing.cpid.id,
                                        rows.busy_handles)
        if dep_changed:
            _unsynced(w, dep_rows)
        changed |= dep_changed
    matched = {known[n].row.id for n in reported if n in known}
    for name, dep_rows in existing.deployables.items():
        if dep_rows.row.id in matched:
            continue
        if dep_rows.row.driver_name in disabled:
            changed |= _keep_disabled(w, dep_rows)
            continue
        if dep_rows.row.id in rows.busy_deployables:
            LOG.warning('Deployable %s is gone from the host but still in '
                        'use; keeping it.', name)
            _mark_missing(w, dep_rows)
            w.result.kept_in_use += 1
            continue
        _delete_deployable(w, dep_rows, existing.row.hostname)
        changed = True
    if changed or added:
        w.result.devices_updated += 1
        w.result.updated.append(dict(
            devices_api.to_dict(existing.row),
            **_device_values(report, hostname),
            updated_at=timeutils.utcnow().replace(microsecond=0)))
    return added


def _renamed(existing: DeviceRows, reported: dict[str, Report]
             ) -> dict[str, DeployableRows]:
    """Known deployables the report names otherwise, found by their
    attach handles: another driver (say, of a deployment cyborg took
    over) named the same part of the same device differently."""
    gone = [rows for name, rows in existing.deployables.items()
            if name not in reported and rows.handles]
    found: dict[str, DeployableRows] = {}
    for name, dep in reported.items():
        if name in existing.deployables or not gone:
            continue
        infos = {canonical_json(h['attach_info'])
                 for h in dep['attach_handles']}
        best = max(gone, key=lambda rows: len(infos & set(rows.handles)))
        if infos & set(best.handles):
            found[name] = best
            gone.remove(best)
    return found


def _unsynced(w: _Writer, dep: DeployableRows) -> None:
    """Placement has yet to learn of a change to the deployable."""
    w.update(models.Deployable, dep.row, {'rp_synced': None})


def _mark_missing(w: _Writer, dep: DeployableRows) -> None:
    """The host no longer has it but a request holds it: placement will
    reserve all of it until the request lets go (see
    providers.purge_released)."""
    if dep.row.missing_since is None:
        w.update(models.Deployable, dep.row,
                 {'missing_since': timeutils.utcnow(), 'rp_synced': None})


def _keep_disabled(w: _Writer, dep: DeployableRows) -> bool:
    """An operator turned the deployable's driver off on its host: keep
    it, with its uuid, overrides and provider, reserved in placement
    until the driver reports it again (see providers.held_back)."""
    if dep.row.driver_disabled_since is not None:
        return False
    w.update(models.Deployable, dep.row,
             {'driver_disabled_since': timeutils.utcnow(),
              'rp_synced': None})
    return True


def _remove_device(w: _Writer, host: str, key: str, device: DeviceRows,
                   rows: HostRows, disabled: set[str]) -> None:
    off = [d for d in device.deployables.values()
           if d.row.driver_name in disabled]
    if off:
        # Kept whole: what its other drivers no longer report goes as
        # from a reported device.
        LOG.info('Device %s on host %s is kept while its driver is turned '
                 'off.', key, host)
        for dep in device.deployables.values():
            if dep.row.driver_name in disabled:
                _keep_disabled(w, dep)
            elif dep.row.id in rows.busy_deployables:
                _mark_missing(w, dep)
            else:
                _delete_deployable(w, dep, device.row.hostname)
        return
    in_use = [d.row.name for d in device.deployables.values()
              if d.row.id in rows.busy_deployables]
    if in_use:
        LOG.warning('Device %s on host %s is gone but deployables %s are '
                    'still in use; keeping it.', key, host,
                    ', '.join(in_use))
        for dep in device.deployables.values():
            _mark_missing(w, dep)
        w.result.kept_in_use += 1
        return
    for dep in device.deployables.values():
        _delete_deployable(w, dep, device.row.hostname)
    w.delete(models.ControlpathID, device.cpid)
    w.delete(models.Device, device.row)
    w.result.devices_removed += 1
    w.result.removed.append(devices_api.to_dict(device.row))


@writer
def apply_report(context: cyborg_context.RequestContext, host: str,
                 report: Report) -> ReportResult:
    """Make the host's rows equal to a validated report; see module doc."""
    hostname = report['hostname']
    result = ReportResult()
    w = _Writer(context.session, result)
    rows = host_rows.load(context.session, host)
    reported = {host_rows.cpid_key(dev['controlpath_id']['cpid_type'],
                                   dev['controlpath_id']['cpid_info']): dev
                for dev in report['devices']}
    # A driver an operator turned off reports no devices; its devices
    # keep their rows until it is turned on again.
    disabled = {name for name, entry in report.get('drivers', {}).items()
                if entry['state'] == 'disabled'}
    for key, device in rows.devices.items():
        if key not in reported:
            _remove_device(w, host, key, device, rows, disabled)
    new_deployables = []
    for key, dev in reported.items():
        if key in rows.devices:
            new_deployables.extend(_sync_device(
                w, rows.devices[key], dev, hostname, rows, disabled))
    # Deletes first: a re-added part may reuse a unique value.
    w.flush_deletes()
    # Only new devices take the agent's status; known ones keep theirs.
    new_deployables.extend(_add_devices(
        w, host, hostname, report.get('new_device_status', 'enabled'),
        [dev for key, dev in reported.items() if key not in rows.devices]))
    _add_deployables(w, hostname, new_deployables)
    return result


def _device_dict(device: DeviceRows) -> dict[str, Any]:
    row = device.row
    return {
        'uuid': row.uuid, 'type': row.type, 'vendor': row.vendor,
        'model': row.model, 'hostname': row.hostname, 'status': row.status,
        'std_board_info': json.loads(row.std_board_info or '{}'),
        'vendor_board_info': json.loads(row.vendor_board_info or '{}'),
        'controlpath_id': {'cpid_type': device.cpid.cpid_type,
                           'cpid_info': json.loads(device.cpid.cpid_info)},
        'deployables': [{
            'uuid': dep.row.uuid, 'name': dep.row.name,
            'num_accelerators': dep.row.num_accelerators,
            'driver_name': dep.row.driver_name,
            'rp_uuid': dep.row.rp_uuid,
            'attributes': {k: a.value for k, a in [
                *dep.attributes.items(), *dep.operator_attributes.items()]},
            'attach_handles': [
                {'uuid': h.uuid, 'attach_type': h.attach_type,
                 'attach_info': json.loads(h.attach_info),
                 'in_use': h.in_use}
                for h in dep.handles.values()],
        } for dep in device.deployables.values()],
    }


@reader
def get_host_devices(context: cyborg_context.RequestContext, host: str
                     ) -> list[dict[str, Any]]:
    """The host's devices as nested dicts in report form."""
    rows = host_rows.load(context.session, host)
    devices = [_device_dict(device) for device in rows.devices.values()]
    devices.sort(key=lambda d: canonical_json(d['controlpath_id']))
    return devices
