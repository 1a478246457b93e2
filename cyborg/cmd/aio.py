"""cyborg-aio: API, conductor and agent in one process, for a first try.

Everything stays on this machine: an SQLite database under the state
directory, oslo.messaging's in-process transport, the fake driver and,
when openstack-placement is installed, a real placement service that the
conductor publishes the fake devices to (``aio_placement``). The services
are those cyborg-conductor, cyborg-agent and cyborg-api launch, started and
stopped here directly: in-process RPC cannot cross a launcher's fork.
"""
import argparse
import os
import signal
import socket
import sys
import threading
import time

from keystoneauth1 import exceptions as ks_exc
from oslo_service import service

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import context as cyborg_context
from cyborg.agent import service as agent_service
from cyborg.cmd import aio_placement
from cyborg.cmd import api as api_cmd
from cyborg.cmd import common
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.db.api import services


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='cyborg-aio',
        description='Run the cyborg API, conductor and agent in one '
                    'process on SQLite with fake devices, and placement '
                    'beside them when openstack-placement is installed.')
    parser.add_argument('--state-dir', default=os.path.join('.', 'state'),
                        help='where the SQLite databases (cyborg\'s and '
                             'placement\'s) are kept (default: ./state)')
    parser.add_argument('--devices', type=int, default=2,
                        help='how many fake devices to report (default: 2)')
    parser.add_argument('--host', default='aio-host',
                        help='the agent\'s host name (default: aio-host)')
    parser.add_argument('--port', type=int, default=6666,
                        help='port of the API on 127.0.0.1 (default: 6666; '
                             '0 picks a free one)')
    parser.add_argument('--placement-port', type=int, default=8778,
                        help='port of placement on 127.0.0.1 (default: '
                             '8778; 0 picks a free one)')
    parser.add_argument('--no-placement', action='store_true',
                        help='run without placement even if '
                             'openstack-placement is installed')
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


def _start_placement(args: argparse.Namespace
                     ) -> aio_placement.EmbeddedPlacement | None:
    """Start placement and point the conductor at it, unless told not to
    or it is not installed."""
    if args.no_placement:
        return None
    if not aio_placement.installed():
        print('cyborg-aio: openstack-placement is not installed (pip '
              "install -e '.[aio]'); running without placement.",
              flush=True)
        return None
    placement = aio_placement.EmbeddedPlacement(CONF.state_path,
                                                args.placement_port)
    try:
        url = placement.start()
    except OSError as exc:
        raise SystemExit(
            'cyborg-aio: cannot serve placement on 127.0.0.1:'
            f'{args.placement_port} ({exc}); pass --placement-port 0 for '
            'a free port, or --no-placement.') from None
    aio_placement.configure(CONF, url)
    return placement


def _compute_node(placement: aio_placement.EmbeddedPlacement,
                  hostname: str) -> str:
    """The compute node provider of the agent's host, as Nova would make
    it; the agent's devices go under it."""
    try:
        placement.wait()
        return aio_placement.ensure_compute_node(CONF, hostname)
    except (aio_placement.PlacementNotStarted, exception.PlacementError,
            ks_exc.ClientException) as exc:
        raise SystemExit(f'cyborg-aio: {exc}') from None


def _wait_for_providers(url: str, root: str, hostname: str,
                        timeout: float = 30) -> int:
    """How many accelerator providers placement holds under ``root``,
    once the conductor has written all of ``hostname``'s, or after
    ``timeout`` seconds."""
    ctx = cyborg_context.get_admin_context()
    deadline = time.monotonic() + timeout
    while (hostname in providers.pending_hostnames(ctx)
           and time.monotonic() < deadline):
        time.sleep(0.2)
    return len(aio_placement.tree(url, root))


def _print_tour(endpoint: str, placement_url: str | None,
                root: str | None) -> None:
    if placement_url:
        placement_line = (f'Placement: {placement_url}  (the token "admin" '
                          'is an administrator)')
        tree_line = (
            "  curl -s -H 'X-Auth-Token: admin' -H 'OpenStack-API-Version: "
            f"placement {aio_placement.MICROVERSION}' \\\n"
            f"      '{placement_url}/resource_providers?in_tree={root}'\n")
    else:
        placement_line = 'Placement: not running'
        tree_line = ''
    print(f"""
API: {endpoint}  (no Keystone: the token "admin" is an administrator)
{placement_line}

Try:
  curl -s -H 'X-Auth-Token: admin' {endpoint}/devices
  openstack --os-auth-type admin_token --os-endpoint {endpoint} \\
      --os-token admin accelerator device list
{tree_line}""", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    url = _configure(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    # Started first: it prepares its database while cyborg does its own.
    placement = _start_placement(args)
    running: list[service.ServiceBase] = []
    try:
        migration.upgrade('head', url=url)
        db_api.configure(CONF)
        rpc.init(CONF, url='fake://')
        hostname = CONF.agent.hostname or CONF.host
        root = _compute_node(placement, hostname) if placement else None
        for svc in (conductor_service.build(CONF),
                    agent_service.build(CONF)):
            svc.start()
            running.append(svc)
        sock = socket.create_server(('127.0.0.1', args.port))
        api = api_cmd.APIService(sock, threads=4)
        api.start()
        threading.Thread(target=api.wait, name='api', daemon=True).start()
        running.append(api)
        endpoint = f'http://127.0.0.1:{sock.getsockname()[1]}/v2'
        print(f'cyborg-aio: database {url}, in-process RPC.')
        devices = _wait_for_devices(CONF.host)
        _print_inventory(devices)
        if placement and root:
            wanted = sum(len(d['deployables']) for d in devices)
            found = _wait_for_providers(placement.url, root, hostname)
            print(f'  placement: compute node {hostname} ({root}) with '
                  f'{found} of {wanted} accelerator provider(s)')
        _print_tour(endpoint, placement.url if placement else None, root)
        if not args.once:
            print('Running; press Ctrl-C to stop.', flush=True)
            while not stop.wait(1):
                pass
    finally:
        for svc in reversed(running):
            svc.stop()
        rpc.cleanup()
        if placement:
            placement.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
