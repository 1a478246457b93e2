"""Helpers shared by tests."""
import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import TypeVar

import sqlalchemy as sa


@contextlib.contextmanager
def count_writes(engine: sa.engine.Engine) -> Iterator[list[str]]:
    """Collect every INSERT, UPDATE and DELETE sent on ``engine``."""
    statements: list[str] = []

    def _record(conn, cursor, statement, parameters, context, executemany):
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb in ('INSERT', 'UPDATE', 'DELETE'):
            statements.append(statement)

    sa.event.listen(engine, 'before_cursor_execute', _record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, 'before_cursor_execute', _record)


@contextlib.contextmanager
def virtual_host(url: str, prefix: str) -> Iterator[str]:
    """``url`` on a new RabbitMQ virtual host, deleted after the block.

    Queue names do not depend on the exchange, so services of two test
    processes or benchmark runs on one virtual host would consume each
    other's messages. Without rabbitmqctl (a remote broker) the URL is
    used as given.
    """
    parsed = urllib.parse.urlsplit(url)
    vhost = f'{prefix}-{uuid.uuid4().hex[:12]}'
    try:
        _rabbitmqctl('add_vhost', vhost)
    except (OSError, subprocess.SubprocessError):
        yield url
        return
    try:
        _rabbitmqctl('set_permissions', '-p', vhost,
                     parsed.username or 'guest', '.*', '.*', '.*')
        yield urllib.parse.urlunsplit(parsed._replace(path=f'/{vhost}'))
    finally:
        _rabbitmqctl('delete_vhost', vhost)


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(['rabbitmqctl', *args], capture_output=True, check=True,
                   timeout=60)


T = TypeVar('T')


def port_open(url: str, default_port: int) -> bool:
    """Whether the server of ``url`` accepts a TCP connection."""
    parsed = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection(
                (parsed.hostname or '127.0.0.1', parsed.port or default_port),
                timeout=2):
            return True
    except OSError:
        return False


def wait_for(check: Callable[[], T], what: str = 'a condition',
             timeout: float = 30, interval: float = 0.05) -> T:
    """The first true value of ``check()``; AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out after {timeout:.0f}s waiting '
                                 f'for {what}')
        time.sleep(interval)


def uwsgi_command(ini: str, conf_file: str, port: int, processes: int,
                  threads: int) -> list[str] | None:
    """The command serving ``cyborg.wsgi.api:application`` under uwsgi as
    devstack runs it (processes that load the application after the
    fork, threads, a master that stops them on SIGTERM) on an HTTP/1.1
    keep-alive socket of 127.0.0.1, its configuration written to
    ``ini``; None when uwsgi is not installed."""
    uwsgi = (shutil.which('uwsgi', path=os.path.dirname(sys.executable))
             or shutil.which('uwsgi'))
    if uwsgi is None:
        return None
    with open(ini, 'w') as f:
        f.write(f"""[uwsgi]
module = cyborg.wsgi.api:application
http11-socket = 127.0.0.1:{port}
processes = {processes}
threads = {threads}
master = true
lazy-apps = true
enable-threads = true
die-on-term = true
need-app = true
worker-reload-mercy = 10
disable-logging = true
env = OS_CYBORG_CONFIG_FILES={conf_file}
""")
    return [uwsgi, '--ini', ini]


def query(url: str, statement: str) -> list[dict]:
    """The rows of ``statement`` on the database at ``url``, as dicts."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                sa.text(statement)).mappings()]
    finally:
        engine.dispose()


def dbsync(workdir, url: str, *args: str) -> subprocess.CompletedProcess:
    """cyborg-dbsync ``args`` on the database at ``url``, as a process;
    its configuration file is written in ``workdir``."""
    conf = os.path.join(str(workdir), 'cyborg.conf')
    with open(conf, 'w') as f:
        f.write(f'[database]\nconnection = {url}\n')
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.dbsync', '--config-file', conf,
         *args], capture_output=True, text=True, timeout=300)


def execute_sql(url: str, *statements: str) -> None:
    """Run ``statements`` in one transaction on the database at ``url``
    (a test's own set-up or damage, out of cyborg's hands)."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def serving(endpoints: list[Any], method: str) -> Any:
    """The first of a service's RPC ``endpoints`` that has ``method``,
    as oslo.messaging's dispatcher picks it."""
    return next(e for e in endpoints if hasattr(e, method))


class Clock:
    """A monotonic clock the test moves: ``now`` is what it answers."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class InProcess:
    """A service's RPC endpoints called in the test's process, without a
    message bus: a method is that of the endpoint ``serving`` it; any
    other attribute is that of ``parts``, the manager that made them."""

    def __init__(self, parts: Any, endpoints: list[Any] | None = None
                 ) -> None:
        self.parts = parts
        self.endpoints = (parts.endpoints() if endpoints is None
                          else endpoints)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith('_'):
            for endpoint in self.endpoints:
                if hasattr(endpoint, name):
                    return getattr(endpoint, name)
        return getattr(self.parts, name)


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """An exclusive lock of the file at ``path`` (made when missing), held
    for the block: pytest workers, each a process, take turns."""
    with open(path, 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
