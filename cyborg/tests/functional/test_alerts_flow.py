"""The shipped alert rules and Grafana dashboard, on a real Prometheus.

Debian's ``prometheus`` package (with ``promtool``) is installed by the
test when missing (``harness/system_packages.py``, through
``harness/prometheus_server.py``). ``promtool check rules`` must pass
the shipped rule file. Then a conductor and an agent with the fake
driver run as processes (with placement, on RabbitMQ and SQLite), each
serving its metrics, and the ``prometheus`` binary scrapes both every
second with a copy of the rules whose ``for:`` is 1 s, their
expressions unchanged: every query of the dashboard returns a series;
a device fault fires CyborgDeviceUnhealthy, and an agent paused
(SIGSTOP) fires CyborgAgentDown (no heartbeat for the conductor's
``service_down_time``, 10 s here) and CyborgAgentUnreachable (its scrape
times out); each resolves once the fault is cleared, the agent resumed.
"""
import functools
import json
import re
import subprocess

import pytest

from cyborg import monitoring
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server
from cyborg.tests.harness import prometheus_server

NODE = 'alerts-node'
# Grafana's variables, as the test substitutes them: every host, and a
# rate window of several 1 s scrapes.
VARIABLES = {'host': '.*', '__rate_interval': '10s'}
# The conductor's service_down_time: 3 s let a loaded CI worker (four on
# two cores) miss heartbeats for that long, and CyborgAgentDown was
# pending before any agent stopped.
SERVICE_DOWN_TIME = 10
# Seconds for an alert to fire or resolve: a health pass or a heartbeat
# (1 s), SERVICE_DOWN_TIME, a scrape and an evaluation (1 s each) and
# ``for: 1s``, with room for a loaded machine.
ALERT_TIMEOUT = 45
# An agent that stops: its heartbeats, and its scrapes.
AGENT_ALERTS = {'CyborgAgentDown', 'CyborgAgentUnreachable'}


def test_shipped_rules_pass_promtool():
    prometheus_server.install()
    checked = subprocess.run(
        ['promtool', 'check', 'rules', str(monitoring.RULES)],
        capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'SUCCESS' in checked.stdout


def _dashboard_queries() -> dict[str, str]:
    """Each panel's queries, variables substituted, by panel title."""
    dashboard = json.loads(monitoring.DASHBOARD.read_text())
    variables = {v['name']: v for v in dashboard['templating']['list']}
    assert variables['datasource']['type'] == 'datasource'
    assert variables['datasource']['query'] == 'prometheus'
    assert dashboard['schemaVersion'] >= 36  # Grafana 9.0 and later

    def substituted(expr: str) -> str:
        expr = re.sub(r'\$\{?(\w+)\}?', lambda m: VARIABLES[m.group(1)],
                      expr)
        assert '$' not in expr, expr
        return expr

    queries = {}
    for panel in dashboard['panels']:
        if panel['type'] == 'row':
            continue
        assert panel['datasource']['uid'] == '${datasource}', panel
        for target in panel['targets']:
            assert target['datasource']['uid'] == '${datasource}', panel
            queries[f'{panel["title"]} {target["refId"]}'] = substituted(
                target['expr'])
    return queries


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
def test_alerts_fire_and_dashboard_queries_answer(
        tmp_path, rabbit_url, db_engine, empty_db_url, fake_nova):
    prometheus_server.install()
    queries = _dashboard_queries()
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    faults = tmp_path / 'faults.json'
    agent_port, conductor_port = (gate_stack.free_port(),
                                  gate_stack.free_port())
    stack.add_placement()
    stack.add_conductor('conductor1', extra={
        'DEFAULT': {'service_down_time': SERVICE_DOWN_TIME},
        'conductor': {'metrics_port': conductor_port,
                      'metrics_host': '127.0.0.1'}})
    agent = stack.add_agent('agent1', NODE, 2, 1, extra={
        'agent': {'health_interval': 1, 'usage_interval': 1,
                  'metrics_port': agent_port,
                  'metrics_host': '127.0.0.1'},
        'fake_driver': {'fault_file': str(faults),
                        'vgpu_device_count': 1}})
    rules = prometheus_server.short_for(monitoring.RULES,
                                        tmp_path / 'rules.yml')
    prometheus = prometheus_server.Prometheus(
        tmp_path, {'cyborg-agent': [f'127.0.0.1:{agent_port}'],
                   'cyborg-conductor': [f'127.0.0.1:{conductor_port}']},
        rules)
    placement = placement_server.Placement(stack.placement_url)
    with stack.running():
        try:
            stack.start('placement', 'conductor1')
            prometheus.start()
            gate_stack.wait_for(stack.placement_up, 'placement to answer',
                                60)
            placement.create_compute_node(NODE)
            stack.ready('conductor1')
            stack.start('agent1')
            stack.ready('agent1')

            # Every panel answers (rates once two scrapes are in).
            for name, expr in queries.items():
                gate_stack.wait_for(functools.partial(prometheus.query, expr),
                                    f'a series of panel {name}: {expr}',
                                    20, interval=0.5)
            assert not prometheus.alerts('firing'), prometheus.alerts()
            assert not prometheus.alerts('pending'), prometheus.alerts()

            # A device fault.
            [first, *_] = prometheus.query(
                'cyborg_device_health{state="healthy"} == 1')
            address = first['metric']['address']
            faults.write_text(json.dumps({address: {
                'state': 'unhealthy', 'reason': 'AER: 1 fatal error'}}))
            [fired] = gate_stack.wait_for(
                lambda: prometheus.alerts().get('CyborgDeviceUnhealthy'),
                'CyborgDeviceUnhealthy to fire', ALERT_TIMEOUT)
            assert (fired['host'], fired['address']) == (NODE, address)
            assert fired['severity'] == 'warning'
            faults.write_text('{}')
            gate_stack.wait_for(
                lambda: 'CyborgDeviceUnhealthy' not in prometheus.alerts(),
                'CyborgDeviceUnhealthy to resolve', ALERT_TIMEOUT)

            # The agent stops answering anything.
            def agent_alerts() -> dict[str, list[dict]]:
                return {name: found for name, found
                        in prometheus.alerts().items()
                        if name in AGENT_ALERTS}

            agent.pause()
            try:
                down = gate_stack.wait_for(
                    lambda: (lambda found: found.keys() == AGENT_ALERTS
                             and found)(agent_alerts()),
                    'the agent alerts to fire', ALERT_TIMEOUT)
            finally:
                agent.resume()
            assert [a['host'] for a in down['CyborgAgentDown']] == [NODE]
            assert [a['instance'] for a in down['CyborgAgentUnreachable']
                    ] == [f'127.0.0.1:{agent_port}']
            gate_stack.wait_for(lambda: not agent_alerts(),
                                'the agent alerts to resolve', ALERT_TIMEOUT)
            assert not prometheus.alerts('firing'), prometheus.alerts()
        except BaseException:
            print(prometheus.tail())
            raise
        finally:
            assert prometheus.stop() == 0, prometheus.tail()
