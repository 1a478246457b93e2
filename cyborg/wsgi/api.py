"""WSGI module for cyborg-api: ``cyborg.wsgi.api:application``.

uwsgi and mod_wsgi import this module; the configuration files are the
usual ones (``/etc/cyborg/cyborg.conf``) unless ``OS_CYBORG_CONFIG_FILES``
names others, separated by ``;``.
"""
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

# uwsgi (die-on-term) stops a worker with SIGINT. A worker that still
# imports this module, as each does after the fork with lazy-apps, would
# turn it into a KeyboardInterrupt, log that the application failed to
# load and go on without it until uwsgi's worker-reload-mercy ran out (60 s
# by default). Until uwsgi takes SIGINT over once the application is
# loaded, let it end the process at once.
if 'uwsgi' in sys.modules:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import cyborg.cmd  # noqa: E402, F401  (native threads first)
from cyborg.api import app  # noqa: E402
from cyborg.cmd import common  # noqa: E402
from cyborg.common import rpc  # noqa: E402
from cyborg.conf import CONF  # noqa: E402
from cyborg.db import api as db_api  # noqa: E402


def init_application() -> Callable[..., Any]:
    """Parse the configuration, then make the WSGI application."""
    files = os.environ.get('OS_CYBORG_CONFIG_FILES')
    # SIGUSR2 is the WSGI server's (uwsgi prints what each worker does),
    # and a Python handler would run only when the main thread next runs
    # Python code: Guru Meditation Reports come from [oslo_reports]
    # file_event_handler alone here.
    common.parse_args(
        [], 'cyborg-api', default_config_files=files.split(';') if files
        else None, report_signal=False)
    common.setup_tracing(CONF)
    db_api.configure(CONF)
    rpc.init(CONF)
    return app.setup_app(CONF)


application = init_application()
