"""Serving a Prometheus registry and a health probe over HTTP, for agents
and conductors."""
import logging
import socket
import threading
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from wsgiref import simple_server

import prometheus_client
from oslo_config import cfg
from prometheus_client import exposition
from prometheus_client import registry as prom_registry

from cyborg.common import probes

LOG = logging.getLogger(__name__)


class _QuietHandler(simple_server.WSGIRequestHandler):
    """No line per request on stderr: a probe every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """``registry`` in the Prometheus text format at ``/metrics`` (any path
    but those of ``health`` answers the same), and ``health`` at
    ``probes.PATHS``, on ``host``:``port``, from a daemon thread; either
    may be None.

    The server is prometheus_client's threading WSGI server, so that a
    slow scrape never holds up another, nor a probe, nor the service's own
    threads.
    """

    def __init__(self, host: str, port: int,
                 registry: prom_registry.CollectorRegistry | None,
                 health: probes.Health | None = None) -> None:
        self.host = host
        self.port = port
        self.registry = registry
        self.health = health
        self._server: simple_server.WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the port chosen when ``port`` was 0)."""
        if self._server is None:
            raise RuntimeError('the metrics server is not running')
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def _app(self) -> Callable[..., Iterable[bytes]]:
        metrics = (prometheus_client.make_wsgi_app(self.registry)
                   if self.registry is not None else None)
        health = self.health

        def app(environ: dict[str, Any],
                start_response: Callable[..., Any]) -> Iterable[bytes]:
            if health is not None and environ.get(
                    'PATH_INFO') in probes.PATHS:
                return health(environ, start_response)
            if metrics is not None:
                return metrics(environ, start_response)
            return probes.not_found(start_response)

        return app

    def start(self) -> None:
        # OSError (the port is taken, the address is not ours) propagates:
        # an operator who asked for metrics or a probe wants the service
        # to say so at once rather than run without them.
        family, _, _, _, address = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE)[0]

        class Server(exposition.ThreadingWSGIServer):
            address_family = family

        self._server = simple_server.make_server(
            str(address[0]), self.port, self._app(), Server,
            handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        daemon=True)
        self._thread.start()
        served = [what for what, there in (
            ('Prometheus metrics', self.registry),
            (' and '.join(probes.PATHS), self.health)) if there is not None]
        LOG.info('Serving %s on %s port %d', ' and '.join(served),
                 *self.address)

    def stop(self) -> None:
        """Stop serving and close the socket, so the port is free again."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def health_server(group: cfg.ConfigOpts.GroupAttr, health: probes.Health
                  ) -> MetricsServer | None:
    """A server of ``health`` alone at ``group``'s ``health_host`` and
    ``health_port``, unless none is set or it is the metrics port (whose
    server serves the probe too)."""
    if not group.health_port or group.health_port == group.metrics_port:
        return None
    return MetricsServer(group.health_host, group.health_port, None, health)
