"""Upstream OpenStack Cyborg 17.0.0's services, as processes, for tests.

``Upstream`` runs upstream's cyborg-api, cyborg-conductor and
cyborg-agent (fake driver) from ``upstream_cyborg``'s environment on one
database, against a placement, a RabbitMQ virtual host and a fake Nova,
and speaks upstream's REST API (``upstream_fill`` drives it).

Upstream has no "noauth" mode: its paste pipeline always holds
keystonemiddleware. The API here is served from a paste file of our own
that leaves it out, so the identity comes from the headers that
keystonemiddleware would have set (``X-Roles: admin`` makes an admin for
upstream's policy, ``X-Service-Roles: service`` a Nova service token for
binds). Its [placement] and [nova] clients use keystoneauth's
``admin_token`` plugin: a fixed token to a fixed endpoint.
"""
import contextlib
import os
import pathlib
import signal
from typing import Any

import requests

from cyborg.tests.fakes import nova
from cyborg.tests.harness import cached_venv
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import upstream_cyborg

START_TIMEOUT = 60
BIND_TIMEOUT = 30
# How often the agent reports its devices (upstream's default is 60 s),
# and how long an RPC call may wait for its answer (also 60 s).
REPORT_INTERVAL = 2
RPC_TIMEOUT = 20
# The identity of every call to upstream's API: an admin of this project
# carrying a service token, as Nova's calls carry one.
PROJECT_ID = '5f3b7c1e9a0d4b6c8e2f1a3b5c7d9e0f'
USER_ID = 'a1b2c3d4e5f60718293a4b5c6d7e8f90'
API_HEADERS = {
    'X-Roles': 'admin,member,reader',
    'X-Project-Id': PROJECT_ID,
    'X-User-Id': USER_ID,
    'X-Service-Roles': 'service',
    'OpenStack-API-Version': 'accelerator 2.3',
}
# upstream's cyborg-api command fails in 17.0.0 (oslo.service's WSGI server
# refuses its threading backend); its WSGI application is served here by
# the standard library instead, as devstack serves it by uwsgi. The port
# comes first, then upstream's own arguments.
SERVE_API = '''
import socketserver, sys
from wsgiref import simple_server
port = int(sys.argv.pop(1))
from cyborg.wsgi import api
class Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
class Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass
simple_server.make_server("127.0.0.1", port, api.application,
                          server_class=Server,
                          handler_class=Quiet).serve_forever()
'''
# Upstream's paste pipeline without keystonemiddleware (see above).
API_PASTE = '''[pipeline:main]
pipeline = request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory
'''


class Upstream:
    """Upstream's API, conductor and agent on one configuration; a
    context manager that stops them on the way out, also when starting
    them failed."""

    def __init__(self, workdir: pathlib.Path, database_url: str,
                 placement_url: str, transport_url: str,
                 fake_nova: nova.FakeNova, host: str) -> None:
        self.workdir = workdir
        self.port = gate_stack.free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        (workdir / 'api-paste.ini').write_text(API_PASTE)
        self.conf = upstream_cyborg.write_config(
            workdir, database_url,
            DEFAULT={'transport_url': transport_url, 'host': host,
                     'periodic_interval': REPORT_INTERVAL,
                     'rpc_response_timeout': RPC_TIMEOUT},
            api={'host_ip': '127.0.0.1', 'port': self.port,
                 'api_workers': 1,
                 'api_paste_config': str(workdir / 'api-paste.ini')},
            agent={'enabled_drivers': 'fake_driver',
                   'resource_provider_name': host,
                   'resource_provider_startup_retries': 0},
            placement={'auth_type': 'admin_token', 'token': 'admin',
                       'endpoint': placement_url,
                       'endpoint_override': placement_url},
            nova={'auth_type': 'admin_token', 'token': fake_nova.token,
                  'endpoint': fake_nova.endpoint,
                  'endpoint_override': fake_nova.endpoint},
        )
        bindir = upstream_cyborg.venv() / 'bin'
        argv = {kind: [str(bindir / f'cyborg-{kind}')]
                for kind in ('conductor', 'agent')}
        argv['api'] = [str(bindir / 'python'), '-c', SERVE_API,
                       str(self.port)]
        self.processes = [
            gate_stack.Process(
                f'upstream-{kind}', kind,
                argv[kind] + ['--config-file', str(self.conf)],
                workdir / f'{kind}.log', cwd=workdir)
            for kind in ('conductor', 'api', 'agent')]
        for process in self.processes:
            process.env = dict(cached_venv.env(), PYTHONUNBUFFERED='1')
        self.session = requests.Session()
        self.session.headers.update(API_HEADERS)

    def __enter__(self) -> 'Upstream':
        conductor, api, agent = self.processes
        try:
            # The agent's first report is a call to the conductor: sent
            # before the conductor's queue exists, it would be lost and the
            # agent would wait for its answer until the RPC timeout.
            conductor.start()
            self.wait_for(lambda: 'Created RPC server' in conductor.log(),
                          'upstream cyborg-conductor to listen')
            api.start()
            agent.start()
            self.wait_for(self._api_up, 'upstream cyborg-api to answer')
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM to each, SIGKILL after gate_stack.STOP_TIMEOUT; then
        SIGKILL to whatever is left in their sessions (a launcher's
        workers)."""
        started = [p for p in self.processes if p.popen is not None]
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def logs(self, lines: int = 40) -> str:
        return '\n'.join(f'--- {p.name} ({p.log_path}) ---\n{p.tail(lines)}'
                         for p in self.processes)

    def wait_for(self, check: Any, what: str,
                 timeout: float = START_TIMEOUT) -> Any:
        """gate_stack.wait_for, failing early when a process has exited,
        with the processes' logs."""
        def checked() -> Any:
            dead = [p.name for p in self.processes
                    if p.popen is not None and not p.running]
            if dead:
                raise AssertionError(
                    f'{", ".join(dead)} exited while waiting for {what}:\n'
                    + self.logs())
            return check()
        try:
            return gate_stack.wait_for(checked, what, timeout)
        except AssertionError as exc:
            if 'exited while' in str(exc):
                raise
            raise AssertionError(f'{exc}\n{self.logs()}') from None

    def _api_up(self) -> bool:
        try:
            return self.session.get(self.url + '/', timeout=2).ok
        except requests.ConnectionError:
            return False

    def request(self, method: str, path: str, expect: int,
                **kwargs: Any) -> Any:
        response = self.session.request(method, self.url + '/v2' + path,
                                        timeout=60, **kwargs)
        assert response.status_code == expect, (
            f'{method} {path}: {response.status_code} {response.text}\n'
            + self.logs())
        return response.json() if response.content else None

    def create_profile(self, name: str, groups: list[dict[str, str]],
                       description: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {'name': name, 'groups': groups}
        if description is not None:
            body['description'] = description
        return self.request('POST', '/device_profiles', 201, json=[body])

    def create_arqs(self, profile: str) -> list[dict[str, Any]]:
        return self.request('POST', '/accelerator_requests', 201,
                            json={'device_profile_name': profile})['arqs']

    def bind(self, arqs: list[dict[str, Any]], hostname: str, rp_uuid: str,
             instance_uuid: str, expect: int = 202) -> None:
        """Bind as Nova's conductor does; all of an instance's ARQs in one
        PATCH (upstream refuses a second bind for an instance)."""
        self.request('PATCH', '/accelerator_requests', expect, json={
            arq['uuid']: [
                {'op': 'add', 'path': '/hostname', 'value': hostname},
                {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                {'op': 'add', 'path': '/instance_uuid',
                 'value': instance_uuid}]
            for arq in arqs})

    def unbind(self, arqs: list[dict[str, Any]]) -> None:
        self.request('PATCH', '/accelerator_requests', 202, json={
            arq['uuid']: [{'op': 'remove', 'path': f'/{field}'}
                          for field in ('hostname', 'device_rp_uuid',
                                        'instance_uuid')]
            for arq in arqs})

    def resolved(self, instance_uuid: str) -> list[dict[str, Any]]:
        """The instance's ARQs once all are resolved (upstream answers
        423 until then), as Nova's compute waits for them."""
        def check() -> list[dict[str, Any]] | None:
            response = self.session.get(
                self.url + '/v2/accelerator_requests', timeout=30,
                params={'instance': instance_uuid, 'bind_state': 'resolved'})
            if response.status_code == 423:
                return None
            assert response.status_code == 200, response.text
            return response.json()['arqs']
        return self.wait_for(check, f'the ARQs of {instance_uuid} to be '
                                    'resolved', BIND_TIMEOUT)
