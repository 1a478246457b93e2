"""The API's paths and methods: 404, 405 and OPTIONS from one table.

pecan finds a handler by walking the controllers, and a REST controller
binds whatever path segments are left to the handler's parameters, query
parameters included: POST /device_profiles/{uuid} reached the collection's
POST, DELETE /accelerator_requests/{uuid}/a/b filled ?arqs= and
?instance=, and HEAD and OPTIONS were 405s. Here a request goes on to
pecan only on a path of the table (``controllers.root.ROUTES``), at a
microversion that has it (from the one the table names on), with one of
its methods: any other gets a 404, or a 405 with the Allow header the
table gives, which OPTIONS answers with. pecan's method override, a
``_method`` query parameter, is refused: the method a request is checked
and served with is its own. ``Head`` serves HEAD as GET without the body,
wherever GET is served.
"""
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from cyborg.api import errors
from cyborg.api import versions

WSGIApp = Callable[..., Iterable[bytes]]

# The order of the methods in an Allow header.
_ORDER = ('GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS')

NOT_FOUND = ('The resource could not be found: check the path against the '
             'API reference (GET / lists the API versions).')


class Route:
    """A path of the table: ``/v2/devices/{uuid}``, ``{...}`` being any one
    segment, and the methods it serves."""

    def __init__(self, template: str, methods: str,
                 added_in: tuple[int, int] | None) -> None:
        """``added_in``: the microversion that added the path; None when
        every request may reach it, one of v1 or of the first version."""
        self.template = template
        self.parts = template[1:].split('/')
        served = set(methods.split()) | {'OPTIONS'}
        if 'GET' in served:
            served.add('HEAD')
        self.methods = frozenset(served)
        ordered = [m for m in _ORDER if m in served]
        self.allow = ', '.join(ordered)
        self.choice = f'{", ".join(ordered[:-1])} or {ordered[-1]}'
        # A plain tuple, or None where no version needs to be read.
        self.added_in = (tuple(added_in) if added_in is not None
                         and added_in > versions.MIN_VERSION else None)

    def matches(self, segments: list[str]) -> bool:
        """Whether ``segments`` (as many as the template's) fill it."""
        pairs = zip(self.parts, segments, strict=True)
        return all(part == segment or (part[:1] == '{' and segment != '')
                   for part, segment in pairs)


def _key(segments: list[str]) -> tuple[int, str, str]:
    # Every path's first two segments are names, never {...}.
    return len(segments), segments[0], segments[1] if len(segments) > 1 else ''


def _asked_version(environ: dict[str, Any]) -> versions.APIVersion:
    try:
        return versions.requested(environ)
    except versions.InvalidVersion:
        # Routed as the latest version; the microversion hook then
        # answers 406 before any controller runs.
        return versions.APIVersion(*versions.MAX_VERSION)


def _overrides_method(query: str) -> bool:
    if '_method' not in query and '%' not in query:
        return False
    return any(name == '_method' for name, _ in urllib.parse.parse_qsl(
        query, keep_blank_values=True))


class Routes:
    """404, 405 and OPTIONS for the paths of ``routes``: path -> its
    methods and the microversion that added it (below it, the path is
    not found, whatever the method)."""

    def __init__(self, app: WSGIApp, routes: Mapping[
            str, tuple[str, tuple[int, int] | None]]) -> None:
        self.app = app
        self._routes: dict[tuple[int, str, str], list[Route]] = {}
        for template, (methods, added_in) in routes.items():
            route = Route(template, methods, added_in)
            self._routes.setdefault(_key(route.parts), []).append(route)

    def match(self, path: str) -> Route | None:
        """The route of ``path`` (a trailing slash ignored), if any."""
        if not path.startswith('/'):
            return None
        if len(path) > 1 and path.endswith('/'):
            path = path[:-1]
        segments = path[1:].split('/')
        for route in self._routes.get(_key(segments), ()):
            if route.matches(segments):
                return route
        return None

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = self.match(environ.get('PATH_INFO') or '/')
        method = environ['REQUEST_METHOD']
        if route is None or (route.added_in and not _asked_version(
                environ).at_least(*route.added_in)):
            # Below its microversion, a path is as unknown as any other.
            error = errors.http_error(404, NOT_FOUND)
        elif _overrides_method(environ.get('QUERY_STRING', '')):
            error = errors.http_error(
                400, 'The _method query parameter is not supported: send '
                     'the request with the method it names.')
        elif method == 'OPTIONS':
            start_response('200 OK', [('Allow', route.allow),
                                      ('Content-Length', '0')])
            return []
        elif method not in route.methods:
            error = errors.http_error(
                405, f'{route.template} does not serve {method}: use '
                     f'{route.choice}.', {'Allow': route.allow})
        else:
            return self.app(environ, start_response)
        return error(environ, start_response)


class Head:
    """HEAD served as GET, without the body: the same status and headers,
    Content-Length included (RFC 9110, 9.3.2)."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get('REQUEST_METHOD') != 'HEAD':
            return self.app(environ, start_response)
        body = self.app(dict(environ, REQUEST_METHOD='GET'), start_response)
        close = getattr(body, 'close', None)
        if close is not None:
            close()
        return []
