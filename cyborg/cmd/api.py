"""cyborg-api: serves the REST API on [api] host_ip:port.

A thin launcher for small and test deployments; production runs the WSGI
module ``cyborg.wsgi.api`` under uwsgi (see the install guide). With
``[api] workers`` at 1 this one process serves; with more, oslo.service's
ProcessLauncher runs that many worker processes on one listening socket
opened before the fork, each a multi-threaded waitress server with its own
database pool and RPC transport (a Python process runs one thread at a
time: processes are what use several cores), restarts a worker that dies
and stops them all on SIGTERM.
"""
import signal
import socket
import sys
import threading
import types

import waitress
from oslo_service import service
from waitress.server import BaseWSGIServer

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.api import app
from cyborg.cmd import common
from cyborg.conf import CONF

# Connections the kernel queues until a process accepts one, as waitress
# asks once it serves the socket.
_BACKLOG = 1024


def create_server(host: str, port: int, threads: int,
                  sockets: list[socket.socket] | None = None
                  ) -> BaseWSGIServer:
    """A multi-threaded HTTP server for the API, bound but not started.

    With ``sockets`` it serves those already-bound sockets instead of
    binding ``host:port``. A connection that sends nothing for ``[api]
    client_socket_timeout`` seconds is closed; past ``[api]
    connection_limit`` open connections, new ones wait in the socket's
    backlog (waitress' 1024).
    """
    options = {'sockets': sockets} if sockets else {'host': host,
                                                    'port': port}
    return waitress.create_server(
        app.setup_app(CONF), threads=threads, ident='cyborg-api',
        clear_untrusted_proxy_headers=True,
        channel_timeout=CONF.api.client_socket_timeout,
        # How often waitress looks for such connections; its 30 s would
        # keep them up to that much longer.
        cleanup_interval=1,
        connection_limit=CONF.api.connection_limit,
        # select() fails on descriptors above 1023, which a raised
        # connection_limit reaches.
        asyncore_use_poll=True,
        **options)


class APIService(service.ServiceBase):
    """The API's HTTP server on a socket bound beforehand, as an
    oslo.service service: ``wait()`` serves until ``stop()``."""

    def __init__(self, sock: socket.socket, threads: int) -> None:
        self.sock = sock
        self.threads = threads
        self.server: BaseWSGIServer | None = None
        self._ended = threading.Event()

    def start(self) -> None:
        self.server = create_server(CONF.api.host_ip, CONF.api.port,
                                    self.threads, [self.sock])

    def wait(self) -> None:
        if self.server is not None:
            self.server.run()
            self._ended.set()

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        # The serving thread closes its sockets itself: closed from here,
        # a descriptor could be reused under its poll().
        server.trigger.pull_trigger(server.close)
        # Lets the requests being served end, for up to waitress' 5 s;
        # run() did so already if SIGTERM interrupted it.
        if not self._ended.is_set():
            server.task_dispatcher.shutdown()

    def reset(self) -> None:
        """Nothing to reset: on SIGHUP the launcher starts a new process."""


def _serve(api: common.Launched, address: str) -> int:
    """Serve in this process until SIGTERM or SIGINT."""

    def _stop(signum: int, frame: types.FrameType | None) -> None:
        raise SystemExit(0)

    # Before the line that tells a supervisor the service is up.
    signal.signal(signal.SIGTERM, _stop)
    print(address, flush=True)
    try:
        api.start()
        api.wait()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        api.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    common.parse_args(sys.argv[1:] if argv is None else argv,
                      'cyborg-api')
    workers = CONF.api.workers
    # Bound first so that the address printed is the one served, and once
    # for every worker process.
    sock = socket.create_server((CONF.api.host_ip, CONF.api.port),
                                backlog=_BACKLOG)
    address = (f'cyborg-api serving on http://{CONF.api.host_ip}:'
               f'{sock.getsockname()[1]}')
    if workers == 1:
        return _serve(common.Launched(
            lambda: APIService(sock, CONF.api.threads), database=True),
            address)
    print(f'{address} with {workers} worker processes', flush=True)
    return common.launch(lambda: APIService(sock, CONF.api.threads),
                         database=True, workers=workers)


if __name__ == '__main__':
    sys.exit(main())
