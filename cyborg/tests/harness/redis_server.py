"""A private Redis server on a free port of 127.0.0.1, the backend of the
tracing tests (osprofiler's ``redis://`` driver).

Debian's ``redis-server`` is installed when missing (``system_packages``);
the server keeps nothing on disk and is stopped by its PID.
"""
import contextlib
import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from cyborg.tests import utils
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import system_packages

# Seconds a new server gets to answer (it answers within 50 ms here).
START_TIMEOUT = 10


@contextlib.contextmanager
def running(workdir: pathlib.Path) -> Iterator[str]:
    """Yield the URL (``redis://127.0.0.1:PORT``) of a new Redis server
    whose files are under ``workdir``; stop it after."""
    system_packages.debian('redis-server')
    port = gate_stack.free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(workdir / 'redis.log', 'ab')
    server = subprocess.Popen(
        [shutil.which('redis-server') or '/usr/bin/redis-server',
         '--port', str(port), '--bind', '127.0.0.1', '--dir', str(workdir),
         '--save', '', '--appendonly', 'no', '--daemonize', 'no'],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f'redis://127.0.0.1:{port}'
    try:
        utils.wait_for(lambda: utils.port_open(url, port),
                       'redis-server to listen', START_TIMEOUT)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _client(url: str) -> Any:
    # Here: importing this module must not need the client (a test
    # requirement), nor fail a collection without it.
    system_packages.python('redis', 'redis>=4.0.0')
    import redis

    return redis.Redis.from_url(url)


def connections_received(url: str) -> int:
    """How many connections the server at ``url`` took since it started,
    this one included."""
    client = _client(url)
    try:
        return int(client.info('stats')['total_connections_received'])
    finally:
        client.close()


def keys(url: str) -> list[str]:
    """Every key the server at ``url`` holds."""
    client = _client(url)
    try:
        return sorted(k.decode() for k in client.keys('*'))
    finally:
        client.close()
