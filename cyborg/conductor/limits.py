"""Project limits from Keystone's unified limits, read with oslo.limit
before the writes they limit ([quota] driver = unified_limits).

A create or a bind reads the limits of the projects it names here, then
writes in one transaction that locks those projects, counts what they
hold and compares (``cyborg.db.api.usage``). No HTTP call is made while a
project is locked: a second write of the project waits for the first's
commit, not for Keystone.

That is why ``Enforcer.enforce()`` is not called in the transaction:
oslo.limit (2.7-2.12) caches the limits it found, not the absence of one,
so an ``enforce()`` of a resource with a registered limit and no limit
of the project's own asks Keystone for the project's limits on every
call. Here all of the service's registered limits and all of a
project's limits are read at once (``get_registered_limits(None)``,
``get_project_limits(project, None)``) and compared as oslo.limit's flat
model compares (usage + delta > limit; a negative limit is no limit).

One enforcer, with what it read, serves ``[quota] cache_seconds``: within
that a write of a project read before asks Keystone nothing, and the
first write after it makes a new enforcer (the enforcement model and the
endpoint, one to three calls), reads the registered limits and its
projects' limits (one call each). Keystone unreachable or misconfigured,
the write is refused with LimitsUnavailable (503), told once to
``outages.tracker``.
"""
import dataclasses
import logging
import threading
import time
import types
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from typing import TypeVar

from keystoneauth1 import exceptions as ks_exceptions
from oslo_config import cfg

from cyborg.common import exception
from cyborg.common import outages
from cyborg.db.api import usage

LOG = logging.getLogger(__name__)

T = TypeVar('T')
UNIFIED_LIMITS = 'unified_limits'
# What stands for a missing Keystone, or one that cannot say cyborg's
# limits, besides keystoneauth's and openstacksdk's own errors: oslo.limit
# raises ValueError for an endpoint, service or region [oslo_limit] names
# that Keystone does not have, and SessionInitError for auth options it
# cannot use.
_CONFIG_ERRORS: tuple[type[Exception], ...] = (ValueError,)


def _no_usage(project_id: str | None, resources: Any) -> dict[str, int]:
    # Usage is counted in the write's own transaction (usage.admit).
    raise NotImplementedError('cyborg counts usage in the transaction')


def _enforcer() -> Any:
    """oslo.limit's enforcer, its endpoint and model found; imported here
    so that a conductor without limits never loads openstacksdk."""
    from oslo_limit import limit
    enforcer = limit.Enforcer(_no_usage, cache=True)
    if enforcer.model.name != 'flat':
        # Keystone's other model (strict-two-level) is not implemented by
        # oslo.limit either.
        raise ValueError(f'Keystone enforces limits with the '
                         f'{enforcer.model.name} model; cyborg knows the '
                         'flat model only.')
    return enforcer


def _keystone_errors() -> tuple[type[Exception], ...]:
    from openstack import exceptions as sdk_exceptions
    from oslo_limit import exception as limit_exceptions
    return (ks_exceptions.ClientException, sdk_exceptions.SDKException,
            limit_exceptions.SessionInitError, *_CONFIG_ERRORS)


@dataclasses.dataclass
class _Read:
    """What one enforcer read, and when it was made."""

    enforcer: Any
    made: float
    registered: dict[str, int]
    projects: dict[str, dict[str, int]] = dataclasses.field(
        default_factory=dict)


class KeystoneLimits:
    """The limits of [oslo_limit]'s endpoint in Keystone, kept
    ``[quota] cache_seconds``."""

    def __init__(self, conf: cfg.ConfigOpts,
                 enforcer: Callable[[], Any] = _enforcer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conf = conf
        self._make = enforcer
        self._clock = clock
        self._lock = threading.Lock()
        self._read: _Read | None = None

    def read(self, projects: Iterable[str | None]) -> usage.Limits:
        """The limits of ``projects`` (None, a request of no project, has
        none), and of every project read before and kept; LimitsUnavailable
        when Keystone cannot say them."""
        wanted = sorted({p for p in projects if p is not None})
        asked = False
        try:
            read = self._current()
            if read is None:
                asked, read = True, self._renew()
            for project in wanted:
                if project not in read.projects:
                    asked = True
                    read.projects[project] = dict(
                        read.enforcer.get_project_limits(project, None))
        except _keystone_errors() as exc:
            outages.tracker.failed(outages.KEYSTONE, exc,
                                   'reading project limits')
            raise exception.LimitsUnavailable(
                projects=', '.join(wanted) or '(none)') from exc
        if asked:
            outages.tracker.ended(outages.KEYSTONE)
        quota = self.conf.quota
        # A view, not a copy: a project is added once and never changed,
        # and renewing makes another dict.
        return usage.Limits(
            read.registered, types.MappingProxyType(read.projects),
            quota.unified_limits_resource_strategy,
            frozenset(quota.unified_limits_resource_list), self.read)

    def _current(self) -> _Read | None:
        with self._lock:
            read = self._read
        if read is None or (self._clock() - read.made
                            >= self.conf.quota.cache_seconds):
            return None
        return read

    def _renew(self) -> _Read:
        # Outside the lock: writes wait for Keystone only where they need
        # it. Two writes renewing at once each read once; the last kept.
        made = self._clock()
        enforcer = self._make()
        read = _Read(enforcer, made,
                     dict(enforcer.get_registered_limits(None)))
        with self._lock:
            self._read = read
        LOG.debug('Read the registered limits of Keystone: %s',
                  read.registered)
        return read

    def write(self, projects: Callable[[], Iterable[str | None]],
              write: Callable[[usage.Limits | None], T]) -> T:
        """``write`` with the limits of ``projects`` read first (and of
        those kept); read again with those of projects it meets that are
        not among them (``usage.reading``)."""
        return usage.reading([self.read(projects())], write)


def from_conf(conf: cfg.ConfigOpts) -> KeystoneLimits | None:
    """The conductor's limits; None when [quota] switches them off."""
    if conf.quota.driver != UNIFIED_LIMITS:
        return None
    if conf is not cfg.CONF:
        # oslo.limit reads [oslo_limit] from the global CONF only.
        raise ValueError('[quota] driver = unified_limits needs the '
                         'global configuration (oslo.limit reads '
                         '[oslo_limit] from oslo_config.cfg.CONF).')
    return KeystoneLimits(conf)


def within(limits: KeystoneLimits | None,
           projects: Callable[[], Iterable[str | None]],
           write: Callable[[usage.Limits | None], T]) -> T:
    """``write`` within the limits of ``projects`` (see
    ``KeystoneLimits.write``); without limits, ``write(None)``, and
    ``projects`` is not asked."""
    if limits is None:
        return write(None)
    return limits.write(projects, write)
