"""A real Horizon (openstack_dashboard) with cyborg's plugin, as a process.

The plugin is installed as Horizon documents it for any plugin: its
"enabled" files (``cyborg/dashboard/enabled/_*.py``) are copied into the
environment's ``openstack_dashboard/local/enabled/``. The settings are a
module of the test's own (DJANGO_SETTINGS_MODULE) that imports
``openstack_dashboard.settings`` and sets what a deployment's
local_settings.py sets (``SETTINGS``, below, says why for each). As
Horizon's packages deploy it, the static files are collected into
STATIC_ROOT and compressed beforehand (``collectstatic``, then
``compress``: COMPRESS_OFFLINE), and the WSGI application is served by
waitress on a free port of 127.0.0.1 with STATIC_ROOT served beside it,
as a web server's alias would serve it.
"""
import importlib.util
import os
import pathlib
import secrets
import subprocess
import sys
import tempfile

import requests

from cyborg.tests import utils
from cyborg.tests.harness import gate_stack

PLUGIN = pathlib.Path(__file__).resolve().parents[2] / 'dashboard'
# The plugin's files Horizon reads, by the folder of openstack_dashboard/
# local/ each is copied to (cyborg/dashboard/__init__.py): the panel
# groups and panels, and the settings snippets (cyborg's policy files),
# which Horizon's settings execute in their own namespace.
FOLDERS = ('enabled', 'local_settings.d')
# The names installed last time, in each folder: a file the plugin has
# renamed or removed since would still be loaded (and fail every page
# once the module it names is gone).
MANIFEST = '.cyborg-dashboard-files'
LOCK = '/tmp/cyborg-test-horizon-enabled.lock'
# Seconds from the start of the process to the login page's first
# answer: the static files are ready by then (COLLECT_TIMEOUT).
START_TIMEOUT = 120
# Seconds for collectstatic or compress: 3-4 s each here, idle.
COLLECT_TIMEOUT = 300

# The settings module. Every value is one an operator's local_settings.py
# sets too, or says why the test needs it.
SETTINGS = '''\
from openstack_dashboard.settings import *  # noqa: F401,F403

# Production behaviour: cached templates, no debug pages. Static files
# are served by the StaticFilesHandler around the application instead.
DEBUG = False
ALLOWED_HOSTS = ['127.0.0.1', 'localhost']
# Set here: left unset, Horizon generates one into a file of its package.
SECRET_KEY = {secret_key!r}
OPENSTACK_KEYSTONE_URL = {keystone_url!r}
OPENSTACK_KEYSTONE_DEFAULT_REGION = {region!r}
# Horizon's default cache, and so its sessions, is memcached on
# 127.0.0.1:11211. The cache: this process's memory. The sessions: files
# (Django's file backend); in that memory cache, a session signed in was
# gone by the next page ("The request's session was deleted before the
# request completed").
CACHES = {{'default': {{
    'BACKEND': 'django.core.cache.backends.locmem.LocMemCache'}}}}
SESSION_ENGINE = 'django.contrib.sessions.backends.file'
SESSION_FILE_PATH = {session_path!r}
# Compressed beforehand, as Horizon's packages do: compressing each page
# as it is served (COMPRESS_OFFLINE = False) took 1.8-2.4 s of every
# page here, cyborg's or Horizon's own, against 90-160 ms offline.
COMPRESS_ENABLED = True
COMPRESS_OFFLINE = True
STATIC_ROOT = {static_root!r}
COMPRESS_ROOT = STATIC_ROOT
MEDIA_ROOT = {media_root!r}
LOGGING = {{
    'version': 1,
    'disable_existing_loggers': False,
    'handlers': {{'console': {{'class': 'logging.StreamHandler'}}}},
    'root': {{'handlers': ['console'], 'level': 'INFO'}},
}}
'''

# The application under waitress, STATIC_ROOT beside it at STATIC_URL;
# the port is the last argument.
_SERVE = '''
import mimetypes, os, sys, waitress
port = int(sys.argv.pop())
from django.conf import settings
from django.core.wsgi import get_wsgi_application
application = get_wsgi_application()
root = os.path.realpath(settings.STATIC_ROOT)

def serve(environ, start_response):
    path = environ.get('PATH_INFO', '')
    if not path.startswith(settings.STATIC_URL):
        return application(environ, start_response)
    found = os.path.realpath(os.path.join(
        root, path[len(settings.STATIC_URL):]))
    if not found.startswith(root + os.sep) or not os.path.isfile(found):
        start_response('404 Not Found', [('Content-Type', 'text/plain')])
        return [b'not found']
    kind = mimetypes.guess_type(found)[0] or 'application/octet-stream'
    with open(found, 'rb') as data:
        body = data.read()
    start_response('200 OK', [('Content-Type', kind),
                              ('Content-Length', str(len(body)))])
    return [body]

waitress.serve(serve, host="127.0.0.1", port=port, threads=8, _quiet=True)
'''


def horizon_local() -> pathlib.Path:
    """The installed openstack_dashboard's local/ folder, where a
    plugin's files go (Horizon's "Pluggable Panels and Groups"
    documentation). Found, not imported: importing it needs settings."""
    spec = importlib.util.find_spec('openstack_dashboard')
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError('openstack_dashboard (horizon) is not '
                                  "installed: pip install '.[dashboard]'")
    return pathlib.Path(spec.origin).parent / 'local'


def _install(source: pathlib.Path, target: pathlib.Path) -> list[str]:
    """Copy ``source``'s ``_*.py`` files (not its __init__.py) to
    ``target``, each replaced whole (a rename), so that a Horizon
    starting meanwhile reads the old file or the new one; remove those of
    the last install that ``source`` no longer has. The names copied."""
    files = sorted(path for path in source.glob('_*.py')
                   if path.name != '__init__.py')
    names = [path.name for path in files]
    manifest = target / MANIFEST
    if manifest.exists():
        for name in set(manifest.read_text().split()) - set(names):
            (target / name).unlink(missing_ok=True)
    for path in files:
        text = path.read_bytes()
        installed = target / path.name
        if installed.exists() and installed.read_bytes() == text:
            continue
        fd, temporary = tempfile.mkstemp(dir=target, suffix='.tmp')
        with os.fdopen(fd, 'wb') as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, installed)
    manifest.write_text('\n'.join(names) + '\n')
    return names


def install_plugin(plugin: pathlib.Path = PLUGIN,
                   local: pathlib.Path | None = None) -> list[str]:
    """Install the plugin as its documentation says: its enabled files
    into Horizon's local/enabled, its settings snippets into
    local/local_settings.d. Idempotent; two pytest workers may install at
    once (a file lock orders them). The names installed."""
    if not list((plugin / 'enabled').glob('_[0-9]*.py')):
        raise FileNotFoundError(f'no enabled files in {plugin}/enabled')
    local = local or horizon_local()
    with utils.file_lock(LOCK):
        return [name for folder in FOLDERS
                for name in _install(plugin / folder, local / folder)]


class Horizon:
    """Horizon with the plugin, as the process ``horizon`` of ``stack``,
    signing users in at the Keystone at ``keystone_url`` (no /v3)."""

    def __init__(self, stack: gate_stack.Stack, keystone_url: str,
                 region: str) -> None:
        self.stack = stack
        self.workdir = stack.workdir / 'horizon'
        self.workdir.mkdir(exist_ok=True)
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        self.settings = self.workdir / 'cyborg_horizon_settings.py'
        self.settings.write_text(SETTINGS.format(
            secret_key=secrets.token_urlsafe(48),
            keystone_url=keystone_url + '/v3', region=region,
            static_root=str(self.workdir / 'static'),
            media_root=str(self.workdir / 'media'),
            session_path=str(self.workdir / 'sessions')))
        (self.workdir / 'sessions').mkdir(exist_ok=True)

    def _env(self) -> dict[str, str]:
        """The settings module, and the plugin of the tree whose enabled
        files were installed (not another cyborg the environment may have
        installed)."""
        return {'DJANGO_SETTINGS_MODULE': 'cyborg_horizon_settings',
                'PYTHONPATH': os.pathsep.join(
                    [str(self.workdir), str(PLUGIN.parents[1])])}

    def collect_static(self) -> None:
        """``collectstatic`` and ``compress``, as an operator runs them
        after installing a plugin (the admin guide's "Dashboard" page):
        about 7 s here."""
        env = dict(os.environ, **self._env())
        for command in (['collectstatic', '--noinput'],
                        ['compress', '--force']):
            done = subprocess.run(
                [sys.executable, '-m', 'django', *command], env=env,
                cwd=self.workdir, capture_output=True, text=True,
                timeout=COLLECT_TIMEOUT)
            if done.returncode:
                raise RuntimeError(f'django-admin {" ".join(command)} '
                                   f'failed:\n{done.stdout}{done.stderr}')

    def process(self, plugin: bool = True) -> gate_stack.Process:
        """The process (not started); the plugin is installed first,
        unless ``plugin`` is false (Horizon as it comes), then the
        static files collected and compressed."""
        if plugin:
            install_plugin()
        self.collect_static()
        return self.stack._add(
            'horizon', 'horizon',
            [sys.executable, '-c', _SERVE, str(self.port)],
            cwd=self.workdir, env=self._env())

    def up(self) -> bool:
        """Whether the login page answers; fails at once when the process
        exited."""
        if not self.stack.processes['horizon'].running:
            raise RuntimeError('horizon exited:\n'
                               + self.stack.processes['horizon'].tail())
        try:
            return requests.get(self.url + '/auth/login/',
                                timeout=60).status_code == 200
        except requests.RequestException:
            return False

    def start(self, plugin: bool = True) -> None:
        """Start the process (see ``process``) and wait until the login
        page answers."""
        self.process(plugin).start()
        gate_stack.wait_for(self.up, 'Horizon to answer', START_TIMEOUT,
                            interval=0.5)
