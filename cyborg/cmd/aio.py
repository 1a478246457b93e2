"""cyborg-aio: API, conductor and agent in one process, for a first try.

Everything stays on this machine: an SQLite database under the state
directory, oslo.messaging's in-process transport, the fake driver and,
with the ``aio`` extra, a real placement service that the conductor
publishes the fake devices to (``aio_placement``) and a real Glance holding
a demo bitstream for them (``aio_glance``). Configuration files
(``--config-file``, ``--config-dir``) are read over these settings. The
services are those cyborg-conductor, cyborg-agent and cyborg-api launch,
started and stopped here directly: in-process RPC cannot cross a
launcher's fork.
"""
import argparse
import os
import pathlib
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

import requests
from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg
from oslo_service import service
from sqlalchemy.engine import url as sa_url

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import context as cyborg_context
from cyborg.agent import service as agent_service
from cyborg.cmd import aio_child
from cyborg.cmd import aio_glance
from cyborg.cmd import aio_placement
from cyborg.cmd import aio_tour
from cyborg.cmd import api as api_cmd
from cyborg.cmd import common
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF
from cyborg.conf import opts
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import deployables
from cyborg.db.api import drivers
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.db.api import services


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='cyborg-aio',
        description='Run the cyborg API, conductor and agent in one '
                    'process on SQLite with fake devices, and placement '
                    'and Glance beside them when installed.',
        epilog='Configuration files are read over cyborg-aio\'s own '
               'settings, which they can change: [database] connection, '
               '[agent] enabled_drivers, [api] auth_strategy, [nova] '
               'send_events and the others of cyborg.conf. Kept whatever '
               'the files say: the in-process RPC transport, [DEFAULT] '
               'state_path (--state-dir), and [placement] and [glance] '
               'while the embedded ones run. A flag given here wins over '
               'the files.')
    parser.add_argument('--config-file', action='append', default=[],
                        metavar='PATH',
                        help='a cyborg configuration file, read over '
                             'cyborg-aio\'s settings (repeatable; later '
                             'files win)')
    parser.add_argument('--config-dir', action='append', default=[],
                        metavar='DIR',
                        help='a directory of *.conf files, read after '
                             'the --config-file files (repeatable)')
    parser.add_argument('--state-dir', default=os.path.join('.', 'state'),
                        help='where the SQLite databases (cyborg\'s, '
                             'placement\'s and Glance\'s) and Glance\'s '
                             'images are kept (default: ./state)')
    parser.add_argument('--devices', type=int, default=None,
                        help='how many fake devices to report (default: '
                             '[fake_driver] device_count of the files, '
                             'else 2)')
    parser.add_argument('--host', default=None,
                        help='the agent\'s host name (default: [DEFAULT] '
                             'host of the files, else aio-host)')
    parser.add_argument('--port', type=int, default=6666,
                        help='port of the API on 127.0.0.1 (default: 6666; '
                             '0 picks a free one)')
    for option, name, port, package in (
            ('placement', 'placement', 8778, 'openstack-placement'),
            ('glance', 'Glance', 9292, 'glance')):
        parser.add_argument(f'--{option}-port', type=int, default=port,
                            help=f'port of {name} on 127.0.0.1 (default: '
                                 f'{port}; 0 picks a free one)')
        parser.add_argument(f'--no-{option}', action='store_true',
                            help=f'run without {name} even if {package} is '
                                 'installed')
    parser.add_argument('--once', action='store_true',
                        help='report once, print, and exit')
    return parser


# cyborg-aio's settings where the configuration files say nothing: the
# fake driver, no Keystone, no service token for binds, and no Nova to
# wait for bind events on a first run. (The database is SQLite under
# [DEFAULT] state_path by cyborg's own default.)
_DEFAULTS: tuple[tuple[str, str, object], ...] = (
    ('DEFAULT', 'host', 'aio-host'),
    ('fake_driver', 'device_count', 2),
    ('agent', 'enabled_drivers', ['fake_driver']),
    ('api', 'auth_strategy', 'noauth'),
    ('api', 'require_service_token', False),
    ('nova', 'send_events', False),
)


def _configure(args: argparse.Namespace) -> None:
    """Parse the configuration files over cyborg-aio's settings; a bad
    file or value is a one-line SystemExit."""
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    argv = [arg for path in args.config_file
            for arg in ('--config-file', path)]
    argv += [arg for path in args.config_dir
             for arg in ('--config-dir', path)]
    try:
        common.parse_args(argv, 'cyborg-aio', default_config_files=[])
        for group, name, value in _DEFAULTS:
            CONF.set_default(name, value,
                             None if group == 'DEFAULT' else group)
        # Forced: the state directory holds placement's and Glance's
        # data too, and the flags of the command line win.
        CONF.set_override('state_path', state_dir)
        if args.host is not None:
            CONF.set_override('host', args.host)
        if args.devices is not None:
            CONF.set_override('device_count', args.devices, 'fake_driver')
        _read_all(CONF)
    except cfg.Error as exc:
        raise SystemExit(f'cyborg-aio: {exc}') from None


def _read_all(conf: cfg.ConfigOpts) -> None:
    """Read every cyborg option once: a value of the files that does not
    parse fails here, before anything starts, rather than in a service."""
    for group, options in opts.list_opts():
        name = group if isinstance(group, str) else group.name
        section = conf if name == 'DEFAULT' else conf[name]
        for option in options:
            try:
                getattr(section, option.dest)
            except cfg.NoSuchOptError:
                # An auth plugin's option the sample lists; not in use.
                pass


def _database() -> str:
    """The database URL as it may be printed: no password."""
    return sa_url.make_url(CONF.database.connection).render_as_string(
        hide_password=True)


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
    for row in drivers.get_all(ctx, host=CONF.host):
        print(f"  driver {row['driver_name']}: {row['state'] or '-'}"
              + (f" ({row['error']})" if row['error'] else ''))
    for svc in services.get_all(ctx):
        state = 'up' if svc['alive'] else 'down'
        print(f"  service {svc['binary']} on {svc['host']}: {state}")


def _start(child: aio_child.ChildService, flag: str) -> str:
    """Start a child service; its URL, or a one-line SystemExit when its
    port is taken."""
    try:
        return child.start()
    except OSError as exc:
        raise SystemExit(
            f'cyborg-aio: cannot serve {child.name} on 127.0.0.1:'
            f'{child.port} ({exc}); pass --{flag}-port 0 for a free port, '
            f'or --no-{flag}.') from None


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
    placement = aio_placement.EmbeddedPlacement(
        pathlib.Path(CONF.state_path) / 'placement', args.placement_port)
    aio_child.point(CONF, 'placement', _start(placement, 'placement'))
    return placement


def _start_glance(args: argparse.Namespace
                  ) -> aio_glance.EmbeddedGlance | None:
    """Start Glance and point the agent at it, unless told not to or it
    is not installed."""
    if args.no_glance:
        return None
    if not aio_glance.installed():
        print("cyborg-aio: glance is not installed (pip install -e "
              "'.[aio]'); running without Glance: FPGAs cannot be "
              'programmed.', flush=True)
        return None
    glance = aio_glance.EmbeddedGlance(
        pathlib.Path(CONF.state_path) / 'glance', args.glance_port)
    aio_child.point(CONF, 'glance', _start(glance, 'glance'))
    return glance


def _ready(child: aio_child.ChildService, then: Callable[[], str]) -> str:
    """``then()`` once ``child`` answers; a SystemExit that says why if it
    does not start (with the end of its log) or the call fails."""
    try:
        child.wait()
        return then()
    except (aio_child.NotStarted, exception.PlacementError,
            ks_exc.ClientException, requests.RequestException) as exc:
        raise SystemExit(f'cyborg-aio: {child.name}: {exc}') from None


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


def _last_fpga(devices: list[dict]) -> dict | None:
    """The deployable of the last fake FPGA (the README's tour uses the
    first), once published to placement."""
    ctx = cyborg_context.get_admin_context()
    for device in reversed(devices):
        if device['type'] == 'FPGA' and device['deployables']:
            name = device['deployables'][0]['name']
            found, _ = deployables.get_all(ctx, name=name, size=1)
            return found[0] if found else None
    return None


def _kept(args: argparse.Namespace,
          placement: aio_placement.EmbeddedPlacement | None,
          glance: aio_glance.EmbeddedGlance | None) -> str:
    """What a stopped cyborg-aio leaves behind for the next run."""
    state = args.state_dir
    default = f'sqlite:///{os.path.join(CONF.state_path, "cyborg.sqlite")}'
    if CONF.database.connection == default:
        kept = [f'the database {os.path.join(state, "cyborg.sqlite")}']
    else:
        kept = [f'the database {_database()} (not under {state}: drop it '
                'too to start over)']
    if placement:
        kept.append("placement's "
                    + os.path.join(state, 'placement', 'placement.sqlite'))
    if glance:
        kept.append("Glance's images and database under "
                    + os.path.join(state, 'glance', ''))
    listed = ', '.join(kept[:-1]) + ' and ' + kept[-1] if len(kept) > 1 \
        else kept[0]
    return (f'cyborg-aio stopped; kept {listed} - run it again to continue '
            f'where it left off, or delete {state} to start over.')


def _start_services() -> list[service.ServiceBase]:
    """The conductor and agent, started; a one-line SystemExit when the
    database or a driver named in the files is wrong."""
    running: list[service.ServiceBase] = []
    try:
        migration.upgrade('head')
        # One process's spans, all of them as cyborg-aio's.
        common.setup_tracing(CONF)
        db_api.configure(CONF)
        for svc in (conductor_service.build(CONF),
                    agent_service.build(CONF)):
            svc.start()
            running.append(svc)
    except exception.CyborgException as exc:
        for svc in reversed(running):
            svc.stop()
        raise SystemExit(f'cyborg-aio: {exc}') from None
    return running


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    _configure(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    # Started first: they prepare their databases while cyborg does its
    # own.
    placement = _start_placement(args)
    glance = None
    running: list[service.ServiceBase] = []
    try:
        glance = _start_glance(args)
        rpc.init(CONF, url='fake://')
        hostname = CONF.agent.hostname or CONF.host
        root = (_ready(placement, lambda: aio_placement.ensure_compute_node(
            CONF, hostname)) if placement else None)
        running = _start_services()
        sock = socket.create_server(('127.0.0.1', args.port))
        api = api_cmd.APIService(sock, threads=4)
        api.start()
        threading.Thread(target=api.wait, name='api', daemon=True).start()
        running.append(api)
        endpoint = f'http://127.0.0.1:{sock.getsockname()[1]}/v2'
        print(f'cyborg-aio: database {_database()}, in-process RPC.')
        image = (_ready(glance, lambda: aio_glance.ensure_demo_image(
            glance.url)) if glance else None)
        devices = _wait_for_devices(CONF.host)
        _print_inventory(devices)
        if placement and root:
            wanted = sum(len(d['deployables']) for d in devices)
            found = _wait_for_providers(placement.url, root, hostname)
            print(f'  placement: compute node {hostname} ({root}) with '
                  f'{found} of {wanted} accelerator provider(s)')
        fpga = _last_fpga(devices)
        print('\n' + aio_tour.text(aio_tour.Running(
            api=endpoint, auth=CONF.api.auth_strategy, hostname=hostname,
            deployable=fpga['uuid'] if fpga else None,
            deployable_name=fpga['name'] if fpga else None,
            rp_uuid=fpga['rp_uuid'] if fpga else None,
            placement=placement.url if placement else None, root=root,
            glance=glance.url if glance else None, image=image)),
            flush=True)
        if not args.once:
            print('Running; press Ctrl-C to stop.', flush=True)
            while not stop.wait(1):
                pass
    finally:
        children = [c for c in (glance, placement) if c]
        # They stop while cyborg's services do.
        for child in children:
            child.terminate()
        for svc in reversed(running):
            svc.stop()
        rpc.cleanup()
        for child in children:
            child.stop()
    print(_kept(args, placement, glance), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
