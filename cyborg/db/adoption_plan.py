"""What adopting an OpenStack Cyborg 17.0.0 database writes.

``make_plan`` reads nothing but the upstream rows it is given (table name
-> rows) and decides, before anything is changed, what comes across into
which of cyborg's tables, what changes on the way (each with its count,
for the dry run) and which rows cannot come across, and why; what
cyborg's schema itself would refuse of the rows it plans is found by
``adoption_checks``.
"""
import collections
import dataclasses
import json
from typing import Any

from oslo_utils import timeutils

from cyborg.common.device_report import ATTACH_TYPES
from cyborg.common.device_report import DEVICE_TYPES
from cyborg.common.device_report import canonical_json
from cyborg.common.device_report import pci_address
from cyborg.db import models

Row = dict[str, Any]

# Upstream's NVMe driver reports what cyborg calls an SSD.
_DEVICE_TYPES = {'NVME': 'SSD'}
# Upstream's device_state, where it means "do not schedule".
_STATE_STATUS = {'error': 'maintaining'}
# Request states that hold an attach handle, in cyborg as upstream.
_HOLDING = ('BindStarted', 'Bound', 'BindFailed', 'Deleting')
_PCI_KEYS = ('domain', 'bus', 'device', 'function')
_PCI_WIDTHS = (4, 2, 2, 1)
# Rows named in a message, per problem.
_SHOWN = 5

# Cyborg's tables that an adoption fills, parents before children.
TABLES = (models.Device, models.ControlpathID, models.Deployable,
          models.Attribute, models.AttachHandle, models.DeviceProfile,
          models.AcceleratorRequest, models.InstanceClaim)
# The upstream table each of them is filled from (instance_claims is
# made from the requests' instances, and needs no table of its own).
SOURCES = {'devices': 'devices', 'controlpath_ids': 'controlpath_ids',
           'deployables': 'deployables', 'attributes': 'attributes',
           'attach_handles': 'attach_handles',
           'device_profiles': 'device_profiles',
           'accelerator_requests': 'extended_accelerator_requests'}
# Cyborg's columns filled from an upstream column of another name.
RENAMED = {('devices', 'host'): 'hostname',
           ('device_profiles', 'groups'): 'profile_json'}

_STAMPED = ('id', 'uuid', 'created_at', 'updated_at')
# The upstream columns read, per upstream table: only these are read, so
# that a column missing from a damaged schema is found before anything
# changes rather than half-way.
COLUMNS = {
    'devices': (*_STAMPED, 'type', 'vendor', 'model', 'std_board_info',
                'vendor_board_info', 'hostname', 'status', 'device_state'),
    'controlpath_ids': (*_STAMPED, 'device_id', 'cpid_type', 'cpid_info'),
    'deployables': (*_STAMPED, 'parent_id', 'root_id', 'name',
                    'num_accelerators', 'device_id', 'rp_uuid',
                    'driver_name', 'bitstream_id'),
    'attributes': (*_STAMPED, 'deployable_id', 'key', 'value'),
    'attach_handles': (*_STAMPED, 'deployable_id', 'cpid_id', 'in_use',
                       'attach_type', 'attach_info'),
    'device_profiles': (*_STAMPED, 'name', 'profile_json', 'description'),
    'extended_accelerator_requests': (
        *_STAMPED, 'project_id', 'state', 'device_profile_id',
        'device_profile_group_id', 'hostname', 'device_rp_uuid',
        'instance_uuid', 'attach_handle_id', 'deployable_id'),
    # Only counted: they are left behind.
    'quota_usages': ('id',),
    'reservations': ('id',),
}


@dataclasses.dataclass
class Plan:
    """What an adoption writes, changes and cannot carry."""

    # Cyborg's table name -> the rows to insert.
    rows: dict[str, list[Row]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list))
    # What comes across other than as it was, one line each.
    changes: list[str] = dataclasses.field(default_factory=list)
    # What cannot come across, one line each; any refuses the adoption.
    problems: list[str] = dataclasses.field(default_factory=list)
    # Upstream tables left behind, with their row counts.
    left: dict[str, int] = dataclasses.field(default_factory=dict)

    def summary(self) -> list[str]:
        states = collections.Counter(
            r['state'] for r in self.rows['accelerator_requests'])
        lines = [f'{table}: {len(self.rows[table])}' for table in
                 (m.__tablename__ for m in TABLES)]
        if states:
            lines.append('accelerator requests by state: ' + ', '.join(
                f'{state} {count}' for state, count in sorted(
                    states.items())))
        return lines


def _problem(plan: Plan, what: str, rows: list[Any]) -> None:
    if not rows:
        return
    shown = ', '.join(str(r) for r in rows[:_SHOWN])
    more = f' and {len(rows) - _SHOWN} more' if len(rows) > _SHOWN else ''
    plan.problems.append(f'{what}: {shown}{more}')


def _change(plan: Plan, count: int, what: str) -> None:
    if count:
        plan.changes.append(f'{count} {what}')


def _pci(info: Any) -> Any:
    """A PCI address with cyborg's widths (0000:0c:00.1); upstream
    drivers wrote some parts unpadded ("device": "0")."""
    if not isinstance(info, dict) or not set(_PCI_KEYS) <= set(info):
        return info
    try:
        parts = [f'{int(str(info[k]), 16):0{w}x}'
                 for k, w in zip(_PCI_KEYS, _PCI_WIDTHS, strict=True)]
    except ValueError:
        return info
    return dict(info, **pci_address(*parts))


def _json_info(text: str) -> str | None:
    """Canonical JSON of a stored cpid or attach info; None if it is not
    JSON."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return canonical_json(_pci(value))


def _board_info(text: str | None) -> str | None:
    """Board info as JSON, which cyborg keeps it as; upstream drivers
    also wrote plain text ("fake_vendor_info"), kept as a JSON string."""
    if text is None:
        return None
    try:
        return canonical_json(json.loads(text))
    except ValueError:
        return canonical_json(text)


def _stamps(row: Row) -> Row:
    return {'created_at': row.get('created_at') or timeutils.utcnow(),
            'updated_at': row.get('updated_at')}


def _devices(plan: Plan, src: dict[str, list[Row]]) -> None:
    unknown, renamed, held, texts = [], 0, 0, 0
    for row in src['devices']:
        kind = _DEVICE_TYPES.get(row['type'], row['type'])
        if kind not in DEVICE_TYPES:
            unknown.append(f'{row["uuid"]} ({row["type"]})')
            continue
        renamed += kind != row['type']
        status = _STATE_STATUS.get(row.get('device_state') or '',
                                   row['status'])
        held += status != row['status']
        boards = [_board_info(row[k])
                  for k in ('std_board_info', 'vendor_board_info')]
        texts += any(b is not None and b.startswith('"') for b in boards)
        plan.rows['devices'].append(dict(
            _stamps(row), id=row['id'], uuid=row['uuid'], type=kind,
            vendor=row['vendor'], model=row['model'],
            std_board_info=boards[0], vendor_board_info=boards[1],
            host=row['hostname'], hostname=row['hostname'], status=status))
    _problem(plan, 'devices of a type cyborg does not have (it has '
             f'{", ".join(DEVICE_TYPES)})', unknown)
    _change(plan, renamed, 'device(s) of type NVME become SSD')
    _change(plan, held, 'device(s) in device_state error become '
            'maintaining (not offered to instances)')
    _change(plan, texts, 'device(s) with board info in plain text, kept '
            'as a JSON string')


def _control_paths(plan: Plan, src: dict[str, list[Row]]) -> None:
    bad, rewritten = [], 0
    for row in src['controlpath_ids']:
        info = _json_info(row['cpid_info'])
        if info is None:
            bad.append(row['uuid'])
            continue
        rewritten += info != row['cpid_info']
        plan.rows['controlpath_ids'].append(dict(
            _stamps(row), id=row['id'], uuid=row['uuid'],
            device_id=row['device_id'], cpid_type=row['cpid_type'],
            cpid_info=info))
    _problem(plan, 'control paths whose cpid_info is not JSON', bad)
    _change(plan, rewritten, 'control path address(es) rewritten in '
            "cyborg's canonical form")


def _deployables(plan: Plan, src: dict[str, list[Row]]) -> None:
    for row in src['deployables']:
        plan.rows['deployables'].append(dict(
            _stamps(row), id=row['id'], uuid=row['uuid'],
            parent_id=row['parent_id'], root_id=row['root_id'],
            name=row['name'], num_accelerators=row['num_accelerators'],
            device_id=row['device_id'], rp_uuid=row['rp_uuid'],
            driver_name=row['driver_name'],
            bitstream_id=row['bitstream_id']))


def _attributes(plan: Plan, src: dict[str, list[Row]]) -> None:
    newest: dict[tuple[int, str], Row] = {}
    for row in sorted(src['attributes'], key=lambda r: r['id']):
        newest[(row['deployable_id'], row['key'])] = row
    _change(plan, len(src['attributes']) - len(newest),
            'attribute(s) repeating a key of their deployable dropped '
            '(the newest of each key is kept)')
    for row in sorted(newest.values(), key=lambda r: r['id']):
        plan.rows['attributes'].append(dict(
            _stamps(row), id=row['id'], uuid=row['uuid'],
            deployable_id=row['deployable_id'], key=row['key'],
            value=row['value'], source=models.ATTRIBUTE_FROM_DRIVER))


def _handles(plan: Plan, src: dict[str, list[Row]],
             held: set[int]) -> None:
    bad, rewritten, freed = [], 0, 0
    for row in src['attach_handles']:
        info = _json_info(row['attach_info'])
        if info is None or row['attach_type'] not in ATTACH_TYPES:
            bad.append(f'{row["uuid"]} ({row["attach_type"]} '
                       f'{row["attach_info"]})')
            continue
        rewritten += info != row['attach_info']
        in_use = row['id'] in held
        freed += bool(row['in_use']) and not in_use
        plan.rows['attach_handles'].append(dict(
            _stamps(row), id=row['id'], uuid=row['uuid'],
            deployable_id=row['deployable_id'], cpid_id=row['cpid_id'],
            in_use=in_use, attach_type=row['attach_type'],
            attach_info=info))
    _problem(plan, 'attach handles whose type or info cyborg cannot read',
             bad)
    _change(plan, rewritten, "attach handle address(es) rewritten in "
            "cyborg's canonical form")
    _change(plan, freed, 'attach handle(s) marked in use without a '
            'request holding them become free')


def _profiles(plan: Plan, src: dict[str, list[Row]]
              ) -> dict[int, tuple[str, list[dict[str, str]]]]:
    """Carry the profiles; return id -> (name, groups)."""
    found: dict[int, tuple[str, list[dict[str, str]]]] = {}
    bad = []
    for row in src['device_profiles']:
        try:
            groups = json.loads(row['profile_json'])['groups']
            groups = [{str(k): str(v) for k, v in g.items()}
                      for g in groups]
        except (TypeError, ValueError, KeyError, AttributeError):
            bad.append(f'{row["name"]} ({row["uuid"]})')
            continue
        found[row['id']] = (row['name'], groups)
        plan.rows['device_profiles'].append(dict(
            _stamps(row), id=row['id'], uuid=row['uuid'], name=row['name'],
            groups=json.dumps(groups), description=row['description']))
    _problem(plan, 'device profiles whose groups cannot be read', bad)
    return found


def _requests(plan: Plan, src: dict[str, list[Row]],
              profiles: dict[int, tuple[str, list[dict[str, str]]]]
              ) -> set[int]:
    """Carry the requests; return the ids of the handles they hold."""
    deployables = {r['id']: r for r in src['deployables']}
    handles = {r['id']: r for r in src['attach_handles']}
    no_profile, incomplete, elsewhere, shared = [], [], [], []
    let_go = 0
    holders: dict[int, str] = {}
    for row in src['extended_accelerator_requests']:
        uuid, state = row['uuid'], row['state']
        profile = profiles.get(row['device_profile_id'])
        group_id = row['device_profile_group_id'] or 0
        if profile is None or not 0 <= group_id < len(profile[1]):
            no_profile.append(uuid)
            continue
        handle_id, dep_id = row['attach_handle_id'], row['deployable_id']
        if state not in _HOLDING and (handle_id or dep_id):
            let_go += 1
            handle_id = dep_id = None
        if state == 'Bound' and not (handle_id and dep_id
                                     and row['instance_uuid']
                                     and row['hostname']):
            incomplete.append(uuid)
            continue
        if handle_id is not None:
            handle = handles.get(handle_id)
            dep = deployables.get(dep_id) if dep_id else None
            if (handle is None or dep is None
                    or handle['deployable_id'] != dep_id
                    or (row['device_rp_uuid']
                        and dep['rp_uuid'] != row['device_rp_uuid'])):
                elsewhere.append(uuid)
                continue
            if handle_id in holders:
                shared.append(f'{holders[handle_id]} and {uuid}')
                continue
            holders[handle_id] = uuid
        plan.rows['accelerator_requests'].append(dict(
            _stamps(row), id=row['id'], uuid=uuid,
            project_id=row['project_id'], state=state,
            device_profile_id=row['device_profile_id'],
            device_profile_name=profile[0],
            device_profile_group_id=group_id,
            device_profile_group=json.dumps(profile[1][group_id]),
            hostname=row['hostname'], device_rp_uuid=row['device_rp_uuid'],
            instance_uuid=row['instance_uuid'], attach_handle_id=handle_id,
            deployable_id=dep_id))
    _problem(plan, 'accelerator requests whose device profile or group '
             'is gone', no_profile)
    _problem(plan, 'Bound accelerator requests without an attach handle, '
             'deployable, instance or host', incomplete)
    _problem(plan, 'accelerator requests whose attach handle is not on '
             'their deployable, or whose deployable is not their '
             'resource provider', elsewhere)
    _problem(plan, 'attach handles held by two accelerator requests',
             shared)
    _change(plan, let_go, 'Initial or Unbound request(s) let go of the '
            'attach handle they still named')
    return set(holders)


def _claims(plan: Plan) -> None:
    instances = sorted({r['instance_uuid']
                        for r in plan.rows['accelerator_requests']
                        if r['instance_uuid']})
    now = timeutils.utcnow()
    plan.rows['instance_claims'] = [
        {'instance_uuid': u, 'created_at': now} for u in instances]


def make_plan(src: dict[str, list[Row]]) -> Plan:
    """What adopting the upstream rows ``src`` (table name -> rows)
    writes; reads nothing else."""
    plan = Plan()
    _devices(plan, src)
    _control_paths(plan, src)
    _deployables(plan, src)
    _attributes(plan, src)
    profiles = _profiles(plan, src)
    held = _requests(plan, src, profiles)
    _handles(plan, src, held)
    _claims(plan)
    for table in ('quota_usages', 'reservations'):
        plan.left[table] = len(src.get(table, []))
    without_project = sum(1 for r in plan.rows['accelerator_requests']
                          if not r['project_id'])
    _change(plan, without_project, 'accelerator request(s) without a '
            'project (made before projects were recorded): only '
            'administrators see them')
    return plan
