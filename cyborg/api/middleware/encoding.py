"""Refuses a request whose path or query string is not text the API reads.

The API decodes both as UTF-8 wherever it reads them; checking them once,
up front, gives the client a 400 that says which part is wrong, and lets
the application use webob's request as it is (pecan's request class
guards every attribute read against decoding errors instead, a cost paid
several hundred times per request). A NUL character (``%00``) is refused
too: no column stores it (PostgreSQL's text refuses it). The body is
``json_only.JsonOnly``'s.
"""
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from cyborg.api import errors

WSGIApp = Callable[..., Iterable[bytes]]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode('utf-8')
    except UnicodeDecodeError:
        return False
    return True


def _wsgi_bytes(text: str) -> bytes:
    # PEP 3333: the server hands bytes over as latin-1 text.
    return text.encode('latin-1', 'surrogateescape')


def _problem(part: str, data: bytes) -> str | None:
    if not _is_utf8(data):
        return (f'The {part} is not valid UTF-8 once its percent-escapes '
                'are decoded.')
    if b'\x00' in data:
        return (f'The {part} has a NUL character (%00): the API stores no '
                'NUL characters.')
    return None


class Utf8Check:
    """400 for a path or query string that is not UTF-8, or has a NUL."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        problem = _problem('request path',
                           _wsgi_bytes(environ.get('PATH_INFO', '')))
        query = environ.get('QUERY_STRING', '')
        if problem is None and query:
            problem = _problem('query string', urllib.parse.unquote_to_bytes(
                _wsgi_bytes(query)))
        if problem is None:
            return self.app(environ, start_response)
        return errors.http_error(400, problem)(environ, start_response)
