"""An RPC server and its periodic tasks as one oslo.service service."""
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging
from oslo_service import loopingcall
from oslo_service import service

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import outages
from cyborg.common import rpc

LOG = logging.getLogger(__name__)

# How long stop() lets a pass under way finish. A pass that waits on a
# peer (an RPC call, placement, the database) may take a minute to give
# up, and a process must not take that long to stop: what such a pass
# leaves undone the next process does again.
PASS_GRACE = 1.0
# A task is stuck when no pass of it ended for this many of
# its intervals plus STUCK_MARGIN seconds. A pass that waits on a peer
# gives up within about a minute (an RPC call's 60 s timeout, a refused
# or timed-out database connection, placement's 60 s read timeout), so a
# healthy task with a 10 s interval ends a pass at least every ~70 s and
# is called stuck after 90 s; a thread that hangs for good is found within
# that, and a slow peer does not restart the process.
STUCK_INTERVALS = 3
STUCK_MARGIN = 60.0
# Namespace of the endpoint every RPCService answers pings on: beside the
# service's own versioned API, not part of it.
PING_NAMESPACE = 'health'
# Seconds a ping of a service's own RPC server may take: a loop through
# the broker takes milliseconds; more than this, and messages are not
# carried (a stalled link, a broker out of resources).
PING_TIMEOUT = 5.0
# How much longer than PING_TIMEOUT the probe waits for a ping's call to
# end before it calls the bus unreachable itself: the call's own timeout
# and errors come first when oslo.messaging gives them.
PING_SLACK = 1.0


class PeriodicTask:
    """Runs ``func`` on an oslo.service looping call.

    The first pass runs at ``start()``, each next one ``interval`` seconds
    after the last ended, or as many as ``next_delay`` answers after it
    when that is not None; ``trigger()`` asks for one at once. Two passes
    never run at the same time: one asked for while another runs follows
    it. A pass that fails goes on to the next: an outage of what it
    needs (``outages.kind_of``) is told to ``outages.tracker``, anything
    else is logged with its traceback; one that fails once ``stop()`` was
    called, at DEBUG only (the process is going away). A pass that
    succeeds ends the outages of the kinds in ``restores``, which its
    work proves reachable, and of those the task met itself.
    """

    def __init__(self, name: str, func: Callable[[], Any],
                 interval: float,
                 next_delay: Callable[[], float | None] | None = None,
                 restores: tuple[str, ...] = (),
                 stuck_after: float | None = None) -> None:
        self.name = name
        self.func = func
        self.interval = interval
        self.next_delay = next_delay
        self.restores = restores
        self.stuck_after = (STUCK_INTERVALS * interval + STUCK_MARGIN
                            if stuck_after is None else stuck_after)
        # What the last pass raised that was no outage (a bug), if it did.
        self.last_error: str | None = None
        # The kinds of outage its passes met since one last succeeded.
        self._met: set[str] = set()
        self._cond = threading.Condition()
        self._running = False
        self._again = False
        self._call: loopingcall.DynamicLoopingCall | None = None
        # Set by stop(), until the next start().
        self._stopped = False
        # time.monotonic() when the last pass ended (or the task started).
        self._ended: float | None = None

    def start(self) -> None:
        self._stopped = False
        self._ended = time.monotonic()
        self._call = loopingcall.DynamicLoopingCall(self._tick)
        self._call.start()

    def age(self, now: float) -> float | None:
        """Seconds from when a pass last ended (or the task started) to
        ``time.monotonic()`` ``now``; None while the task is not
        running."""
        ended = self._ended
        if self._call is None or ended is None:
            return None
        return max(0.0, now - ended)

    def trigger(self) -> None:
        """Run a pass now, or right after the one under way."""
        if self._call is not None:
            threading.Thread(target=self.run, name=self.name,
                             daemon=True).start()

    def stop(self, grace: float = PASS_GRACE) -> None:
        """Run no more passes; give the one under way ``grace`` seconds."""
        self._stopped = True
        call, self._call = self._call, None
        if call is not None:
            call.stop()
        with self._cond:
            self._cond.wait_for(lambda: not self._running, grace)

    def run(self) -> None:
        """One pass, unless one runs already: that one is then repeated."""
        with self._cond:
            if self._running:
                self._again = True
                return
            self._running = True
        try:
            while True:
                self._pass()
                with self._cond:
                    if not self._again or self._call is None:
                        return
                    self._again = False
        finally:
            with self._cond:
                self._running = self._again = False
                self._cond.notify_all()

    def _pass(self) -> None:
        try:
            self.func()
        except Exception as exc:
            kind = outages.kind_of(exc)
            if self._stopped:
                # Stopped: the process is going away, and what the pass
                # needed may be gone with it (after rpc.cleanup() a bus
                # ping finds no connection pool). Neither an outage nor
                # a bug.
                LOG.debug('Periodic task %s ended after its task stopped: '
                          '%s', self.name, outages.describe(exc))
            elif kind is not None:
                outages.tracker.failed(kind, exc,
                                       f'periodic task {self.name}')
                self._met.add(kind)
                self.last_error = None
            else:
                self.last_error = outages.describe(exc)
                LOG.exception('Periodic task %s failed; retrying in %ss',
                              self.name, self.interval)
        else:
            self.last_error = None
            met, self._met = self._met, set()
            for kind in sorted(met.union(self.restores)):
                outages.tracker.ended(kind)
        finally:
            self._ended = time.monotonic()

    def _tick(self) -> float:
        # The looping call's thread is the task's alone: named after it,
        # it is found by name in a Guru Meditation Report (reports.py).
        threading.current_thread().name = self.name
        self.run()
        delay = self.next_delay() if self.next_delay is not None else None
        return self.interval if delay is None else delay


class PingEndpoint:
    """Answers the pings of ``bus_probe``."""

    target = messaging.Target(namespace=PING_NAMESPACE, version='1.0')

    def ping(self, context: Any) -> bool:
        return True


class _Ping:
    """One ping's call, on a daemon thread of its own.

    oslo.messaging bounds a call's sending by its ``retry`` and its wait
    by its timeout, but not everything a call does first: the first call
    of a process declares its reply queue, and that retries for as long
    as the broker is away, whatever the call's ``retry``. A probe whose
    first pass met an outage then never ended it (a conductor stayed
    ready 73 s into an outage, and would have for as long as it lasted).
    So ``bus_probe`` waits for a ping with a deadline of its own; a call
    still under way then is left to end on its thread, and no second one
    is sent until it has.
    """

    def __init__(self, call: Callable[[], None], name: str) -> None:
        self.sent = time.monotonic()
        self.done = threading.Event()
        self.error: Exception | None = None
        # A daemon: a call oslo.messaging retries for ever must not keep
        # the process from exiting.
        threading.Thread(target=self._run, args=(call,), name=name,
                         daemon=True).start()

    def _run(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 (handed to the waiter)
            self.error = exc
        finally:
            self.done.set()

    def wait(self, timeout: float) -> None:
        """Until the call ended, at most ``timeout`` seconds: what it
        raised, or MessageBusUnreachable when it is still under way."""
        if not self.done.wait(timeout):
            raise exception.MessageBusUnreachable(
                reason=f'a ping sent {time.monotonic() - self.sent:.0f} s '
                       f'ago has not come back')
        if self.error is not None:
            raise self.error


def bus_probe(topic: str, host: str, interval: float) -> PeriodicTask:
    """A task that calls its own process's RPC server (``topic`` as
    ``host``) every ``interval`` seconds: a message that goes through the
    broker to the server's queue, and an answer through the broker back.

    An answer ends an outage of the message bus, no answer within
    PING_TIMEOUT starts one, whatever the call is still doing (``_Ping``).
    It costs one call and its reply per interval and process (10 s by
    default; 0.1 call/s, 200 messages/s for 1,000 agents, against the tens
    of thousands a RabbitMQ node carries), and it sees what nothing else
    in a conductor does: a conductor sends no message of its own while it
    is idle, and oslo.messaging's listener reconnects without telling
    anyone.
    """
    clients: list[messaging.RPCClient] = []
    flight: list[_Ping] = []

    def call() -> None:
        if not clients:
            clients.append(rpc.get_client(messaging.Target(
                topic=topic, server=host, namespace=PING_NAMESPACE,
                version='1.0')))
        rpc.call(clients[0], cyborg_context.get_admin_context(), '1.0',
                 'ping', server=host, timeout=PING_TIMEOUT,
                 unavailable=lambda reason: exception.MessageBusUnreachable(
                     reason=reason))

    def ping() -> None:
        if not flight or flight[0].done.is_set():
            flight[:] = [_Ping(call, f'{topic}-bus-ping')]
        flight[0].wait(PING_TIMEOUT + PING_SLACK)

    return PeriodicTask(f'{topic}-bus-probe', ping, interval,
                        restores=(outages.BUS,))


class RPCService(service.ServiceBase):
    """An RPC server on ``topic`` as ``host`` and its periodic tasks.

    ``stop()`` takes no new message, waits for those being handled, and
    gives a periodic pass under way ``PASS_GRACE`` seconds; it does not wait
    for the next poll of an idle queue (see ``cyborg.cmd``).
    """

    def __init__(self, topic: str, host: str, endpoints: list[Any],
                 tasks: list[PeriodicTask] | None = None) -> None:
        self.topic = topic
        self.host = host
        self.endpoints = endpoints
        self.tasks = tasks or []
        self._rpc_server: messaging.MessageHandlingServer | None = None
        self._stopped = threading.Event()

    def start(self) -> None:
        self._stopped.clear()
        outages.watch_lost_replies()
        target = messaging.Target(topic=self.topic, server=self.host)
        self._rpc_server = rpc.get_server(target,
                                          self.endpoints + [PingEndpoint()])
        self._rpc_server.start()
        for task in self.tasks:
            task.start()
        LOG.info('%s listening on topic %s as %s', type(self).__name__,
                 self.topic, self.host)

    def stop(self) -> None:
        for task in self.tasks:
            task.stop(grace=0)
        server, self._rpc_server = self._rpc_server, None
        if server is not None:
            server.stop()
            server.wait()
        deadline = time.monotonic() + PASS_GRACE
        for task in self.tasks:
            task.stop(grace=max(0.0, deadline - time.monotonic()))
        self._stopped.set()

    def wait(self) -> None:
        self._stopped.wait()

    def reset(self) -> None:
        """Nothing to reset: SIGHUP restarts the process (cotyledon)."""
