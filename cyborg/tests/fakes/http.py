"""A real HTTP server on 127.0.0.1 that fakes of remote services build on.

A fake routes requests by method and path prefix to handlers, records every
request (also those it was told to fail), and can be told to fail the next
requests with a status or by closing the connection, so that clients' retries
are exercised over real sockets.
"""
import collections
import dataclasses
import http.server
import json
import threading
import traceback
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

JSON_TYPE = 'application/json'


@dataclasses.dataclass
class Request:
    """A request as the fake received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    # Lower-case names, e.g. 'x-auth-token'.
    headers: dict[str, str]
    # The parsed body when it was sent as JSON, else the raw bytes (b''
    # when there was none).
    body: Any
    # The status the fake answered; None while it is being handled, and
    # when the fake closed the connection instead.
    status: int | None = None


@dataclasses.dataclass
class Response:
    """A handler's answer. ``body`` is bytes, or an iterable of byte chunks
    written as they come (a download); without a Content-Length header the
    end of such a body is the end of the connection."""

    status: int = 200
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes | Iterable[bytes] = b''


# A handler returns None to close the connection without answering.
Handler = Callable[[Request], Response | None]


def json_response(body: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> Response:
    return Response(status, {'Content-Type': JSON_TYPE, **(headers or {})},
                    json.dumps(body).encode())


def stream_response(chunks: Iterable[bytes], status: int = 200,
                    length: int | None = None,
                    content_type: str = 'application/octet-stream',
                    headers: dict[str, str] | None = None) -> Response:
    """Stream ``chunks``; ``length`` (when known) becomes Content-Length."""
    all_headers = {'Content-Type': content_type, **(headers or {})}
    if length is not None:
        all_headers['Content-Length'] = str(length)
    return Response(status, all_headers, chunks)


class FakeHTTPServer:
    """A ThreadingHTTPServer on an ephemeral port, served by a daemon
    thread between ``start()`` and ``stop()`` (or as a context manager)."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, str, Handler]] = []
        self._requests: list[Request] = []
        # One entry per request to spoil: a status, or None to hang up.
        self._faults: collections.deque[int | None] = collections.deque()
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        # Exceptions raised by handlers: bugs of the fake, which answered
        # 500 for them; fixtures fail the test when there are any.
        self.errors: list[str] = []

    # -- set-up ------------------------------------------------------------

    def route(self, method: str, prefix: str, handler: Handler) -> None:
        """Send ``method`` requests whose path starts with ``prefix`` to
        ``handler``; the longest matching prefix wins."""
        with self._lock:
            self._routes.append((method.upper(), prefix, handler))
            self._routes.sort(key=lambda route: len(route[1]), reverse=True)

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        """Answer the next ``count`` requests with ``status``."""
        with self._lock:
            self._faults.extend([status] * count)

    def drop_next(self, count: int = 1) -> None:
        """Close the connection of the next ``count`` requests unanswered."""
        with self._lock:
            self._faults.extend([None] * count)

    def fault_response(self, status: int) -> Response:
        """The answer to a request spoiled by ``fail_next``."""
        return json_response({'error': {'code': status,
                                        'message': 'Injected fault'}},
                             status)

    # -- life cycle --------------------------------------------------------

    def start(self, port: int = 0) -> None:
        """Serve on ``port``, an ephemeral one by default: a fake stopped
        and started again on its old port is a service back after an
        outage."""
        handler = type('Handler', (_RequestHandler,), {'fake': self})
        self._server = http.server.ThreadingHTTPServer(('127.0.0.1', port),
                                                       handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={'poll_interval': 0.05},
            name=f'{type(self).__name__}-{self.port}', daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> 'FakeHTTPServer':
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError('the fake is not started')
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        return f'http://127.0.0.1:{self.port}'

    # -- what was received -------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        """Every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, method: str, prefix: str) -> list[Request]:
        return [request for request in self.requests
                if request.method == method.upper()
                and request.path.startswith(prefix)]

    def clear(self) -> None:
        """Forget the requests received so far and the pending faults."""
        with self._lock:
            self._requests.clear()
            self._faults.clear()

    # -- serving -----------------------------------------------------------

    def _handle(self, request: Request) -> Response | None:
        with self._lock:
            self._requests.append(request)
            spoil = bool(self._faults)
            fault = self._faults.popleft() if spoil else None
            handler = next((h for method, prefix, h in self._routes
                            if method == request.method
                            and request.path.startswith(prefix)), None)
        if spoil:
            response = None if fault is None else self.fault_response(fault)
        elif handler is None:
            response = json_response(
                {'error': {'code': 404, 'message':
                           f'No route for {request.method} {request.path}'}},
                404)
        else:
            try:
                response = handler(request)
            except Exception:
                self.errors.append(traceback.format_exc())
                response = Response(500, {'Content-Type': 'text/plain'},
                                    b'The fake failed; see its errors')
        # Recorded before the answer leaves, so a client that has it in hand
        # always finds the status here.
        request.status = None if response is None else response.status
        return response


class _RequestHandler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so a streamed body without a
    # length ends with the connection and stop() leaves nothing behind.
    protocol_version = 'HTTP/1.0'
    fake: FakeHTTPServer

    def _serve(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        headers = {name.lower(): value for name, value in self.headers.items()}
        raw = self._read_body(headers)
        request = Request(self.command, split.path,
                          urllib.parse.parse_qs(split.query), headers,
                          _parse_body(headers, raw))
        response = self.fake._handle(request)
        if response is None:
            self.close_connection = True
            return
        self.send_response(response.status)
        names = {name.lower() for name in response.headers}
        chunks: Iterable[bytes]
        if isinstance(response.body, bytes):
            chunks = (response.body,)
            if 'content-length' not in names:
                self.send_header('Content-Length', str(len(response.body)))
        else:
            chunks = response.body
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command == 'HEAD':
            return
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _read_body(self, headers: dict[str, str]) -> bytes:
        if 'chunked' in headers.get('transfer-encoding', '').lower():
            # Clients that upload a stream (an image) send it chunked.
            parts = []
            while True:
                size = int(self.rfile.readline().split(b';')[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    return b''.join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(headers.get('content-length') or 0)
        return self.rfile.read(length) if length else b''

    def log_message(self, format: str, *args: Any) -> None:
        # The recorded requests say more, and stderr stays quiet.
        pass


def _parse_body(headers: dict[str, str], raw: bytes) -> Any:
    if raw and JSON_TYPE in headers.get('content-type', ''):
        try:
            return json.loads(raw)
        except ValueError:
            pass
    return raw
