"""The API over HTTP (webtest) with a real database and conductor."""
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import webtest

from cyborg import context as cyborg_context
from cyborg.accelerator import pci
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import manager as agent_manager
from cyborg.agent import resource_tracker
from cyborg.api import app
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db.api import inventory

ADMIN = {'X-Auth-Token': 'admin'}
SERVICE = {'X-Auth-Token': 'nova:service-project', 'X-Roles': 'service',
           'X-Service-Roles': 'service'}


def user(project: str = 'p1', roles: str = 'member,reader',
         service_token: bool = False) -> dict[str, str]:
    """Headers of a (noauth) user of ``project`` with ``roles``."""
    headers = {'X-Auth-Token': f'u-{project}:{project}', 'X-Roles': roles}
    if service_token:
        headers['X-Service-Roles'] = 'service'
    return headers


def version(v: str, headers: dict[str, str] | None = None
            ) -> dict[str, str]:
    return dict(headers or ADMIN, **{'OpenStack-API-Version':
                                     f'accelerator {v}'})

_AGENTS: dict[int, dict[str, rpc_service.RPCService]] = {}
# The parts of each agent of _AGENTS, as start_agent returns them.
_AGENT_PARTS: dict[int, dict[str, agent_manager.AgentManager]] = {}


@dataclasses.dataclass
class API:
    """A running API: the webtest app and helpers around it."""

    app: webtest.TestApp
    conf: Any
    conductor: rpc_service.RPCService
    # The parts the conductor's endpoints serve.
    conductor_parts: manager.ConductorManager

    @property
    def agents(self) -> dict[str, rpc_service.RPCService]:
        """host -> its agent's RPC server (fake driver), started by
        ``seed``: enabling a device and its layouts ask the agent. Kept
        by configuration, so that copies of this API (clients' LiveAPI)
        share them."""
        return _AGENTS.setdefault(id(self.conf), {})

    def stop_conductor(self) -> None:
        self.conductor.stop()

    def start_agent(self, host: str) -> agent_manager.AgentManager:
        """The agent of ``host`` over the fake driver, serving RPC; its
        parts (started once)."""
        if host not in self.agents:
            conductor_api = conductor_rpcapi.ConductorAPI(self.conf)
            tracker = resource_tracker.ResourceTracker(
                self.conf, [fake.FakeDriver(self.conf)], conductor_api)
            manager = agent_manager.AgentManager(self.conf, tracker,
                                                 conductor_api)
            agent = rpc_service.RPCService(rpc.AGENT_TOPIC, host,
                                           manager.endpoints())
            agent.start()
            self.agents[host] = agent
            _AGENT_PARTS.setdefault(id(self.conf), {})[host] = manager
        return _AGENT_PARTS[id(self.conf)][host]

    def stop_agents(self) -> None:
        _AGENT_PARTS.pop(id(self.conf), None)
        for agent in _AGENTS.pop(id(self.conf), {}).values():
            agent.stop()

    def seed(self, host: str = 'cmp1', count: int = 1,
             hostname: str | None = None, agent: bool = True
             ) -> list[dict[str, Any]]:
        """Devices of the fake driver on ``host``, as the conductor stores
        them; returns them as inventory.get_host_devices does."""
        self.conf.set_override('host', host)
        self.conf.set_override('device_count', count, 'fake_driver')
        report = {'hostname': hostname or host,
                  'devices': [d.to_dict()
                              for d in fake.FakeDriver(self.conf).discover()]}
        ctx = cyborg_context.get_admin_context()
        inventory.apply_report(ctx, host, report)
        if agent:
            self.start_agent(host)
        return inventory.get_host_devices(ctx, host)

    def seed_driver(self, host: str, hostname: str,
                    driver: AcceleratorDriver) -> list[dict[str, Any]]:
        """The devices ``driver`` discovers, reported by ``host`` (whose
        hypervisor is ``hostname``) as the conductor stores them; no
        agent serves them."""
        with pci.discovery_pass():
            devices = [d.to_dict() for d in driver.discover()]
        ctx = cyborg_context.get_admin_context()
        inventory.apply_report(ctx, host,
                               {'hostname': hostname, 'devices': devices})
        return inventory.get_host_devices(ctx, host)

    def dp(self, name: str = 'dp1',
           groups: list[dict[str, str]] | None = None) -> dict[str, Any]:
        groups = groups or [{'resources:FPGA': '1',
                             'trait:CUSTOM_FAKE_DEVICE': 'required'}]
        return self.app.post_json('/v2/device_profiles',
                                  [{'name': name, 'groups': groups}],
                                  headers=ADMIN).json


def _api(conf, engine) -> Iterator[API]:
    conf.set_override('auth_strategy', 'noauth', 'api')
    rpc.set_defaults(control_exchange=f'cyborg-api-{uuid.uuid4().hex[:8]}')
    rpc.init(conf, url='fake://')
    parts = manager.ConductorManager(conf)
    conductor = rpc_service.RPCService(rpc.CONDUCTOR_TOPIC, 'test-conductor',
                                       parts.endpoints())
    conductor.start()
    running = API(webtest.TestApp(app.setup_app(conf)), conf, conductor,
                  parts)
    try:
        yield running
    finally:
        running.stop_agents()
        conductor.stop()
        # As the conductor service stops: no heartbeat of this test's
        # agents, retried by the batch's thread, reaches the next test.
        parts.stop()
        rpc.cleanup()
        rpc.set_defaults()


@pytest.fixture
def api(conf, sqlite_engine) -> Iterator[API]:
    """The API on SQLite."""
    yield from _api(conf, sqlite_engine)


@pytest.fixture
def api_all_dbs(conf, db_engine) -> Iterator[API]:
    """The API on each of SQLite, MariaDB and PostgreSQL."""
    yield from _api(conf, db_engine)
