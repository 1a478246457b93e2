"""Capture what the REST API answers to a fixed set of requests, as JSON.

The API (``app.setup_app``, noauth, a conductor on the fake RPC transport)
runs in-process on a new SQLite database, as the functional API tests run
it (``cyborg.tests.functional.api.fixtures``). The requests: every path of
the route table with every method, the ones it does not serve included,
with and without a body, with bad JSON, and paths it does not have; each
at every microversion header value (none, 2.0 to the latest, ``latest``,
an invalid one and one too high); the version documents; a few state
changes (a device profile created, shown by name and deleted per
version). For each answer it keeps the status, the headers a client
reads (Allow, Content-Type, OpenStack-API-Version and the range, Vary)
and the body, with uuids and timestamps replaced by placeholders (uuids
numbered in their order of appearance), so that two runs of the same
code write the same file (the script runs itself with a fixed
``PYTHONHASHSEED``). It runs in well under a minute.

Run it from a checkout (its code is what is captured) with the test
virtualenv, then compare two captures::

    PYTHONPATH=$PWD .tox/py3/bin/python tools/api_capture.py before.json
    # ... change the code ...
    PYTHONPATH=$PWD .tox/py3/bin/python tools/api_capture.py after.json
    diff before.json after.json && echo identical

The request set is a fixed list, not derived from the route table, so
that a change of the table shows as a difference.
"""
import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from oslo_config import cfg

from cyborg.tests import conftest
from cyborg.tests.functional.api import fixtures

HASH_SEED = '0'

MISSING = '0b2d4e5f-7a8b-4c9d-8e0f-1a2b3c4d5e6f'
METHODS = ('GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS')
WITH_BODY = ('POST', 'PUT', 'PATCH')
# None: no header at all.
VERSION_HEADERS = (None, '2.0', '2.1', '2.2', '2.3', '2.4', '2.5', '2.6',
                   '2.7', '2.8', '2.9', '2.10', '2.11', '2.12', 'latest',
                   'bogus', '2.99')
HEADERS = ('Allow', 'Content-Type', 'OpenStack-API-Version',
           'OpenStack-API-Minimum-Version', 'OpenStack-API-Maximum-Version',
           'Vary')
# The paths of the table as of 2.10 and v1, {names} filled by ``paths``,
# then paths the API does not have.
TEMPLATES = (
    '/', '/v1', '/v1/', '/v1/accelerators', '/v1/accelerators/{deployable}',
    '/v1/accelerators/{missing}',
    '/v2', '/v2/',
    '/v2/accelerator_requests', '/v2/accelerator_requests/{arq}',
    '/v2/accelerator_requests/{missing}',
    '/v2/attach_handles', '/v2/attach_handles/{handle}/clean',
    '/v2/attach_handles/{missing}/release',
    '/v2/attributes', '/v2/attributes/{attribute}',
    '/v2/attributes/{missing}',
    '/v2/capacity',
    '/v2/deployables', '/v2/deployables/{deployable}',
    '/v2/deployables/{missing}/program',
    '/v2/deployables/{missing}/program/{missing}',
    '/v2/device_profiles', '/v2/device_profiles/{profile}',
    '/v2/device_profiles/dp1', '/v2/device_profiles/{missing}',
    '/v2/device_profiles/dp1/projects',
    '/v2/device_profiles/{missing}/projects/p1',
    '/v2/devices', '/v2/devices/{device}', '/v2/devices/{missing}',
    '/v2/devices/{missing}/disable', '/v2/devices/{missing}/enable',
    '/v2/devices/{missing}/health', '/v2/devices/{device}/impact',
    '/v2/devices/{device}/layout', '/v2/devices/{missing}/layout',
    '/v2/drivers',
    '/v2/hosts/nohost/discover', '/v2/hosts/cmp1/drivers',
    '/v2/hosts/nohost/drivers/reload',
    '/v2/hosts/cmp1/drivers/nodriver/disable',
    '/v2/hosts/cmp1/drivers/nodriver/enable',
    '/v2/services',
    # Query parameters of a later microversion.
    '/v2/devices?health=healthy', '/v2/devices?limit=1',
    '/v2/device_profiles?limit=1&marker={profile}',
    # Not paths of the API.
    '/v3', '/x', '/v2/nope', '/v2/devices/{device}/nope',
    '/v2/devices//disable', '/v2/devices/{device}/disable/x', '//v2',
    '/v2/hosts', '/v2/hosts/cmp1', '/v2/hosts/cmp1/drivers/fake',
    '/v2/hosts/cmp1/drivers/fake/x/enable', '/v2/attach_handles/{handle}',
    '/v2/capacity/x', '/v2/services/x', '/v2/drivers/x',
    '/v1/accelerators/{deployable}/x', '/v2/device_profiles?_method=DELETE',
)
# What a request with a body sends: nothing, bad JSON, an empty object.
BODIES = (None, b'{"a": ', b'{}')

_UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}|[0-9a-f]{32}')
_TIME = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?'
                   r'(?:Z|[+-]\d\d:?\d\d)?')


class Normaliser:
    """Replaces uuids by placeholders numbered in their order of first
    appearance over the whole capture, and timestamps by one placeholder:
    two of them are equal or not as the clock's second turns."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def _uuid(self, match: re.Match) -> str:
        return self.seen.setdefault(match.group(0),
                                    f'<uuid-{len(self.seen) + 1}>')

    def __call__(self, text: str) -> str:
        return _TIME.sub('<time>', _UUID.sub(self._uuid, text))


def _headers(version: str | None, body: bytes | None) -> dict[str, str]:
    headers = dict(fixtures.ADMIN)
    if version is not None:
        headers['OpenStack-API-Version'] = f'accelerator {version}'
    if body is not None:
        headers['Content-Type'] = 'application/json'
    return headers


def _answer(api: fixtures.API, normalise: Normaliser, method: str,
            path: str, version: str | None, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = api.app.request(
        path, method=method, body=body or b'', expect_errors=True,
        headers=headers if headers is not None else _headers(version, body))
    text = response.body.decode('utf-8', 'replace')
    return {'request': normalise(f'{method} {path} version={version} '
                                 f'body={body!r}'),
            'status': response.status,
            'headers': {name: normalise(response.headers[name])
                        for name in HEADERS if name in response.headers},
            'body': normalise(text)}


def _running_api(state: str) -> Iterator[fixtures.API]:
    cfg.CONF([], project='cyborg', default_config_files=[])
    cfg.CONF.set_override('state_path', state)
    try:
        for engine in conftest.migrated_engine(
                f'sqlite:///{state}/cyborg.sqlite'):
            yield from fixtures._api(cfg.CONF, engine)
    finally:
        cfg.CONF.reset()


def _seed(api: fixtures.API) -> dict[str, str]:
    """A host with two fake devices, a profile and a request; the uuids
    the templates name."""
    devices = api.seed('cmp1', count=2)
    profile = api.dp('dp1')
    arq = api.app.post_json('/v2/accelerator_requests',
                            {'device_profile_name': 'dp1'},
                            headers=fixtures.ADMIN).json['arqs'][0]
    attribute = api.app.get('/v2/attributes',
                            headers=fixtures.ADMIN).json['attributes'][0]
    deployable = devices[0]['deployables'][0]
    return {'device': devices[0]['uuid'], 'deployable': deployable['uuid'],
            'handle': deployable['attach_handles'][0]['uuid'],
            'profile': profile['uuid'], 'arq': arq['uuid'],
            'attribute': attribute['uuid'], 'missing': MISSING}


def capture(api: fixtures.API) -> list[dict[str, Any]]:
    normalise = Normaliser()
    names = _seed(api)
    paths = [template.format(**names) for template in TEMPLATES]
    answers = []
    for version in VERSION_HEADERS:
        for path in paths:
            for method in METHODS:
                for body in (BODIES if method in WITH_BODY else (None,)):
                    answers.append(_answer(api, normalise, method, path,
                                           version, body))
        # The /project_id operation (2.1), in a bind to nowhere.
        project = json.dumps({names['arq']: [
            {'path': '/hostname', 'op': 'add', 'value': 'nohost'},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': MISSING},
            {'path': '/instance_uuid', 'op': 'add', 'value': MISSING},
            {'path': '/project_id', 'op': 'add', 'value': 'p2'}]}).encode()
        answers.append(_answer(api, normalise, 'PATCH',
                               '/v2/accelerator_requests', version, project))
        # A profile of this version's own: created, shown by name, listed,
        # deleted by name, deleted again.
        name = f'dp-{version}'.replace('.', '_')
        profile = json.dumps([{'name': name, 'groups': [
            {'resources:FPGA': '1'}]}]).encode()
        for method, path, body in (
                ('POST', '/v2/device_profiles', profile),
                ('GET', f'/v2/device_profiles/{name}', None),
                ('GET', '/v2/device_profiles', None),
                ('DELETE', f'/v2/device_profiles/{name}', None),
                ('DELETE', f'/v2/device_profiles/{name}', None)):
            answers.append(_answer(api, normalise, method, path, version,
                                   body))
    # Without a token; with a header naming another service only.
    for path in ('/', '/v2', '/v1', '/v2/devices', '/v2/nope'):
        answers.append(_answer(api, normalise, 'GET', path, None,
                               headers={}))
    answers.append(_answer(
        api, normalise, 'GET', '/v2/devices', None,
        headers=dict(fixtures.ADMIN, **{'OpenStack-API-Version':
                                        'compute 2.1'})))
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('output', help='the JSON file to write')
    args = parser.parse_args()
    if os.environ.get('PYTHONHASHSEED') != HASH_SEED:
        # WSME names a request's unknown query arguments in the order of
        # a set of strings, which string hashing randomises per process.
        os.execve(sys.executable, [sys.executable, *sys.argv],
                  dict(os.environ, PYTHONHASHSEED=HASH_SEED))
    # The API's own logs (a WARNING per legacy 500) are not captured.
    logging.disable(logging.CRITICAL)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as state:
        running = _running_api(state)
        api = next(running)
        try:
            answers = capture(api)
        finally:
            running.close()
    with open(args.output, 'w') as f:
        json.dump(answers, f, indent=1, sort_keys=True)
        f.write('\n')
    print(f'{len(answers)} requests in {time.monotonic() - started:.1f} s '
          f'-> {args.output}', file=sys.stderr)


if __name__ == '__main__':
    main()
