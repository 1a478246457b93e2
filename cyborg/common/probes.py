"""The health of a conductor or an agent, as an orchestrator probes it.

``/health`` says whether the process is ready: it reaches what it needs
(the database, the message bus) and its periodic tasks keep ending their
passes. ``/health/live`` says whether it is alive: its tasks keep ending
their passes, whatever its peers do, so that an outage of the database
does not make an orchestrator restart every conductor at once.

Both answer in the health check response format of
draft-inadarei-api-health-check (https://datatracker.ietf.org/doc/html/
draft-inadarei-api-health-check-06), ``application/health+json``, the
format of Nova's per-process health check specification: ``status``
``pass``, ``warn`` or ``fail``, HTTP 200 for the first two and 503 for
the last (section 3.1), and ``checks`` by ``component:measurement``.

Answering costs no query and no message: what is served is the state the
periodic tasks left (``outages.tracker``, each task's last pass), which
they refresh every ``[DEFAULT] heartbeat_interval`` (10 s). A probe that
queried the database itself would cost little while the database answers
(Kubernetes' default: a liveness and a readiness probe every 10 s, 0.2
queries/s per process), but not while it stalls: each probe's query
would hold a pooled connection and a server thread for as long as the
driver waits (a connect timeout of 10 s or more when packets are
dropped), long after the probe's own 1 s timeout, and a new one would
follow every 10 s, taking connections from oslo.db's pool (5, plus 50 of
overflow by default) that the RPC handlers need. Here a probe takes
microseconds and waits on nothing.
"""
import datetime
import json
import time
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from cyborg.common import outages
from cyborg.common import rpc_service

CONTENT_TYPE = 'application/health+json'
READY_PATH = '/health'
LIVE_PATH = '/health/live'
PATHS = (READY_PATH, LIVE_PATH)

PASS = 'pass'
WARN = 'warn'
FAIL = 'fail'
# RFC draft section 3.1: pass and warn are 2xx, fail is 4xx-5xx.
_HTTP_STATUS = {PASS: '200 OK', WARN: '200 OK',
                FAIL: '503 Service Unavailable'}
# Each kind of outage's check: (key in ``checks``, componentType).
_CHECKS = {outages.DATABASE: ('database:connectivity', 'datastore'),
           outages.BUS: ('message_bus:connectivity', 'component'),
           outages.PEER: ('rpc_peers:connectivity', 'component'),
           outages.KEYSTONE: ('identity:connectivity', 'component')}


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(
        timestamp, datetime.timezone.utc).isoformat(timespec='seconds')


class Health:
    """The health of ``service`` (e.g. ``cyborg-conductor``) from its
    ``tasks`` and ``tracker``: an outage of a kind in ``needs`` fails it,
    one of a kind in ``wants`` only warns."""

    def __init__(self, service: str, tasks: list[rpc_service.PeriodicTask],
                 needs: tuple[str, ...], wants: tuple[str, ...] = (),
                 tracker: outages.Tracker = outages.tracker,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.tasks = tasks
        self.needs = needs
        self.wants = wants
        self.tracker = tracker
        self.clock = clock

    def _tasks(self) -> tuple[str, list[dict[str, Any]]]:
        now = self.clock()
        status = PASS
        found = []
        for task in self.tasks:
            age = task.age(now)
            check: dict[str, Any] = {'componentId': task.name,
                                     'componentType': 'system',
                                     'observedUnit': 's'}
            if age is None:
                check.update(status=FAIL, output='not running')
            elif age > task.stuck_after:
                check.update(status=FAIL, observedValue=round(age, 1),
                             output=f'no pass ended for {age:.0f} s '
                                    f'(stuck after {task.stuck_after:.0f} '
                                    's)')
            elif task.last_error is not None:
                check.update(status=WARN, observedValue=round(age, 1),
                             output=f'last pass failed: {task.last_error}')
            else:
                check.update(status=PASS, observedValue=round(age, 1))
            status = _worst(status, check['status'])
            found.append(check)
        return status, found

    def check(self, live: bool = False) -> dict[str, Any]:
        """The health document: liveness (``live``) or readiness."""
        status, tasks = self._tasks()
        checks: dict[str, list[dict[str, Any]]] = {
            'periodicTask:passAge': tasks}
        if live:
            # Tasks only: a stuck thread is what a restart mends.
            return self._document(_warned(status), checks)
        current = self.tracker.current()
        for kind in self.needs + self.wants:
            outage = current.get(kind)
            name, component = _CHECKS[kind]
            check: dict[str, Any] = {'componentType': component,
                                     'status': PASS}
            if outage is not None:
                check.update(status=FAIL if kind in self.needs else WARN,
                             time=_iso(outage.since),
                             observedValue=outage.failures,
                             observedUnit='failures',
                             output=outage.error)
            status = _worst(status, check['status'])
            checks[name] = [check]
        return self._document(status, checks)

    def _document(self, status: str, checks: dict[str, Any]
                  ) -> dict[str, Any]:
        return {'status': status, 'serviceId': self.service,
                'description': f'health of {self.service}',
                'checks': checks}

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        """WSGI: the document of ``READY_PATH`` or ``LIVE_PATH``."""
        if environ.get('REQUEST_METHOD', 'GET') not in ('GET', 'HEAD'):
            return _json(start_response, '405 Method Not Allowed',
                         {'error': 'only GET and HEAD are allowed'},
                         [('Allow', 'GET, HEAD')])
        document = self.check(
            live=environ.get('PATH_INFO') == LIVE_PATH)
        body = _json(start_response, _HTTP_STATUS[document['status']],
                     document, [('Cache-Control', 'no-store')],
                     CONTENT_TYPE)
        # HEAD: the headers of GET (its Content-Length too), no body.
        return [] if environ.get('REQUEST_METHOD') == 'HEAD' else body


_ORDER = (PASS, WARN, FAIL)


def _worst(one: str, other: str) -> str:
    return max(one, other, key=_ORDER.index)


def _warned(status: str) -> str:
    # A bug in one pass is no reason to restart a process.
    return PASS if status == WARN else status


def _json(start_response: Callable[..., Any], status: str,
          body: dict[str, Any], headers: list[tuple[str, str]],
          content_type: str = 'application/json') -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [('Content-Type', content_type),
                            ('Content-Length', str(len(data))), *headers])
    return [data]


def not_found(start_response: Callable[..., Any]) -> list[bytes]:
    """A 404 in JSON, naming the paths served."""
    return _json(start_response, '404 Not Found',
                 {'error': f'not found; served: {", ".join(PATHS)}'}, [])
