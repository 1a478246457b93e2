"""A request traced with osprofiler through every process it reaches.

cyborg-api, a conductor and an agent (fake driver) run as processes on
real RabbitMQ and MariaDB, with ``[profiler] enabled`` and a private Redis
server as the backend. ``openstack --os-profile KEY accelerator host
driver list`` (the API asks the conductor, which reads the agent's
service row and asks the agent) prints a trace id, and ``osprofiler trace
show --json`` puts its spans together: the API's handling of the
requests, the conductor's RPC call and its SQL, the agent's RPC call. A
request signed with another key is not traced.
Installs Debian's ``redis-server`` when missing
(``harness/system_packages.py``).
"""
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from osprofiler import profiler as osprofiler
from osprofiler import web

from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import redis_server

NODE = 'trace-node'
HOST = 'agent1'
KEY = 'trace-key'


def _bin(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def _signed_with(key: str) -> dict[str, str]:
    """The trace headers of a new trace, signed with ``key``."""
    osprofiler.init(key)
    try:
        return web.get_trace_id_headers()
    finally:
        osprofiler.clean()


def _spans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every span under ``node`` of ``osprofiler trace show --json``."""
    for child in node.get('children', []):
        yield child
        yield from _spans(child)


def _parents(node: dict[str, Any], parent: str | None = None
             ) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """(name of the parent span, span) of every span under ``node``."""
    for child in node.get('children', []):
        yield parent, child
        yield from _parents(child, child['info']['name'])


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_a_request_traced_through_api_conductor_and_agent(
        tmp_path, rabbit_url, db_engine, empty_db_url, fake_nova):
    with redis_server.running(tmp_path / 'redis') as redis_url:
        profiler = {'profiler': {'enabled': 'true', 'hmac_keys': KEY,
                                 'connection_string': redis_url}}
        stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                                 fake_nova.endpoint, fake_nova.token)
        stack.add_api(extra=profiler)
        stack.add_conductor('conductor1', extra=profiler)
        stack.add_agent(HOST, NODE, 1, 1, extra=profiler)
        with stack.running():
            stack.start('conductor1', 'api', HOST)
            stack.ready('conductor1', HOST)
            gate_stack.wait_for(stack.api_up, 'the API to answer', 60)
            # The agent answers once its first heartbeat registered it.
            gate_stack.wait_for(
                lambda: requests.get(
                    f'{stack.api_url}/hosts/{HOST}/drivers', timeout=30,
                    headers=gate_stack.API_HEADERS).status_code == 200,
                'the agent registered', 30)
            # A request signed with a key the services do not have is
            # served, and not traced.
            answer = requests.get(
                f'{stack.api_url}/hosts/{HOST}/drivers', timeout=30,
                headers={**gate_stack.API_HEADERS,
                         **_signed_with('another-key')})
            assert answer.status_code == 200, answer.text
            assert redis_server.keys(redis_url) == []

            env = {k: v for k, v in os.environ.items()
                   if not k.startswith('OS_')}
            done = subprocess.run(
                [_bin('openstack'), '--os-profile', KEY,
                 '--os-auth-type', 'admin_token', '--os-endpoint',
                 stack.api_url, '--os-token', 'admin', 'accelerator',
                 'host', 'driver', 'list', HOST, '-f', 'json'],
                env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            # Left beside the logs, as the trace below, for a reader of a
            # failed run.
            (tmp_path / 'openstack.err').write_text(done.stderr)
            assert 'fake_driver' in [d['Name']
                                     for d in json.loads(done.stdout)]
            trace_id = re.search(r'Trace ID: (\S+)', done.stderr).group(1)

            shown = subprocess.run(
                [_bin('osprofiler'), 'trace', 'show', '--connection-string',
                 redis_url, '--json', trace_id],
                capture_output=True, text=True, timeout=60)
            assert shown.returncode == 0, shown.stderr
            trace = json.loads(shown.stdout)
            (tmp_path / 'trace.json').write_text(shown.stdout)

    spans = list(_spans(trace))
    by_service: dict[str, set[str]] = {}
    for span in spans:
        by_service.setdefault(span['info']['service'], set()).add(
            span['info']['name'])
    assert by_service == {'cyborg-api': {'wsgi'},
                          'cyborg-conductor': {'rpc', 'db'},
                          'cyborg-agent': {'rpc'}}, by_service
    # The request the API served, the call it made, the SQL of the
    # conductor and its call to the agent, each under the span that led
    # to it.
    rpcs = {(p, s['info']['service'], s['info']['meta.raw_payload.rpc-start']
             ['info']['method'])
            for p, s in _parents(trace) if s['info']['name'] == 'rpc'}
    assert rpcs == {('wsgi', 'cyborg-conductor', 'host_drivers_list'),
                    ('rpc', 'cyborg-agent', 'drivers_list')}, rpcs
    statements = [s for p, s in _parents(trace) if s['info']['name'] == 'db'
                  and p == 'rpc']
    assert any('FROM services' in s['info']['meta.raw_payload.db-start']
               ['info']['db']['statement'] for s in statements)
    paths = {s['info']['meta.raw_payload.wsgi-start']['info']['request']
             ['path'] for s in spans if s['info']['name'] == 'wsgi'}
    assert f'/v2/hosts/{HOST}/drivers' in paths, paths
