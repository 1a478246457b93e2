"""Malformed and hostile requests: each a JSON 4xx, never a 500.

Bodies that are not JSON (forms, multipart without a boundary), JSON the
parser would choke on (deep nesting) or a column could not store (lone
surrogates, NUL, NaN), and methods or paths no route serves.
"""
import json
import pathlib
import re

import pytest
import requests
import webob
import yaml

from cyborg.api.controllers import root
from cyborg.api.middleware import json_only
from cyborg.api.middleware import routes
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401

REFERENCE = (pathlib.Path(__file__).parents[4] / 'doc' / 'source'
             / 'reference' / 'openapi.yaml')
GROUPS = [{'resources:FPGA': '1'}]
MISSING = '9a1a5b1e-2f83-4f3f-a8b3-7b3cc1b5c7c9'
STATUS_LINES = ('400 Bad Request', '404 Not Found', '405 Method Not Allowed',
                '406 Not Acceptable', '413 Request Entity Too Large',
                '415 Unsupported Media Type')


def _fault(response, status: int) -> str:
    assert response.status_int == status, response.body
    assert response.content_type == 'application/json'
    fault = json.loads(response.json['error_message'])
    assert fault['faultcode'] == 'Client'
    message = fault['faultstring']
    assert not any(line in message for line in STATUS_LINES), message
    return message


def _send(api, method: str, path: str, body: bytes | None = None,
          content_type: str | None = None, headers: dict | None = None):
    """``body`` sent as is: with ``content_type``, or no Content-Type."""
    request = webob.Request.blank(path, method=method,
                                  headers=dict(ADMIN, **(headers or {})))
    if body is not None:
        request.body = body
        request.headers.pop('Content-Type', None)
        if content_type is not None:
            request.headers['Content-Type'] = content_type
    return api.app.do_request(request, status='*', expect_errors=True)


def _profiles(api) -> list[str]:
    return [p['name'] for p in api.app.get(
        '/v2/device_profiles', headers=ADMIN).json['device_profiles']]


def _profile(name: str, **fields) -> bytes:
    return json.dumps([dict(name=name, groups=GROUPS, **fields)]).encode()


WRITES = [('POST', '/v2/device_profiles'),
          ('DELETE', '/v2/device_profiles'),
          ('POST', '/v2/accelerator_requests'),
          ('PATCH', '/v2/accelerator_requests'),
          ('DELETE', '/v2/accelerator_requests'),
          ('PATCH', f'/v2/accelerator_requests/{MISSING}'),
          ('POST', '/v2/attributes'),
          ('DELETE', f'/v2/attributes/{MISSING}'),
          ('POST', f'/v2/devices/{MISSING}/disable'),
          ('PATCH', f'/v2/deployables/{MISSING}/program')]


@pytest.mark.parametrize('method, path', WRITES)
@pytest.mark.parametrize('content_type, body', [
    ('multipart/form-data', b'--x\r\n\r\n--x--\r\n'),
    ('multipart/form-data; boundary=x', b'--x\r\nContent-Disposition: '
     b'form-data; name="a"\r\n\r\n1\r\n--x--\r\n'),
    ('application/x-www-form-urlencoded', b'name=x&_method=DELETE'),
    ('text/plain', b'[]'),
    ('application/xml', b'<a/>'),
])
def test_bodies_that_are_not_json_are_415(api, method, path, content_type,
                                          body):
    response = _send(api, method, path, body, content_type)
    message = _fault(response, 415)
    assert 'Content-Type: application/json' in message
    assert content_type.split(';')[0] in message


@pytest.mark.parametrize('method, query, body', [
    ('POST', '_method=DELETE&value=kept', b'{}'),
    ('POST', '%5Fmeth%6Fd=delete', b''),
    ('GET', 'value=kept&_method=delete', None),
])
def test_no_method_override(api, method, query, body):
    """pecan would route by a _method query parameter."""
    api.dp('kept')
    response = _send(api, method, f'/v2/device_profiles?{query}', body,
                     'application/json')
    assert '_method' in _fault(response, 400)
    assert _profiles(api) == ['kept']


@pytest.mark.parametrize('content_type', [
    None, 'application/json', 'application/json; charset=UTF-8',
    'Application/JSON'])
def test_json_bodies_are_read_with_or_without_a_content_type(
        api, content_type):
    response = _send(api, 'POST', '/v2/device_profiles', _profile('dp'),
                     content_type)
    assert response.status_int == 201, response.body
    assert _profiles(api) == ['dp']


def test_an_arq_bind_without_a_content_type(api):
    [device] = api.seed('cmp1')
    api.dp('dp1')
    arq = api.app.post_json('/v2/accelerator_requests',
                            {'device_profile_name': 'dp1'},
                            headers=ADMIN).json['arqs'][0]
    patch = {arq['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': 'cmp1'},
        {'op': 'add', 'path': '/device_rp_uuid',
         'value': device['deployables'][0]['rp_uuid']},
        {'op': 'add', 'path': '/instance_uuid', 'value': MISSING}]}
    response = _send(api, 'PATCH', '/v2/accelerator_requests',
                     json.dumps(patch).encode(), headers=SERVICE)
    assert response.status_int == 202, response.body


@pytest.mark.parametrize('content_type', [None, 'application/json'])
@pytest.mark.parametrize('body', [
    b'[' * 970 + b']' * 970,
    b'{"a":' * 500 + b'1' + b'}' * 500,
    b'[' * 33 + b']' * 33,
    # Unterminated: refused as deep, not left to recurse.
    b'[' * 5000,
    b'[{"name": "x", "groups": ' + b'[' * 40 + b']' * 40 + b'}]',
])
def test_deep_nesting_is_400_naming_the_limit(api, body, content_type):
    response = _send(api, 'POST', '/v2/device_profiles', body, content_type)
    assert f'more than {json_only.MAX_DEPTH} levels deep' in _fault(
        response, 400)


def test_nesting_up_to_the_limit_is_parsed(api):
    body = b'[' * json_only.MAX_DEPTH + b']' * json_only.MAX_DEPTH
    response = _send(api, 'POST', '/v2/device_profiles', body,
                     'application/json')
    assert 'levels deep' not in _fault(response, 400)


def test_brackets_in_strings_are_not_nesting(api):
    text = '[{"\\"' * 100
    response = _send(api, 'POST', '/v2/device_profiles',
                     _profile('dp', description=text), 'application/json')
    assert response.status_int == 201, response.body
    description = api.app.get('/v2/device_profiles', headers=ADMIN).json[
        'device_profiles'][0]['description']
    assert description == text


@pytest.mark.parametrize('text', ['[[[', '\\', '"[', '{"a": [[['])
def test_depth_skips_strings(text):
    document = json.dumps({'a': [text] * 40, 'b': [[[]]]}).encode()
    assert json_only.depth(document) == 4
    assert json_only.check(document) is None


@pytest.mark.parametrize('body, where', [
    (b'[{"name": "s", "description": "\\ud800", "groups": []}]',
     'at /0/description'),
    (b'[{"name": "s", "description": "a\\udfffb", "groups": []}]',
     'at /0/description'),
    (b'[{"name": "s", "groups": [{"resources:FPGA": "1", '
     b'"trait:X\\ud83d": "required"}]}]', 'in a key of /0/groups/0'),
    (b'[{"name": "s", "groups": [], "x/~y": ["ok", "\\uDBFF"]}]',
     'at /0/x~1~0y/1'),
    (b'"\\ud800\\ud800"', 'at the top level'),
])
def test_lone_surrogates_are_400_saying_where(api, body, where):
    response = _send(api, 'POST', '/v2/device_profiles', body,
                     'application/json')
    message = _fault(response, 400)
    assert 'lone UTF-16 surrogate' in message
    assert where + ':' in message
    assert _profiles(api) == []


def test_surrogate_pairs_and_escaped_backslashes_are_text(api):
    body = (b'[{"name": "dp", "description": "\\ud83d\\ude80 \\\\ud800 '
            b'NaN Infinity", "groups": [{"resources:FPGA": "1"}]}]')
    response = _send(api, 'POST', '/v2/device_profiles', body,
                     'application/json')
    assert response.status_int == 201, response.body
    assert response.json['description'] == '\U0001f680 \\ud800 NaN Infinity'


@pytest.mark.parametrize('body, where', [
    (b'[{"name": "s", "description": "a\\u0000b", "groups": []}]',
     'at /0/description'),
    (b'[{"name": "s", "groups": [{"a\\u0000": "1"}]}]',
     'in a key of /0/groups/0'),
])
def test_nul_in_a_body_is_400_on_every_database(api_all_dbs, body, where):
    response = _send(api_all_dbs, 'POST', '/v2/device_profiles', body,
                     'application/json')
    message = _fault(response, 400)
    assert f'NUL character (\\u0000) {where}' in message
    assert _profiles(api_all_dbs) == []


def test_nul_in_an_attribute_is_400(api_all_dbs):
    [device] = api_all_dbs.seed('cmp1')
    body = json.dumps({'deployable_uuid': device['deployables'][0]['uuid'],
                       'key': 'k', 'value': 'a\x00'}).encode()
    response = _send(api_all_dbs, 'POST', '/v2/attributes', body,
                     'application/json')
    assert 'NUL character (\\u0000) at /value' in _fault(response, 400)


@pytest.mark.parametrize('literal', [b'NaN', b'Infinity', b'-Infinity'])
def test_nan_and_infinity_are_400(api, literal):
    body = b'{"device_profile_name": "dp", "x": ' + literal + b'}'
    response = _send(api, 'POST', '/v2/accelerator_requests', body,
                     'application/json')
    assert 'not a JSON number' in _fault(response, 400)


@pytest.mark.parametrize('accept', ['text/html', 'application/xml',
                                    'application/json;q=0'])
def test_a_client_that_takes_no_json_is_406(api, accept):
    response = _send(api, 'GET', '/v2/device_profiles',
                     headers={'Accept': accept})
    assert 'Accept: application/json' in _fault(response, 406)


@pytest.mark.parametrize('accept', [
    'application/xml, application/json;q=0.1', 'text/html, */*;q=0.8',
    'application/*', 'not a header;;'])
def test_a_client_that_takes_json_gets_json(api, accept):
    response = _send(api, 'GET', '/v2/device_profiles',
                     headers={'Accept': accept})
    assert response.status_int == 200
    assert response.json == {'device_profiles': []}


# -- paths and methods ------------------------------------------------------

ALLOW = {
    '/': 'GET, HEAD, OPTIONS',
    '/v2/accelerator_requests': 'GET, HEAD, POST, PATCH, DELETE, OPTIONS',
    f'/v2/accelerator_requests/{MISSING}':
        'GET, HEAD, PATCH, DELETE, OPTIONS',
    '/v2/device_profiles': 'GET, HEAD, POST, DELETE, OPTIONS',
    '/v2/device_profiles/dp1': 'GET, HEAD, PATCH, DELETE, OPTIONS',
    f'/v2/attributes/{MISSING}': 'GET, HEAD, DELETE, OPTIONS',
    f'/v2/devices/{MISSING}': 'GET, HEAD, OPTIONS',
    f'/v2/devices/{MISSING}/enable': 'POST, OPTIONS',
    f'/v2/deployables/{MISSING}': 'GET, HEAD, OPTIONS',
    f'/v2/deployables/{MISSING}/program': 'PATCH, OPTIONS',
    '/v2/hosts/cmp1/discover': 'POST, OPTIONS',
    '/v1/accelerators': 'GET, HEAD, OPTIONS',
}


@pytest.mark.parametrize('path, allow', ALLOW.items())
def test_options_answers_allow(api, path, allow):
    response = api.app.options(path, headers=version('2.5'))
    assert response.status_int == 200
    assert response.headers['Allow'] == allow
    assert response.body == b''


@pytest.mark.parametrize('path, allow', ALLOW.items())
def test_405_names_the_methods_in_allow(api, path, allow):
    served = allow.split(', ')
    for method in ('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'TRACE'):
        if method in served:
            continue
        response = _send(api, method, path, b'{}', 'application/json',
                         version('2.5'))
        message = _fault(response, 405)
        assert response.headers['Allow'] == allow
        assert f'does not serve {method}: use ' in message


@pytest.mark.parametrize('path', [f'/v2/device_profiles/{MISSING}',
                                  f'/v2/accelerator_requests/{MISSING}',
                                  f'/v2/attributes/{MISSING}'])
def test_post_on_an_item_creates_nothing(api, path):
    response = api.app.post(path, _profile('x'),
                            headers=ADMIN, content_type='application/json',
                            expect_errors=True)
    _fault(response, 405)
    assert _profiles(api) == []


@pytest.mark.parametrize('method, path', [
    ('GET', '/nope'), ('GET', '/v1/nope'), ('GET', '/v2/nope'),
    ('GET', '/v2/x/y/z'), ('PUT', '/v2/x/y/z'), ('OPTIONS', '/v2/nope'),
    ('GET', f'/v2/device_profiles/{MISSING}/x'),
    ('DELETE', f'/v2/accelerator_requests/{MISSING}/a/b'),
    ('PATCH', f'/v2/deployables/{MISSING}/other'),
    ('GET', '//v2'), ('GET', '/v2/services'), ('OPTIONS', '/v2/drivers')])
def test_unknown_paths_are_404(api, method, path):
    response = _send(api, method, path)
    assert 'could not be found' in _fault(response, 404)


def _headers(response) -> list[tuple[str, str]]:
    """The headers but the request id, which differs every time."""
    return sorted((k, v) for k, v in response.headerlist
                  if k.lower() != 'x-openstack-request-id')


def test_head_is_get_without_the_body(api):
    api.seed('cmp1')
    profile = api.dp('dp1')
    for path in ('/', '/v1', '/v2', '/v2/device_profiles',
                 f'/v2/device_profiles/{profile["uuid"]}', '/v2/devices',
                 f'/v2/device_profiles/{MISSING}', '/v2/nope',
                 f'/v2/devices/{MISSING}/enable'):
        get = _send(api, 'GET', path, headers=version('2.5'))
        head = _send(api, 'HEAD', path, headers=version('2.5'))
        assert (head.status, head.body) == (get.status, b''), path
        assert _headers(head) == _headers(get), path


def _shape(path: str) -> str:
    return re.sub(r'\{[^}]+\}', '{}', path)


def test_the_table_is_what_the_reference_documents():
    """root.ROUTES serves the paths and methods of openapi.yaml, and the
    v1 view."""
    with REFERENCE.open() as f:
        document = yaml.safe_load(f)
    documented = {(method.upper(), _shape(path))
                  for path, item in document['paths'].items()
                  for method in ('get', 'post', 'put', 'patch', 'delete')
                  if method in item}
    v1 = {('GET', '/v1'), ('GET', '/v1/accelerators'),
          ('GET', '/v1/accelerators/{}')}
    assert {(method, _shape(path))
            for path, (methods, _) in root.ROUTES.items()
            for method in methods.split()} == documented | v1


def test_a_table_route_matches_its_own_paths_only():
    table = routes.Routes(None, root.ROUTES)
    assert table.match('/v2/devices/x/disable').template == (
        '/v2/devices/{uuid}/disable')
    assert table.match('/v2/devices/x/').template == '/v2/devices/{uuid}'
    assert table.match('/').template == '/'
    for path in ('/v2/devices//disable', '/v2/devices/x/y', '/v2//',
                 '//v2', '/v2/devices/x/disable/y', '/v3', '/x', '*', ''):
        assert table.match(path) is None, path



def test_every_route_of_the_table_reaches_a_handler(api):
    """The controllers serve each path and method of root.ROUTES at the
    latest version: pecan routes none of them to its own 404 or 405 (a
    route declared without a handler would get them)."""
    names = {'host': 'nohost', 'name': 'nodriver'}
    for path, (methods, _) in root.ROUTES.items():
        filled = re.sub(r'\{([^}]+)\}',
                        lambda m: names.get(m.group(1), MISSING), path)
        for method in methods.split():
            response = _send(api, method, filled, body=b'{}',
                             content_type='application/json',
                             headers=version('latest'))
            assert response.status_int != 405, (method, path)
            if response.status_int == 404:
                fault = json.loads(response.json['error_message'])
                # pecan's own words, where it found no handler.
                assert fault['faultstring'] != (
                    'The resource could not be found.'), (method, path)

# -- over a real socket -----------------------------------------------------

def test_over_http(live_api):  # noqa: F811
    """What a client sees from cyborg-api's own server."""
    root_url = live_api.url[:-len('/v2')]
    headers = {'X-Auth-Token': 'admin'}
    response = requests.post(
        live_api.url + '/device_profiles', data=_profile('dp'), timeout=30,
        headers=dict(headers, **{'Content-Type': 'multipart/form-data'}))
    assert response.status_code == 415
    assert 'error_message' in response.json()
    response = requests.post(live_api.url + '/device_profiles', timeout=30,
                             data=b'[' * 970 + b']' * 970, headers=headers)
    assert response.status_code == 400
    assert 'levels deep' in response.json()['error_message']
    # Without a Content-Type, as requests sends bytes.
    response = requests.post(live_api.url + '/device_profiles', timeout=30,
                             data=_profile('dp'), headers=headers)
    assert response.status_code == 201, response.text
    get = requests.get(live_api.url + '/device_profiles', headers=headers,
                       timeout=30)
    head = requests.head(live_api.url + '/device_profiles', headers=headers,
                         timeout=30)
    assert (head.status_code, head.content) == (200, b'')
    assert head.headers['Content-Length'] == get.headers['Content-Length']
    options = requests.options(root_url + '/v2/device_profiles/dp',
                               headers=headers, timeout=30)
    assert options.status_code == 200
    assert options.headers['Allow'] == 'GET, HEAD, PATCH, DELETE, OPTIONS'
    put = requests.put(live_api.url + '/device_profiles', data=b'x=1',
                       headers=headers, timeout=30)
    assert put.status_code == 405
    assert put.headers['Allow'] == 'GET, HEAD, POST, DELETE, OPTIONS'
    assert put.headers['Content-Type'] == 'application/json'
