"""Building the WSGI application: pecan app plus its middleware."""
import collections
import inspect
from collections.abc import Callable
from typing import Any

import pecan
import pecan.util
import webob
from oslo_config import cfg
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id
from oslo_middleware import sizelimit

from cyborg.api import hooks
from cyborg.api.middleware import auth
from cyborg.api.middleware import encoding
from cyborg.api.middleware import parsable_error
from cyborg.common import policy

_ArgSpec = collections.namedtuple('ArgSpec', 'args varargs keywords defaults')
_argspecs: dict[Any, Any] = {}


def _cached_argspec(func: Callable[..., Any]) -> Any:
    """pecan's argspec of ``func``, computed once per function.

    pecan routes every request by inspecting controller signatures, and
    its own helper builds a new namedtuple class on each call: a third of
    a small request's time. A signature never changes, so keep it.
    """
    key = getattr(func, '__func__', func)
    try:
        return _argspecs[key]
    except KeyError:
        spec = _ArgSpec(*inspect.getfullargspec(func)[:4])
        _argspecs[key] = spec
        return spec


pecan.util._getargspec = _cached_argspec


class Request(webob.Request):
    """The request pecan hands the controllers.

    pecan's own class wraps every attribute read to turn a decoding error
    into a 400, several hundred reads per request; ``encoding.Utf8Check``
    refuses such requests before they get here instead.
    """


def setup_app(conf: cfg.ConfigOpts) -> Callable[..., Any]:
    """The API as a WSGI callable, configured from ``conf``.

    The pipeline, outermost first: proxy headers, request id, JSON
    errors, body size limit, authentication, UTF-8 check, pecan.
    """
    policy.get_enforcer(conf)
    app = pecan.make_app(
        'cyborg.api.controllers.root.RootController',
        hooks=[hooks.ContextHook(), hooks.ConductorHook(conf),
               hooks.MicroversionHook()],
        force_canonical=False,
        guess_content_type_from_ext=False,
        debug=False,
        logging={},
        request_cls=Request)
    app = encoding.Utf8Check(app)
    if conf.api.auth_strategy == 'keystone':
        app = auth.KeystoneAuth(app, {'oslo_config_config': conf})
    else:
        app = auth.NoAuth(app)
    app = sizelimit.RequestBodySizeLimiter(app, conf)
    app = parsable_error.ParsableErrorMiddleware(app)
    app = request_id.RequestId(app)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app
