"""A real Glance 33 behind Keystone, for Nova's images and cyborg's
bitstreams.

Glance's own paste pipeline with keystonemiddleware
(``[paste_deploy] flavor = keystone``), a file store and an SQLite
database under the stack's work directory (made by ``glance-manage db
sync`` before it starts), served by waitress as cyborg-aio serves its
Glance.
"""
import pathlib
import shutil
import subprocess
import sys

import requests

from cyborg.tests.harness import gate_stack
from cyborg.tests.nova_stack import keystone as keystone_lib

_SERVE = '''
import sys, waitress
port = int(sys.argv.pop())
from glance.common import wsgi_app
waitress.serve(wsgi_app.init_app(), host="127.0.0.1", port=port,
               threads=4, _quiet=True)
'''


class Glance:
    """Glance's configuration and process in ``stack``."""

    def __init__(self, stack: gate_stack.Stack,
                 keystone: keystone_lib.Keystone) -> None:
        self.stack = stack
        self.keystone = keystone
        self.workdir = stack.workdir / 'glance'
        self.workdir.mkdir(exist_ok=True)
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        stores = {'file': self.workdir / 'images',
                  'os_glance_staging_store': self.workdir / 'staging',
                  'os_glance_tasks_store': self.workdir / 'tasks'}
        self.conf = gate_stack.write_conf(
            self.workdir / 'glance-api.conf', {
                'DEFAULT': {'enabled_backends': 'file:file'},
                'database': {'connection':
                             f'sqlite:///{self.workdir}/glance.sqlite'},
                'glance_store': {'default_backend': 'file'},
                **{store: {'filesystem_store_datadir': str(path)}
                   for store, path in stores.items()},
                'paste_deploy': {'flavor': 'keystone'},
                'keystone_authtoken': keystone.authtoken('glance')})
        paste = (pathlib.Path(sys.prefix) / 'etc' / 'glance'
                 / 'glance-api-paste.ini')
        shutil.copy(paste, self.workdir / 'glance-api-paste.ini')

    def setup(self) -> None:
        """Its database."""
        with open(self.stack.workdir / 'glance-manage.log', 'ab') as out:
            subprocess.run([sys.executable, '-m', 'glance.cmd.manage',
                            '--config-file', str(self.conf), 'db', 'sync'],
                           check=True, stdout=out, stderr=subprocess.STDOUT,
                           cwd=self.workdir, timeout=300)

    def register(self) -> None:
        """Its user and endpoints in Keystone."""
        self.keystone.add_service_user('glance')
        self.keystone.add_service('glance', 'image', self.url)

    def process(self) -> gate_stack.Process:
        return self.stack._add(
            'glance', 'glance',
            [sys.executable, '-c', _SERVE, str(self.port)],
            cwd=self.workdir,
            env={'OS_GLANCE_CONFIG_DIR': str(self.workdir)})

    def up(self) -> bool:
        try:
            return requests.get(self.url + '/versions',
                                timeout=2).status_code == 200
        except requests.RequestException:
            return False
