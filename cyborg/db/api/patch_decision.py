"""What one PATCH does with the accelerator requests it names, decided
from the requests read.

Nothing here reads or writes: ``arq_bindings.apply_in`` reads the
requests (locked), asks ``plan`` which binds and unbinds to make and
which repeat what was applied, writes them, and asks ``claim`` what an
instance's claim already taken means. A refusal is the exception the
PATCH is answered with, built here and raised by the caller.

The rules: every request named must exist. A bind sent again as it was
applied changes nothing. An instance gets requests bound in one PATCH
only (its claim, see ``claims.take``), unless ``live`` (microversion
2.9): then binds may join the requests its claim holds, as
``claims.join`` allows, an ARQ bound elsewhere is a Conflict naming its
binding, and so is an unbind of an ARQ never bound (Initial); an unbind
of one already Unbound changes nothing.
"""
import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from cyborg.common import exception

# The states a bind starts from, and those an unbind does.
BINDABLE = ('Initial', 'Unbound')
UNBINDABLE = ('Initial', 'BindStarted', 'Bound', 'BindFailed',
              'UnbindFailed', 'Unbound')
# States in which an ARQ keeps the binding it was given; a bind sent again
# with that same binding changes nothing (Nova retries a PATCH that timed
# out, whether or not it was applied).
BOUND_TO = ('BindStarted', 'Bound', 'BindFailed')
_BINDING = ('hostname', 'device_rp_uuid', 'instance_uuid')


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a PATCH does, decided before anything is written."""

    # The binds to make and the unbinds to make, in the order sent.
    binds: dict[str, dict[str, Any]]
    unbinds: list[str]
    # Binds sent again as they were applied: their ARQs' states, kept.
    same: dict[str, str] = dataclasses.field(default_factory=dict)
    # Unbinds sent again (a PATCH whose answer was lost) of requests
    # already Unbound: they announce nothing a second time.
    again: list[str] = dataclasses.field(default_factory=list)
    # What refuses the PATCH before anything is written.
    refused: exception.CyborgException | None = None
    # A bind of a request bound elsewhere, without ``live``: refused once
    # the instances' claims are taken, whose refusal answers first.
    stuck: exception.CyborgException | None = None


def plan(found: Mapping[str, Any], binds: dict[str, dict[str, Any]],
         unbinds: list[str], live: bool) -> Plan:
    """The binds and unbinds to make of those sent, given the requests
    ``found`` of those named (uuid -> row with the ARQ's ``state`` and
    binding, ``arq_bindings.Held``); or what refuses the PATCH."""
    missing = (set(binds) | set(unbinds)) - set(found)
    if missing:
        return Plan({}, [], refused=exception.ARQNotFound(
            uuids=', '.join(sorted(missing))))
    same = {uuid: found[uuid].state for uuid, binding in binds.items()
            if _repeats(found[uuid], binding)}
    making = {u: b for u, b in binds.items() if u not in same}
    stuck = next((u for u in making if found[u].state not in BINDABLE), None)
    if not live:
        return Plan(making, list(unbinds), same, stuck=None if stuck is None
                    else _bad_state(stuck, found[stuck].state))
    refused = _live_refusal(found, stuck, unbinds)
    again = [u for u in unbinds if found[u].state == 'Unbound']
    return Plan(making, [u for u in unbinds if u not in again], same, again,
                refused=refused)


def _repeats(request: Any, binding: dict[str, Any]) -> bool:
    """Whether ``binding`` is the one ``request`` was bound with."""
    return request.state in BOUND_TO and all(
        getattr(request, key) == binding[key] for key in _BINDING)


def _bad_state(uuid: str, state: str) -> exception.ARQBadState:
    # What is bound stays so: that, not the device, is the answer.
    return exception.ARQBadState(uuid=uuid, state=state, action='binding',
                                 expected=', '.join(BINDABLE))


def _live_refusal(found: Mapping[str, Any], stuck: str | None,
                  unbinds: list[str]) -> exception.Conflict | None:
    """Why a live PATCH cannot be applied: a bind of a request bound
    elsewhere, or else an unbind of one never bound."""
    if stuck is not None:
        row = found[stuck]
        return exception.Conflict(
            reason=f'Accelerator request {stuck} is {row.state}, bound '
                   f'to instance {row.instance_uuid} on host '
                   f'{row.hostname}. Unbind it first (a PATCH of '
                   '"remove" operations) to bind it elsewhere.')
    initial = next((u for u in unbinds if found[u].state == 'Initial'), None)
    if initial is None:
        return None
    return exception.Conflict(
        reason=f'Accelerator request {initial} is Initial: it is '
               'bound to no instance, so there is nothing to '
               'unbind. Leave it out of the PATCH.')


class Claim(enum.Enum):
    """What becomes of an instance's claim when a PATCH binds to it."""

    # The PATCH is the first to bind to the instance: the claim is its.
    TAKEN = 'taken'
    # Another PATCH took it and this one is a live attach: its binds join
    # the requests the claim holds, as far as ``claims.join`` lets them.
    JOIN = 'join'


def claim(instance: str, taken: bool, live: bool
          ) -> Claim | exception.Invalid:
    """What follows from inserting ``instance``'s claim (``taken``: it
    was not there): the claim is the PATCH's, or a live attach joins it,
    or the PATCH is refused."""
    if taken:
        return Claim.TAKEN
    if live:
        return Claim.JOIN
    # The claim may be another project's, whose requests must never share
    # a server with the caller's: refused, with the answer the caller gets
    # for its own instance, naming nothing but what it sent.
    return exception.Invalid(
        reason=f'Cannot bind accelerator requests to instance '
               f'{instance}: bind all of an instance\'s accelerator '
               'requests in one PATCH.')
