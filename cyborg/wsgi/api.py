"""WSGI module for cyborg-api: ``cyborg.wsgi.api:application``.

uwsgi and mod_wsgi import this module; the configuration files are the
usual ones (``/etc/cyborg/cyborg.conf``) unless ``OS_CYBORG_CONFIG_FILES``
names others, separated by ``;``.
"""
import os

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.api import app
from cyborg.cmd import common
from cyborg.common import rpc
from cyborg.conf import CONF
from cyborg.db import api as db_api


def init_application():
    files = os.environ.get('OS_CYBORG_CONFIG_FILES')
    common.parse_args(
        [], default_config_files=files.split(';') if files else None)
    db_api.configure(CONF)
    rpc.init(CONF)
    return app.setup_app(CONF)


application = init_application()
