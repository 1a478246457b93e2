"""Building the WSGI application: pecan app plus its middleware."""
from collections.abc import Callable
from typing import Any

import pecan
from oslo_config import cfg
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id

from cyborg.api import hooks
from cyborg.api.middleware import parsable_error


def setup_app(conf: cfg.ConfigOpts) -> Callable[..., Any]:
    """The API as a WSGI callable, configured from ``conf``."""
    app = pecan.make_app(
        'cyborg.api.controllers.root.RootController',
        hooks=[hooks.MicroversionHook()],
        force_canonical=False,
        guess_content_type_from_ext=False,
        debug=False,
        logging={})
    app = parsable_error.ParsableErrorMiddleware(app)
    app = request_id.RequestId(app)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app
