"""Authentication middleware: keystonemiddleware, or noauth for development."""
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from keystonemiddleware import auth_token

from cyborg.api import errors

PUBLIC_ROUTES = frozenset(['/', '/v1', '/v1/', '/v2', '/v2/'])

WSGIApp = Callable[..., Iterable[bytes]]


def _is_public(environ: dict[str, Any]) -> bool:
    return (environ.get('PATH_INFO') or '/') in PUBLIC_ROUTES


class KeystoneAuth(auth_token.AuthProtocol):
    """keystonemiddleware's auth_token, except for the version documents."""

    def __init__(self, app: WSGIApp, conf: dict[str, Any]) -> None:
        self._unauthenticated_app = app
        super().__init__(app, conf)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if _is_public(environ):
            return self._unauthenticated_app(environ, start_response)
        return super().__call__(environ, start_response)


_IDENTITY_HEADERS = ('HTTP_X_USER_ID', 'HTTP_X_USER_NAME', 'HTTP_X_PROJECT_ID',
                     'HTTP_X_PROJECT_NAME', 'HTTP_X_ROLES',
                     'HTTP_X_IDENTITY_STATUS')


class NoAuth:
    """Development-only identity from the token itself, no validation.

    ``X-Auth-Token: admin`` is an administrator (roles admin, member,
    reader) of project ``admin``. Any other token ``user[:project]`` gets
    the roles in ``X-Roles`` (none when absent). ``X-Service-Roles`` is
    trusted as sent, standing for a validated service token.
    """

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if _is_public(environ):
            return self.app(environ, start_response)
        token = environ.get('HTTP_X_AUTH_TOKEN', '').strip()
        if not token:
            body = errors.error_body(
                401, 'Authentication required: send an X-Auth-Token '
                     'header (any token when [api] auth_strategy = noauth).')
            start_response('401 Unauthorized',
                           [('Content-Type', 'application/json'),
                            ('Content-Length', str(len(body)))])
            return [body]
        user, _, project = token.partition(':')
        environ.setdefault('HTTP_X_USER_ID', user)
        environ.setdefault('HTTP_X_PROJECT_ID', project or user)
        if token == 'admin':
            environ.setdefault('HTTP_X_ROLES', 'admin,member,reader')
        environ.setdefault('HTTP_X_ROLES', '')
        environ['HTTP_X_IDENTITY_STATUS'] = 'Confirmed'
        return self.app(environ, start_response)
