"""Running a service: an RPC server plus periodic tasks on native threads."""
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging

from cyborg.common import rpc

LOG = logging.getLogger(__name__)


class PeriodicTask:
    """Calls ``func`` every ``interval`` seconds on its own thread.

    The first call happens at start. ``trigger()`` runs it again at once.
    An exception is logged and the task goes on: one failed pass must not
    stop a service.
    """

    def __init__(self, name: str, func: Callable[[], Any],
                 interval: float) -> None:
        self.name = name
        self.func = func
        self.interval = interval
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name,
                                        daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        self._wake.set()

    def stop(self, timeout: float | None = 30) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.func()
            except Exception:
                LOG.exception('Periodic task %s failed; retrying in %ss',
                              self.name, self.interval)
            self._wake.wait(self.interval)


class Service:
    """An RPC server on ``topic``/``server`` and its periodic tasks."""

    def __init__(self, topic: str, server: str, endpoints: list[Any],
                 tasks: list[PeriodicTask] | None = None) -> None:
        self.topic = topic
        self.server = server
        self.endpoints = endpoints
        self.tasks = tasks or []
        self._rpc_server: messaging.MessageHandlingServer | None = None

    def start(self) -> None:
        target = messaging.Target(topic=self.topic, server=self.server)
        self._rpc_server = rpc.get_server(target, self.endpoints)
        self._rpc_server.start()
        for task in self.tasks:
            task.start()
        LOG.info('%s listening on topic %s as %s', type(self).__name__,
                 self.topic, self.server)

    def stop(self) -> None:
        for task in self.tasks:
            task.stop()
        if self._rpc_server is not None:
            self._rpc_server.stop()
            self._rpc_server.wait()
            self._rpc_server = None


def run(services: list[Any]) -> None:
    """Start ``services``, wait for SIGTERM or SIGINT, then stop them."""
    stop = threading.Event()

    def _handler(signum: int, frame: Any) -> None:
        LOG.info('Signal %s received, stopping.', signum)
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    started = []
    try:
        for svc in services:
            svc.start()
            started.append(svc)
        while not stop.wait(1):
            pass
    finally:
        for svc in reversed(started):
            svc.stop()
