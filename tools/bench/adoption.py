"""Benchmark of ``cyborg-dbsync adopt`` on a large OpenStack Cyborg 17.0.0
database: how long the switch-over window's migration takes.

The schema is made by upstream's own migrations (``cyborg.tests.
upstream_cyborg``, which installs openstack-cyborg 17.0.0 into a cached
environment), on a new database of the server ``--db-server``; the rows
are written in bulk as upstream's fake driver and API write them: H
hosts of D FPGAs with A attach handles each, one profile, and a bound
request (two per instance) on every other handle, plus as many unbound
ones. Then it times the dry run and the adoption, in this process (the
CPU of ``dbsync``) and the CPU of every process of the database
server over each (from /proc; other users of the server disturb it).

    python tools/bench/adoption.py -H 1000 -d 4 -a 16 --json adopt.json
"""
import argparse
import json
import os
import pathlib
import tempfile
import time
import uuid

import api
import sqlalchemy as sa

from cyborg.db import adoption
from cyborg.db import migration
from cyborg.tests.harness import upstream_cyborg

_BATCH = 5000


def _insert(conn: sa.engine.Connection, table: sa.Table,
            rows: list[dict]) -> None:
    for start in range(0, len(rows), _BATCH):
        conn.execute(sa.insert(table), rows[start:start + _BATCH])


def _pci(bus: int, function: int) -> str:
    # As upstream's fake driver writes it: spaced, the device unpadded.
    return json.dumps({'domain': '0000', 'bus': f'{bus:02x}',
                       'device': str(function // 8),
                       'function': str(function % 8)})


def seed(url: str, hosts: int, devices: int, handles: int) -> dict:
    """Write the rows; their counts by table."""
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(engine)
    now = time.strftime('%Y-%m-%d %H:%M:%S')
    rows: dict[str, list[dict]] = {t: [] for t in meta.tables}
    profile = {'id': 1, 'uuid': str(uuid.uuid4()), 'name': 'fpga',
               'created_at': now, 'profile_json': json.dumps(
                   {'groups': [{'resources:FPGA': '1'}]})}
    rows['device_profiles'].append(profile)
    arqs = rows['extended_accelerator_requests']
    for host in range(hosts):
        hostname = f'compute-{host:05d}'
        for dev in range(devices):
            dev_id = host * devices + dev + 1
            rp = str(uuid.uuid4())
            rows['devices'].append(dict(
                id=dev_id, uuid=str(uuid.uuid4()), created_at=now,
                type='FPGA', vendor='0xABCD', model='miss model info',
                std_board_info='{"device_id": "0xabcd"}',
                vendor_board_info='fake_vendor_info', hostname=hostname,
                status='enabled', device_state='available'))
            rows['controlpath_ids'].append(dict(
                id=dev_id, uuid=str(uuid.uuid4()), created_at=now,
                device_id=dev_id, cpid_type='PCI', cpid_info=json.dumps(
                    {'domain': '0000', 'bus': f'{12 + dev:02x}',
                     'device': '00', 'function': '0'},
                    separators=(',', ':'))))
            rows['deployables'].append(dict(
                id=dev_id, uuid=str(uuid.uuid4()), created_at=now,
                name=f'{hostname}_FakeDevice{dev}', device_id=dev_id,
                num_accelerators=handles, rp_uuid=rp, driver_name='fake'))
            rows['attributes'] += [
                dict(id=2 * dev_id - 1, uuid=str(uuid.uuid4()),
                     created_at=now, deployable_id=dev_id, key='rc',
                     value='FPGA'),
                dict(id=2 * dev_id, uuid=str(uuid.uuid4()), created_at=now,
                     deployable_id=dev_id, key='traits1',
                     value='CUSTOM_FAKE_DEVICE')]
            for fn in range(1, handles + 1):
                handle_id = (dev_id - 1) * handles + fn
                bound = fn % 2 == 1
                rows['attach_handles'].append(dict(
                    id=handle_id, uuid=str(uuid.uuid4()), created_at=now,
                    deployable_id=dev_id, cpid_id=dev_id, in_use=bound,
                    attach_type='TEST_PCI', attach_info=_pci(12 + dev, fn)))
                instance = str(uuid.UUID(int=handle_id // 4 + 1))
                arqs.append(dict(
                    id=len(arqs) + 1, uuid=str(uuid.uuid4()),
                    created_at=now, project_id='p1',
                    state='Bound' if bound else 'Initial',
                    device_profile_id=1, device_profile_group_id=0,
                    substate='Initial',
                    hostname=hostname if bound else None,
                    device_rp_uuid=rp if bound else None,
                    instance_uuid=instance if bound else None,
                    attach_handle_id=handle_id if bound else None,
                    deployable_id=dev_id if bound else None))
    with engine.begin() as conn:
        for table in meta.sorted_tables:
            _insert(conn, table, rows[table.name])
    engine.dispose()
    return {t: len(r) for t, r in rows.items() if r}


def _server_cpu(comm: str) -> float:
    """CPU seconds of every process named ``comm`` and of its children
    that ended: PostgreSQL serves each connection from a process of its
    own, which ends with the connection (and which the postmaster reaps,
    adding its time to its own children's)."""
    tick = os.sysconf('SC_CLK_TCK')
    return sum(sum(int(v) for v in fields[11:15]) / tick
               for _, name, fields in api.proc_stats() if name == comm)


def _timed(what: str, comm: str, func) -> dict:
    before = (time.process_time(), _server_cpu(comm))
    start = time.monotonic()
    func()
    wall = time.monotonic() - start
    figures = {'wall_s': round(wall, 2),
               'dbsync_cpu_s': round(time.process_time() - before[0], 2),
               'db_server_cpu_s': round(_server_cpu(comm) - before[1], 2)}
    print(f'{what}: {figures}', flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-H', '--hosts', type=int, default=1000)
    parser.add_argument('-d', '--devices', type=int, default=4)
    parser.add_argument('-a', '--handles', type=int, default=16)
    parser.add_argument('--db-server', default='mysql+pymysql://root@'
                                               '127.0.0.1:3306/')
    parser.add_argument('--json', help='write the figures to this file')
    args = parser.parse_args()
    name, url = api._database(args.db_server)
    try:
        with tempfile.TemporaryDirectory() as workdir:
            upstream_cyborg.migrate(url, pathlib.Path(workdir))
        counts = seed(url, args.hosts, args.devices, args.handles)
        print(f'seeded {counts}', flush=True)
        backend = ('PostgreSQL' if url.startswith('postgresql')
                   else 'MariaDB')
        comm = 'postgres' if backend == 'PostgreSQL' else 'mariadbd'
        run = {'backend': backend,
               'hosts': args.hosts, 'devices': args.devices,
               'handles': args.handles, 'rows': counts}
        run['dry_run'] = _timed('dry run', comm, lambda: adoption.adopt(
            url, dry_run=True, say=lambda _: None))
        run['adopt'] = _timed('adopt', comm, lambda: adoption.adopt(
            url, say=lambda _: None))
        assert migration.version(url) == migration.head()
        if args.json:
            api.write_json(args.json, 'adoption', [run])
    finally:
        api._admin(args.db_server, f'DROP DATABASE {name}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
