"""cyborg-api: serves the REST API on [api] host_ip:port."""
import socketserver
import sys
from wsgiref import simple_server

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.api import app
from cyborg.cmd import common
from cyborg.conf import CONF


class _ThreadingWSGIServer(socketserver.ThreadingMixIn,
                           simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        # Requests are logged by the request-id middleware's users; keep
        # stderr for errors.
        pass


def make_server(host: str, port: int) -> simple_server.WSGIServer:
    return simple_server.make_server(
        host, port, app.setup_app(CONF), server_class=_ThreadingWSGIServer,
        handler_class=_QuietHandler)


def main(argv: list[str] | None = None) -> int:
    common.parse_args(sys.argv[1:] if argv is None else argv)
    server = make_server(CONF.api.host_ip, CONF.api.port)
    print(f'cyborg-api serving on http://{CONF.api.host_ip}:'
          f'{server.server_port}', flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
