"""Serving a Prometheus registry over HTTP, for agents and conductors."""
import logging
import threading
from wsgiref import simple_server

import prometheus_client
from prometheus_client import registry as prom_registry

LOG = logging.getLogger(__name__)


class MetricsServer:
    """``registry`` in the Prometheus text format at ``/metrics`` (any path
    answers the same) on ``host``:``port``, from a daemon thread.

    The thread is prometheus_client's own threading WSGI server, so that a
    slow scrape never holds up another, nor the service's own threads.
    """

    def __init__(self, host: str, port: int,
                 registry: prom_registry.CollectorRegistry) -> None:
        self.host = host
        self.port = port
        self.registry = registry
        self._server: simple_server.WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the port chosen when ``port`` was 0)."""
        if self._server is None:
            raise RuntimeError('the metrics server is not running')
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        # OSError (the port is taken, the address is not ours) propagates:
        # an operator who asked for metrics wants the service to say so
        # at once rather than run without them.
        self._server, self._thread = prometheus_client.start_http_server(
            self.port, addr=self.host, registry=self.registry)
        LOG.info('Serving Prometheus metrics on %s port %d', *self.address)

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
