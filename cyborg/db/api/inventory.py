"""A host's devices and their parts, kept equal to what its agent reports.

``apply_report`` reads the host's rows (a fixed number of queries, whatever
the number of devices), compares them with the report and writes only the
difference, in one transaction: an unchanged report writes nothing.
Identity: a device is its control path (PCI address), a deployable its name
within the device, an attribute its key, an attach handle its attach info.
Parts that an accelerator request still uses are never deleted; they stay
until the request lets go of them.
"""
import collections
import dataclasses
import json
import logging
import uuid
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common.device_report import canonical_json
from cyborg.db import models
from cyborg.db.api import reader
from cyborg.db.api import writer

LOG = logging.getLogger(__name__)

# Namespace of resource-provider uuids: uuid5(RP_NAMESPACE,
# "<hostname>/<control path address>/<deployable name>").
RP_NAMESPACE = uuid.UUID('4a1f2b8e-6c3d-5e7f-9a0b-1c2d3e4f5a6b')


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
    """What one report changed; ``writes`` counts rows written."""

    devices_added: int = 0
    devices_updated: int = 0
    devices_removed: int = 0
    kept_in_use: int = 0
    writes: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _DeployableRows:
    row: models.Deployable
    attributes: dict[str, models.Attribute] = dataclasses.field(
        default_factory=dict)
    handles: dict[str, models.AttachHandle] = dataclasses.field(
        default_factory=dict)


@dataclasses.dataclass
class _DeviceRows:
    row: models.Device
    cpid: models.ControlpathID
    deployables: dict[str, _DeployableRows] = dataclasses.field(
        default_factory=dict)


def _cpid_key(cpid_type: str, cpid_info: str | dict[str, str]) -> str:
    if isinstance(cpid_info, str):
        cpid_info = _loads(cpid_info)
    return canonical_json({'cpid_type': cpid_type, 'cpid_info': cpid_info})


def _loads(text: str) -> Any:
    return json.loads(text)


def _load_host(session: sa.orm.Session, host: str
               ) -> tuple[dict[str, _DeviceRows], set[int], set[int]]:
    """The host's rows by identity, plus the ids that requests still use."""
    on_host = models.Device.host == host
    devices = {d.id: d for d in session.scalars(
        sa.select(models.Device).where(on_host))}
    if not devices:
        return {}, set(), set()
    by_device: dict[int, _DeviceRows] = {}
    for cpid in session.scalars(
            sa.select(models.ControlpathID).join(models.Device)
            .where(on_host)):
        by_device[cpid.device_id] = _DeviceRows(devices[cpid.device_id],
                                                cpid)
    deployables: dict[int, _DeployableRows] = {}
    for dep in session.scalars(
            sa.select(models.Deployable).join(models.Device)
            .where(on_host)):
        entry = by_device.get(dep.device_id)
        if entry is not None:
            deployables[dep.id] = entry.deployables.setdefault(
                dep.name, _DeployableRows(dep))
    for attr in session.scalars(
            sa.select(models.Attribute).join(models.Deployable)
            .join(models.Device).where(on_host)):
        if attr.deployable_id in deployables:
            deployables[attr.deployable_id].attributes[attr.key] = attr
    for handle in session.scalars(
            sa.select(models.AttachHandle).join(models.Deployable)
            .join(models.Device).where(on_host)):
        if handle.deployable_id in deployables:
            deployables[handle.deployable_id].handles[
                handle.attach_info] = handle
    arq = models.AcceleratorRequest
    busy_handles: set[int] = set()
    busy_deployables: set[int] = set()
    for handle_id, deployable_id in session.execute(
            sa.select(arq.attach_handle_id, arq.deployable_id)
            .join(models.Deployable, models.Deployable.id ==
                  arq.deployable_id)
            .join(models.Device).where(on_host)):
        if handle_id is not None:
            busy_handles.add(handle_id)
        busy_deployables.add(deployable_id)
    for entry in by_device.values():
        for dep in entry.deployables.values():
            for handle in dep.handles.values():
                if handle.in_use:
                    busy_handles.add(handle.id)
                    busy_deployables.add(dep.row.id)
    return ({_cpid_key(e.cpid.cpid_type, e.cpid.cpid_info): e
             for e in by_device.values()}, busy_handles, busy_deployables)


class _Writer:
    """Collects inserts, updates and deletes, then runs them in batches."""

    def __init__(self, session: sa.orm.Session, result: ReportResult
                 ) -> None:
        self.session = session
        self.result = result
        self.deletes: dict[type, list[int]] = collections.defaultdict(list)

    def update(self, row: Any, values: dict[str, Any]) -> bool:
        changed = {k: v for k, v in values.items()
                   if getattr(row, k) != v}
        if changed:
            self.session.execute(
                sa.update(type(row)).where(type(row).id == row.id)
                .values(**changed))
            self.result.writes += 1
        return bool(changed)

    def delete(self, row: Any) -> None:
        self.deletes[type(row)].append(row.id)

    def flush_deletes(self) -> None:
        # Children before parents, so foreign keys never see an orphan.
        order = (models.AttachHandle, models.Attribute, models.Deployable,
                 models.ControlpathID, models.Device)
        for model in order:
            ids = self.deletes.pop(model, [])
            if ids:
                self.session.execute(
                    sa.delete(model).where(model.id.in_(ids)))
                self.result.writes += len(ids)

    def insert(self, rows: list[Any]) -> None:
        if rows:
            self.session.add_all(rows)
            self.session.flush()
            self.result.writes += len(rows)


def _new_uuid() -> str:
    return str(uuid.uuid4())


def _device_values(report: dict[str, Any], hostname: str) -> dict[str, Any]:
    return {'type': report['type'], 'vendor': report['vendor'],
            'model': report['model'], 'hostname': hostname,
            'std_board_info': canonical_json(
                report.get('std_board_info', {})),
            'vendor_board_info': canonical_json(
                report.get('vendor_board_info', {}))}


def _deployable_values(report: dict[str, Any], hostname: str,
                       cpid_info: dict[str, str]) -> dict[str, Any]:
    return {'num_accelerators': report['num_accelerators'],
            'driver_name': report['driver_name'],
            'rp_uuid': resource_provider_uuid(hostname, cpid_info,
                                              report['name'])}


def _add_deployables(w: _Writer, device: models.Device,
                     cpid: models.ControlpathID, hostname: str,
                     cpid_info: dict[str, str],
                     reports: list[dict[str, Any]]) -> None:
    rows = [models.Deployable(uuid=_new_uuid(), name=dep['name'],
                              device_id=device.id,
                              **_deployable_values(dep, hostname, cpid_info))
            for dep in reports]
    w.insert(rows)
    children: list[Any] = []
    for row, dep in zip(rows, reports, strict=True):
        children.extend(_new_attributes(row, dep.get('attributes', {})))
        children.extend(_new_handles(row, cpid, dep['attach_handles']))
    w.insert(children)


def _new_attributes(dep: models.Deployable, attributes: dict[str, str]
                    ) -> list[models.Attribute]:
    return [models.Attribute(uuid=_new_uuid(), deployable_id=dep.id,
                             key=key, value=value)
            for key, value in sorted(attributes.items())]


def _new_handles(dep: models.Deployable, cpid: models.ControlpathID,
                 handles: list[dict[str, Any]]) -> list[models.AttachHandle]:
    return [models.AttachHandle(uuid=_new_uuid(), deployable_id=dep.id,
                                cpid_id=cpid.id, in_use=False,
                                attach_type=h['attach_type'],
                                attach_info=canonical_json(h['attach_info']))
            for h in handles]


def _add_devices(w: _Writer, host: str, hostname: str,
                 reports: list[dict[str, Any]]) -> None:
    devices = [models.Device(uuid=_new_uuid(), host=host, status='enabled',
                             **_device_values(dev, hostname))
               for dev in reports]
    w.insert(devices)
    cpids = [models.ControlpathID(
        uuid=_new_uuid(), device_id=device.id,
        cpid_type=dev['controlpath_id']['cpid_type'],
        cpid_info=canonical_json(dev['controlpath_id']['cpid_info']))
        for device, dev in zip(devices, reports, strict=True)]
    w.insert(cpids)
    for device, cpid, dev in zip(devices, cpids, reports, strict=True):
        _add_deployables(w, device, cpid, hostname,
                         dev['controlpath_id']['cpid_info'],
                         dev['deployables'])
    w.result.devices_added += len(devices)


def _sync_deployable(w: _Writer, existing: _DeployableRows,
                     report: dict[str, Any], cpid: models.ControlpathID,
                     busy_handles: set[int]) -> bool:
    changed = False
    attributes = report.get('attributes', {})
    new_attrs = []
    for key, value in attributes.items():
        row = existing.attributes.get(key)
        if row is None:
            new_attrs.append(key)
        else:
            changed |= w.update(row, {'value': value})
    for key, row in existing.attributes.items():
        if key not in attributes:
            w.delete(row)
            changed = True
    handles = {canonical_json(h['attach_info']): h
               for h in report['attach_handles']}
    new_handles = []
    for info, handle in handles.items():
        row = existing.handles.get(info)
        if row is None:
            new_handles.append(handle)
        else:
            changed |= w.update(row, {'attach_type': handle['attach_type']})
    for info, row in existing.handles.items():
        if info in handles:
            continue
        if row.id in busy_handles:
            LOG.warning('Attach handle %s of deployable %s is gone from the '
                        'host but still in use; keeping it.',
                        row.attach_info, existing.row.name)
            w.result.kept_in_use += 1
            continue
        w.delete(row)
        changed = True
    w.insert(_new_attributes(existing.row,
                             {k: attributes[k] for k in new_attrs}))
    w.insert(_new_handles(existing.row, cpid, new_handles))
    return changed or bool(new_attrs or new_handles)


def _delete_deployable(w: _Writer, dep: _DeployableRows) -> None:
    for row in dep.attributes.values():
        w.delete(row)
    for row in dep.handles.values():
        w.delete(row)
    w.delete(dep.row)


def _sync_device(w: _Writer, existing: _DeviceRows, report: dict[str, Any],
                 hostname: str, busy_handles: set[int],
                 busy_deployables: set[int]) -> None:
    changed = w.update(existing.row, _device_values(report, hostname))
    cpid_info = report['controlpath_id']['cpid_info']
    reported = {dep['name']: dep for dep in report['deployables']}
    added = []
    for name, dep in reported.items():
        rows = existing.deployables.get(name)
        if rows is None:
            added.append(dep)
            continue
        changed |= w.update(rows.row,
                            _deployable_values(dep, hostname, cpid_info))
        changed |= _sync_deployable(w, rows, dep, existing.cpid,
                                    busy_handles)
    for name, rows in existing.deployables.items():
        if name in reported:
            continue
        if rows.row.id in busy_deployables:
            LOG.warning('Deployable %s is gone from the host but still in '
                        'use; keeping it.', name)
            w.result.kept_in_use += 1
            continue
        _delete_deployable(w, rows)
        changed = True
    if added:
        _add_deployables(w, existing.row, existing.cpid, hostname,
                         cpid_info, added)
        changed = True
    if changed:
        w.result.devices_updated += 1


@writer
def apply_report(context: cyborg_context.RequestContext, host: str,
                 report: dict[str, Any]) -> ReportResult:
    """Make the host's rows equal to a validated report; see module doc."""
    session = context.session
    hostname = report['hostname']
    result = ReportResult()
    w = _Writer(session, result)
    existing, busy_handles, busy_deployables = _load_host(session, host)
    reported = {_cpid_key(dev['controlpath_id']['cpid_type'],
                          dev['controlpath_id']['cpid_info']): dev
                for dev in report['devices']}
    for key, rows in existing.items():
        if key in reported:
            continue
        in_use = [d.row.name for d in rows.deployables.values()
                  if d.row.id in busy_deployables]
        if in_use:
            LOG.warning('Device %s on host %s is gone but deployables %s '
                        'are still in use; keeping it.', key, host,
                        ', '.join(in_use))
            result.kept_in_use += 1
            continue
        for dep in rows.deployables.values():
            _delete_deployable(w, dep)
        w.delete(rows.cpid)
        w.delete(rows.row)
        result.devices_removed += 1
    w.flush_deletes()
    for key, dev in reported.items():
        if key in existing:
            _sync_device(w, existing[key], dev, hostname, busy_handles,
                         busy_deployables)
    w.flush_deletes()
    _add_devices(w, host, hostname,
                 [dev for key, dev in reported.items()
                  if key not in existing])
    return result


@reader
def get_host_devices(context: cyborg_context.RequestContext, host: str
                     ) -> list[dict[str, Any]]:
    """The host's devices as nested dicts in report form (for tests/tools)."""
    existing, _, _ = _load_host(context.session, host)
    devices = []
    for rows in existing.values():
        device = rows.row
        devices.append({
            'uuid': device.uuid, 'type': device.type,
            'vendor': device.vendor, 'model': device.model,
            'hostname': device.hostname, 'status': device.status,
            'std_board_info': _loads(device.std_board_info or '{}'),
            'vendor_board_info': _loads(device.vendor_board_info or '{}'),
            'controlpath_id': {'cpid_type': rows.cpid.cpid_type,
                               'cpid_info': _loads(rows.cpid.cpid_info)},
            'deployables': [{
                'uuid': dep.row.uuid, 'name': dep.row.name,
                'num_accelerators': dep.row.num_accelerators,
                'driver_name': dep.row.driver_name,
                'rp_uuid': dep.row.rp_uuid,
                'attributes': {k: a.value
                               for k, a in dep.attributes.items()},
                'attach_handles': [
                    {'uuid': h.uuid, 'attach_type': h.attach_type,
                     'attach_info': _loads(h.attach_info),
                     'in_use': h.in_use}
                    for h in dep.handles.values()],
            } for dep in rows.deployables.values()],
        })
    devices.sort(key=lambda d: canonical_json(d['controlpath_id']))
    return devices
