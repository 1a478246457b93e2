"""Refuses a request whose path, query string or JSON body is not UTF-8.

The API decodes these as UTF-8 wherever it reads them; checking them once,
up front, gives the client a 400 that says which part is wrong, and lets
the application use webob's request as it is (pecan's request class
guards every attribute read against decoding errors instead, a cost paid
several hundred times per request).
"""
import io
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

import webob.exc

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


def _read_body(environ: dict[str, Any]) -> bytes | None:
    """The body (now also buffered for the application), or None when the
    request has none."""
    length = environ.get('CONTENT_LENGTH')
    stream = environ.get('wsgi.input')
    if stream is None:
        return None
    if length:
        try:
            size = int(length)
        except ValueError:
            return None
        if size <= 0:
            return None
        body = stream.read(size)
    elif environ.get('wsgi.input_terminated'):
        # No length (a chunked body): the server marks the stream as one
        # that ends, as webob requires before it reads one.
        body = stream.read()
        environ['CONTENT_LENGTH'] = str(len(body))
    else:
        return None
    environ['wsgi.input'] = io.BytesIO(body)
    return body


def _is_json(environ: dict[str, Any]) -> bool:
    content_type = environ.get('CONTENT_TYPE', '').lower()
    return not content_type or 'json' in content_type


class Utf8Check:
    """400 for a path, query string or JSON body that is not UTF-8."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        problem = None
        if not _is_utf8(_wsgi_bytes(environ.get('PATH_INFO', ''))):
            problem = ('The request path is not valid UTF-8 once its '
                       'percent-escapes are decoded.')
        elif not _is_utf8(urllib.parse.unquote_to_bytes(
                _wsgi_bytes(environ.get('QUERY_STRING', '')))):
            problem = ('The query string is not valid UTF-8 once its '
                       'percent-escapes are decoded.')
        elif _is_json(environ):
            try:
                body = _read_body(environ)
            except webob.exc.HTTPException as exc:
                # The size limit's reader refusing a body that is too large.
                return exc(environ, start_response)
            if body is not None and not _is_utf8(body):
                problem = ('The request body is not valid UTF-8: send JSON '
                           'encoded as UTF-8.')
        if problem is None:
            return self.app(environ, start_response)
        return errors.http_error(400, problem)(environ, start_response)
