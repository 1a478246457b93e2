"""Turns every error response into the JSON error body clients parse."""
import html
import json
import re
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from cyborg.api import errors

_TAGS = re.compile(r'<[^>]+>')


def _message_from(body: bytes, status: int) -> dict[str, Any] | None:
    """The fault in ``body``, or None if it already is an error body."""
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
        for key in ('message', 'detail', 'explanation'):
            if isinstance(document.get(key), str):
                return errors.fault(status, document[key])
    plain = html.unescape(_TAGS.sub(' ', text))
    plain = ' '.join(plain.split())
    return errors.fault(status, plain or 'Error')


class ParsableErrorMiddleware:
    """Rewrites 4xx/5xx bodies as ``{"error_message": ...}`` JSON."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        captured: dict[str, Any] = {}

        def _start(status: str, headers: list[tuple[str, str]],
                   exc_info: Any = None) -> Callable[[bytes], None]:
            captured['status'] = status
            captured['headers'] = headers
            captured['exc_info'] = exc_info
            return lambda data: None

        chunks = self.app(environ, _start)
        try:
            body = b''.join(chunks)
        finally:
            close = getattr(chunks, 'close', None)
            if close is not None:
                close()
        status_code = int(captured['status'].split(None, 1)[0])
        headers = captured['headers']
        if status_code >= 400 and environ.get('REQUEST_METHOD') != 'HEAD':
            fault = _message_from(body, status_code)
            if fault is not None:
                body = json.dumps(
                    {'error_message': json.dumps(fault)}).encode()
                headers = [(k, v) for k, v in headers
                           if k.lower() not in ('content-type',
                                                'content-length')]
                headers.append(('Content-Type',
                                'application/json; charset=UTF-8'))
                headers.append(('Content-Length', str(len(body))))
        start_response(captured['status'], headers, captured['exc_info'])
        return [body]
