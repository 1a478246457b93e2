"""JSON in and out: the Accept header, and the body before WSME reads it.

The API answers in JSON only: a client that accepts no JSON gets a 406,
and one that does is answered in JSON whatever else it accepts (WSME would
pick XML). It reads JSON bodies only, sent as ``application/json`` or with
no Content-Type (then taken as JSON); any other body is a 415 here, where
webob would parse it as a form, or fail on a multipart body without a
boundary, while pecan routes the request.

WSME parses the body, once, for the handler (``base.jsontype``). Before
that, a 400 saying what is wrong refuses a body that is not UTF-8, that
nests arrays and objects deeper than MAX_DEPTH (the parser recurses: a
2 KB body of brackets exhausts the stack), or that holds what no column
stores: a lone UTF-16 surrogate (``"\\ud800"``), a NUL character
(PostgreSQL's text refuses it), NaN or Infinity (not JSON). Each check is
a C-speed scan of the bytes that an ordinary body passes without being
parsed; only a body that may hold one of them is parsed here, to say where.
"""
import io
import itertools
import json
import re
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

import webob.acceptparse
import webob.exc

from cyborg.api import errors

WSGIApp = Callable[..., Iterable[bytes]]

JSON = 'application/json'

# How deep arrays and objects may nest. The deepest body the API takes is
# a device profile's, [{"groups": [{...}]}], 4 levels.
MAX_DEPTH = 32

# Accept headers that take JSON, as clients send them, without parsing.
_TAKES_JSON = frozenset(['', '*/*', JSON, f'{JSON}, */*'])

# The bytes the checks look at: brackets and braces, quotes, backslashes
# (escapes), and the first letters of NaN and Infinity. One pass keeps
# them (``bytes.translate``, C speed); what follows reads those few.
_NOT_MARKS = bytes(c for c in range(256) if chr(c) not in '[]{}"\\NI')
_STEP = {ord('['): 1, ord('{'): 1, ord(']'): -1, ord('}'): -1}
# A JSON string, or an unterminated one to the end of the body. No part of
# the body can match two ways, so a scan is linear whatever the body.
_STRING = re.compile(rb'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)
# The escape of a surrogate or of NUL.
_ESCAPE = re.compile(rb'\\u(?:0000|[dD][89a-fA-F])')
# Once parsed: NUL, or a surrogate that was not half of a pair.
_UNSTORABLE = re.compile('[\x00\ud800-\udfff]')


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


def _accepts_json(accept: str) -> bool:
    offers = webob.acceptparse.create_accept_header(accept)
    return bool(offers.acceptable_offers([JSON]))


def _marks(body: bytes) -> bytes:
    return body.translate(None, _NOT_MARKS)


def depth(body: bytes, marks: bytes | None = None) -> int:
    """How deep arrays and objects nest in the JSON ``body``."""
    if marks is None:
        marks = _marks(body)
    if b'\\' in marks and b'\\"' in body:
        # A string holds a quote: only a scan finds where strings end.
        marks = _marks(_STRING.sub(b'', body))
        outside = marks.translate(None, b'"\\NI')
    else:
        # Every quote opens or closes a string. Two quotes side by side
        # once all but the marks are gone hold no bracket between them,
        # in a string or not: away with them first, which leaves few
        # strings to split off.
        kept = marks.translate(None, b'\\NI').replace(b'""', b'')
        outside = b''.join(kept.split(b'"')[::2])
    steps = map(_STEP.__getitem__, outside)
    return max(itertools.accumulate(steps), default=0)


class _Refused(ValueError):
    """A body the API does not read, and why."""


def _no_constant(name: str) -> None:
    raise _Refused(f'The request body has {name}, which is not a JSON '
                   'number: send numbers as digits.')


def _pointer(where: str, key: str) -> str:
    # RFC 6901: "~" and "/" in a key are escaped.
    return f'{where}/{key.replace("~", "~0").replace("/", "~1")}'


def _unstorable(document: Any) -> tuple[str, str] | None:
    """The first character no column stores, in document order, and where
    it is: (character, JSON pointer or 'in a key of <pointer>')."""
    stack = [(document, '')]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            found = _UNSTORABLE.search(value)
            if found:
                return found.group(), f'at {where or "the top level"}'
        elif isinstance(value, dict):
            for key in value:
                found = _UNSTORABLE.search(key)
                if found:
                    return found.group(), (f'in a key of '
                                           f'{where or "the top level"}')
            stack.extend((value[key], _pointer(where, key))
                         for key in reversed(list(value)))
        elif isinstance(value, list):
            stack.extend((value[i], f'{where}/{i}')
                         for i in range(len(value) - 1, -1, -1))
    return None


def check(body: bytes) -> str | None:
    """Why the JSON ``body`` (valid UTF-8) is refused, or None when WSME
    may parse it."""
    marks = _marks(body)
    if (marks.count(b'[') + marks.count(b'{') > MAX_DEPTH
            and depth(body, marks) > MAX_DEPTH):
        return (f'The request body nests arrays and objects more than '
                f'{MAX_DEPTH} levels deep, the most the API reads.')
    suspect = (b'\\' in marks and _ESCAPE.search(body)) or (
        (b'N' in marks or b'I' in marks)
        and (b'NaN' in body or b'Infinity' in body))
    if not suspect:
        return None
    try:
        document = json.loads(body.decode('utf-8'),
                              parse_constant=_no_constant)
    except _Refused as exc:
        return str(exc)
    except ValueError as exc:
        return f'The request body is not valid JSON: {exc}.'
    found = _unstorable(document)
    if found is None:
        return None
    character, where = found
    if character == '\x00':
        return (f'The request body has a NUL character (\\u0000) {where}: '
                'the API stores no NUL characters.')
    return (f'The request body has a lone UTF-16 surrogate '
            f'(\\u{ord(character):04x}) {where}: send a character beyond '
            'U+FFFF as UTF-8, or escaped as a pair of surrogates.')


class JsonOnly:
    """406 for a client that takes no JSON; 415, or 400, for a body the
    API does not read."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        error = self._refusal(environ)
        if error is not None:
            return error(environ, start_response)
        return self.app(environ, start_response)

    def _refusal(self, environ: dict[str, Any]
                 ) -> webob.exc.HTTPException | None:
        accept = environ.get('HTTP_ACCEPT', '')
        if accept not in _TAKES_JSON:
            if not _accepts_json(accept):
                return errors.http_error(
                    406, 'The API answers in JSON only: send "Accept: '
                         'application/json", or no Accept header.')
            environ['HTTP_ACCEPT'] = JSON
        try:
            body = _read_body(environ)
        except webob.exc.HTTPException as exc:
            # The size limit's reader refusing a body that is too large.
            return exc
        if not body:
            return None
        media_type = environ.get('CONTENT_TYPE', '').split(';', 1)[0]
        media_type = media_type.strip().lower()
        if media_type not in ('', JSON):
            return errors.http_error(
                415, f'The API reads JSON bodies only: send the body as '
                     f'"Content-Type: application/json", not {media_type}.')
        # WSME reads the body as JSON only with this exact type (and JSON
        # is UTF-8 whatever a charset parameter says).
        environ['CONTENT_TYPE'] = JSON
        try:
            body.decode('utf-8')
        except UnicodeDecodeError:
            return errors.http_error(
                400, 'The request body is not valid UTF-8: send JSON '
                     'encoded as UTF-8.')
        problem = check(body)
        return None if problem is None else errors.http_error(400, problem)
