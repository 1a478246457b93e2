"""Prometheus metrics of agents and conductors, scraped over real HTTP and
read with prometheus_client's own parser."""
import datetime
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from oslo_utils import timeutils
from prometheus_client import parser
from prometheus_client import registry as prom_registry

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import metrics as agent_metrics
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import heartbeats
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import metrics as conductor_metrics
from cyborg.conductor import service as conductor_service
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.db.api import services
from cyborg.tests.fakes import fixtures
from cyborg.tests.harness.gate_stack import free_port
from cyborg.tests.utils import wait_for

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Series:
    """Every sample served on ``port``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics',
                                timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(text)
            for s in family.samples}


def named(series: Series, name: str, **labels: str) -> dict[tuple, float]:
    """The samples of ``name`` whose labels include ``labels``."""
    return {key: value for key, value in series.items()
            if key[0] == name and set(labels.items()) <= set(key[1])}


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(('127.0.0.1', port)) == 0


def sample(address: str, **overrides: Any) -> device_health.DeviceSample:
    fields: dict[str, Any] = dict(
        controlpath_id={'cpid_type': 'PCI', 'cpid_info': {'addr': address}},
        type='GPU', vendor='10de', model='A100', address=address,
        driver_name='nvidia_gpu', product_id='20b0',
        device_uuid=str(uuid.uuid4()),
        health=device_health.Health(device_health.HEALTHY),
        usage=device_health.Usage(
            temperature_celsius=61.5, power_watts=212.0,
            utilization_percent=37.0, memory_used_bytes=2 ** 30,
            memory_total_bytes=40 * 2 ** 30,
            counters={'ecc_uncorrected': 3, 'xid': 1},
            gauges={'sm_clock_hz': 1.41e9}))
    fields.update(overrides)
    return device_health.DeviceSample(**fields)


@pytest.fixture
def agent_metrics_on(conf):
    conf.set_override('host', 'cmp1')
    conf.set_override('metrics_host', '127.0.0.1', 'agent')
    conf.set_override('metrics_port', free_port(), 'agent')
    metrics = agent_metrics.AgentMetrics(conf)
    metrics.start()
    try:
        yield metrics
    finally:
        metrics.stop()


def test_agent_serves_each_device_with_its_labels(agent_metrics_on):
    metrics = agent_metrics_on
    port = metrics.server.port
    first = sample('0000:3b:00.0', instances=['i-2', 'i-1', 'i-2'],
                   projects=['p1', 'p1'])
    second = sample('0000:af:00.0', usage=device_health.Usage(
        temperature_celsius=float('nan')),
        health=device_health.Health(device_health.DEGRADED, 'hot'))
    metrics.update([first, second])
    series = scrape(port)

    labels = {'host': 'cmp1', 'device_uuid': first.device_uuid,
              'type': 'GPU', 'vendor': '10de', 'product': '20b0',
              'model': 'A100', 'address': '0000:3b:00.0',
              'driver': 'nvidia_gpu',
              # Several instances: one series, uuids sorted and joined.
              'instance_uuid': 'i-1,i-2', 'project_id': 'p1'}
    key = tuple(sorted(labels.items()))
    assert series[('cyborg_device_temperature_celsius', key)] == 61.5
    assert series[('cyborg_device_power_watts', key)] == 212.0
    assert series[('cyborg_device_utilization_ratio', key)] == 0.37
    assert series[('cyborg_device_memory_used_bytes', key)] == 2 ** 30
    assert series[('cyborg_device_memory_total_bytes', key)] == 40 * 2 ** 30
    counters = named(series, 'cyborg_device_counter_total',
                     address='0000:3b:00.0')
    assert {dict(k[1])['counter']: v for k, v in counters.items()} == {
        'ecc_uncorrected': 3, 'xid': 1}
    assert named(series, 'cyborg_device_gauge', address='0000:3b:00.0',
                 gauge='sm_clock_hz') != {}
    health = named(series, 'cyborg_device_health', address='0000:3b:00.0')
    assert {dict(k[1])['state']: v for k, v in health.items()} == {
        'healthy': 1, 'degraded': 0, 'unhealthy': 0, 'unknown': 0}

    # Unbound, its labels empty; its health is served, an unknown (not
    # finite) reading is not, nor what the driver did not read.
    health = named(series, 'cyborg_device_health', address='0000:af:00.0',
                   instance_uuid='', project_id='')
    assert {dict(k[1])['state']: v for k, v in health.items()} == {
        'healthy': 0, 'degraded': 1, 'unhealthy': 0, 'unknown': 0}
    for name in ('cyborg_device_temperature_celsius',
                 'cyborg_device_power_watts',
                 'cyborg_device_counter_total'):
        assert named(series, name, address='0000:af:00.0') == {}
    [passed] = named(series, 'cyborg_agent_health_pass_timestamp_seconds',
                     host='cmp1').values()
    assert abs(passed - time.time()) < 60

    # The first device is unbound, the second removed: their old series
    # are gone at the next scrape.
    metrics.update([sample('0000:3b:00.0', device_uuid=first.device_uuid)])
    series = scrape(port)
    assert named(series, 'cyborg_device_health',
                 address='0000:af:00.0') == {}
    assert named(series, 'cyborg_device_health', instance_uuid='i-1,i-2') \
        == {}
    assert len(named(series, 'cyborg_device_health', instance_uuid='',
                     address='0000:3b:00.0')) == 4


def test_agent_metrics_before_any_pass_and_after_stop(conf):
    conf.set_override('metrics_host', '127.0.0.1', 'agent')
    conf.set_override('metrics_port', free_port(), 'agent')
    metrics = agent_metrics.AgentMetrics(conf)
    port = conf.agent.metrics_port
    assert not listening(port)
    metrics.start()
    try:
        # No pass yet: the families are served, with no series.
        assert scrape(port) == {}
    finally:
        metrics.stop()
    assert not listening(port)
    # The port is free again: a new server can take it at once.
    again = agent_metrics.AgentMetrics(conf)
    again.start()
    again.stop()


# The conductor


class SlowAgent:
    """The agent's side of a vGPU bind, across RPC: it takes DELAY s."""

    DELAY = 1.2

    def create_mdev(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(self.DELAY)

    def remove_mdev(self, *args: Any, **kwargs: Any) -> None:
        pass


def _seed(conf) -> dict[str, str]:
    """Two FPGA handles and a GPU's vGPUs on node1; rp uuid by type."""
    conf.set_override('host', 'cmp1')
    conf.set_override('accelerators_per_device', 2, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    report = {'hostname': 'node1',
              'devices': [d.to_dict()
                          for d in fake.FakeDriver(conf).discover()]}
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, 'cmp1', report)
    device_profiles.create(ctx, {'name': 'fpga', 'groups': [
        {'resources:FPGA': '1'}]})
    device_profiles.create(ctx, {'name': 'vgpu', 'groups': [
        {'resources:VGPU': '1'}]})
    return {d['type']: d['deployables'][0]['rp_uuid']
            for d in inventory.get_host_devices(ctx, 'cmp1')}


def test_conductor_serves_arq_counts_and_bind_durations(
        conf, sqlite_engine, fake_nova):
    fixtures.nova_conf(conf, fake_nova)
    rps = _seed(conf)
    ctx = cyborg_context.get_admin_context()
    binder = conductor_manager.ConductorManager(
        conf, agent_api=SlowAgent()).binder
    conf.set_override('metrics_host', '127.0.0.1', 'conductor')
    conf.set_override('metrics_port', free_port(), 'conductor')
    metrics = conductor_metrics.ConductorMetrics(conf, binder.bind_durations)
    metrics.start()
    try:
        def patch(profile: str, count: int = 1) -> list[str]:
            created = [arqs.create(ctx, profile, 'p1')[0]['uuid']
                       for _ in range(count)]
            binder.apply_patch(ctx, {u: {
                'hostname': 'node1', 'device_rp_uuid': rps[
                    'GPU' if profile == 'vgpu' else 'FPGA'],
                'instance_uuid': str(uuid.uuid4())} for u in created}, [])
            return created

        # Two instant binds, one refused (no free handle: its ARQ stays
        # Initial and no bind ended), one through the agent, and one ARQ
        # left Initial.
        patch('fpga', count=2)
        with pytest.raises(exception.BindRefused):
            patch('fpga')
        [vgpu] = patch('vgpu')
        arqs.create(ctx, 'fpga', 'p2')
        wait_for(lambda: arqs.get(ctx, vgpu)['state'] == 'Bound',
                 'the vGPU bind')
        series = scrape(metrics.server.port)
    finally:
        metrics.stop()
        binder.stop()

    counts = {dict(k[1])['state']: v
              for k, v in named(series, 'cyborg_arqs').items()}
    assert counts == {'Initial': 2, 'BindStarted': 0, 'Bound': 3,
                      'Unbound': 0, 'BindFailed': 0, 'UnbindFailed': 0,
                      'Deleting': 0}

    def bucket(result: str, le: str) -> float:
        return series[('cyborg_bind_duration_seconds_bucket',
                       (('le', le), ('result', result)))]

    def total(result: str) -> float:
        return series[('cyborg_bind_duration_seconds_count',
                       (('result', result),))]

    assert total('bound') == 3
    assert total('failed') == 0
    # The instant binds took well under a second; the agent's, longer.
    assert bucket('bound', '1.0') == 2
    assert bucket('bound', '+Inf') == 3
    assert bucket('bound', '0.001') <= bucket('bound', '0.5')
    assert series[('cyborg_bind_duration_seconds_sum',
                   (('result', 'bound'),))] >= SlowAgent.DELAY


def test_arq_counts_are_cached_briefly(conf, sqlite_engine, monkeypatch):
    _seed(conf)
    ctx = cyborg_context.get_admin_context()
    collector = conductor_metrics.ArqCollector()

    def initial() -> float:
        [family] = collector.collect()
        return next(s.value for s in family.samples
                    if s.labels['state'] == 'Initial')

    arqs.create(ctx, 'fpga', 'p1')
    assert initial() == 1
    arqs.create(ctx, 'fpga', 'p1')
    # Within COUNT_TTL: the count read a moment ago.
    assert initial() == 1
    monkeypatch.setattr(conductor_metrics, 'COUNT_TTL', 0)
    assert initial() == 2


def test_conductor_service_serves_metrics_only_when_asked(conf,
                                                          sqlite_engine):
    port = free_port()
    conf.set_override('metrics_host', '127.0.0.1', 'conductor')
    assert conductor_service.build(conf).metrics is None
    conf.set_override('metrics_port', port, 'conductor')
    rpc.init(conf, url='fake://')
    svc = conductor_service.build(conf)
    try:
        svc.start()
        try:
            assert named(scrape(port), 'cyborg_bind_duration_seconds_count',
                         result='bound')
        finally:
            svc.stop()
            svc.conductor.binder.stop()
        assert not listening(port)
        with pytest.raises(urllib.error.URLError):
            scrape(port)
    finally:
        rpc.cleanup()


def test_conductor_serves_agents_up_from_heartbeats(conf, sqlite_engine):
    ctx = cyborg_context.get_admin_context()
    long_ago = timeutils.utcnow() - datetime.timedelta(seconds=300)
    # Agents that stopped beating before this conductor started: only the
    # services table knows them.
    services.heartbeat_many(ctx, [
        services.Beat('cmp-old', 'cyborg-agent', '1', 'node-old', long_ago),
        services.Beat('cmp-back', 'cyborg-agent', '1', None, long_ago),
        services.Beat('ctl1', 'cyborg-conductor', '1', None, long_ago)])
    beats = heartbeats.HeartbeatBatch()
    registry = prom_registry.CollectorRegistry()
    registry.register(conductor_metrics.AgentCollector(beats, 60))

    def up() -> dict[str, float]:
        return {s.labels['host']: s.value
                for f in registry.collect() for s in f.samples
                if s.name == 'cyborg_agent_up'}

    try:
        beats.add('cmp1', 'cyborg-agent', '1', 'node1')
        beats.add('ctl2', 'cyborg-conductor', '1', None)
        # By hostname where the agent sent one; conductors are not agents.
        assert up() == {'node1': 1, 'node-old': 0, 'cmp-back': 0}
        # A heartbeat taken now counts over the older row; the table is
        # read once (a row written since, not by this conductor, is not
        # seen).
        beats.add('cmp-back', 'cyborg-agent', '1', None)
        services.heartbeat(ctx, 'cmp-old', 'cyborg-agent', '1', 'node-old')
        assert up() == {'node1': 1, 'node-old': 0, 'cmp-back': 1}
    finally:
        beats.stop()
    # With a service_down_time of 0 every heartbeat taken is too old.
    registry = prom_registry.CollectorRegistry()
    registry.register(conductor_metrics.AgentCollector(beats, 0))
    assert set(up().values()) == {0}
