"""cyborg-api's checks for oslo.middleware's /healthcheck: the database
and the message bus, loaded by name from ``[healthcheck] backends``
(entry points of namespace ``oslo.middleware.healthcheck``)."""
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg
from oslo_middleware.healthcheck import pluginbase

from cyborg import context as cyborg_context
from cyborg.common import outages
from cyborg.common import rpc
from cyborg.db import api as db_api

LOG = logging.getLogger(__name__)

# Seconds one attempt to reach the broker may take before the bus counts
# as unreachable: a broker on a host that drops packets would otherwise
# hold the check for kombu's connect timeout, past a load balancer's own
# (haproxy's "timeout check" defaults to its "inter", 2 s).
BROKER_TIMEOUT = 1.5

Result = pluginbase.HealthcheckResult


class CachedCheck:
    """``check`` (which returns what it reached and raises when it cannot)
    run at most once per ``ttl`` seconds, and by one thread at a time.

    A thread that finds another checking answers the last result instead
    of waiting for it: while a database hangs, a load balancer's checks
    keep being answered (the last 503) rather than piling up on the API's
    threads. Only the very first check is waited for.
    """

    def __init__(self, name: str, check: Callable[[], str], ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._check = check
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, bool, str] | None = None

    def _run(self) -> tuple[float, bool, str]:
        try:
            reached = self._check()
        except Exception as error:  # noqa: BLE001 (any failure is the answer)
            # Logged once per outage by the process's tracker, whichever
            # of the plain and detailed checks, or of the API's own
            # requests, meets it first.
            outages.tracker.failed(self.name, error, 'the health check')
            return (self._clock(), False,
                    f'{self.name} unreachable: {type(error).__name__}')
        outages.tracker.ended(self.name)
        return self._clock(), True, f'{self.name} OK: {reached}'

    def __call__(self) -> Result:
        last = self._last
        if last is None or self._clock() - last[0] >= self._ttl:
            if self._lock.acquire(blocking=last is None):
                try:
                    last = self._last = self._run()
                finally:
                    self._lock.release()
            else:
                assert last is not None
        checked_at, available, details = last
        age = self._clock() - checked_at
        return Result(available=available,
                      reason='OK' if available
                      else f'{self.name.upper()} UNREACHABLE',
                      details=f'{details} ({age:.1f} s ago)')


class _Backend(pluginbase.HealthcheckBaseExtension):
    """A check of one of the API's dependencies, cached per
    ``[healthcheck] cache_seconds``."""

    name = ''

    def __init__(self, oslo_conf: cfg.ConfigOpts,
                 conf: dict[str, Any]) -> None:
        super().__init__(oslo_conf, conf)
        self._cached = CachedCheck(self.name, self.check,
                                   oslo_conf.healthcheck.cache_seconds)

    def check(self) -> str:
        raise NotImplementedError

    def healthcheck(self, server_port: int) -> Result:
        return self._cached()


class DatabaseCheck(_Backend):
    """``SELECT 1`` on the API's database."""

    name = outages.DATABASE

    def check(self) -> str:
        return db_api.ping(cyborg_context.get_admin_context())


class MessageBusCheck(_Backend):
    """A new connection to the broker of the API's transport URL, closed
    at once (``rpc.reach_broker``)."""

    name = outages.BUS

    def check(self) -> str:
        return rpc.reach_broker(self.oslo_conf, BROKER_TIMEOUT)
