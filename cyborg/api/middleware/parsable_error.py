"""Turns every error response into the JSON error body clients parse.

Whoever answered with an error (a handler, pecan, webob, keystonemiddleware
or the body size limit) and in whatever form (JSON of another shape, text,
HTML), the client gets ``{"error_message": ...}`` with one sentence, the
status line that webob repeats in its bodies left out. An exception that
escapes the application is a bug: it is logged with its traceback, and
the client gets a JSON 500 naming the request id, never the server's own
plain-text page.
"""
import html
import json
import logging
import re
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from oslo_config import cfg

from cyborg.api import errors

LOG = logging.getLogger(__name__)

_TAGS = re.compile(r'<[^>]+>')


def _sentence(text: str, status: str) -> str:
    """``text`` on one line, without webob's echoes of the status line
    (``405 Method Not Allowed``), or the status's reason if nothing is
    left."""
    words = ' '.join(text.replace(status, ' ').split())
    return words or status.partition(' ')[2] + '.'


def _fault(body: bytes, status: str) -> dict[str, Any] | None:
    """The fault that ``body`` says, or None if it is an error body."""
    code = int(status.split(None, 1)[0])
    text = body.decode('utf-8', 'replace').strip()
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict):
        if 'error_message' in document:
            return None
        if 'faultstring' in document:
            return document
        # keystonemiddleware's {"error": {"code", "title", "message"}}.
        if isinstance(document.get('error'), dict):
            document = document['error']
        # pecan's is {"code", "title", "description"}.
        for key in ('message', 'description', 'detail', 'explanation',
                    'title'):
            if isinstance(document.get(key), str):
                return errors.fault(code, _sentence(document[key], status))
    plain = html.unescape(_TAGS.sub(' ', text))
    return errors.fault(code, _sentence(plain, status))


class ParsableErrorMiddleware:
    """Rewrites 4xx/5xx bodies as ``{"error_message": ...}`` JSON."""

    def __init__(self, app: Callable[..., Iterable[bytes]],
                 conf: cfg.ConfigOpts) -> None:
        self.app = app
        self.conf = conf

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        captured: dict[str, Any] = {}

        def _start(status: str, headers: list[tuple[str, str]],
                   exc_info: Any = None) -> Callable[[bytes], None]:
            captured.update(status=status, headers=headers,
                            exc_info=exc_info)
            return lambda data: None

        try:
            chunks = self.app(environ, _start)
            try:
                body = b''.join(chunks)
            finally:
                close = getattr(chunks, 'close', None)
                if close is not None:
                    close()
        except Exception:
            request_id = environ.get('openstack.request_id', '-')
            LOG.exception('Request %s failed', request_id)
            return self._error(start_response, '500 Internal Server Error',
                               [], errors.fault(500, errors.unexpected(
                                   request_id)))
        status, headers = captured['status'], captured['headers']
        if int(status.split(None, 1)[0]) >= 400:
            fault = _fault(body, status)
            if fault is not None:
                if status.startswith('413'):
                    fault['faultstring'] = self._too_large()
                return self._error(start_response, status, headers, fault)
        start_response(status, headers, captured['exc_info'])
        return [body]

    def _too_large(self) -> str:
        # The body size limit's own text names no size.
        limit = self.conf.oslo_middleware.max_request_body_size
        return (f'The request body is too large: send at most {limit} '
                'bytes.')

    @staticmethod
    def _error(start_response: Callable[..., Any], status: str,
               headers: list[tuple[str, str]],
               fault: dict[str, Any]) -> Iterable[bytes]:
        body = errors.fault_body(fault)
        headers = [(k, v) for k, v in headers
                   if k.lower() not in ('content-type', 'content-length')]
        headers += [('Content-Type', 'application/json'),
                    ('Content-Length', str(len(body)))]
        start_response(status, headers)
        return [body]
