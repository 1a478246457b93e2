"""The API served by cyborg-api's own HTTP server, for real clients.

``live_api`` builds on the ``api`` fixture of the API tests (noauth, a real
SQLite database, an in-process conductor on the ``fake://`` transport) and
serves the application that ``cyborg.cmd.api.create_server`` builds on an
ephemeral port of 127.0.0.1.
"""
import dataclasses
import threading
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any

import pytest
from waitress import wasyncore

from cyborg.cmd import api as api_cmd
from cyborg.tests.functional.api import fixtures
from cyborg.tests.functional.api.fixtures import api  # noqa: F401

WSGIApp = Callable[..., Iterable[bytes]]

# The one service token that ClientSide accepts.
SERVICE_TOKEN = 'nova-service-token'


@dataclasses.dataclass
class Seen:
    """A request as it reached the server, and the status it got."""

    method: str
    path: str
    query: str
    # Lower-case names, e.g. 'x-auth-token', 'openstack-api-version'.
    headers: dict[str, str]
    status: int | None = None


@dataclasses.dataclass
class LiveAPI(fixtures.API):
    """A running API (``seed`` and ``dp`` as in the API tests), the
    endpoint a client is given (``http://127.0.0.1:<port>/v2``) and the
    requests the server has seen, oldest first."""

    url: str
    seen: list[Seen]


class ClientSide:
    """Records each request, and stands for keystonemiddleware's
    validation of ``X-Service-Token``.

    Under noauth the API trusts ``X-Service-Roles`` as sent, but clients
    such as Nova send a service token and never that header; SERVICE_TOKEN
    counts as a valid service token with the ``service`` role.
    """

    def __init__(self, app: WSGIApp, seen: list[Seen]) -> None:
        self.app = app
        self.seen = seen

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        seen = Seen(environ['REQUEST_METHOD'], environ.get('PATH_INFO', ''),
                    environ.get('QUERY_STRING', ''),
                    {k[5:].replace('_', '-').lower(): v
                     for k, v in environ.items() if k.startswith('HTTP_')})
        self.seen.append(seen)
        if seen.headers.get('x-service-token') == SERVICE_TOKEN:
            environ['HTTP_X_SERVICE_ROLES'] = 'service'

        def recording_start_response(status: str, *args: Any) -> Any:
            seen.status = int(status.split()[0])
            return start_response(status, *args)

        return self.app(environ, recording_start_response)


def _serve(server: Any, stopping: threading.Event) -> None:
    """waitress's loop, in steps, until ``stopping`` is set.

    ``server.run()`` returns only once its trigger pipe is pulled, which
    makes teardown depend on one file descriptor staying healthy; stepping
    the loop lets teardown stop it with a flag instead.
    """
    while not stopping.is_set():
        wasyncore.loop(timeout=0.05, map=server._map, use_poll=True,
                       count=1)


@pytest.fixture
def live_api(api) -> Iterator[LiveAPI]:  # noqa: F811
    """The API over HTTP on 127.0.0.1, with 4 worker threads.

    Teardown stops the loop, then closes the client connections and the
    server; the ``api`` fixture then stops the conductor and resets rpc
    and policy.
    """
    server = api_cmd.create_server('127.0.0.1', 0, 4)
    seen: list[Seen] = []
    server.application = ClientSide(server.application, seen)
    stopping = threading.Event()
    thread = threading.Thread(target=_serve, args=(server, stopping),
                              name='cyborg-api', daemon=True)
    thread.start()
    try:
        yield LiveAPI(**{f.name: getattr(api, f.name)
                         for f in dataclasses.fields(api)},
                      url=f'http://127.0.0.1:{server.effective_port}/v2',
                      seen=seen)
    finally:
        stopping.set()
        thread.join(10)
        assert not thread.is_alive(), 'the API server did not stop'
        for channel in list(server.active_channels.values()):
            channel.handle_close()
        server.close()
        server.task_dispatcher.shutdown()
