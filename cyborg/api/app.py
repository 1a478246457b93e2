"""Building the WSGI application: pecan app plus its middleware."""
from collections.abc import Callable
from typing import Any

import pecan
import webob
import webob.multidict
from oslo_config import cfg
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id
from oslo_middleware import sizelimit

from cyborg.api import hooks
from cyborg.api import policy
from cyborg.api.controllers import root
from cyborg.api.middleware import auth
from cyborg.api.middleware import encoding
from cyborg.api.middleware import healthcheck
from cyborg.api.middleware import json_only
from cyborg.api.middleware import parsable_error
from cyborg.api.middleware import routes
from cyborg.common import patches
from cyborg.common import profiler

patches.cache_pecan_argspecs()


class Request(webob.Request):
    """The request pecan hands the controllers.

    pecan's own class wraps every attribute read to turn a decoding error
    into a 400, several hundred reads per request; ``encoding.Utf8Check``
    and ``json_only.JsonOnly`` refuse such requests before they get here
    instead.

    Nothing reads the body through it: WSME parses the JSON body once, for
    the handler. While routing, pecan would parse a form (``POST``, for a
    ``_method`` field), failing on a multipart body without a boundary,
    and a JSON object a second time (``json``, to pass its keys to the
    handler as arguments).
    """

    POST = webob.multidict.NoVars('The API reads no forms.')
    json = json_body = None


def authenticate(app: Callable[..., Any],
                 conf: cfg.ConfigOpts) -> Callable[..., Any]:
    """``app`` behind the authentication ``[api] auth_strategy`` names."""
    if conf.api.auth_strategy == 'keystone':
        return auth.KeystoneAuth(app, {'oslo_config_config': conf})
    return auth.NoAuth(app)


def setup_app(conf: cfg.ConfigOpts) -> Callable[..., Any]:
    """The API as a WSGI callable, configured from ``conf``.

    The pipeline, outermost first: proxy headers, request id,
    /healthcheck (no token, its own plain-text or JSON answer), tracing
    (with ``[profiler] enabled``; outside authentication, which would
    refuse a request before its trace began), HEAD as GET, JSON errors,
    body size limit, authentication, paths and methods, UTF-8 path and
    query, JSON in and out, pecan.
    """
    app = pecan.make_app(
        'cyborg.api.controllers.root.RootController',
        hooks=[hooks.ConfigHook(conf, policy.make_enforcer(conf)),
               hooks.ContextHook(), hooks.ConductorHook(conf),
               hooks.MicroversionHook()],
        force_canonical=False,
        guess_content_type_from_ext=False,
        debug=False,
        logging={},
        request_cls=Request)
    app = json_only.JsonOnly(app)
    app = encoding.Utf8Check(app)
    app = routes.Routes(app, root.ROUTES)
    app = sizelimit.RequestBodySizeLimiter(authenticate(app, conf), conf)
    app = parsable_error.ParsableErrorMiddleware(app, conf)
    app = routes.Head(app)
    app = profiler.wsgi_middleware(app, conf)
    app = healthcheck.Healthcheck(app, conf,
                                  lambda inner: authenticate(inner, conf))
    app = request_id.RequestId(app)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app
