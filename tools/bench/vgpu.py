"""Benchmark of one vGPU request's life, its mdev made by the agent or by
nova-compute, or its SR-IOV VF given a vGPU type by the agent.

For each value of ``[gpu_devices] mdev_creator`` (``cyborg``, then
``nova``), and for ``sriov`` (an H100 SXM5, 10de:2330, with 16 VFs on
vGPU software 17, serving vGPUs of type 1008, NVIDIA H100XM-10C; its
``current_vgpu_type`` writes an emulated vGPU manager follows,
``cyborg.tests.harness.nvidia_vgpu_host``), starts placement,
cyborg-api, a conductor and an agent as processes (``layout.stack_of``)
on a real RabbitMQ and a database of their own (MariaDB by default), and
a fake Nova. For the first two, the agent's ``nvidia_gpu`` driver sees a
sysfs tree of one T4 (10de:1eb8) serving 16 vGPUs of type nvidia-222,
whose mdev writes an emulated kernel follows
(``cyborg.tests.harness.sysfs_kernel``, a thread of this process). Then,
back to back, ``--cycles`` times, a request (created unmeasured) for one vGPU:

``bind``: ``PATCH /v2/accelerator_requests`` to the T4's provider, until
the database shows the request Bound. With ``cyborg`` the PATCH leaves it
BindStarted and the conductor has the agent create the mdev (agent RPC
``create_mdev``); with ``nova`` the handle's attach info says Nova creates
it, and the PATCH binds it in its own transaction.

With ``sriov`` the PATCH leaves the request BindStarted and the conductor
has the agent give the VF its type (agent RPC ``create_mdev``), and the
DELETE leaves the handle reserved until the agent has taken it back.

``delete``: once the emulated kernel shows the mdev (unmeasured: a real
kernel has made it when the agent's write returns),
``DELETE /v2/accelerator_requests?instance=<uuid>``, until the database
shows the handle free. With ``cyborg`` the handle stays reserved in
placement until the agent has removed the mdev (``remove_mdev``); with
``nova`` it is free when the DELETE answers.

Then ``--cycles`` layout changes of the GPU, each until placement shows
it: the T4 between 8 and 16 vGPUs of nvidia-222, the H100 between 4
vGPUs of 1010 and 8 of 1008 (its 16 VFs kept).

A cycle's latency is its bind's and its delete's. Its CPU per process is
read from ``/proc`` once the processes are done with it (the fake Nova has
the bind's event, placement has the provider's state, the kernel shows no
mdev), less what each uses idle in as long (measured over ``--idle``
seconds first); ``services`` is cyborg-api, the conductor and the agent
together:

    python tools/bench/vgpu.py [--cycles 20] [--db mysql]
"""
import logging
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import api
import health_latency
import layout
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from cyborg.tests import utils
from cyborg.tests.harness import nvidia_vgpu_host
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

NODE = 'bench-vgpu-node'
T4 = '0000:af:00.0'
VGPU_TYPE = 'nvidia-222'
# (type, name, instances) as a T4 on the vGPU host driver offers them.
T4_TYPES = (('nvidia-222', 'GRID T4-1B', 16),
            ('nvidia-223', 'GRID T4-2B', 8))
PROFILE = {'resources:VGPU': '1',
           'trait:CUSTOM_NVIDIA_1EB8_T4_1B': 'required'}
H100 = '0000:3b:00.0'
H100_TYPE = '1008'
H100_PROFILE = {'resources:VGPU': '1',
                'trait:CUSTOM_NVIDIA_2330_H100XM_10C': 'required'}
MODES = ('cyborg', 'nova', 'sriov')
# Seconds a bind or a delete may take before the run fails.
TIMEOUT = 30


def _until(check: Callable[[], bool], what: str) -> None:
    """Look at ``check`` every ``layout.POLL`` seconds until it holds."""
    deadline = time.monotonic() + TIMEOUT
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f'timed out waiting for {what}')
        time.sleep(layout.POLL)


class Probe:
    """What the database shows of the T4's one deployable."""

    def __init__(self, engine: sa.engine.Engine) -> None:
        self.engine = engine
        dep, device = models.Deployable, models.Device
        self.deployable_id, self.rp_uuid = utils.wait_for(
            lambda: self._one(sa.select(dep.id, dep.rp_uuid)
                              .join(device, device.id == dep.device_id)
                              .where(device.hostname == NODE)),
            'the T4 in the database', 60, 0.5)

    def _one(self, query: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(query).first()

    def state(self, arq: str) -> str:
        arqs = models.AcceleratorRequest
        return self._one(sa.select(arqs.state).where(arqs.uuid == arq))[0]

    def handles_free(self) -> bool:
        ah = models.AttachHandle
        return not self._one(sa.select(sa.func.count()).where(
            ah.deployable_id == self.deployable_id,
            sa.or_(ah.in_use, ah.clean_state.is_not(None))))[0]

    def placement_synced(self) -> bool:
        dep = models.Deployable
        return not self._one(sa.select(sa.func.count()).where(
            dep.id == self.deployable_id, dep.rp_synced.is_(None)))[0]


def _mdevs(tree: SysfsTree) -> int:
    """The mdevs of the served type on the T4, or the H100's VFs with a
    vGPU type."""
    if nvidia_vgpu_host.model(tree, H100) is not None:
        return sum(1 for t in nvidia_vgpu_host.model(tree, H100)[
            'vfs'].values() if t != '0')
    return len(os.listdir(tree.device_dir(T4) / 'mdev_supported_types'
                          / VGPU_TYPE / 'devices'))


def _cycles(client: layout.Client, probe: Probe, nova: api.FakeNovaProcess,
            tree: SysfsTree, creator: str, count: int,
            sessions: dict[int, str]
            ) -> tuple[layout.Cost, list[float], list[float]]:
    """``count`` requests bound and deleted: the cost of each cycle, and
    the latencies of the binds and of the deletes."""
    cost, binds, deletes = layout.Cost(), [], []
    events = nova.events()
    # The mdevs the kernel shows while a request is bound.
    held = 0 if creator == 'nova' else 1

    def life(arq: str, instance: str) -> tuple[float, float]:
        start = time.perf_counter()
        client.call('PATCH', '/accelerator_requests', expect=202, json={
            arq: [{'op': 'add', 'path': '/hostname', 'value': NODE},
                  {'op': 'add', 'path': '/device_rp_uuid',
                   'value': probe.rp_uuid},
                  {'op': 'add', 'path': '/instance_uuid',
                   'value': instance}]})
        _until(lambda: probe.state(arq) != 'BindStarted', 'the bind')
        if (state := probe.state(arq)) != 'Bound':
            raise SystemExit(f'the bind of {arq} ended {state}')
        bound = time.perf_counter() - start
        # Unmeasured, as Nova starts the instance here: a real kernel has
        # made the mdev when the agent's write returns, the emulated one
        # shows it at its next look.
        _until(lambda: _mdevs(tree) == held, 'the mdev')
        start = time.perf_counter()
        client.call('DELETE', f'/accelerator_requests?instance={instance}',
                    expect=204)
        _until(probe.handles_free, 'the handle to be free')
        return bound, time.perf_counter() - start

    def settle() -> None:
        _until(lambda: probe.placement_synced() and _mdevs(tree) == 0
               and nova.events() >= events,
               'the bind event, placement and the kernel')

    for _ in range(count):
        arq = client.call('POST', '/accelerator_requests', expect=201,
                          json={'device_profile_name': 'vgpu'}
                          )['arqs'][0]['uuid']
        events += 1
        cpu = api.cpu_used(sessions)
        start = time.perf_counter()
        bound, deleted = life(arq, str(uuid.uuid4()))
        settle()
        cost.add(bound + deleted, api.cpu_used(sessions) - cpu,
                 time.perf_counter() - start)
        binds.append(bound)
        deletes.append(deleted)
    return cost, binds, deletes


def _layouts(client: layout.Client, probe: Probe, creator: str, count: int,
             sessions: dict[int, str]) -> layout.Cost:
    """``count`` layout changes of the GPU, 8 vGPUs and back to all (16
    mdevs of nvidia-222 on the T4; 8 of 1008 on the H100 and back to 4 of
    1010, whose VFs stay), each until placement shows it."""
    if creator == 'sriov':
        layouts = [{'vf_count': 16, 'vgpu_type': '1010', 'vgpu_count': 4},
                   {'vf_count': 16, 'vgpu_type': H100_TYPE,
                    'vgpu_count': 8}]
    else:
        layouts = [{'mdev_type': VGPU_TYPE, 'mdev_count': 8},
                   {'mdev_type': VGPU_TYPE, 'mdev_count': 16}]
    device = client.call('GET', f'/devices?hostname={NODE}&type=GPU'
                         )['devices'][0]['uuid']
    cost = layout.Cost()
    for n in range(count):
        body = layouts[n % 2]
        cost.measure(lambda body=body: (
            client.call('PUT', f'/devices/{device}/layout', json=body),
            _until(probe.placement_synced, 'placement')), sessions)
    return cost


def _mode(backend: str, transport: str, creator: str, cycles: int,
          warmup: int, idle_seconds: float) -> dict[str, Any]:
    """The figures of one value of ``mdev_creator``, on a stack of its
    own: the agent reads the option when it starts."""
    with tempfile.TemporaryDirectory(
            prefix=f'cyborg-bench-vgpu-{creator}-') as tmp, \
            health_latency.database(backend, tmp) as db_url:
        workdir = pathlib.Path(tmp)
        tree = SysfsTree(workdir / 'host')
        if creator == 'sriov':
            nvidia_vgpu_host.add_gpu(tree, H100, vfs=16)
            gpus = {'enabled_vgpu_types': H100_TYPE,
                    'vgpu_type_addresses': f'{H100_TYPE}:{H100}'}
        else:
            tree.add_function(T4, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
            for type_id, name, instances in T4_TYPES:
                tree.add_mdev_type(T4, type_id, name, instances)
            gpus = {'enabled_vgpu_types': VGPU_TYPE,
                    'vgpu_type_addresses': f'{VGPU_TYPE}:{T4}',
                    'mdev_creator': creator}
        nova = api.FakeNovaProcess(str(workdir / 'nova.log'))
        stack = layout.stack_of(workdir, transport, db_url, nova, NODE, {
            'agent': {'enabled_drivers': 'nvidia_gpu',
                      'sysfs_root': tree.root},
            'gpu_devices': gpus})
        kernel = sysfs_kernel.Kernel(tree.root).start()
        engine = sa.create_engine(db_url)
        try:
            migration.upgrade('head', url=db_url)
            layout.start(stack, NODE)
            client = layout.Client(stack.api_url)
            probe = Probe(engine)
            client.call('POST', '/device_profiles', expect=201,
                        json=[{'name': 'vgpu', 'groups': [
                            H100_PROFILE if creator == 'sriov'
                            else PROFILE]}])
            # Each process leads a session of its own.
            sessions = {p.pid: p.kind for p in stack.processes.values()}
            sessions[nova.proc.pid] = 'Nova'
            _until(probe.placement_synced, 'the T4 in placement')
            # Unmeasured: connection pools, caches, the first messages.
            _cycles(client, probe, nova, tree, creator, warmup, sessions)
            idle = layout.idle_rates(sessions, idle_seconds)
            cost, binds, deletes = _cycles(client, probe, nova, tree,
                                           creator, cycles, sessions)
            changes = _layouts(client, probe, creator, cycles, sessions)
            row = cost.row(creator, idle)
            row['layout'] = changes.row(creator, idle)
            row.update(bind_ms=1000 * statistics.median(binds),
                       delete_ms=1000 * statistics.median(deletes),
                       idle_cpu_ms_per_s={k: v * 1000
                                          for k, v in idle.items()})
            return row
        except BaseException:
            print(stack.tails(), file=sys.stderr)
            raise
        finally:
            stack.stop_all()
            kernel.stop()
            nova.stop()
            engine.dispose()


def bench(backend: str, transport: str, modes: list[str], cycles: int,
          warmup: int, idle_seconds: float) -> dict[str, Any]:
    return {'db': backend, 'cycles': cycles,
            'calibration_ms': api.calibration(),
            'rows': [_mode(backend, transport, creator, cycles, warmup,
                           idle_seconds) for creator in modes]}


def show(result: dict[str, Any]) -> None:
    print(f"db={result['db']} cycles={result['cycles']} "
          f"calibration {result['calibration_ms']:.0f} ms")
    print(f'{"mdev_creator":<12} {"bind ms":>7} {"delete ms":>9} '
          f'{"cycle ms":>8} {"p95":>6} {"services":>8} {"api":>6} '
          f'{"conductor":>9} {"agent":>6} {"placement":>9}  others')
    for row in result['rows']:
        cpu = row['cpu_ms']
        others = ', '.join(f'{label} {ms:.1f}' for label, ms in sorted(
            cpu.items()) if label not in (*layout.SERVICES, 'placement'))
        print(f"{row['op']:<12} {row['bind_ms']:>7.1f} "
              f"{row['delete_ms']:>9.1f} {row['median_ms']:>8.1f} "
              f"{row['p95_ms']:>6.1f} {row['services_ms']:>8.1f} "
              f"{cpu.get('api', 0):>6.1f} {cpu.get('conductor', 0):>9.1f} "
              f"{cpu.get('agent', 0):>6.1f} {cpu.get('placement', 0):>9.1f}"
              f'  {others}')
    print(f'{"layout":<12} {"median ms":>9} {"p95":>6} {"services":>8} '
          f'{"api":>6} {"conductor":>9} {"agent":>6} {"placement":>9}')
    for row in result['rows']:
        change, cpu = row['layout'], row['layout']['cpu_ms']
        print(f"{row['op']:<12} {change['median_ms']:>9.1f} "
              f"{change['p95_ms']:>6.1f} {change['services_ms']:>8.1f} "
              f"{cpu.get('api', 0):>6.1f} {cpu.get('conductor', 0):>9.1f} "
              f"{cpu.get('agent', 0):>6.1f} "
              f"{cpu.get('placement', 0):>9.1f}")
    for row in result['rows']:
        idle = ', '.join(f'{k} {v:.1f}' for k, v in
                         sorted(row['idle_cpu_ms_per_s'].items()))
        print(f"idle CPU ms/s with {row['op']}: {idle}")


def main(argv: list[str] | None = None) -> int:
    parser = layout.parser_of(__doc__.splitlines()[0], 'mode')
    parser.add_argument('--modes', nargs='+', choices=MODES,
                        default=list(MODES),
                        help='values of [gpu_devices] mdev_creator, '
                             'and sriov (default: all three)')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    with utils.virtual_host(args.transport_url, 'cyborg-bench') as url:
        show(bench(args.db, url, args.modes, args.cycles, args.warmup,
                   args.idle))
    return 0


if __name__ == '__main__':
    sys.exit(main())
