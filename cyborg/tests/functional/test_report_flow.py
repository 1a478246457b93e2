"""Agent → conductor → database over real RabbitMQ, on every database."""
import logging
import uuid

import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import manager as agent_manager
from cyborg.agent import resource_tracker
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.agent import service as agent_service
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db.api import inventory
from cyborg.tests import utils
from cyborg.tests.utils import count_writes


class TunableFakeDriver(fake.FakeDriver):
    """The fake driver with an attribute a test can change."""

    extra_trait = 'CUSTOM_FIRST'

    def discover(self):
        devices = super().discover()
        for device in devices:
            for dep in device.deployables:
                dep.attributes['trait9'] = self.extra_trait
        return devices


@pytest.fixture
def rabbit_rpc(conf, rabbit_url):
    rpc.set_defaults(control_exchange=f'cyborg-test-{uuid.uuid4().hex[:8]}')
    rpc.init(conf, url=rabbit_url)
    yield
    rpc.cleanup()
    rpc.set_defaults()


@pytest.fixture
def conductor(conf, rabbit_rpc, db_engine):
    manager = conductor_manager.ConductorManager(conf)
    svc = rpc_service.RPCService(rpc.CONDUCTOR_TOPIC, 'ctl-test',
                                 manager.endpoints())
    svc.start()
    yield svc
    svc.stop()
    manager.stop()


def test_reports_flow_into_the_database(conf, conductor, db_engine, caplog):
    conf.set_override('host', 'cmp1')
    conf.set_override('hostname', 'cmp1.example', 'agent')
    conf.set_override('device_count', 2, 'fake_driver')
    driver = TunableFakeDriver(conf)
    tracker = resource_tracker.ResourceTracker(
        conf, [driver], conductor_rpcapi.ConductorAPI(conf))
    ctx = cyborg_context.get_admin_context()

    result = tracker.update()
    assert result['devices_added'] == 2
    devices = inventory.get_host_devices(ctx, 'cmp1')
    assert [d['hostname'] for d in devices] == ['cmp1.example'] * 2

    # Nothing changed: the agent does not even send.
    assert tracker.update() is None
    # Sent anyway (a full report): the conductor writes nothing.
    with count_writes(db_engine) as writes:
        result = tracker.update(force=True)
    assert writes == []
    assert result['writes'] == 0

    driver.extra_trait = 'CUSTOM_SECOND'
    result = tracker.update()
    assert result['devices_updated'] == 2
    assert result['writes'] == 2
    values = {d['deployables'][0]['attributes']['trait9']
              for d in inventory.get_host_devices(ctx, 'cmp1')}
    assert values == {'CUSTOM_SECOND'}

    conf.set_override('device_count', 1, 'fake_driver')
    result = tracker.update()
    assert result['devices_removed'] == 1
    assert len(inventory.get_host_devices(ctx, 'cmp1')) == 1

    # A malformed report is refused with the reason, logged, and nothing
    # is written.
    api = conductor_rpcapi.ConductorAPI(conf)
    bad = {'hostname': 'cmp1.example', 'devices': [{'type': 'FPGA'}]}
    with caplog.at_level(logging.ERROR), count_writes(db_engine) as writes:
        with pytest.raises(exception.InvalidReport) as err:
            api.report_data(ctx, 'cmp1', bad)
        with pytest.raises(exception.InvalidReport):
            api.report_data(ctx, 'cmp1', 'not a report')
    assert "'vendor' is a required property" in str(err.value)
    assert writes == []
    assert 'Rejected a device report' in caplog.text
    assert len(inventory.get_host_devices(ctx, 'cmp1')) == 1


def test_conductor_asks_agent_to_discover(conf, conductor, db_engine):
    conf.set_override('host', 'cmp7')
    conductor_api = conductor_rpcapi.ConductorAPI(conf)
    tracker = resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf)], conductor_api)
    agent = rpc_service.RPCService(
        rpc.AGENT_TOPIC, 'cmp7',
        agent_manager.AgentManager(conf, tracker, conductor_api).endpoints())
    agent.start()
    try:
        ctx = cyborg_context.get_admin_context()
        result = agent_rpcapi.AgentAPI(conf).discover(ctx, 'cmp7')
        assert result['devices_added'] == 1
        again = agent_rpcapi.AgentAPI(conf).discover(ctx, 'cmp7')
        assert again['writes'] == 0
    finally:
        agent.stop()


def test_two_agents_claiming_one_node_are_refused(conf, conductor,
                                                  db_engine, caplog):
    """Two hosts that report the same placement node name collide."""
    api = conductor_rpcapi.ConductorAPI(conf)
    ctx = cyborg_context.get_admin_context()
    conf.set_override('hostname', 'shared-node', 'agent')
    report = {'hostname': 'shared-node',
              'devices': [d.to_dict()
                          for d in fake.FakeDriver(conf).discover()]}
    api.report_data(ctx, 'cmp1', report)
    with caplog.at_level(logging.ERROR):
        with pytest.raises(exception.ReportConflict) as err:
            api.report_data(ctx, 'cmp2', report)
    assert 'shared-node' in str(err.value)
    assert '[agent] hostname' in str(err.value)
    assert inventory.get_host_devices(ctx, 'cmp2') == []
    assert len(inventory.get_host_devices(ctx, 'cmp1')) == 1


def test_the_first_report_is_retried_until_a_conductor_takes_it(
        conf, rabbit_rpc, sqlite_engine, caplog, tmp_path):
    # The broker matters here, not the database: SQLite only.
    # No conductor queue yet: the broker drops each call, which then
    # waits this long for an answer.
    conf.set_override('rpc_response_timeout', 1)
    # A pass away is longer than the test: only the first report's own
    # retries can bring it.
    conf.set_override('periodic_interval', 3600, 'agent')
    conf.set_override('host', 'cmp-early')
    conf.set_override('hostname', 'cmp-early.example', 'agent')
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('device_count', 1, 'fake_driver')
    caplog.set_level(logging.INFO, logger='cyborg.agent.manager')
    ctx = cyborg_context.get_admin_context()

    def said(level, text):
        return [r for r in caplog.records
                if r.name == 'cyborg.agent.manager' and r.levelno == level
                and text in r.getMessage()]

    agent = agent_service.build(conf, loaded=[fake.FakeDriver(conf)])
    agent.start()
    try:
        utils.wait_for(lambda: said(logging.WARNING, 'No conductor'),
                       'a failed try')
        assert inventory.get_host_devices(ctx, 'cmp-early') == []
        manager = conductor_manager.ConductorManager(conf)
        conductor = rpc_service.RPCService(
            rpc.CONDUCTOR_TOPIC, 'ctl-late', manager.endpoints())
        conductor.start()
        try:
            devices = utils.wait_for(
                lambda: inventory.get_host_devices(ctx, 'cmp-early'),
                'the report')
        finally:
            conductor.stop()
            manager.stop()
    finally:
        agent.stop()
    assert len(devices) == 1
    [taken] = utils.wait_for(
        lambda: said(logging.INFO, 'acknowledged the first'), 'its log')
    tries = said(logging.WARNING, 'No conductor acknowledged the first')
    assert f'({len(tries)} failed tries before)' in taken.getMessage()
