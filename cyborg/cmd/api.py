"""cyborg-api: serves the REST API on [api] host_ip:port.

With ``[api] workers`` above 1 the listening socket is opened once and
shared by that many forked processes, each a multi-threaded waitress
server with its own database pool and RPC transport: a Python process
runs one thread at a time, so processes are what use several cores. The
parent only supervises: it restarts a worker that dies and stops them all
on SIGTERM or SIGINT.
"""
import logging
import os
import signal
import socket
import sys
import time

import waitress

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.api import app
from cyborg.cmd import common
from cyborg.common import rpc
from cyborg.conf import CONF
from cyborg.db import api as db_api

LOG = logging.getLogger(__name__)

# A worker that dies sooner than this after its start is not restarted
# at once, so a worker that cannot start does not spin the supervisor.
_RESTART_DELAY = 1.0


def create_server(host: str, port: int, threads: int,
                  sockets: list[socket.socket] | None = None
                  ) -> waitress.server.BaseWSGIServer:
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


def _serve(sockets: list[socket.socket] | None = None) -> int:
    """Run one API server in this process until it is told to stop."""
    db_api.configure(CONF)
    rpc.init(CONF)
    server = create_server(CONF.api.host_ip, CONF.api.port,
                           CONF.api.threads, sockets)

    def _stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    # A forked worker inherits the supervisor's handler; Ctrl-C in a
    # terminal reaches the whole process group.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.close()
        rpc.cleanup()
    return 0


def _spawn(sock: socket.socket) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _serve([sock])
        finally:
            os._exit(code)
    return pid


class _Stop(Exception):
    """Raised by the supervisor's signal handler to end its wait."""


def _supervise(sock: socket.socket, workers: int) -> int:
    """Keep ``workers`` processes serving ``sock`` until told to stop."""

    def _stop(signum, frame):
        # Raising is what interrupts waitpid(); a handler that returns
        # lets the call resume (PEP 475).
        raise _Stop()

    started: dict[int, float] = {}
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        for _ in range(workers):
            started[_spawn(sock)] = time.monotonic()
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid not in started:
                continue
            lived = time.monotonic() - started.pop(pid)
            LOG.error('API worker %d exited (status %d) after %.1fs; '
                      'starting another.', pid, status, lived)
            if lived < _RESTART_DELAY:
                time.sleep(_RESTART_DELAY)
            started[_spawn(sock)] = time.monotonic()
    except _Stop:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for pid in started:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in started:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    common.parse_args(sys.argv[1:] if argv is None else argv)
    if CONF.api.workers == 1:
        # Bind first so the address printed is the one served.
        sock = socket.create_server((CONF.api.host_ip, CONF.api.port))
        print(f'cyborg-api serving on http://{CONF.api.host_ip}:'
              f'{sock.getsockname()[1]}', flush=True)
        return _serve([sock])
    sock = socket.create_server((CONF.api.host_ip, CONF.api.port),
                                backlog=1024)
    sock.set_inheritable(True)
    print(f'cyborg-api serving on http://{CONF.api.host_ip}:'
          f'{sock.getsockname()[1]} with {CONF.api.workers} worker '
          'processes', flush=True)
    return _supervise(sock, CONF.api.workers)


if __name__ == '__main__':
    sys.exit(main())
