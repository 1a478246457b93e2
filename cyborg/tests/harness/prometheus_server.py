"""A real Prometheus, Debian's ``prometheus`` package, scraping a stack.

``Prometheus`` runs the package's ``prometheus`` binary (not its systemd
service) with a configuration of its own: the given targets, a rule file,
1 s scrape and evaluation intervals, a storage directory under the
test's, on a free port of 127.0.0.1. It answers through the HTTP API
(https://prometheus.io/docs/prometheus/latest/querying/api/):
``query`` is ``GET /api/v1/query``, ``alerts`` is ``GET /api/v1/alerts``.
"""
import pathlib
import re
import subprocess
from typing import Any

import requests
import yaml

from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import system_packages

PACKAGE = 'prometheus'
# Seconds between two scrapes and two rule evaluations: an alert with
# ``for: 1s`` fires 2-3 s after its expression turns true.
INTERVAL = '1s'
# ``for:`` of every rule in the test's copy of a rule file.
FOR = '1s'
# Seconds Prometheus gets to answer /-/ready after it starts (0.5-1 s
# here), and to stop on SIGTERM.
START_TIMEOUT = 30
STOP_TIMEOUT = 15


def install() -> None:
    """Debian's prometheus package, with promtool, when missing."""
    system_packages.debian(PACKAGE)


def short_for(rules: pathlib.Path, copy: pathlib.Path) -> pathlib.Path:
    """Write ``rules`` to ``copy`` with every ``for:`` set to ``FOR``,
    and nothing else changed (checked by parsing both)."""
    text = re.sub(r'^(\s+)for: .*$', rf'\g<1>for: {FOR}', rules.read_text(),
                  flags=re.MULTILINE)
    copy.write_text(text)
    shipped = yaml.safe_load(rules.read_text())
    for group in shipped['groups']:
        for rule in group['rules']:
            if 'for' in rule:
                rule['for'] = FOR
    assert yaml.safe_load(text) == shipped, 'more than for: changed'
    return copy


class Prometheus:
    """One Prometheus process over ``jobs`` (job name -> targets, as
    host:port) with the rule file ``rules``, in ``workdir``."""

    def __init__(self, workdir: pathlib.Path, jobs: dict[str, list[str]],
                 rules: pathlib.Path) -> None:
        self.workdir = workdir
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        config = {
            'global': {'scrape_interval': INTERVAL,
                       'scrape_timeout': INTERVAL,
                       'evaluation_interval': INTERVAL},
            'rule_files': [str(rules)],
            'scrape_configs': [
                {'job_name': job, 'static_configs': [{'targets': targets}]}
                for job, targets in jobs.items()]}
        self.config = workdir / 'prometheus.yml'
        self.config.write_text(yaml.safe_dump(config))
        self.log = workdir / 'prometheus.log'
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, 'ab') as log:
            self.popen = subprocess.Popen(
                ['prometheus', f'--config.file={self.config}',
                 f'--storage.tsdb.path={self.workdir / "data"}',
                 f'--web.listen-address=127.0.0.1:{self.port}'],
                stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        gate_stack.wait_for(self._ready, 'Prometheus to be ready',
                            START_TIMEOUT, interval=0.2)

    def _ready(self) -> bool:
        assert self.popen is not None and self.popen.poll() is None, \
            self.log.read_text()[-2000:]
        try:
            return requests.get(f'{self.url}/-/ready',
                                timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL; its exit code."""
        if self.popen is None:
            return None
        self.popen.terminate()
        try:
            return self.popen.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()

    def _get(self, path: str, **params: str) -> Any:
        answer = requests.get(f'{self.url}/api/v1/{path}', params=params,
                              timeout=10)
        body = answer.json()
        assert answer.status_code == 200 and body['status'] == 'success', \
            (path, params, body)
        return body['data']

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The series of the instant query ``expr``, now."""
        data = self._get('query', query=expr)
        return data['result'] if data['resultType'] == 'vector' else [
            {'metric': {}, 'value': data['result']}]

    def alerts(self, state: str = 'firing') -> dict[str, list[dict]]:
        """The active alerts in ``state`` (pending, firing), by name."""
        found: dict[str, list[dict]] = {}
        for alert in self._get('alerts')['alerts']:
            if alert['state'] == state:
                found.setdefault(alert['labels']['alertname'],
                                 []).append(alert['labels'])
        return found

    def tail(self, lines: int = 30) -> str:
        return '\n'.join(self.log.read_text().splitlines()[-lines:])
