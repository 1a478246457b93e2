"""Benchmark of the dashboard's pages against a large deployment.

Starts the dashboard's deployment (``cyborg.tests.harness.dashboard_cloud``:
Keystone, placement, cyborg-api behind Keystone, a conductor, an agent
with the fake driver and Horizon with the plugin), writes ``--devices``
fake devices (spread over hosts of ``--per-host``) and ``--requests``
accelerator requests of the member's project into cyborg's database
through cyborg's own DB API, signs in to Horizon as the administrator
and as the member, and times each page ``-r`` times after one unmeasured
load: the five panels, the device list filtered by health, its second
page, a device's and a host's page, and the requests' second page. It
prints per page the median and 90th percentile of the time to the last
byte of the HTML, the page's size and the cyborg-api requests it made:

    python tools/bench/dashboard.py --devices 1000 --requests 10000 -r 10
    python tools/bench/dashboard.py --devices 0 --requests 0    # small

With ``--devices 0 --requests 0`` nothing is written: the agent's two
cards and the harness's request. ``--cyborg-db mysql`` puts cyborg's
database on the MariaDB of CYBORG_TEST_MYSQL_URL instead of SQLite.
``--json PATH`` also writes the seeding times and every page's figures.
"""
import argparse
import dataclasses
import html
import json
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

import requests
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import arqs as arqs_api
from cyborg.db.api import devices as devices_api
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.tests.harness import dashboard_cloud

# Accelerators (attach handles) per fake card: bound requests take them.
ACCELERATORS_PER_DEVICE = 4
# One device in this many is set unhealthy by an operator.
UNHEALTHY_EVERY = 50
# One request in this many is bound to a handle.
BOUND_EVERY = 10
# Requests written per transaction.
_CHUNK = 1000
TIMEOUT = 120


def _conf() -> Any:
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('accelerators_per_device', ACCELERATORS_PER_DEVICE,
                      'fake_driver')
    return conf


def seed_devices(ctx: Any, devices: int, per_host: int) -> list[str]:
    """``devices`` fake cards, ``per_host`` a host, as their agents would
    report them; one in UNHEALTHY_EVERY set unhealthy by an operator. Their
    deployables get a resource provider from the report (``rp_uuid``,
    which is what the capacity counts); the digest placement sync records
    once it has written a provider (``rp_synced``) is recorded here as
    the sync would, so that the conductor does not try to write these
    providers to placement, which knows none of these hosts. Returns the
    hostnames."""
    conf = _conf()
    hostnames = []
    for first in range(0, devices, per_host):
        hostname = f'bench-{first // per_host:03d}'
        conf.set_override('host', hostname)
        conf.set_override('hostname', hostname, 'agent')
        conf.set_override('device_count', min(per_host, devices - first),
                          'fake_driver')
        found = fake.FakeDriver(conf).discover()
        inventory.apply_report(ctx, hostname, {
            'hostname': hostname,
            'devices': [device.to_dict() for device in found]})
        hostnames.append(hostname)
    with db_api.main_context_manager.reader.using(ctx) as session:
        uuids = list(session.scalars(
            sa.select(models.Device.uuid)
            .where(models.Device.hostname.in_(hostnames))
            .order_by(models.Device.id)))
    for uuid_ in uuids[::UNHEALTHY_EVERY]:
        devices_api.set_health(ctx, uuid_, 'unhealthy',
                               'bench: set unhealthy')
    for hostname in hostnames:
        providers.record(ctx, [(p.deployable_id, p.digest(), 1)
                               for p in providers.host_providers(
                                   ctx, hostname)])
    return hostnames


def seed_requests(ctx: Any, count: int, project_id: str) -> int:
    """``count`` requests of the profile of the harness in the project,
    through the create the API uses; one in BOUND_EVERY then bound to a
    free handle of the seeded devices, in SQL (the conductor's bind also
    asks placement and Nova, which know nothing of these hosts). Returns
    the number bound."""
    made: list[str] = []
    for start in range(0, count, _CHUNK):
        created = arqs_api.create_many(ctx, [
            (dashboard_cloud.PROFILE, project_id)] * min(_CHUNK,
                                                         count - start))
        made.extend(arq['uuid'] for arqs in created for arq in arqs)
    ARQ, AH, Dep, Device = (models.AcceleratorRequest, models.AttachHandle,
                            models.Deployable, models.Device)
    with db_api.main_context_manager.writer.using(ctx) as session:
        handles = session.execute(
            sa.select(AH.id, AH.deployable_id, Dep.rp_uuid, Device.hostname)
            .join(Dep, Dep.id == AH.deployable_id)
            .join(Device, Device.id == Dep.device_id)
            .where(AH.in_use.is_(False), Device.hostname.like('bench-%'))
            .order_by(AH.id)).all()
        bound = list(zip(made[::BOUND_EVERY], handles, strict=False))
        if bound:
            # Core's executemany: one UPDATE, a row of values each.
            table = ARQ.__table__
            session.execute(
                sa.update(table).where(table.c.uuid == sa.bindparam('arq')),
                [{'arq': arq, 'state': 'Bound', 'hostname': h.hostname,
                  'device_rp_uuid': h.rp_uuid, 'attach_handle_id': h.id,
                  'deployable_id': h.deployable_id,
                  'instance_uuid': str(uuid.uuid5(uuid.NAMESPACE_URL, arq))}
                 for arq, h in bound])
            session.execute(
                sa.update(AH).where(AH.id.in_([h.id for _, h in bound]))
                .values(in_use=True))
    return len(bound)


def seed(url: str, devices: int, per_host: int, requests_: int,
         project_id: str) -> dict[str, Any]:
    """Write the data; what it took (seconds) and the seeded hosts."""
    ctx = cyborg_context.get_admin_context()
    engine = engines.create_engine(url)
    undo = db_api.patch_engine(engine)
    try:
        start = time.perf_counter()
        hostnames = seed_devices(ctx, devices, per_host) if devices else []
        devices_s = time.perf_counter() - start
        start = time.perf_counter()
        bound = seed_requests(ctx, requests_, project_id) if requests_ else 0
        requests_s = time.perf_counter() - start
    finally:
        undo()
        engine.dispose()
    return {'hostnames': hostnames, 'devices_s': round(devices_s, 1),
            'requests_s': round(requests_s, 1), 'bound': bound}


class Horizon:
    """One user's session in Horizon, signed in through the login form."""

    def __init__(self, url: str, user: str, password: str) -> None:
        self.url = url
        self.session = requests.Session()
        login = self.session.get(url + '/auth/login/', timeout=TIMEOUT)
        form = {'csrfmiddlewaretoken': self._csrf(login.text),
                'username': user, 'password': password}
        # The region is a hidden field (or a choice of one) the form
        # sends back as it is; a domain field only with multidomain on.
        for name in ('region', 'domain'):
            found = re.search(
                rf'name="{name}"[^>]*value="([^"]*)"|'
                rf'<select[^>]*name="{name}".*?<option value="([^"]*)"',
                login.text, re.S)
            if found:
                form[name] = html.unescape(found.group(1)
                                           or found.group(2))
        # Signed in, the form redirects to the landing page, which is
        # not followed: Horizon's project overview asks Nova, which this
        # deployment has not.
        signed = self.session.post(
            url + '/auth/login/', data=form, timeout=TIMEOUT,
            headers={'Referer': url + '/auth/login/'},
            allow_redirects=False)
        if (signed.status_code != 302
                or '/auth/login' in signed.headers.get('Location', '')):
            raise SystemExit(f'{user} could not sign in to Horizon: '
                             f'{signed.status_code}')

    @staticmethod
    def _csrf(text: str) -> str:
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"',
                          text)
        if not found:
            raise SystemExit('no CSRF token in the login page')
        return found.group(1)

    def get(self, path: str) -> requests.Response:
        response = self.session.get(self.url + path, timeout=TIMEOUT)
        if (response.status_code != 200
                or '/auth/login' in response.url):
            raise SystemExit(f'{path}: {response.status_code} '
                             f'{response.url}')
        return response

    def server_filter(self, path: str, table: str, field: str,
                      value: str) -> None:
        """Set a table's server-side filter: Horizon keeps it in the
        session, from a POST of the filter's form to the page."""
        page = self.get(path)
        param = f'{table}__filter__q'
        self.session.post(self.url + path, timeout=TIMEOUT, data={
            'csrfmiddlewaretoken': self._csrf(page.text),
            param: value, f'{param}_field': field},
            headers={'Referer': self.url + path})


class ApiLog:
    """The cyborg-api requests in its log (a line per request)."""

    PATTERN = re.compile(r'"(GET|POST|PUT|PATCH|DELETE|HEAD) /v2')

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def count(self) -> int:
        with open(self.path, errors='replace') as log:
            return sum(1 for line in log if self.PATTERN.search(line))


@dataclasses.dataclass
class Page:
    name: str
    user: str
    path: str


def next_link(text: str, param: str = 'marker') -> str:
    """The table's "More" link (``?marker=...``)."""
    found = re.search(rf'href="(\?{param}=[^"]+)"', text)
    if not found:
        raise SystemExit(f'no ?{param}= link in the page')
    return html.unescape(found.group(1))


def pages(sessions: dict[str, Horizon], hostnames: list[str]
          ) -> list[Page]:
    """The pages to time; the links found on the pages themselves."""
    admin, member = sessions['admin'], sessions['member']
    devices = admin.get('/admin/accelerator_devices/').text
    found = re.search(r'href="(/admin/accelerator_devices/[0-9a-f-]{36}/)"',
                      devices)
    if not found:
        raise SystemExit('no device link on the devices page')
    host = hostnames[0] if hostnames else dashboard_cloud.HOSTNAME
    listed = [
        Page('hosts', 'admin', '/admin/accelerator_hosts/'),
        Page('devices', 'admin', '/admin/accelerator_devices/'),
        Page('devices, health=unhealthy', 'filtered',
             '/admin/accelerator_devices/'),
        Page('capacity', 'admin', '/admin/accelerator_capacity/'),
        Page('device detail', 'admin', found.group(1)),
        Page('host detail', 'admin', f'/admin/accelerator_hosts/{host}/'),
        Page('device profiles', 'member', '/project/device_profiles/'),
        Page('requests', 'member', '/project/accelerator_requests/')]
    if '?marker=' in devices:
        listed.insert(2, Page('devices, page 2', 'admin',
                              '/admin/accelerator_devices/'
                              + next_link(devices)))
    arqs = member.get('/project/accelerator_requests/').text
    if '?marker=' in arqs:
        listed.append(Page('requests, page 2', 'member',
                           '/project/accelerator_requests/'
                           + next_link(arqs)))
    return listed


def time_page(session: Horizon, page: Page, rounds: int,
              api_log: ApiLog | None) -> dict[str, Any]:
    """One unmeasured load, then ``rounds`` timed ones."""
    session.get(page.path)
    times = []
    calls = []
    size = 0
    for _ in range(rounds):
        before = api_log.count() if api_log else 0
        start = time.perf_counter()
        response = session.get(page.path)
        times.append(time.perf_counter() - start)
        size = len(response.content)
        if api_log:
            calls.append(api_log.count() - before)
    times.sort()
    figures = {'page': page.name, 'path': page.path,
               'median_ms': round(statistics.median(times) * 1000, 1),
               'p90_ms': round(times[min(len(times) - 1,
                                         int(len(times) * 0.9))] * 1000, 1),
               'html_kib': round(size / 1024, 1)}
    if api_log:
        figures['api_requests'] = max(calls)
    return figures


def run(args: argparse.Namespace, workdir: pathlib.Path) -> dict[str, Any]:
    with dashboard_cloud.running(workdir,
                                 cyborg_backend=args.cyborg_db) as cloud:
        seeded = seed(cloud.stack.database_url, args.devices, args.per_host,
                      args.requests, cloud.project_id)
        print(f'seeded {args.devices} devices on '
              f'{len(seeded["hostnames"])} hosts in {seeded["devices_s"]} s, '
              f'{args.requests} requests ({seeded["bound"]} bound) in '
              f'{seeded["requests_s"]} s')
        sessions = {
            'admin': Horizon(cloud.horizon_url, cloud.admin,
                             cloud.passwords[cloud.admin]),
            # A session of its own, whose devices table keeps a filter.
            'filtered': Horizon(cloud.horizon_url, cloud.admin,
                                cloud.passwords[cloud.admin]),
            'member': Horizon(cloud.horizon_url, cloud.member,
                              cloud.passwords[cloud.member])}
        sessions['filtered'].server_filter(
            '/admin/accelerator_devices/', 'devices', 'health', 'unhealthy')
        log_path = workdir / 'api.log'
        api_log = ApiLog(log_path)
        if not api_log.count():
            api_log = None
        results = [time_page(sessions[page.user], page, args.rounds, api_log)
                   for page in pages(sessions, seeded['hostnames'])]
    return {'devices': args.devices, 'requests': args.requests,
            'rounds': args.rounds, 'cyborg_db': args.cyborg_db,
            'seed_devices_s': seeded['devices_s'],
            'seed_requests_s': seeded['requests_s'],
            'bound': seeded['bound'], 'pages': results}


def print_table(result: dict[str, Any]) -> None:
    counted = 'api_requests' in result['pages'][0]
    print(f'{result["devices"]} devices, {result["requests"]} requests, '
          f'{result["rounds"]} rounds:')
    print(f'  {"page":<27} {"median ms":>9} {"p90 ms":>8} {"KiB":>7}'
          + (f' {"API calls":>9}' if counted else ''))
    for page in result['pages']:
        print(f'  {page["page"]:<27} {page["median_ms"]:>9.1f} '
              f'{page["p90_ms"]:>8.1f} {page["html_kib"]:>7.1f}'
              + (f' {page["api_requests"]:>9}' if counted else ''))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--devices', type=int, default=1000,
                        help='fake devices written (default: 1000)')
    parser.add_argument('--per-host', type=int, default=20,
                        help='devices a host (default: 20)')
    parser.add_argument('--requests', type=int, default=10_000,
                        help='accelerator requests of the member\'s '
                             'project written (default: 10000)')
    parser.add_argument('-r', '--rounds', type=int, default=10,
                        help='timed loads of each page (default: 10)')
    parser.add_argument('--cyborg-db', choices=('sqlite', 'mysql'),
                        default='sqlite',
                        help='cyborg\'s database (default: sqlite)')
    parser.add_argument('--json', metavar='PATH',
                        help='also write the key figures to PATH')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='cyborg-bench-dash-') as tmp:
        result = run(args, pathlib.Path(tmp))
    print_table(result)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(result, benchmark='dashboard',
                           date=time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                              time.gmtime()),
                           cores=os.cpu_count()), f, indent=1)
            f.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
