"""Benchmark: a server booted by Nova 34 with one FPGA against the same
flavor without an accelerator, in one deployment.

Starts the Nova gate's deployment (``cyborg.tests.nova_stack``: Keystone,
placement, Glance, Nova's API, conductor, scheduler and two computes with
the fake virt driver, cyborg's API, conductor and two agents, each a
process) on MariaDB and RabbitMQ, then ``--boots`` times, alternating, a
project member boots a server of the flavor ``fpga1`` (one fake FPGA) and
one of the flavor ``plain`` (the same flavor without
``accel:device_profile``) through openstacksdk, waits until it is ACTIVE
(reading its status every 50 ms),
and deletes it (unmeasured). It prints the medians of the boot times and,
per boot, the CPU seconds each cyborg process used from the create call
until ACTIVE (utime + stime from ``/proc``, ``api.cpu_used``), and how
long the deployment took to come up. MariaDB and RabbitMQ are read from
CYBORG_TEST_MYSQL_URL and CYBORG_TEST_RABBIT_URL.

    .tox/nova/bin/python tools/bench/nova_boot.py --boots 10

(any environment with Nova, Keystone, Glance and placement installed,
as ``tox -e nova`` makes).
"""
import argparse
import collections
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import api  # noqa: E402  (tools/bench/api.py: the /proc reader)

from cyborg.tests.nova_stack import cloud as cloud_lib  # noqa: E402
from cyborg.tests.nova_stack import stack as stack_lib  # noqa: E402

PROFILES = {'bench-fpga': [{'resources:FPGA': '1',
                            'trait:CUSTOM_FAKE_DEVICE': 'required'}]}
FLAVORS = {'fpga1': 'bench-fpga', 'plain': None}
# Seconds between two reads of the server's status while it boots: the
# resolution of the boot times.
POLL = 0.05
# cyborg's processes in the stack, by the label they are reported under.
CYBORG = ('api', 'conductor', *stack_lib.HOSTS.values())


def _boot(cloud: cloud_lib.Cloud, flavor: str,
          sessions: dict[int, str]) -> tuple[float, collections.Counter]:
    """Seconds until ACTIVE, and the CPU seconds of each cyborg process
    meanwhile; the server is deleted afterwards."""
    before = api.cpu_used(sessions)
    started = time.monotonic()
    server = cloud.boot(flavor, interval=POLL)
    took = time.monotonic() - started
    used = api.cpu_used(sessions)
    used.subtract(before)
    cloud.delete(server)
    return took, used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--boots', type=int, default=10,
                        help='servers of each flavor (default 10)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the logs afterwards')
    args = parser.parse_args()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix='nova-boot-bench-'))
    try:
        with stack_lib.NovaStack.open(workdir) as stack:
            stack.bring_up()
            print(f'deployment up in {stack.timings["total"]:.0f} s '
                  f'({stack.timings})', flush=True)
            cloud = cloud_lib.populate(stack, PROFILES, FLAVORS)
            sessions = {stack.processes[name].pid: name for name in CYBORG}
            times: dict[str, list[float]] = collections.defaultdict(list)
            cpu: dict[str, list[collections.Counter]] = \
                collections.defaultdict(list)
            # One unmeasured boot of each: first calls fill caches and
            # open connections.
            for flavor in FLAVORS:
                _boot(cloud, flavor, sessions)
            for _ in range(args.boots):
                for flavor in FLAVORS:
                    took, used = _boot(cloud, flavor, sessions)
                    times[flavor].append(took)
                    cpu[flavor].append(used)
            cloud.engine.dispose()
    finally:
        if args.keep:
            print(f'logs in {workdir}')
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f'{"flavor":8} {"median s":>9} {"min s":>6} {"max s":>6}  '
          + ' '.join(f'{name + " cpu s":>16}' for name in CYBORG))
    for flavor in FLAVORS:
        row = times[flavor]
        cpus = [statistics.median(c[name] for c in cpu[flavor])
                for name in CYBORG]
        print(f'{flavor:8} {statistics.median(row):9.2f} {min(row):6.2f} '
              f'{max(row):6.2f}  '
              + ' '.join(f'{value:16.3f}' for value in cpus))
    print(f'(median of {args.boots} boots each, alternating; cpu: median '
          f'per boot, until ACTIVE; pid {os.getpid()})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
