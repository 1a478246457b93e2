"""Whether and how one bind can be made, and how it ends, decided from
what was read.

Nothing here reads or writes: ``bind_takes`` reads what ``decide`` asks
for (``Need``), one step at a time, and takes what it decides. A refusal
is a value (``Refused``), its reason the words the 409 says of that bind.
``bind_ends`` reads the requests a worker finished and writes what
``ends`` decides of them.
"""
import dataclasses
import datetime
import enum
import typing
from collections.abc import Mapping
from typing import Any

from cyborg.db.api import layouts
from cyborg.db.api import nova_events

# Why a bind is refused when every rule let it through but no handle was
# free to take.
NO_FREE_HANDLE = 'the deployable has no free attach handle'


class Target(typing.NamedTuple):
    """The deployable behind the resource provider Nova named, with its
    device and control path: one row read for the bind."""

    id: int
    uuid: str
    name: str
    driver_name: str | None
    driver_disabled_since: datetime.datetime | None
    hostname: str
    host: str
    status: str
    health: str | None
    health_reason: str | None
    cpid_type: str
    cpid_info: str


class Need(enum.Enum):
    """What ``decide`` needs read before it can decide."""

    # The image providing the group's accel:function_id (Glance).
    BITSTREAM = 'bitstream'
    # The deployable's programming state, under its lock, and its
    # device's layout state.
    LOCK = 'lock'
    # Who holds the deployable's handles in use.
    HOLDERS = 'holders'
    # A free attach handle, taken.
    HANDLE = 'handle'


@dataclasses.dataclass(frozen=True)
class Refused:
    """The bind cannot be made: why, as the 409 names it."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Bind:
    """The bind can be made: whether it programs the deployable, or waits
    for the programming under way."""

    program: bool
    waits: bool


@dataclasses.dataclass
class BindRead:
    """What was read for one bind so far; each step adds what ``decide``
    asked for."""

    hostname: str
    group: dict[str, Any]
    target: Target | None
    # The deployables this PATCH programs, and the bitstream each gets.
    programming: Mapping[int, str]
    # The image to load: the group's accel:bitstream_id, or what Glance
    # found for its accel:function_id.
    bitstream: str | None = None
    looked_up: bool = False
    # Why Glance found no image for the group's function.
    lookup_error: str | None = None
    # The deployable's (action, action_bitstream_id, bitstream_id).
    state: Any = None
    layout_state: str | None = None
    holders: list[str] | None = None
    handle: Any = None
    taken: bool = False


def refusal(deployable: Any | None, hostname: str,
            group: dict[str, Any]) -> str | None:
    """Why a bind to ``deployable`` (the row read for the provider Nova
    named, None when none has it) on ``hostname`` cannot be, from what was
    read; None when nothing read so far stands in its way."""
    if deployable is None:
        return 'no deployable has this resource provider'
    if deployable.hostname != hostname:
        return f'the deployable is on {deployable.hostname}, not {hostname}'
    if deployable.status != 'enabled':
        return 'the device is disabled'
    if deployable.driver_disabled_since is not None:
        return (f'its driver {deployable.driver_name} is disabled on '
                f'{deployable.host}')
    if deployable.health == 'unhealthy':
        # Placement reserves an unhealthy device's inventory, but a
        # scheduler may have picked it just before.
        why = deployable.health_reason
        return 'the device is unhealthy' + (f': {why}' if why else '')
    if group.get('accel:bitstream_id') and group.get('accel:function_id'):
        return ('the profile names both accel:bitstream_id and '
                'accel:function_id')
    return None


def decide(read: BindRead) -> Refused | Bind | Need:
    """The first rule that refuses the bind, from what was read; else
    what is to be read next; else how the bind is made."""
    reason = refusal(read.target, read.hostname, read.group)
    if reason is not None:
        return Refused(reason)
    function = read.group.get('accel:function_id')
    if function and not read.looked_up:
        return Need.BITSTREAM
    if read.lookup_error is not None:
        return Refused(f'no image provides function {function}: '
                       f'{read.lookup_error}')
    if read.state is None:
        return Need.LOCK
    role = _role(read)
    if not isinstance(role, Bind):
        return role
    if not read.taken:
        return Need.HANDLE
    if read.handle is None:
        return Refused(NO_FREE_HANDLE)
    return role


def _role(read: BindRead) -> Refused | Bind | Need:
    """Whether the bind programs the deployable, waits for the
    programming under way, or neither; or why it cannot bind at all.
    Decided under the deployable's lock (see ``deployables``), exclusive
    when the bind may program."""
    assert read.target is not None  # refusal() names a missing one
    deployable_id = read.target.id
    bitstream, state = read.bitstream, read.state
    # A layout change takes the device under the deployables' exclusive
    # locks (layouts.begin_layout): its handles are about to change.
    if read.layout_state == layouts.APPLYING:
        return Refused('the device\'s layout is being changed')
    if read.layout_state == layouts.PENDING:
        return Refused('the device waits to be enabled with a new layout')
    if deployable_id in read.programming:
        if bitstream in (None, read.programming[deployable_id]):
            return Bind(program=True, waits=False)
        return Refused(f'another request of this PATCH loads bitstream '
                       f'{read.programming[deployable_id]} on the device')
    if state.action is not None:
        if bitstream in (None, state.action_bitstream_id):
            return Bind(program=False, waits=True)
        return Refused(f'the device is being programmed with bitstream '
                       f'{state.action_bitstream_id}')
    if bitstream and bitstream != state.bitstream_id:
        if read.holders is None:
            return Need.HOLDERS
        if read.holders:
            return Refused(
                f'bitstream {bitstream} cannot be loaded while accelerator '
                f'request(s) {", ".join(read.holders)} use the device')
        return Bind(program=True, waits=False)
    return Bind(program=False, waits=False)


@dataclasses.dataclass(frozen=True)
class Ends:
    """How the binds a worker finished end."""

    # The requests still BindStarted with the handle their job took (one
    # unbound or deleted meanwhile, maybe bound again, is left alone).
    started: dict[str, Any]
    # Those that end Bound, and those that failed.
    bound: list[str]
    lost: list[str]
    # The state a failure ends in.
    lost_state: str
    # Each one's new state, and the event (ARQ uuid, instance, status,
    # reason) owed to Nova for it.
    states: dict[str, str]
    events: list[tuple[str, str | None, str, str | None]]


def ends(succeeded: list[dict[str, Any]], failed: list[dict[str, Any]],
         read: list[Any], owed: bool, reasons: Mapping[str, str]) -> Ends:
    """How the binds of the jobs ``succeeded`` and ``failed`` end, given
    the requests ``read`` of theirs still BindStarted (with ``uuid``,
    ``handle_id`` and ``instance_uuid``): a failure still ``owed`` to Nova
    stays BindStarted (see ``bind_ends``), else ends BindFailed."""
    handles = {j['arq_uuid']: j['attach_handle_id']
               for j in [*succeeded, *failed]}
    started = {row.uuid: row for row in read
               if row.handle_id == handles[row.uuid]}
    bound = [j['arq_uuid'] for j in succeeded if j['arq_uuid'] in started]
    lost = [j['arq_uuid'] for j in failed if j['arq_uuid'] in started]
    lost_state = 'BindStarted' if owed else 'BindFailed'
    states = {**dict.fromkeys(bound, 'Bound'),
              **dict.fromkeys(lost, lost_state)}
    events = [(uuid, started[uuid].instance_uuid,
               nova_events.COMPLETED if state == 'Bound'
               else nova_events.FAILED, reasons.get(uuid))
              for uuid, state in sorted(states.items())]
    return Ends(started, bound, lost, lost_state, states, events)
