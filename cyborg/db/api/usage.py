"""What a project holds against its limits, counted in SQL, and the check
of a write against the limits read before it.

The resources a project is limited in ([quota] driver = unified_limits):

- ``accelerator_requests``: its requests, in any state. A create adds
  as many as its profile asks for accelerators.
- ``class:<RC>`` (``class:FPGA``, ``class:VGPU``, ``class:CUSTOM_...``, as
  Nova names the classes of its own limits): its requests that hold a
  device (an attach handle: BindStarted or Bound; a failed bind gives its
  handle back at once) whose ``resource_class``, the class their device
  profile group asks for, is RC. A bind of a request holding none adds
  one.

A limited write reads its projects' limits first (``Limits``, from
Keystone by ``cyborg.conductor.limits``, never while a lock is held), then
in its transaction ``admit`` locks the projects' rows
(``project_locks``), counts what they hold and compares: a second write of
the project waits for the first to commit, and its count includes what
the first wrote (every database runs at READ COMMITTED or serialises
writers, see ``cyborg.db.api``), so no limit is ever gone over. A write
that asks nothing limited locks nothing.
"""
import collections
import dataclasses
import typing
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import project_locks

ARQ = models.AcceleratorRequest

REQUESTS = 'accelerator_requests'
CLASS = 'class:'
# Keystone's limits are -1 (unlimited) to 2**31 - 1.
UNLIMITED = -1
# Times a write that met projects whose limits were not read runs again
# with them (``reading``): a project moves to another between two reads
# of its requests only when an administrator's bind moves it meanwhile.
REREADS = 2
T = typing.TypeVar('T')


def resource_of(resource_class: str) -> str:
    """The resource of the devices of ``resource_class``."""
    return CLASS + resource_class


class LimitsMissing(Exception):
    """A write met projects whose limits were not read before it (a bind
    that moves a request to another project than the one read): the
    caller reads them and writes again."""

    def __init__(self, projects: Collection[str]) -> None:
        self.projects = frozenset(projects)
        super().__init__(', '.join(sorted(self.projects)))


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits of some projects as Keystone said them: its registered
    limits, each project's own, and what a resource with neither is
    (``[quota] unified_limits_resource_strategy`` and ``_list``, as
    Nova's options of the same names)."""

    registered: Mapping[str, int]
    # project -> resource -> limit; every project read is a key.
    projects: Mapping[str, Mapping[str, int]]
    strategy: str = 'require'
    listed: frozenset[str] = frozenset({REQUESTS})
    # Reads the limits of more projects (Keystone's: the conductor's
    # KeystoneLimits.read); never called while a transaction is open.
    reader: Callable[[Collection[str]], 'Limits'] | None = (
        dataclasses.field(default=None, compare=False, repr=False))

    def required(self, resource: str) -> bool:
        """Whether ``resource`` without a registered limit has a limit of
        0 (else it is unlimited)."""
        return (resource in self.listed) == (self.strategy == 'require')

    def limit(self, project: str, resource: str) -> int | None:
        """``project``'s limit of ``resource``; None when unlimited."""
        found = self.projects[project].get(resource,
                                           self.registered.get(resource))
        if found is None:
            return 0 if self.required(resource) else None
        return None if found <= UNLIMITED else found

    def more(self, projects: Collection[str]) -> 'Limits':
        """These limits and those of ``projects``, read (LimitsMissing
        without a reader)."""
        if self.reader is None:
            raise LimitsMissing(projects)
        return dataclasses.replace(
            self, projects={**self.projects,
                            **self.reader(projects).projects})

    def over(self, project: str, held: Mapping[str, int],
             deltas: Mapping[str, int]) -> exception.OverLimit | None:
        """What refuses ``deltas`` of ``project``, which holds ``held``:
        None when they fit."""
        over: list[dict[str, Any]] = []
        for resource in sorted(deltas):
            limit = self.limit(project, resource)
            delta = deltas[resource]
            if limit is None or delta <= 0:
                continue
            usage = held.get(resource, 0)
            if usage + delta > limit:
                over.append({'resource': resource, 'limit': limit,
                             'usage': usage, 'delta': delta})
        if not over:
            return None
        unregistered = frozenset(
            item['resource'] for item in over
            if item['resource'] not in self.registered
            and item['resource'] not in self.projects[project])
        return exception.OverLimit.of(project, over, unregistered)

    def limited(self, project: str, deltas: Mapping[str, int]
                ) -> dict[str, int]:
        """The part of ``deltas`` that ``project``'s limits bound."""
        return {resource: delta for resource, delta in deltas.items()
                if delta > 0 and self.limit(project, resource) is not None}


Ask = tuple[str | None, Mapping[str, int]]


def admit(session: sa.orm.Session, limits: Limits, asks: list[Ask]
          ) -> list[exception.OverLimit | None]:
    """Admit writes, in order, in the caller's transaction: each of
    ``asks`` is a project (None: a request of no project, never limited)
    and what it adds of each resource. One answer each: None, or what
    refuses it alone, and what it adds is not counted for the next.

    The projects with something limited to add are locked and counted
    once, whatever the number of writes.
    """
    known(limits, asks)
    bounded = [(project, limits.limited(project, deltas))
               if project is not None else (None, {})
               for project, deltas in asks]
    projects = {project for project, deltas in bounded
                if project is not None and deltas}
    if not projects:
        return [None] * len(asks)
    project_locks.lock(session, set(projects))
    held = count(session, projects,
                 {resource for _, deltas in bounded for resource in deltas})
    answers: list[exception.OverLimit | None] = []
    for project, deltas in bounded:
        refusal = None
        if project is not None and deltas:
            refusal = limits.over(project, held[project], deltas)
            if refusal is None:
                for resource, delta in deltas.items():
                    held[project][resource] += delta
        answers.append(refusal)
    return answers


def reading(known: list[Limits | None], write: Callable[[Limits | None], T]
            ) -> T:
    """``write(known[0])``; when it meets projects whose limits were not
    read (LimitsMissing, raised before it wrote anything), again, once
    they are read into ``known[0]``."""
    for _ in range(REREADS):
        try:
            return write(known[0])
        except LimitsMissing as missing:
            limits = known[0]
            if limits is None:
                raise
            known[0] = limits.more(missing.projects)
    return write(known[0])


def known(limits: Limits, asks: list[Ask]) -> None:
    """LimitsMissing naming the projects of ``asks`` whose limits were
    not read."""
    missing = {project for project, _ in asks
               if project is not None and project not in limits.projects}
    if missing:
        raise LimitsMissing(missing)


def count(session: sa.orm.Session, projects: Collection[str],
          resources: Collection[str]
          ) -> dict[str, collections.Counter[str]]:
    """What each of ``projects`` holds of each of ``resources``, in at
    most two queries (one GROUP BY each for requests and devices)."""
    held: dict[str, collections.Counter[str]] = {
        project: collections.Counter() for project in projects}
    if REQUESTS in resources:
        for row in session.execute(
                sa.select(ARQ.project_id, sa.func.count().label('number'))
                .where(ARQ.project_id.in_(list(held)))
                .group_by(ARQ.project_id)):
            held[str(row.project_id)][REQUESTS] = row.number
    classes = [resource[len(CLASS):] for resource in resources
               if resource.startswith(CLASS)]
    if classes:
        for device in session.execute(
                sa.select(ARQ.project_id, ARQ.resource_class,
                          sa.func.count().label('number'))
                .where(ARQ.project_id.in_(list(held)),
                       ARQ.resource_class.in_(classes),
                       ARQ.attach_handle_id.is_not(None))
                .group_by(ARQ.project_id, ARQ.resource_class)):
            held[str(device.project_id)][
                resource_of(str(device.resource_class))] = device.number
    return held
