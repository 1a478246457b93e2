"""A stand-in for Neutron that answers what Nova asks of servers without
ports (``--nic none``).

Real Neutron needs an ML2 mechanism and its agents (OVS or OVN) to bind
anything; Nova asks it nothing but lists for a server created with
``networks='none'``: its extensions, the instance's ports (on every
network-info refresh, action and delete) and the project's networks (on
a refresh). This server answers every
``GET /v2.0/<collection>`` with an empty list, version discovery with a
version document, and anything else with a 404 that it logs as
``UNANSWERED``, so that a test sees a question it does not know.

    python -m cyborg.tests.nova_stack.neutron PORT
"""
import http.server
import json
import sys
from typing import Any

UNANSWERED = 'UNANSWERED'


class Handler(http.server.BaseHTTPRequestHandler):
    """One request of Nova's."""

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _versions(self) -> dict[str, Any]:
        host = self.headers.get('Host', '127.0.0.1')
        return {'versions': [{'id': 'v2.0', 'status': 'CURRENT',
                              'links': [{'rel': 'self',
                                         'href': f'http://{host}/v2.0/'}]}]}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split('?', 1)[0].rstrip('/')
        if path == '':
            self._answer(200, self._versions())
        elif path == '/v2.0':
            self._answer(200, {'resources': []})
        elif path.startswith('/v2.0/') and path.count('/') == 2:
            collection = path.rsplit('/', 1)[1].replace('-', '_')
            self._answer(200, {collection: []})
        else:
            self._unanswered()

    def _unanswered(self) -> None:
        print(f'{UNANSWERED} {self.command} {self.path}', flush=True)
        self._answer(404, {'NeutronError': {
            'type': 'HTTPNotFound', 'detail': '',
            'message': f'The stand-in does not answer {self.command} '
                       f'{self.path}'}})

    do_POST = do_PUT = do_DELETE = _unanswered  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        print(format % args, flush=True)


def main() -> None:
    server = http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])),
                                             Handler)
    server.serve_forever()


if __name__ == '__main__':
    main()
