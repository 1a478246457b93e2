"""The Glance cyborg-aio runs beside itself, when installed, for bitstreams.

glance (``pip install 'cyborg[aio]'``) runs in a child process
(``aio_child``) with its file store and SQLite database under
``<state_dir>/glance``, its schema made by ``glance-manage db sync`` when
it starts, and no Keystone: the token ``admin`` is an administrator of
the project ``aio``. cyborg-aio uploads a demo bitstream for the fake
FPGAs, which the tour programs and binds by its function.
"""
import hashlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from cyborg.cmd import aio_child

# The demo bitstream: an image whose accel:function_id the fake driver
# reports as a trait once loaded, and that device profiles can ask for.
DEMO_IMAGE_NAME = 'fake-fpga-demo'
DEMO_FUNCTION_ID = 'fake-demo-function'
DEMO_DATA = b'cyborg-aio demo bitstream for the fake FPGA\n' * 64

# The identity the token "admin" stands for.
PROJECT_ID = 'aio'
USER_ID = 'admin'
_IDENTITY = ('HTTP_X_IDENTITY_STATUS', 'HTTP_X_ROLES', 'HTTP_X_PROJECT_ID',
             'HTTP_X_USER_ID', 'HTTP_X_TENANT_ID', 'HTTP_X_SERVICE_CATALOG')

# Glance's "keystone" pipeline without keystonemiddleware: its context
# middleware reads the identity headers ``application`` sets. Glance's
# own no-auth pipeline (unauthenticated-context) makes a context with no
# roles, which glance's policies, new defaults on, answer with 403.
_PASTE = '''[pipeline:glance-api]
pipeline = versionnegotiation context rootapp

[composite:rootapp]
paste.composite_factory = glance.api:root_app_factory
/: apiversions
/v2: apiv2app

[app:apiversions]
paste.app_factory = glance.api.versions:create_resource

[app:apiv2app]
paste.app_factory = glance.api.v2.router:API.factory

[filter:versionnegotiation]
paste.filter_factory = \
glance.api.middleware.version_negotiation:VersionNegotiationFilter.factory

[filter:context]
paste.filter_factory = glance.api.middleware.context:ContextMiddleware.factory
'''

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def installed() -> bool:
    """Whether glance can be imported."""
    return importlib.util.find_spec('glance') is not None


class EmbeddedGlance(aio_child.ChildService):
    """Glance under ``<state_dir>/glance``."""

    name = 'glance'
    app = 'cyborg.cmd.aio_glance:application()'
    # Answers once the database is made and the token is taken.
    probe = '/v2/images?limit=1'

    @property
    def database(self) -> str:
        return str(self.workdir / 'glance.sqlite')

    @property
    def images(self) -> str:
        return str(self.workdir / 'images')

    def prepare(self) -> dict[str, str]:
        stores = {'file': self.images,
                  'os_glance_staging_store': self.workdir / 'staging',
                  'os_glance_tasks_store': self.workdir / 'tasks'}
        (self.workdir / 'glance-api.conf').write_text(
            '[DEFAULT]\nenabled_backends = file:file\n'
            '[database]\n'
            f'connection = sqlite:///{self.database}\n'
            '[glance_store]\ndefault_backend = file\n'
            + ''.join(f'[{store}]\nfilesystem_store_datadir = {path}\n'
                      for store, path in stores.items()))
        (self.workdir / 'glance-api-paste.ini').write_text(_PASTE)
        return {'OS_GLANCE_CONFIG_DIR': str(self.workdir)}


def application() -> WSGIApp:
    """Glance's API, its database made first, in which the token
    ``admin`` is an administrator; run in the child process, where
    ``OS_GLANCE_CONFIG_DIR`` names the directory ``prepare`` wrote."""
    config = os.path.join(os.environ['OS_GLANCE_CONFIG_DIR'],
                          'glance-api.conf')
    subprocess.run([sys.executable, '-m', 'glance.cmd.manage',
                    '--config-file', config, 'db', 'sync'], check=True)
    # Glance's exit handler makes its task pool if no upload made it;
    # the lazy import of the pool's class fails once Python shuts down.
    import concurrent.futures.thread  # noqa: F401

    from glance.common import wsgi_app

    glance = wsgi_app.init_app()

    def admin_token(environ: dict[str, Any],
                    start_response: StartResponse) -> Iterable[bytes]:
        # Only this wrapper says who the caller is.
        for header in _IDENTITY:
            environ.pop(header, None)
        if environ.get('HTTP_X_AUTH_TOKEN') == aio_child.TOKEN:
            environ.update(HTTP_X_IDENTITY_STATUS='Confirmed',
                           HTTP_X_ROLES='admin,member,reader',
                           HTTP_X_PROJECT_ID=PROJECT_ID,
                           HTTP_X_USER_ID=USER_ID)
        return glance(environ, start_response)

    return admin_token


def ensure_demo_image(url: str, token: str = aio_child.TOKEN) -> str:
    """The id of the demo bitstream image in the Glance at ``url``,
    created and uploaded (as the administrator whose token is ``token``)
    unless an active one is there from an earlier run. One cut short
    (not active) is deleted and made again."""
    client = aio_child.session()
    client.headers['X-Auth-Token'] = token
    listed = client.get(f'{url}/v2/images',
                        params={'name': DEMO_IMAGE_NAME}, timeout=10)
    listed.raise_for_status()
    digest = hashlib.sha512(DEMO_DATA).hexdigest()
    for image in listed.json()['images']:
        if image['status'] == 'active' and image['os_hash_value'] == digest:
            return str(image['id'])
        client.delete(f'{url}/v2/images/{image["id"]}',
                      timeout=10).raise_for_status()
    created = client.post(f'{url}/v2/images', timeout=10, json={
        'name': DEMO_IMAGE_NAME, 'disk_format': 'raw',
        'container_format': 'bare', 'visibility': 'public',
        'accel:function_id': DEMO_FUNCTION_ID})
    created.raise_for_status()
    image_id = str(created.json()['id'])
    client.put(f'{url}/v2/images/{image_id}/file', data=DEMO_DATA,
               headers={'Content-Type': 'application/octet-stream'},
               timeout=30).raise_for_status()
    return image_id
