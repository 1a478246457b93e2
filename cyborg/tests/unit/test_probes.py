"""The health probe of a conductor or an agent, served over real HTTP:
readiness from outages and periodic tasks, liveness from tasks only."""
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from oslo_db import exception as db_exc
from prometheus_client import registry as prom_registry

from cyborg.common import metrics_server
from cyborg.common import outages
from cyborg.common import probes
from cyborg.common import rpc_service
from cyborg.tests.utils import wait_for


@pytest.fixture(autouse=True)
def tracker() -> Iterator[outages.Tracker]:
    outages.tracker.clear()
    yield outages.tracker
    outages.tracker.clear()


def get(server: metrics_server.MetricsServer, path: str,
        method: str = 'GET') -> tuple[int, str, Any]:
    """(status, content type, body: JSON when it is)."""
    host, port = server.address
    request = urllib.request.Request(f'http://{host}:{port}{path}',
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            status, headers, body = answer.status, answer.headers, \
                answer.read()
    except urllib.error.HTTPError as error:
        status, headers, body = error.code, error.headers, error.read()
    kind = headers['Content-Type']
    return status, kind, (json.loads(body) if body and 'json' in kind
                          else body)


class Tasks:
    """A task that ends its passes, and one whose pass can be held."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        self.held = threading.Event()
        self.quick = rpc_service.PeriodicTask('quick', lambda: None, 0.05)
        self.slow = rpc_service.PeriodicTask('slow', self._slow, 0.05,
                                             stuck_after=0.3)
        self.all = [self.quick, self.slow]

    def _slow(self) -> None:
        if not self.release.is_set():
            self.held.set()
        self.release.wait(10)


@pytest.fixture
def served() -> Iterator[tuple[metrics_server.MetricsServer, Tasks]]:
    tasks = Tasks()
    health = probes.Health('cyborg-conductor', tasks.all,
                           needs=(outages.DATABASE, outages.BUS),
                           wants=(outages.PEER,))
    server = metrics_server.MetricsServer('127.0.0.1', 0, None, health)
    server.start()
    for task in tasks.all:
        task.start()
    try:
        yield server, tasks
    finally:
        tasks.release.set()
        for task in tasks.all:
            task.stop()
        server.stop()


def statuses(document: dict[str, Any]) -> dict[str, str]:
    return {f'{name}/{check.get("componentId", "")}': check['status']
            for name, checks in document['checks'].items()
            for check in checks}


def test_ready_and_alive(served):
    server, _ = served
    status, kind, document = get(server, probes.READY_PATH)
    assert (status, kind) == (200, 'application/health+json')
    assert document['status'] == 'pass'
    assert document['serviceId'] == 'cyborg-conductor'
    assert statuses(document) == {
        'periodicTask:passAge/quick': 'pass',
        'periodicTask:passAge/slow': 'pass',
        'database:connectivity/': 'pass',
        'message_bus:connectivity/': 'pass',
        'rpc_peers:connectivity/': 'pass'}
    status, _, document = get(server, probes.LIVE_PATH)
    assert (status, document['status']) == (200, 'pass')
    assert set(document['checks']) == {'periodicTask:passAge'}
    # HEAD for a probe that reads the status alone.
    assert get(server, probes.READY_PATH, 'HEAD')[0] == 200


def test_an_outage_fails_readiness_not_liveness(served, tracker):
    server, _ = served
    tracker.failed(outages.DATABASE,
                   db_exc.DBConnectionError('connection refused'), 'test')
    status, _, document = get(server, probes.READY_PATH)
    assert (status, document['status']) == (503, 'fail')
    [check] = document['checks']['database:connectivity']
    assert check['status'] == 'fail'
    assert check['output'] == 'DBConnectionError: connection refused'
    assert check['observedValue'] == 1
    assert check['time'].endswith('+00:00')
    assert get(server, probes.LIVE_PATH)[0] == 200
    tracker.ended(outages.DATABASE)
    assert get(server, probes.READY_PATH)[0] == 200


def test_a_peer_outage_warns(served, tracker):
    server, _ = served
    tracker.failed(outages.PEER, TimeoutError('no answer'), 'test')
    status, _, document = get(server, probes.READY_PATH)
    assert (status, document['status']) == (200, 'warn')


def test_a_stuck_task_fails_both(served):
    server, tasks = served
    tasks.release.clear()
    tasks.held.wait(10)
    document = wait_for(
        lambda: (lambda d: d if d['status'] == 'fail' else None)(
            get(server, probes.LIVE_PATH)[2]), 'the slow task to be stuck',
        10, interval=0.05)
    assert statuses(document) == {'periodicTask:passAge/quick': 'pass',
                                  'periodicTask:passAge/slow': 'fail'}
    [slow] = [c for c in document['checks']['periodicTask:passAge']
              if c['componentId'] == 'slow']
    assert slow['output'].startswith('no pass ended for ')
    assert get(server, probes.READY_PATH)[0] == 503
    tasks.release.set()
    wait_for(lambda: get(server, probes.LIVE_PATH)[0] == 200,
             'the slow task to end its pass', 10, interval=0.05)


def test_other_paths_and_methods(served):
    server, _ = served
    status, _, body = get(server, '/metrics')
    assert status == 404
    assert body == {'error': 'not found; served: /health, /health/live'}
    status, _, body = get(server, probes.READY_PATH, 'POST')
    assert status == 405


def test_the_metrics_server_serves_the_probe_beside_the_metrics():
    health = probes.Health('cyborg-agent', [], needs=(outages.BUS,))
    server = metrics_server.MetricsServer(
        '127.0.0.1', 0, prom_registry.CollectorRegistry(), health)
    server.start()
    try:
        assert get(server, probes.READY_PATH)[:2] == (
            200, 'application/health+json')
        status, kind, _ = get(server, '/metrics')
        assert status == 200 and kind.startswith('text/plain')
    finally:
        server.stop()
