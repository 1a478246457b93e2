"""An RPC server and its periodic tasks as one oslo.service service."""
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging
from oslo_service import loopingcall
from oslo_service import service

from cyborg.common import rpc

LOG = logging.getLogger(__name__)

# How long stop() lets a pass under way finish. A pass that waits on a
# peer (an RPC call, placement, the database) may take a minute to give
# up, and a process must not take that long to stop: what such a pass
# leaves undone the next process does again.
PASS_GRACE = 1.0


class PeriodicTask:
    """Runs ``func`` on an oslo.service looping call.

    The first pass runs at ``start()``, each next one ``interval`` seconds
    after the last ended, or as many as ``next_delay`` answers after it
    when that is not None; ``trigger()`` asks for one at once. Two passes
    never run at the same time: one asked for while another runs follows
    it. A pass that fails is logged and the task goes on.
    """

    def __init__(self, name: str, func: Callable[[], Any],
                 interval: float,
                 next_delay: Callable[[], float | None] | None = None
                 ) -> None:
        self.name = name
        self.func = func
        self.interval = interval
        self.next_delay = next_delay
        self._cond = threading.Condition()
        self._running = False
        self._again = False
        self._call: loopingcall.DynamicLoopingCall | None = None

    def start(self) -> None:
        self._call = loopingcall.DynamicLoopingCall(self._tick)
        self._call.start()

    def trigger(self) -> None:
        """Run a pass now, or right after the one under way."""
        if self._call is not None:
            threading.Thread(target=self.run, name=self.name,
                             daemon=True).start()

    def stop(self, grace: float = PASS_GRACE) -> None:
        """Run no more passes; give the one under way ``grace`` seconds."""
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
                try:
                    self.func()
                except Exception:
                    LOG.exception('Periodic task %s failed; retrying in %ss',
                                  self.name, self.interval)
                with self._cond:
                    if not self._again or self._call is None:
                        return
                    self._again = False
        finally:
            with self._cond:
                self._running = self._again = False
                self._cond.notify_all()

    def _tick(self) -> float:
        # The looping call's thread is the task's alone: named after it,
        # it is found by name in a Guru Meditation Report (reports.py).
        threading.current_thread().name = self.name
        self.run()
        delay = self.next_delay() if self.next_delay is not None else None
        return self.interval if delay is None else delay


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
        target = messaging.Target(topic=self.topic, server=self.host)
        self._rpc_server = rpc.get_server(target, self.endpoints)
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
