"""cyborg-api: serves the REST API on [api] host_ip:port."""
import sys

import waitress

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.api import app
from cyborg.cmd import common
from cyborg.common import rpc
from cyborg.conf import CONF
from cyborg.db import api as db_api


def create_server(host: str, port: int,
                  threads: int) -> waitress.server.BaseWSGIServer:
    """A multi-threaded HTTP server for the API, bound but not started."""
    return waitress.create_server(
        app.setup_app(CONF), host=host, port=port, threads=threads,
        ident='cyborg-api', clear_untrusted_proxy_headers=True)


def main(argv: list[str] | None = None) -> int:
    common.parse_args(sys.argv[1:] if argv is None else argv)
    db_api.configure(CONF)
    rpc.init(CONF)
    server = create_server(CONF.api.host_ip, CONF.api.port,
                           CONF.api.threads)
    print(f'cyborg-api serving on http://{CONF.api.host_ip}:'
          f'{server.effective_port}', flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
