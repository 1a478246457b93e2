"""cyborg-api's own HTTP server against clients that hold connections."""
import socket

from cyborg.db import migration
from cyborg.tests.functional.test_processes import _get
from cyborg.tests.functional.test_processes import _start
from cyborg.tests.functional.test_processes import _stop
from cyborg.tests.functional.test_processes import _write_conf
from cyborg.tests.harness import gate_stack
from cyborg.tests.utils import wait_for

CONNECTION_LIMIT = 10


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b''
    except TimeoutError:
        return False
    except OSError:
        return True


def test_half_sent_requests_do_not_hold_the_server(tmp_path):
    """More connections than [api] connection_limit, each with a request
    whose headers never end: they are closed after [api]
    client_socket_timeout, and a client that sends a whole request is
    answered."""
    url = f'sqlite:///{tmp_path}/cyborg.sqlite'
    migration.upgrade('head', url=url)
    port = gate_stack.free_port()
    conf_file = _write_conf(
        tmp_path / 'cyborg.conf', DEFAULT={'transport_url': 'fake://'},
        database={'connection': url},
        api={'auth_strategy': 'noauth', 'port': port,
             'connection_limit': CONNECTION_LIMIT,
             'client_socket_timeout': 1})
    proc = _start('cyborg.cmd.api', conf_file, tmp_path / 'api.log')
    base = f'http://127.0.0.1:{port}/v2'
    idle = []
    try:
        wait_for(lambda: _get(base) == 200, 'the API to answer')
        for _ in range(CONNECTION_LIMIT + 5):
            sock = socket.create_connection(('127.0.0.1', port))
            sock.sendall(b'GET /v2 HTTP/1.1\r\nHost: cyborg\r\n')
            sock.settimeout(0.1)
            idle.append(sock)
        wait_for(lambda: _get(f'{base}/device_profiles', 'admin') == 200,
                 'a whole request to be answered', timeout=20)
        wait_for(lambda: all(_closed_by_server(s) for s in idle),
                 'the half-sent requests to be closed', timeout=20)
    finally:
        for sock in idle:
            sock.close()
        code = _stop(proc)
    log = (tmp_path / 'api.log').read_text()
    assert code == 0, log
    assert 'reached the connection limit' in log, log
