"""Generated requests against a running API, checked against openapi.yaml.

What the suite's fuzz test (test_openapi.test_schemathesis) and the fuzz
tool (tools/fuzz/run.py) share: the resources half of the requests are
aimed at, and the run itself, with the checks of contract.py.

A run at one microversion sends, for every operation of the document,
schemathesis's coverage cases (boundary values, missing and malformed
parameters, undocumented methods), then N positive and N negative
generated requests, then walks the links between operations (the
stateful phase). A failing check is recorded and the run goes on: every
distinct failure is reported once, with a request that reproduces it,
and nothing is shrunk.
"""
import dataclasses
import re
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import hypothesis
import requests
from hypothesis import errors as hypothesis_errors
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.failures import Failure
from schemathesis.core.failures import FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.meta import REQUEST_SHAPE_PROBES
from schemathesis.generation.stateful import run_state_machine_as_test
from schemathesis.openapi.checks import UndefinedStatusCode

from cyborg.tests.functional.api.contract import CHECKS
from cyborg.tests.functional.api.contract import NO_LEGACY_500
from cyborg.tests.functional.api.contract import STATEFUL_CHECKS
from cyborg.tests.functional.api.contract import VERSION_HEADER
from cyborg.tests.functional.api.contract import ServerErrorFailure
from cyborg.tests.functional.api.contract import served_version

# An administrator whose request also carries a valid service token (under
# noauth the API trusts X-Service-Roles): the caller every operation
# serves, binds and deletes by instance included.
HEADERS = {'X-Auth-Token': 'admin', 'X-Service-Roles': 'service'}
# Headers that frame a request on the wire rather than say anything to
# the API (see ``Fuzzer.prepare``).
FRAMING_HEADERS = frozenset(('content-length', 'transfer-encoding',
                             'host', 'connection'))
# Walks of the stateful phase per hypothesis run.
STATEFUL_BATCH = 20


# -- the resources half of the requests name --------------------------------

class Resources:
    """A resource of each kind, made again once a request deleted it.

    Devices and deployables come from the agents' reports (they must
    exist beforehand); a device profile, an accelerator request of it and
    an attribute of the first deployable are created here, over HTTP.
    ``ids`` maps each resource (the first segment after /v2/) to the
    uuid, or for hosts the name, that its path parameters get.
    """

    def __init__(self, root: str, host: str) -> None:
        self.root = root
        self.session = requests.Session()
        self.session.headers.update(HEADERS)
        self.ids: dict[str, str] = {'hosts': host}
        # The name of the profile the requests are made from.
        self.profile = ''
        self.made = 0

    def _call(self, method: str, path: str, expect: int,
              body: Any = None) -> Any:
        response = self.session.request(method, self.root + path,
                                        json=body, timeout=60)
        if response.status_code != expect:
            raise RuntimeError(f'{method} {path}: {response.status_code} '
                               f'{response.text}')
        return response.json() if response.content else None

    def seed(self) -> dict[str, str]:
        devices = self._call('GET', '/v2/devices', 200)['devices']
        deployables = self._call('GET', '/v2/deployables', 200)['deployables']
        if not devices or not deployables:
            raise RuntimeError('no device to aim requests at')
        self.ids['devices'] = devices[0]['uuid']
        self.ids['deployables'] = deployables[0]['uuid']
        # Free: its clean and release are 409s, as no clean failed here.
        response = self.session.get(
            self.root + '/v2/attach_handles', timeout=60,
            headers={'OpenStack-API-Version': 'accelerator 2.8'})
        if response.status_code != 200:
            raise RuntimeError(f'GET /v2/attach_handles: '
                               f'{response.status_code} {response.text}')
        self.ids['attach_handles'] = response.json()[
            'attach_handles'][0]['uuid']
        for resource in ('device_profiles', 'accelerator_requests',
                         'attributes'):
            self.make(resource)
        return self.ids

    def make(self, resource: str) -> None:
        self.made += 1
        if resource == 'device_profiles':
            name = f'fuzz-dp-{self.made}'
            self.ids[resource] = self._call(
                'POST', '/v2/device_profiles', 201,
                [{'name': name,
                  'groups': [{'resources:FPGA': '1',
                              'trait:CUSTOM_FAKE_DEVICE': 'required'}]}]
            )['uuid']
            self.profile = name
        elif resource == 'accelerator_requests':
            self.ids[resource] = self._arq()
        elif resource == 'attributes':
            self.ids[resource] = self._call(
                'POST', '/v2/attributes', 201,
                {'deployable_uuid': self.ids['deployables'],
                 'key': f'fuzz-{self.made}', 'value': 'v'})['uuid']

    def _arq(self) -> str:
        try:
            return self._call('POST', '/v2/accelerator_requests', 201,
                              {'device_profile_name': self.profile}
                              )['arqs'][0]['uuid']
        except RuntimeError:
            # The profile went with a delete by name or uuid.
            self.make('device_profiles')
            return self._call('POST', '/v2/accelerator_requests', 201,
                              {'device_profile_name': self.profile}
                              )['arqs'][0]['uuid']

    def after(self, case: Any, response: Any) -> None:
        """Make again what a successful DELETE may have removed."""
        if case.method.upper() != 'DELETE' or not (
                200 <= response.status_code < 300):
            return
        resource = _resource(case.operation.path)
        if resource in ('device_profiles', 'accelerator_requests',
                        'attributes'):
            self.make(resource)


def _resource(path: str) -> str:
    parts = path.split('/')
    return parts[2] if len(parts) > 2 else ''


# -- the run ----------------------------------------------------------------

@dataclasses.dataclass
class Finding:
    """One distinct failure: where, what, how often, and a request that
    reproduces it."""

    operation: str
    kind: str
    status: int | None
    message: str
    curl: str
    count: int = 1
    # What the API logged about it, when known.
    cause: str = ''


# What makes two failures the same: their messages with the generated
# values (uuids, numbers, quoted strings) blanked out.
_NOISE = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                    r'[0-9a-f]{12}|\d+|\'[^\']*\'|"[^"]*"', re.I)


class CountingSession(requests.Session):
    """A session that counts the requests it actually sends."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def send(self, request: Any, **kwargs: Any) -> Any:
        self.sent += 1
        return super().send(request, **kwargs)


class Fuzz:
    """The run at one microversion against the API at ``root``
    (``http://host:port``); ``version`` None sends no version header."""

    def __init__(self, schema: Any, root: str, version: str | None,
                 resources: Resources, seed: int | None = None,
                 checks: list[Callable[..., Any]] = CHECKS,
                 timeout: float = 60) -> None:
        self.schema = schema
        self.checks = checks
        self.root = root
        self.version = version
        self.resources = resources
        self.seed = seed
        self.timeout = timeout
        self.session = CountingSession()
        self.findings: dict[tuple[str, str, int | None, str], Finding] = {}

    # -- one request --------------------------------------------------------

    def prepare(self, case: Any, existing: bool) -> None:
        """The caller's headers and the microversion on every case, unless
        the case is about a bad version header; ``existing``: its path
        names the resource of ``resources``, unless its path is what the
        case gets wrong."""
        meta = case.meta
        negative = {location for location, info in
                    (meta.components.items() if meta else ())
                    if info.mode.is_negative}
        data = meta.phase.data if meta else None
        # A probe of the method or the Content-Type keeps the rest valid.
        probe = getattr(data, 'scenario', None) in REQUEST_SHAPE_PROBES
        # Framing headers are the HTTP client's to set: a malformed
        # Content-Length is refused by the HTTP server (waitress, uwsgi)
        # before any WSGI application sees the request, as RFC 9112
        # section 6.3 asks, in its own plain-text 400.
        headers = dict({name: value for name, value
                        in (case.headers or {}).items()
                        if name.lower() not in FRAMING_HEADERS}, **HEADERS)
        if probe or (ParameterLocation.HEADER not in negative
                     and getattr(data, 'parameter', None) != VERSION_HEADER):
            headers.pop(VERSION_HEADER, None)
            if self.version:
                headers[VERSION_HEADER] = f'accelerator {self.version}'
        case.headers = headers
        resource = _resource(case.operation.path)
        if (existing and case.path_parameters
                and (probe or ParameterLocation.PATH not in negative)
                and resource in self.resources.ids):
            for name in case.path_parameters:
                case.path_parameters[name] = self.resources.ids[resource]

    def send(self, case: Any) -> Any:
        """Send ``case``; the response, or None (recorded) if none came."""
        try:
            return case.call(base_url=self.root, session=self.session,
                             timeout=self.timeout)
        except requests.RequestException as exc:
            self._record(case.operation.label, 'No response', None,
                         f'{type(exc).__name__}: {exc}', case, None)
            return None

    def call(self, case: Any) -> None:
        response = self.send(case)
        if response is not None:
            self.validate(case, response, self.checks)

    def validate(self, case: Any, response: Any,
                 checks: list[Callable[..., Any]],
                 recorder: Any = None) -> None:
        """Run ``checks`` on the response and record what fails."""
        self.resources.after(case, response)
        self._replay_legacy(case, response)
        try:
            case.validate_response(response, checks=checks,
                                   transport_kwargs={'base_url': self.root},
                                   recorder=recorder)
        except FailureGroup as group:
            failures = list(group.exceptions)
        except Failure as failure:
            failures = [failure]
        else:
            return
        for failure in failures:
            if (isinstance(failure, UndefinedStatusCode)
                    and response.status_code >= 500):
                # no_undocumented_server_error says it, with the body.
                continue
            self._record(failure.operation or case.operation.label,
                         failure.title, response.status_code,
                         failure.message, case, response)

    def _replay_legacy(self, case: Any, response: Any) -> None:
        """A documented 500 below 2.4 is for bad input, which 2.4 answers
        with a 400: sent again at 2.4, any other 5xx was a crash that the
        legacy 500 hid."""
        if (response.status_code != 500
                or served_version(response) >= NO_LEGACY_500
                or '500' not in case.operation.definition.raw['responses']):
            return
        again = response.request.copy()
        again.headers[VERSION_HEADER] = 'accelerator %d.%d' % NO_LEGACY_500
        try:
            replayed = self.session.send(again, timeout=self.timeout)
        except requests.RequestException:
            return
        if replayed.status_code >= 500:
            self._record(
                case.operation.label, ServerErrorFailure.kind_title, 500,
                f'500 at {self.version or "2.0"}, '
                f'{replayed.status_code} at 2.4 too: '
                f'{replayed.content[:2000].decode(errors="replace")}',
                case, response)

    def _record(self, operation: str, kind: str, status: int | None,
                message: str, case: Any, response: Any) -> None:
        message = ' '.join(message.split())
        signature = _NOISE.sub('_', message)[:300]
        key = (operation, kind, status, signature)
        if key in self.findings:
            self.findings[key].count += 1
            return
        headers = dict(response.request.headers) if response is not None \
            else None
        curl = case.as_curl_command(headers=headers, base_url=self.root)
        self.findings[key] = Finding(operation, kind, status,
                                     message[:1500], curl)

    # -- the phases ---------------------------------------------------------

    def _settings(self, examples: int, **kwargs: Any) -> hypothesis.settings:
        return hypothesis.settings(
            max_examples=examples, derandomize=self.seed is None,
            database=None, deadline=None,
            suppress_health_check=list(hypothesis.HealthCheck),
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            **kwargs)

    def _seeded(self, test: Callable[..., Any]) -> Callable[..., Any]:
        return test if self.seed is None else hypothesis.seed(self.seed)(
            test)

    def coverage(self, operation: Any) -> None:
        """schemathesis's coverage cases of ``operation``, every other one
        aimed at the existing resource."""
        config = self.schema.config.generation_for(operation=operation)
        cases = self.schema.iter_coverage_cases(
            operation, generation_modes=list(GenerationMode),
            generation_config=config)
        for number, case in enumerate(cases):
            self.prepare(case, existing=number % 2 == 1)
            self.call(case)

    def generated(self, operation: Any, examples: int) -> None:
        """``examples`` positive then ``examples`` negative requests, half
        of them aimed at the existing resource."""
        for mode in GenerationMode:
            strategy = operation.as_strategy(generation_mode=mode)

            @self._settings(examples)
            @hypothesis.given(case=strategy, existing=st.booleans())
            def run(case: Any, existing: bool) -> None:
                self.prepare(case, existing)
                self.call(case)

            try:
                self._seeded(run)()
            except hypothesis_errors.Unsatisfiable:
                # Nothing of the operation can be made invalid (no
                # parameter, no body): there is no negative request.
                pass

    def stateful(self, examples: int, steps: int) -> None:
        """``examples`` walks of up to ``steps`` linked requests."""
        fuzz = self

        class Machine(self.schema.as_state_machine()):  # type: ignore
            def before_call(self, case: Any) -> None:
                fuzz.prepare(case, existing=False)

            def call(self, case: Any, **kwargs: Any) -> Any:
                response = fuzz.send(case)
                # A walk cannot go on without the response.
                hypothesis.assume(response is not None)
                return response

            def validate_response(self, response: Any, case: Any,
                                  *args: Any, **kwargs: Any) -> None:
                fuzz.validate(case, response,
                              fuzz.checks + STATEFUL_CHECKS, self.recorder)

        # Walks in batches, each from a seed of its own: what a walk can
        # do depends on what the API answered before, which hypothesis
        # may find inconsistent when it replays a prefix; that ends the
        # batch, not the phase.
        first = self.seed or 0
        for batch in range(-(-examples // STATEFUL_BATCH)):
            try:
                run_state_machine_as_test(
                    hypothesis.seed(first + batch)(Machine),
                    settings=self._settings(
                        min(STATEFUL_BATCH,
                            examples - batch * STATEFUL_BATCH),
                        stateful_step_count=steps))
            except hypothesis_errors.FlakyStrategyDefinition:
                pass

    def run(self, examples: int, stateful_examples: int, steps: int = 10,
            coverage: bool = True,
            operations: Callable[[Any], bool] = lambda op: True,
            progress: Callable[[str], None] = lambda line: None) -> None:
        """Every operation that ``operations`` keeps: its coverage cases
        (unless not ``coverage``), ``examples`` positive and as many
        negative requests; then ``stateful_examples`` walks of up to
        ``steps`` requests."""
        for operation in self.operations(operations):
            before = self.session.sent
            if coverage:
                self.coverage(operation)
            self.generated(operation, examples)
            progress(f'{operation.label}: {self.session.sent - before} '
                     f'requests')
        if stateful_examples:
            before = self.session.sent
            self.stateful(stateful_examples, steps)
            progress(f'stateful: {self.session.sent - before} requests')

    def operations(self, keep: Callable[[Any], bool]) -> Iterator[Any]:
        for result in self.schema.get_all_operations():
            operation = result.ok()
            if keep(operation):
                yield operation

    def report(self) -> str:
        """The findings, grouped by operation and kind."""
        grouped: dict[tuple[str, str], list[Finding]] = {}
        for finding in self.findings.values():
            grouped.setdefault((finding.operation, finding.kind),
                               []).append(finding)
        lines = []
        for (operation, kind), findings in sorted(grouped.items()):
            total = sum(f.count for f in findings)
            lines.append(f'{operation} — {kind}: {total} failure(s), '
                         f'{len(findings)} distinct')
            for finding in findings:
                status = finding.status if finding.status is not None \
                    else 'no response'
                lines.append(f'  [{status}] x{finding.count} '
                             f'{finding.message}')
                if finding.cause:
                    lines.append(f'    logged: {finding.cause}')
                lines.append(f'    {finding.curl}')
        return '\n'.join(lines)
