"""GET and HEAD /healthcheck, without a token: oslo.middleware's
healthcheck, in detail only for administrators.

oslo.middleware answers 200 "OK" (204 to HEAD) while every backend of
``[healthcheck] backends`` is available, else 503 with their reasons
(e.g. "DISABLED BY FILE", "DATABASE UNREACHABLE"). Its ``detailed``
option would show every caller the process's threads' stacks, its
platform and the backends' details; here ``detailed = true`` shows them
only to a request whose token the API's own authentication middleware
finds to carry the admin role. Any other request, a load balancer's
without a token among them, gets the plain answer; a detailed request
whose token is refused gets the plain answer too, never a 401 that a
load balancer would take for the service being down.
"""
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from oslo_config import cfg
from oslo_middleware import healthcheck

from cyborg import context as cyborg_context

WSGIApp = Callable[..., Iterable[bytes]]

PATH = '/healthcheck'
# The role of an administrator, as hooks.ContextHook decides is_admin.
ADMIN_ROLE = 'admin'


class _Answer(healthcheck.Healthcheck):
    """oslo.middleware's healthcheck with ``detailed`` fixed by cyborg
    rather than read from the option, which is global."""

    def __init__(self, conf: cfg.ConfigOpts, detailed: bool) -> None:
        self._detailed = detailed
        super().__init__(None, conf)

    def _conf_get(self, key: str, group: str = 'healthcheck') -> Any:
        if key == 'detailed':
            return self._detailed
        return super()._conf_get(key, group)


def _roles_app(environ: dict[str, Any],
               start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Stands for the API behind authentication: the roles it set are
    left in ``environ`` for ``Healthcheck._is_admin``."""
    start_response('204 No Content', [])
    return []


class Healthcheck:
    """Answers /healthcheck before the rest of the pipeline; passes every
    other request on to ``app``.

    ``authenticate`` wraps an application in the API's authentication
    middleware (keystonemiddleware, or noauth): a request asking for
    detail goes through it first.
    """

    def __init__(self, app: WSGIApp, conf: cfg.ConfigOpts,
                 authenticate: Callable[[WSGIApp], WSGIApp]) -> None:
        self.app = app
        self._plain = _Answer(conf, detailed=False)
        self._detailed = (_Answer(conf, detailed=True)
                          if conf.healthcheck.detailed else None)
        self._authenticated = authenticate(_roles_app)

    def _is_admin(self, environ: dict[str, Any]) -> bool:
        probe = dict(environ, PATH_INFO=PATH, REQUEST_METHOD='GET')
        status: list[str] = []
        for _ in self._authenticated(
                probe, lambda s, h, e=None: status.append(s)):
            pass
        # The roles as the authentication middleware set them from a
        # token it accepted; keystonemiddleware drops those the client
        # sent.
        return (status[:1] == ['204 No Content']
                and ADMIN_ROLE in probe.get(
                    'HTTP_X_ROLES', '').split(','))

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if (environ.get('PATH_INFO') != PATH
                or environ.get('REQUEST_METHOD') not in ('GET', 'HEAD')):
            # OPTIONS and other methods: the route table answers.
            return self.app(environ, start_response)
        # This thread's context (oslo.context keeps one per thread, and
        # oslo.log writes its ids on every line) is still the last
        # request's: what a check logs is this request's.
        cyborg_context.RequestContext.from_environ(environ)
        answer = self._plain
        if (self._detailed is not None
                and environ.get('HTTP_X_AUTH_TOKEN')
                and self._is_admin(environ)):
            answer = self._detailed
        return answer(environ, start_response)
