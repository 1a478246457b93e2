"""Benchmark of the deletion of requests nothing bound
(``cyborg.db.api.arq_expiry``): how long one batch holds its rows
locked, by batch size, on MariaDB and PostgreSQL.

On a new database of each server it writes ``-n`` requests, a tenth of
them Initial and older than the TTL (due), the rest bound, then times
``arq_expiry.expire`` batch after batch until nothing is due, for each
batch size of ``--batches``, writing the due requests again before each
size. It prints, per server and size, the median and 95th percentile of
a batch and the requests deleted per second.

    python tools/bench/expiry.py -n 200000 --batches 100 500 2000 5000
"""
import argparse
import datetime
import json
import statistics
import tempfile
import time
import uuid

import sqlalchemy as sa
from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import conf as cyborg_conf  # noqa: F401  (registers options)
from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import arq_expiry
from cyborg.tests import conftest

ARQ = models.AcceleratorRequest
_CHUNK = 10_000


def _rows(count: int, due: bool) -> list[dict]:
    now = timeutils.utcnow().replace(microsecond=0)
    created = now - datetime.timedelta(hours=2 if due else 30)
    group = json.dumps({'resources:FPGA': '1'})
    return [{'uuid': str(uuid.uuid4()), 'project_id': f'p{n % 50}',
             'state': 'Initial' if due else 'Bound',
             'device_profile_name': 'dp', 'device_profile_group_id': 0,
             'device_profile_group': group, 'resource_class': 'FPGA',
             'instance_uuid': None if due else str(uuid.uuid4()),
             'hostname': None if due else f'compute-{n % 1000:04d}',
             'created_at': created} for n in range(count)]


def _insert(engine: sa.engine.Engine, rows: list[dict]) -> None:
    with engine.begin() as conn:
        for start in range(0, len(rows), _CHUNK):
            conn.execute(sa.insert(ARQ), rows[start:start + _CHUNK])


def run(backend: str, total: int, sizes: list[int]) -> list[tuple]:
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        urls = conftest.empty_database_url(backend, workdir)
        engines = conftest.migrated_engine(next(urls))
        engine = next(engines)
        due = total // 10
        _insert(engine, _rows(total - due, due=False))
        ctx = cyborg_context.get_admin_context()
        for size in sizes:
            _insert(engine, _rows(due, due=True))
            with engine.connect() as conn:
                conn.execute(sa.text(
                    'ANALYZE TABLE accelerator_requests' if backend ==
                    'mysql' else 'ANALYZE accelerator_requests'))
            cutoff = timeutils.utcnow() - datetime.timedelta(hours=1)
            times = []
            deleted = 0
            while True:
                start = time.perf_counter()
                gone = arq_expiry.expire(ctx, cutoff, size)
                times.append(time.perf_counter() - start)
                deleted += len(gone)
                if len(gone) < size:
                    break
            times.sort()
            results.append((backend, size, deleted,
                            statistics.median(times) * 1000,
                            times[int(len(times) * 0.95)] * 1000,
                            deleted / sum(times)))
        next(engines, None)
        next(urls, None)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, default=200_000,
                        help='requests in the table')
    parser.add_argument('--batches', type=int, nargs='+',
                        default=[100, 500, 2000, 5000])
    parser.add_argument('--backends', nargs='+',
                        default=['mysql', 'postgresql'])
    args = parser.parse_args()
    cfg.CONF([], project='cyborg', default_config_files=[])
    print(f'{"server":<11} {"batch":>6} {"deleted":>8} {"p50 ms":>8} '
          f'{"p95 ms":>8} {"per s":>8}')
    for backend in args.backends:
        for row in run(backend, args.n, args.batches):
            print('{:<11} {:>6} {:>8} {:>8.1f} {:>8.1f} {:>8.0f}'.format(
                *row))


if __name__ == '__main__':
    main()
