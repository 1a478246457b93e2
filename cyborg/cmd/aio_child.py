"""A WSGI service cyborg-aio runs in a child process (placement, Glance).

Each such service reads its own configuration from files and sets up
logging for the whole process it runs in, so it gets a process of its
own: a ``python -c`` child serving one WSGI application with waitress, on
a socket the parent binds (the address is known before the child starts,
and port 0 picks a free one). The child is in a session of its own, so a
Ctrl-C reaches only the parent, which stops it; it also ends when the
parent dies (PR_SET_PDEATHSIG). Every service answers to the token
``admin`` as an administrator, without Keystone.
"""
import os
import pathlib
import socket
import subprocess
import sys
import time

import requests
from oslo_config import cfg

TOKEN = 'admin'

# Runs in the child. argv: the listening socket's fd, the parent's pid,
# the server's name and the application as "module:attribute", or
# "module:factory()" for a function that returns it.
_SERVE = '''
import ctypes, importlib, os, signal, socket, sys
try:
    # PR_SET_PDEATHSIG: a SIGTERM when the parent dies, however it dies.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[2]):
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
import waitress
module, _, name = sys.argv[4].partition(":")
app = getattr(importlib.import_module(module), name.removesuffix("()"))
if name.endswith("()"):
    app = app()
listener = socket.socket(fileno=int(sys.argv[1]))
waitress.serve(app, sockets=[listener], threads=4, ident=sys.argv[3],
               _quiet=True)
'''


def session() -> requests.Session:
    """A requests session for the services on 127.0.0.1."""
    new = requests.Session()
    # 127.0.0.1 is never behind the proxy of the environment.
    new.trust_env = False
    return new


class NotStarted(Exception):
    """The child process did not answer in time or exited."""


class ChildService:
    """One service in a child process; ``start``, ``wait``, ``stop``.

    ``workdir`` holds its configuration (written by ``prepare``), its
    data and its log; ``env`` is added to the child's environment.
    """

    #: The service's name, for messages and its log file.
    name = ''
    #: What the child serves: "module:attribute" or "module:factory()".
    app = ''
    #: The path that answers 200 once the service is up.
    probe = '/'

    def __init__(self, workdir: pathlib.Path, port: int) -> None:
        self.workdir = workdir
        self.port = port
        self.url = ''
        self.log_path = workdir / f'{self.name}.log'
        self.process: subprocess.Popen[bytes] | None = None

    def prepare(self) -> dict[str, str]:
        """Write the service's configuration under ``workdir``; the
        environment the child needs to find it."""
        return {}

    def start(self) -> str:
        """Bind the port and start the child; its URL. OSError if the
        port is taken."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **self.prepare())
        sock = socket.create_server(('127.0.0.1', self.port))
        try:
            with open(self.log_path, 'ab') as log:
                # cwd: no directory on the caller's path may shadow the
                # service's package ("python -c" puts it first).
                self.process = subprocess.Popen(
                    [sys.executable, '-c', _SERVE, str(sock.fileno()),
                     str(os.getpid()), self.name, self.app],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    cwd=self.workdir, pass_fds=[sock.fileno()],
                    start_new_session=True, env=env)
            self.url = f'http://127.0.0.1:{sock.getsockname()[1]}'
        finally:
            sock.close()
        return self.url

    def wait(self, timeout: float = 60) -> None:
        """Until the service answers ``probe``; NotStarted with the end
        of its log otherwise."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        client = session()
        while True:
            try:
                if client.get(self.url + self.probe, timeout=2,
                              headers={'X-Auth-Token': TOKEN}).ok:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or \
                    time.monotonic() > deadline:
                tail = self.log_path.read_text(errors='replace')[-2000:]
                raise NotStarted(
                    f'{self.name} did not start (log {self.log_path}):\n'
                    f'{tail}')
            time.sleep(0.1)

    def terminate(self) -> None:
        """Ask the child to stop, without waiting: children stopped
        together stop in the time of the slowest."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def stop(self) -> None:
        """Stop the child and wait for it (10 s, then kill it)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def point(conf: cfg.ConfigOpts, group: str, url: str) -> None:
    """Point the keystoneauth options of ``group`` at ``url`` with the
    admin token, no Keystone."""
    # The admin_token plugin's options exist once the plugin is named.
    from keystoneauth1 import loading
    conf.set_override('auth_type', 'admin_token', group)
    loading.register_auth_conf_options(conf, group)
    conf.register_opts(loading.get_auth_plugin_conf_options('admin_token'),
                       group=group)
    conf.set_override('endpoint', url, group)
    conf.set_override('token', TOKEN, group)
