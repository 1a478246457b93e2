"""Many compute hosts in one process, speaking the agent's RPC.

Each simulated host sends what a ``cyborg-agent`` with the fake driver
sends, through the real ``ConductorAPI``: a full report (``report_data``)
at its start and again every report interval, unchanged, and a
``service_heartbeat`` cast every heartbeat interval. The hosts' sends are
spread evenly over each interval, as independent agents' would be. Used
by ``tools/bench/hosts.py`` and the host-scale functional test.
"""
import concurrent.futures
import dataclasses
import threading
import time
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg import version
from cyborg.accelerator.drivers import fake
from cyborg.conductor import rpcapi

BINARY = 'cyborg-agent'
# Seconds the steady-state scheduler sleeps between two looks at what is
# due: 20 looks per second keep each send within 50 ms of its turn.
TICK = 0.05


def agent_host(hostname: str) -> str:
    """The RPC host name of the agent of compute node ``hostname``."""
    return f'agent-{hostname}'


def build_report(conf: cfg.ConfigOpts, hostname: str, devices: int
                 ) -> dict[str, Any]:
    """What an agent with ``devices`` fake cards on ``hostname`` reports.

    Sets ``[DEFAULT] host``, ``[agent] hostname`` and ``[fake_driver]
    device_count`` on ``conf``: not for use while another thread reads
    them.
    """
    conf.set_override('host', agent_host(hostname))
    conf.set_override('hostname', hostname, 'agent')
    conf.set_override('device_count', devices, 'fake_driver')
    found = [d.to_dict() for d in fake.FakeDriver(conf).discover()]
    return {'hostname': hostname, 'devices': found,
            'drivers': {fake.FakeDriver.driver_name: {
                'state': 'ok', 'version': version.version_string()}}}


@dataclasses.dataclass
class Sent:
    """What a steady-state run sent, and how late the scheduler got."""

    heartbeats: int = 0
    reports: int = 0
    failures: int = 0
    # The largest delay of a send behind its turn, in seconds.
    max_lag: float = 0.0


class SimulatedHosts:
    """``hostnames``, each with ``devices`` fake cards, as agents."""

    def __init__(self, conf: cfg.ConfigOpts, api: rpcapi.ConductorAPI,
                 hostnames: list[str], devices: int) -> None:
        self.api = api
        self.hostnames = list(hostnames)
        self.reports = {h: build_report(conf, h, devices)
                        for h in self.hostnames}
        self.version = version.version_string()

    def report(self, hostname: str) -> dict[str, int]:
        """The host's full report; what the conductor changed."""
        return self.api.report_data(cyborg_context.get_admin_context(),
                                    agent_host(hostname),
                                    self.reports[hostname])

    def heartbeat(self, hostname: str) -> None:
        self.api.service_heartbeat(cyborg_context.get_admin_context(),
                                   agent_host(hostname), BINARY,
                                   self.version, hostname=hostname)

    def register(self, concurrency: int) -> list[dict[str, int]]:
        """Every host's first report, ``concurrency`` at a time."""
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(self.report, self.hostnames))

    def steady(self, seconds: float, heartbeat_interval: float | None,
               report_interval: float | None, concurrency: int = 8) -> Sent:
        """Heartbeats and unchanged reports for ``seconds``; an interval
        of None sends none of that kind. Each kind goes round the hosts
        in order, host ``i`` of ``N`` at ``i / N`` of each interval."""
        sent = Sent()
        lock = threading.Lock()
        kinds = [(interval, func, name) for interval, func, name in (
            (heartbeat_interval, self.heartbeat, 'heartbeats'),
            (report_interval, self.report, 'reports')) if interval]
        done = [0] * len(kinds)
        count = len(self.hostnames)

        def send(func: Any, name: str, hostname: str) -> None:
            try:
                func(hostname)
            except Exception:
                with lock:
                    sent.failures += 1
                return
            with lock:
                setattr(sent, name, getattr(sent, name) + 1)

        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            while (now := time.monotonic() - start) < seconds:
                for k, (interval, func, name) in enumerate(kinds):
                    due = int(now / interval * count)
                    while done[k] < due:
                        turn = start + done[k] * interval / count
                        sent.max_lag = max(sent.max_lag,
                                           time.monotonic() - turn)
                        pool.submit(send, func, name,
                                    self.hostnames[done[k] % count])
                        done[k] += 1
                time.sleep(TICK)
        return sent
