"""A burst of accelerator-request creates and binds through the REST API
while something breaks, and what every request came to.

Each item of the burst is what Nova does for one accelerator: ``POST
/v2/accelerator_requests`` for one request of a one-accelerator profile,
then ``PATCH /v2/accelerator_requests`` binding it to a new instance on a
TEST_PCI device (an instant bind: Bound before the 202). A client sends
each request at most twice: once, and once more after a 5xx or a broken
connection, as Nova's client would be retried by its caller. ``run``
calls a breaking action (a broker node stopped) once a share of the items
is done and keeps the burst going until some items more were sent after
it ended, however long it took; ``Tally`` checks the outcome
against the database. Used by ``test_rabbit_cluster`` and
``tools/bench/rabbit_cluster.py``.
"""
import dataclasses
import itertools
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import requests
import sqlalchemy as sa
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.tests.harness import gate_stack

PROFILE = 'burst'
HOST = 'burst-host'
HOSTNAME = 'burst-node'
# Handles per fake device; the fake driver allows 248.
HANDLES_PER_DEVICE = 200
# Items a burst may send beyond those asked for while its action lasts:
# a graceful stop of a RabbitMQ node took 3 to 10 s here, at 20 to 60
# items a second.
EXTRA_ITEMS = 1000
# Seconds a client waits for one answer: longer than the API's RPC
# timeout, so that the API, not the client, gives up on a lost call.
CLIENT_TIMEOUT = 60
# Names every instance of a burst, so that a bind's instance is known
# from its item alone.
_INSTANCES = uuid.UUID('6c3f7f57-3c1e-4d55-9d6e-0d1f3a1b2c00')

ARQ = models.AcceleratorRequest
AH = models.AttachHandle


def seed(conf: cfg.ConfigOpts, engine: sa.engine.Engine, items: int
         ) -> list[str]:
    """Fake devices with a TEST_PCI handle for each of ``items`` binds
    and EXTRA_ITEMS more (the burst goes on while its action lasts), and the
    profile the burst creates requests of, in the database of ``engine``
    (migrated); the devices' rp_uuids."""
    conf.set_override('host', HOST)
    conf.set_override('hostname', HOSTNAME, 'agent')
    conf.set_override('device_count',
                      math.ceil((items + EXTRA_ITEMS) / HANDLES_PER_DEVICE),
                      'fake_driver')
    conf.set_override('accelerators_per_device', HANDLES_PER_DEVICE,
                      'fake_driver')
    undo = db_api.patch_engine(engine)
    try:
        ctx = cyborg_context.get_admin_context()
        inventory.apply_report(ctx, HOST, {
            'hostname': HOSTNAME,
            'devices': [d.to_dict()
                        for d in fake.FakeDriver(conf).discover()]})
        device_profiles.create(ctx, {'name': PROFILE,
                                     'groups': [{'resources:FPGA': '1'}]})
        return [d['deployables'][0]['rp_uuid']
                for d in inventory.get_host_devices(ctx, HOST)]
    finally:
        undo()


def instance_of(item: int) -> str:
    return str(uuid.uuid5(_INSTANCES, str(item)))


@dataclasses.dataclass
class Attempt:
    started: float
    ended: float
    # The HTTP status, or 0 when no answer came (connection error).
    status: int
    error: str = ''

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclasses.dataclass
class Request:
    """One create or bind of one item, and its attempts (two at most)."""

    kind: str
    item: int
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    # The request uuids a create was answered with.
    arqs: list[str] = dataclasses.field(default_factory=list)

    @property
    def answered(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].ok


class Burst:
    """Creates and binds of at least ``items`` items by ``clients`` threads
    against the API at ``api_url``, binding to the devices ``rp_uuids``
    (seeded by ``seed``) in turn; ``after`` items at least are sent once
    the action has ended. Items are numbered from ``first``; one number
    names one instance (``instance_of``)."""

    def __init__(self, api_url: str, rp_uuids: list[str], items: int,
                 clients: int, after: int = 20, first: int = 0) -> None:
        self.api_url = api_url
        self.rp_uuids = rp_uuids
        self.items = items
        self.clients = clients
        self.after = after
        # As many as the seeded devices have handles, counting those of
        # the bursts before (numbered below ``first``).
        self.limit = len(rp_uuids) * HANDLES_PER_DEVICE
        self._after_started = 0
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self.first = first
        self._next = first
        self._finished = 0
        # When the breaking action began and ended (monotonic).
        self.broke_at: float | None = None
        self.broken_at: float | None = None
        self.elapsed = 0.0

    def run(self, break_after: int, action: Callable[[], object]) -> None:
        """Run the burst; once ``break_after`` items are done call
        ``action`` here while the clients go on."""
        threads = [threading.Thread(target=self._client, daemon=True)
                   for _ in range(self.clients)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        with self._done:
            # A client that failed (it counts as lost) ends its thread.
            self._done.wait_for(
                lambda: self._finished >= break_after
                or not any(t.is_alive() for t in threads))
        self.broke_at = time.monotonic()
        action()
        with self._lock:
            self.broken_at = time.monotonic()
        for thread in threads:
            thread.join()
        self.elapsed = time.monotonic() - started

    @property
    def taken(self) -> int:
        """How many items were sent."""
        return self._next - self.first

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.limit or (
                    self.taken >= self.items and self.broken_at is not None
                    and self._after_started >= self.after):
                return None
            if self.broken_at is not None:
                self._after_started += 1
            self._next += 1
            return self._next - 1

    def _client(self) -> None:
        session = requests.Session()
        session.headers.update(gate_stack.API_HEADERS)
        while (item := self._take()) is not None:
            try:
                self._item(session, item)
            finally:
                with self._done:
                    self._finished += 1
                    self._done.notify_all()

    def _item(self, session: requests.Session, item: int) -> None:
        created = self._send(session, Request('create', item), 'POST',
                             {'device_profile_name': PROFILE})
        if created.answered:
            arq = created.arqs[0]
            self._send(session, Request('bind', item), 'PATCH', {arq: [
                {'op': 'add', 'path': '/hostname', 'value': HOSTNAME},
                {'op': 'add', 'path': '/device_rp_uuid',
                 'value': self.rp_uuids[item % len(self.rp_uuids)]},
                {'op': 'add', 'path': '/instance_uuid',
                 'value': instance_of(item)}]})

    def _send(self, session: requests.Session, request: Request,
              method: str, body: dict[str, Any]) -> Request:
        """Send, and once more after a 5xx or no answer; a 4xx is an
        answer (and a failure of the burst, which sends only valid
        requests)."""
        for _ in range(2):
            started = time.monotonic()
            try:
                answer = session.request(
                    method, f'{self.api_url}/accelerator_requests',
                    json=body, timeout=CLIENT_TIMEOUT)
            except requests.RequestException as exc:
                request.attempts.append(Attempt(started, time.monotonic(),
                                                0, str(exc)))
                continue
            attempt = Attempt(started, time.monotonic(), answer.status_code)
            request.attempts.append(attempt)
            if attempt.ok:
                if method == 'POST':
                    request.arqs = [a['uuid']
                                    for a in answer.json()['arqs']]
                break
            attempt.error = answer.text[:200]
            if answer.status_code < 500:
                break
        with self._lock:
            self.requests.append(request)
        return request


@dataclasses.dataclass
class Tally:
    """What a burst came to, from the clients' answers and the database."""

    # Items sent (a create and a bind each), requests, retries.
    items: int
    requests: int
    retries: int
    # Requests with no 2xx answer after their retry.
    lost: int
    # Requests answered 4xx: none is expected.
    refused: int
    # Requests a second attempt of which answered 2xx.
    recovered_by_retry: int
    # Request rows no client was answered with (a create done twice),
    # instances with more than one request, handles held by two requests,
    # and request uuids answered to two creates.
    duplicated: int
    # Binds the database does not show Bound to their instance.
    unbound: int
    # Requests Bound, and attach handles in use: equal.
    bound: int
    handles_in_use: int
    # Seconds from the end of the action to the first 2xx of a request
    # sent after it; the longest time without any 2xx from the start of
    # the action on; the action's own time.
    recovery_s: float
    # Requests sent after the action that were answered 2xx.
    answered_after: int
    longest_gap_s: float
    action_s: float
    elapsed_s: float
    errors: list[str]

    def figures(self) -> dict[str, Any]:
        figures = dataclasses.asdict(self)
        figures['errors'] = figures['errors'][:5]
        return figures


def tally(burst: Burst, engine: sa.engine.Engine) -> Tally:
    assert burst.broke_at is not None and burst.broken_at is not None
    done = burst.requests
    creates = [r for r in done if r.kind == 'create' and r.answered]
    binds = {r.item for r in done if r.kind == 'bind' and r.answered}
    answered_uuids = [u for r in creates for u in r.arqs]
    with engine.connect() as conn:
        rows = conn.execute(sa.select(
            ARQ.uuid, ARQ.state, ARQ.instance_uuid,
            ARQ.attach_handle_id)).all()
        in_use = conn.execute(sa.select(sa.func.count()).select_from(AH)
                              .where(AH.in_use.is_(True))).scalar_one()
    by_instance: dict[str | None, int] = {}
    for row in rows:
        by_instance[row.instance_uuid] = by_instance.get(
            row.instance_uuid, 0) + 1
    handles = [r.attach_handle_id for r in rows
               if r.attach_handle_id is not None]
    duplicated = (
        len({r.uuid for r in rows} - set(answered_uuids))
        + (len(answered_uuids) - len(set(answered_uuids)))
        + sum(n - 1 for i, n in by_instance.items() if i is not None)
        + (len(handles) - len(set(handles))))
    bound = {r.instance_uuid for r in rows if r.state == 'Bound'}
    successes = sorted(a.ended for r in done for a in r.attempts if a.ok)
    after = [a.ended for r in done for a in r.attempts
             if a.ok and a.started >= burst.broken_at]
    window = [burst.broke_at] + [t for t in successes if t > burst.broke_at]
    gaps = [b - a for a, b in itertools.pairwise(window)]
    failed = [a for r in done for a in r.attempts if not a.ok]
    return Tally(
        items=burst.taken,
        requests=len(done),
        retries=sum(len(r.attempts) - 1 for r in done),
        lost=sum(not r.answered for r in done)
        + burst.taken - len({r.item for r in done if r.kind == 'create'}),
        refused=sum(r.attempts[-1].status in range(400, 500) for r in done),
        recovered_by_retry=sum(len(r.attempts) > 1 and r.answered
                               for r in done),
        duplicated=duplicated,
        unbound=sum(instance_of(i) not in bound for i in binds),
        bound=sum(r.state == 'Bound' for r in rows),
        handles_in_use=in_use,
        recovery_s=round(min(after) - burst.broken_at, 2) if after
        else float('inf'),
        answered_after=len(after),
        longest_gap_s=round(max(gaps, default=0.0), 2),
        action_s=round(burst.broken_at - burst.broke_at, 2),
        elapsed_s=round(burst.elapsed, 1),
        errors=[f'{a.status} {a.error}' for a in failed])


def run_twice(logs: list[str]) -> int:
    """How many RPC calls the servers whose logs are given ran more than
    once between them.

    oslo.messaging's RPC server logs each message it takes (at DEBUG, as
    ``gate_stack`` configures conductors) before it acknowledges it, and
    skips one whose acknowledgement failed: the broker delivers that one
    again. Calls taken twice, less the skipped takings, ran twice.
    """
    ids = [line.split(_RECEIVED, 1)[1].split()[0]
           for log in logs for line in log.splitlines() if _RECEIVED in line]
    # Casts have no id.
    ids = [i for i in ids if i != 'None']
    skipped = sum(log.count(_SKIPPED) for log in logs)
    return len(ids) - len(set(ids)) - skipped


_RECEIVED = 'Receive incoming message with id '
_SKIPPED = 'Can not acknowledge message. Skip processing'
