"""A load of binds: fake devices with many TEST_PCI attach handles, Initial
accelerator requests to bind to them, and concurrent clients binding
through ``ConductorAPI.arq_apply_patch``, timed.

TEST_PCI handles are bound in the PATCH's own transaction, so a bind's
latency is that of the conductor and the database alone. The benchmarks
(``tools/bench``) and the scale tests share it.
"""
import concurrent.futures
import dataclasses
import statistics
import time
import uuid
from typing import Any

from oslo_config import cfg

import cyborg.cmd  # noqa: F401  (native threads, before oslo.service loads)
from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.conductor import rpcapi
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory

HOST = 'bench-host'
HOSTNAME = 'bench-node'
PROFILE = 'bench'


def widen(dep: Any, handles: int) -> None:
    """Give a fake deployable ``handles`` TEST_PCI attach handles, more
    than the fake driver's PCI functions allow."""
    template = dep.attach_handles[0]
    dep.attach_handles = [
        type(template)(attach_type='TEST_PCI',
                       attach_info={'index': str(i)})
        for i in range(handles)]
    dep.num_accelerators = handles


def seed(conf: cfg.ConfigOpts, devices: int, handles: int, requests: int
         ) -> tuple[list[str], list[str]]:
    """``devices`` fake devices of host HOST (compute node HOSTNAME) with
    ``handles`` TEST_PCI handles each, and ``requests`` Initial ARQs of
    profile PROFILE, through the database the facade uses; the devices'
    rp_uuids and the ARQs' uuids."""
    conf.set_override('host', HOST)
    conf.set_override('hostname', HOSTNAME, 'agent')
    conf.set_override('device_count', devices, 'fake_driver')
    found = fake.FakeDriver(conf).discover()
    for device in found:
        widen(device.deployables[0], handles)
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, HOST, {
        'hostname': HOSTNAME, 'devices': [d.to_dict() for d in found]})
    rp_uuids = [d['deployables'][0]['rp_uuid']
                for d in inventory.get_host_devices(ctx, HOST)]
    device_profiles.create(ctx, {'name': PROFILE,
                                 'groups': [{'resources:FPGA': '1'}]})
    uuids = [arqs.create(ctx, PROFILE, None)[0]['uuid']
             for _ in range(requests)]
    return rp_uuids, uuids


@dataclasses.dataclass
class Load:
    """What concurrent PATCHes took: seconds in all, each one's latency,
    and the errors of those that failed (their ARQ uuids, the error)."""

    seconds: float
    latencies: list[float]
    errors: list[tuple[list[str], str]]

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def percentiles(self) -> dict[str, float]:
        """p50, p95 and p99 of the latencies, in milliseconds."""
        q = statistics.quantiles(self.latencies, n=100)
        return {'p50_ms': q[49] * 1000, 'p95_ms': q[94] * 1000,
                'p99_ms': q[98] * 1000}


def patches(uuids: list[str], rp_uuids: list[str], batch: int = 1
            ) -> list[dict[str, dict[str, str]]]:
    """PATCHes binding ``uuids`` to the devices in turn, ``batch`` of
    them to a new instance each, as Nova binds an instance's requests."""
    found = []
    for start in range(0, len(uuids), batch):
        instance = str(uuid.uuid4())
        found.append({arq: {'hostname': HOSTNAME,
                            'device_rp_uuid': rp_uuids[i % len(rp_uuids)],
                            'instance_uuid': instance}
                      for i, arq in enumerate(uuids[start:start + batch],
                                              start)})
    return found


def fire(conductor: rpcapi.ConductorAPI,
         binds: list[dict[str, dict[str, str]]], clients: int) -> Load:
    """Send every PATCH of ``binds`` through ``conductor`` from
    ``clients`` threads."""
    errors: list[tuple[list[str], str]] = []

    def timed(patch: dict[str, dict[str, str]]) -> float:
        start = time.perf_counter()
        try:
            conductor.arq_apply_patch(cyborg_context.get_admin_context(),
                                      patch, [])
        except Exception as exc:
            # Every PATCH is sent; the caller judges the failures.
            errors.append((sorted(patch), repr(exc)))
        return time.perf_counter() - start

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        latencies = sorted(pool.map(timed, binds))
    return Load(time.perf_counter() - start, latencies, errors)
