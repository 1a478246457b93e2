"""cyborg-aio: conductor and agent in one process, for a first try.

Everything stays on this machine: an SQLite database under the state
directory, oslo.messaging's in-process transport, and the fake driver.
"""
import argparse
import os
import signal
import sys
import threading
import time

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import context as cyborg_context
from cyborg.agent import service as agent_service
from cyborg.cmd import api as api_cmd
from cyborg.cmd import common
from cyborg.common import rpc
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import inventory
from cyborg.db.api import services


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='cyborg-aio',
        description='Run the cyborg conductor and agent in one process on '
                    'SQLite with fake devices.')
    parser.add_argument('--state-dir', default=os.path.join('.', 'state'),
                        help='where the SQLite database is kept '
                             '(default: ./state)')
    parser.add_argument('--devices', type=int, default=2,
                        help='how many fake devices to report (default: 2)')
    parser.add_argument('--host', default='aio-host',
                        help='the agent\'s host name (default: aio-host)')
    parser.add_argument('--port', type=int, default=6666,
                        help='port of the API on 127.0.0.1 (default: 6666; '
                             '0 picks a free one)')
    parser.add_argument('--once', action='store_true',
                        help='report once, print, and exit')
    return parser


def _configure(args: argparse.Namespace) -> str:
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    url = f'sqlite:///{state_dir}/cyborg.sqlite'
    common.parse_args([], default_config_files=[])
    CONF.set_override('state_path', state_dir)
    CONF.set_override('host', args.host)
    CONF.set_override('connection', url, 'database')
    CONF.set_override('device_count', args.devices, 'fake_driver')
    CONF.set_override('enabled_drivers', ['fake_driver'], 'agent')
    # Development settings: no Keystone, and no service token for binds.
    CONF.set_override('auth_strategy', 'noauth', 'api')
    CONF.set_override('require_service_token', False, 'api')
    # No Nova waits for bind events on a first run.
    CONF.set_override('send_events', False, 'nova')
    return url


def _wait_for_devices(host: str, timeout: float = 30) -> list[dict]:
    ctx = cyborg_context.get_admin_context()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        devices = inventory.get_host_devices(ctx, host)
        if devices or CONF.fake_driver.device_count == 0:
            return devices
        time.sleep(0.2)
    raise SystemExit('cyborg-aio: the agent reported nothing within '
                     f'{timeout:.0f}s; see the log above.')


def _print_inventory(devices: list[dict]) -> None:
    print(f'Discovered {len(devices)} device(s) on {CONF.host}:')
    for device in devices:
        cpid = device['controlpath_id']['cpid_info']
        address = inventory.control_path_address(cpid)
        print(f"  {device['type']:5} {device['vendor']} {device['model']} "
              f"at {address} (uuid {device['uuid']})")
        for dep in device['deployables']:
            print(f"    deployable {dep['name']}: "
                  f"{dep['num_accelerators']} accelerator(s), "
                  f"resource class {dep['attributes'].get('rc', '-')}, "
                  f"provider {dep['rp_uuid']}")
    ctx = cyborg_context.get_admin_context()
    for svc in services.get_all(ctx):
        state = 'up' if svc['alive'] else 'down'
        print(f"  service {svc['binary']} on {svc['host']}: {state}")


class _Closing:
    """Stops an HTTP server along with the services."""

    def __init__(self, server) -> None:
        self.server = server

    def stop(self) -> None:
        self.server.close()


def _print_tour(endpoint: str) -> None:
    print(f"""
API: {endpoint}  (no Keystone: the token "admin" is an administrator)

Try:
  curl -s -H 'X-Auth-Token: admin' {endpoint}/devices
  openstack --os-auth-type admin_token --os-endpoint {endpoint} \\
      --os-token admin accelerator device list
""", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    url = _configure(args)
    migration.upgrade('head', url=url)
    db_api.configure(CONF)
    rpc.init(CONF, url='fake://')
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    running = []
    try:
        for svc in (conductor_service.build(CONF),
                    agent_service.build(CONF)):
            svc.start()
            running.append(svc)
        server = api_cmd.create_server('127.0.0.1', args.port, 4)
        threading.Thread(target=server.run, name='api', daemon=True).start()
        running.append(_Closing(server))
        endpoint = f'http://127.0.0.1:{server.effective_port}/v2'
        print(f'cyborg-aio: database {url}, in-process RPC.')
        _print_inventory(_wait_for_devices(CONF.host))
        _print_tour(endpoint)
        if not args.once:
            print('Running; press Ctrl-C to stop.', flush=True)
            while not stop.wait(1):
                pass
    finally:
        for svc in reversed(running):
            svc.stop()
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
