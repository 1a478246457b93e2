"""The API reference samples, replayed against the real API.

``doc/source/reference/samples/samples.yaml`` lists sample cases in order:
a request (method, path, headers, body from a request file) and what the
API answers (status, body from a response file). This test sends each one
to the API, with a real database, conductor and agent (fake driver), and
holds the answer to the sample: the same status, the same JSON structure
with exactly the same keys at every level, the same value types and equal
values. Only what legitimately differs from one run to the next is checked
by its format instead: UUIDs, timestamps and service versions, also where
strings embed them (links, messages). A UUID must stand for the same thing
throughout: once the sample's ``8d5e...`` has been seen as the real
``1f2a...``, every later sample and request that says ``8d5e...`` means
``1f2a...``; that is how request samples name what earlier responses
created, and how ``{placeholders}`` in paths are filled (``save``).

It also checks that every route of the OpenAPI description and of v1, and
every microversion, has a sample case, and that every sample file is listed
in the manifest and shown by a page of the reference.

After a change to the API, ``CYBORG_WRITE_API_SAMPLES=1`` rewrites the
response samples from what the API answers, keeping the sample's value
wherever only a UUID or timestamp differs; review the diff.
"""
import json
import os
import pathlib
import re
import time
from typing import Any

import pytest
import yaml

from cyborg import context as cyborg_context
from cyborg import version
from cyborg.accelerator.drivers import fake
from cyborg.agent import health
from cyborg.agent import service as agent_service
from cyborg.api import versions
from cyborg.db.api import inventory
from cyborg.db.api import services
from cyborg.tests.fakes import fixtures

REFERENCE = (pathlib.Path(__file__).parents[4] / 'doc' / 'source'
             / 'reference')
SAMPLES = REFERENCE / 'samples'
MANIFEST = SAMPLES / 'samples.yaml'
OPENAPI = REFERENCE / 'openapi.yaml'
METHODS = ('get', 'post', 'put', 'patch', 'delete')
# Served, but not in openapi.yaml: the deprecated v1 view.
V1_ROUTES = {('GET', '/v1'), ('GET', '/v1/accelerators'),
             ('GET', '/v1/accelerators/{uuid}')}
WRITE = os.environ.get('CYBORG_WRITE_API_SAMPLES') == '1'

UUID = r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
TIMESTAMP = (r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?'
             r'(?:[+-]\d\d:\d\d|Z)?')
VARYING = re.compile(f'(?P<uuid>{UUID})|(?P<timestamp>{TIMESTAMP})')
# Values of these keys are checked by format only.
FORMATS = {'version': re.compile(r'\d+(\.\d+)+(\.dev\d+)?(\+.*)?|unknown')}
MISSING = object()


def _manifest() -> dict[str, Any]:
    with MANIFEST.open() as f:
        return yaml.safe_load(f)


def _load(name: str) -> Any:
    with (SAMPLES / name).open() as f:
        return json.load(f)


def _parts(text: str) -> list[tuple[str, str]]:
    """``text`` as (kind, value) pieces: 'uuid', 'timestamp', 'text'."""
    parts, end = [], 0
    for match in VARYING.finditer(text):
        if match.start() > end:
            parts.append(('text', text[end:match.start()]))
        parts.append((match.lastgroup, match.group()))
        end = match.end()
    if end < len(text):
        parts.append(('text', text[end:]))
    return parts


def _embedded_json(text: str) -> Any:
    """The JSON document a string holds (error_message, attributes_list
    and board infos are JSON strings), or MISSING."""
    if not text.startswith(('{', '[')):
        return MISSING
    try:
        return json.loads(text)
    except ValueError:
        return MISSING


class Mismatch(AssertionError):
    pass


class Replay:
    """Holds real responses to samples, remembering which real UUID each
    sample UUID stands for."""

    def __init__(self) -> None:
        self.real: dict[str, str] = {}
        self.sample: dict[str, str] = {}

    def pair(self, sample: str, real: str, where: str) -> None:
        known = self.real.setdefault(sample, real)
        if known != real:
            raise Mismatch(f'{where}: sample {sample} was {known} before, '
                           f'now {real}')
        seen = self.sample.setdefault(real, sample)
        if seen != sample:
            raise Mismatch(f'{where}: {real} is sample {seen} elsewhere, '
                           f'{sample} here')

    def translate(self, value: Any) -> Any:
        """A request sample with the sample UUIDs replaced by real ones."""
        if isinstance(value, dict):
            return {self.translate(k): self.translate(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self.translate(v) for v in value]
        if isinstance(value, str):
            return re.sub(UUID, lambda m: self.real.get(m.group(), m.group()),
                          value)
        return value

    def check(self, sample: Any, real: Any, where: str = '') -> None:
        """Raise Mismatch where ``real`` differs from ``sample``."""
        if type(real) is not type(sample):
            raise Mismatch(f'{where or "/"}: {type(real).__name__} '
                           f'{real!r}, the sample has '
                           f'{type(sample).__name__} {sample!r}')
        if isinstance(sample, dict):
            if set(real) != set(sample):
                raise Mismatch(
                    f'{where or "/"}: keys {sorted(real)}, the sample has '
                    f'{sorted(sample)}')
            for key in sample:
                self._check_key(key, sample[key], real[key],
                                f'{where}/{key}')
        elif isinstance(sample, list):
            if len(real) != len(sample):
                raise Mismatch(f'{where or "/"}: {len(real)} items, the '
                               f'sample has {len(sample)}')
            for i, (s, r) in enumerate(zip(sample, real, strict=True)):
                self.check(s, r, f'{where}/{i}')
        elif isinstance(sample, str):
            self._check_string(sample, real, where)
        elif real != sample:
            raise Mismatch(f'{where}: {real!r}, the sample has {sample!r}')

    def _check_key(self, key: str, sample: Any, real: Any,
                   where: str) -> None:
        if key in FORMATS and isinstance(sample, str):
            for value in (sample, real):
                if not isinstance(value, str) or not (
                        FORMATS[key].fullmatch(value)):
                    raise Mismatch(f'{where}: {value!r} is not a {key}')
            return
        self.check(sample, real, where)

    def _check_string(self, sample: str, real: str, where: str) -> None:
        document = _embedded_json(sample)
        if document is not MISSING:
            real_document = _embedded_json(real)
            if real_document is MISSING:
                raise Mismatch(f'{where}: {real!r} is not JSON, the sample '
                               f'is {sample!r}')
            self.check(document, real_document, f'{where}(json)')
            return
        ours, theirs = _parts(sample), _parts(real)
        shape = [kind if kind != 'text' else value for kind, value in ours]
        if shape != [kind if kind != 'text' else value
                     for kind, value in theirs]:
            raise Mismatch(f'{where}: {real!r}, the sample has {sample!r}')
        for (kind, s), (_, r) in zip(ours, theirs, strict=True):
            if kind == 'uuid':
                self.pair(s, r, where)

    def written(self, sample: Any, real: Any) -> Any:
        """What to write as the new sample: ``real``, but the sample's own
        values wherever they still hold, and the sample's UUIDs."""
        if sample is not MISSING:
            trial = Replay()
            trial.real, trial.sample = dict(self.real), dict(self.sample)
            try:
                trial.check(sample, real)
            except Mismatch:
                pass
            else:
                self.real, self.sample = trial.real, trial.sample
                return sample
        if isinstance(real, dict):
            old = sample if isinstance(sample, dict) else {}
            return {k: self.written(old.get(k, MISSING), v)
                    for k, v in real.items()}
        if isinstance(real, list):
            old = sample if isinstance(sample, list) else []
            return [self.written(old[i] if i < len(old) else MISSING, v)
                    for i, v in enumerate(real)]
        if isinstance(real, str):
            return re.sub(UUID,
                          lambda m: self.sample.get(m.group(), m.group()),
                          real)
        return real


def _pointer(document: Any, pointer: str) -> Any:
    """The value at JSON pointer ``pointer`` (RFC 6901, no escapes)."""
    for token in pointer.lstrip('/').split('/'):
        document = document[int(token) if isinstance(document, list)
                            else token]
    return document


def _route_patterns(routes: set[tuple[str, str]]
                    ) -> dict[tuple[str, str], re.Pattern[str]]:
    return {(method, path): re.compile(
        re.sub(r'\\\{[^}]+\\\}', '[^/]+', re.escape(path)) + '$')
        for method, path in routes}


def _routes() -> set[tuple[str, str]]:
    with OPENAPI.open() as f:
        document = yaml.safe_load(f)
    return {(method.upper(), path)
            for path, item in document['paths'].items()
            for method in METHODS if method in item} | V1_ROUTES


def _route_of(case: dict[str, Any],
              patterns: dict[tuple[str, str], re.Pattern[str]]
              ) -> tuple[str, str]:
    path = case['path'].split('?')[0]
    matches = [route for route, pattern in patterns.items()
               if route[0] == case['method'] and pattern.match(path)]
    assert len(matches) == 1, (
        f'{case["name"]}: {case["method"]} {path} matches {matches}')
    return matches[0]


def test_every_route_has_a_sample():
    routes = _routes()
    patterns = _route_patterns(routes)
    cases = _manifest()['cases']
    names = [case['name'] for case in cases]
    assert len(names) == len(set(names)), 'sample case names repeat'
    covered = {_route_of(case, patterns) for case in cases}
    assert routes - covered == set(), 'routes without a sample case'
    asked = {case.get('headers', {}).get(versions.HEADER) for case in cases}
    for microversion in versions.VERSIONS[1:]:
        assert (f'{versions.SERVICE_TYPE} {versions.as_string(microversion)}'
                in asked), f'no sample case at {microversion}'
    for case in cases:
        route = _route_of(case, patterns)
        if 'request' in case:
            assert case['method'] in ('POST', 'PATCH', 'PUT'), case['name']
        if case['status'] < 300 and route[0] == 'GET':
            assert 'response' in case, f'{case["name"]}: no response sample'


def _included() -> set[pathlib.Path]:
    """The files the reference pages include with literalinclude."""
    found = set()
    for page in REFERENCE.rglob('*.rst'):
        for match in re.finditer(r'^\s*\.\. literalinclude:: (\S+)',
                                 page.read_text(), re.MULTILINE):
            found.add((page.parent / match.group(1)).resolve())
    return found


def test_every_sample_is_listed_and_shown():
    cases = _manifest()['cases']
    listed = {SAMPLES / case[key] for case in cases
              for key in ('request', 'response') if key in case}
    on_disk = {path for path in SAMPLES.rglob('*.json')}
    assert sorted(map(str, listed - on_disk)) == [], (
        'listed in samples.yaml but missing')
    assert sorted(map(str, on_disk - listed)) == [], (
        'sample files samples.yaml does not list')
    shown = _included()
    assert sorted(str(p) for p in on_disk if p.resolve() not in shown) == [], (
        'sample files no reference page includes')
    routes = _routes()
    pages = '\n'.join(p.read_text() for p in REFERENCE.rglob('*.rst'))
    for method, path in sorted(routes):
        assert f'{method} {path}' in pages, (
            f'{method} {path} is not described in the reference')


@pytest.fixture
def agent(api, fake_glance):
    """What the manifest's ``setup`` describes: a conductor and an agent
    with the fake driver that has reported its devices, and the images in
    a fake Glance."""
    setup = _manifest()['setup']
    api.conf.set_override('public_endpoint', setup['endpoint'], 'api')
    fixtures.glance_conf(api.conf, fake_glance)
    for image in setup['images']:
        fake_glance.add_image(b'bitstream', image_id=image['id'],
                              name=image['name'])
    ctx = cyborg_context.get_admin_context()
    services.heartbeat(ctx, setup['conductor']['host'], 'cyborg-conductor',
                       version.version_string())
    host = setup['agent']['host']
    api.conf.set_override('host', host)
    api.conf.set_override('hostname', setup['agent']['hostname'], 'agent')
    api.conf.set_override('hotplug', False, 'agent')
    api.conf.set_override('periodic_interval', 3600, 'agent')
    # One health pass, run below once the devices are known, rather than
    # a periodic one that may come before or after the report.
    api.conf.set_override('health_interval', 0, 'agent')
    api.conf.set_override('device_count', setup['agent']['fake_devices'],
                          'fake_driver')
    svc = agent_service.build(api.conf, loaded=[fake.FakeDriver(api.conf)])
    svc.start()
    deadline = time.monotonic() + 30
    while (not inventory.get_host_devices(ctx, host)
           or not services.get_all(ctx, binary='cyborg-agent')):
        assert time.monotonic() < deadline, 'the agent reported nothing'
        time.sleep(0.05)
    health.HealthMonitor(api.conf, svc.agent.tracker,
                         svc.agent.conductor_api).run()
    yield
    svc.stop()


def _send(api, case: dict[str, Any], headers: dict[str, str],
          body: Any) -> Any:
    method = case['method'].lower()
    kwargs: dict[str, Any] = {'headers': headers, 'expect_errors': True}
    if body is not MISSING:
        return getattr(api.app, f'{method}_json')(case['path'], body,
                                                  **kwargs)
    return getattr(api.app, method)(case['path'], **kwargs)


def test_samples_match_the_api(api, agent):
    manifest = _manifest()
    replay = Replay()
    variables = dict(manifest.get('variables', {}))
    failures = []
    for case in manifest['cases']:
        name = case['name']
        headers = dict(manifest['credentials'][case.get('as', 'admin')])
        headers.update(case.get('headers', {}))
        path = case['path'].format(**variables)
        body = (replay.translate(_load(case['request']))
                if 'request' in case else MISSING)
        response = _send(api, dict(case, path=path), headers, body)
        where = f'{name} ({case["method"]} {path})'
        assert response.status_int == case['status'], (
            f'{where}: {response.status}, the sample says '
            f'{case["status"]}: {response.text[:500]}')
        if path.startswith('/v2') and response.status_int < 400:
            served = headers.get(versions.HEADER, f'{versions.SERVICE_TYPE} '
                                 f'{versions.as_string(versions.MIN_VERSION)}')
            assert response.headers[versions.HEADER] == served, where
        if 'response' not in case:
            assert response.body == b'', f'{where}: a body {response.text}'
            continue
        assert response.content_type == 'application/json', where
        real = response.json
        for variable, pointer in case.get('save', {}).items():
            variables[variable] = _pointer(real, pointer)
        if WRITE:
            file = SAMPLES / case['response']
            sample = _load(case['response']) if file.exists() else MISSING
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps(replay.written(sample, real),
                                       indent=4) + '\n')
            continue
        sample = _load(case['response'])
        try:
            # Clients index some envelopes by their first key.
            if list(real)[:1] != list(sample)[:1]:
                raise Mismatch(f'/: first key {list(real)[:1]}, the sample '
                               f'has {list(sample)[:1]}')
            replay.check(sample, real)
        except Mismatch as exc:
            failures.append(f'{where}, {case["response"]}: {exc}')
    assert not failures, '\n'.join(failures)
