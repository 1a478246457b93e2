"""Requests whose path, query string or body is not UTF-8 text, or has
what no column stores."""
import json
import urllib.parse

import pytest
import webob

from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import version

JSON = dict(ADMIN, **{'Content-Type': 'application/json'})
GROUPS = [{'resources:FPGA': '1'}]


def _fault(response) -> str:
    assert response.content_type == 'application/json'
    fault = json.loads(response.json['error_message'])
    assert fault['faultcode'] == 'Client'
    return fault['faultstring']


def _profiles(api) -> list:
    return api.app.get('/v2/device_profiles',
                       headers=ADMIN).json['device_profiles']


@pytest.mark.parametrize('method, path', [
    ('GET', '/v2/accelerator_requests/%FF'),
    ('GET', '/v2/device_profiles/caf%E9'),
    ('DELETE', '/v2/device_profiles/%C3%28'),
    ('PATCH', '/v2/accelerator_requests/%80'),
])
def test_path_that_is_not_utf8_is_400(api, method, path):
    response = api.app.request(path, method=method, headers=version(
        '2.2'), expect_errors=True)
    assert response.status_int == 400
    assert 'request path is not valid UTF-8' in _fault(response)


@pytest.mark.parametrize('query', [
    'instance=%FF', 'name=a,caf%E9', '%FF=1', 'bind_state=%C3%28',
])
def test_query_that_is_not_utf8_is_400(api, query):
    path = ('/v2/device_profiles' if 'name' in query
            else '/v2/accelerator_requests')
    response = api.app.get(f'{path}?{query}', headers=ADMIN, status=400)
    assert 'query string is not valid UTF-8' in _fault(response)


@pytest.mark.parametrize('body', [
    b'[{"name": "caf\xe9", "groups": [{"resources:FPGA": "1"}]}]',
    b'[{"name": "x", "description": "\xff\xfe", "groups": []}]',
])
def test_body_that_is_not_utf8_is_400_and_writes_nothing(api, body):
    response = api.app.post('/v2/device_profiles', body, headers=JSON,
                            status=400)
    assert 'request body is not valid UTF-8' in _fault(response)
    assert _profiles(api) == []


def test_arq_body_that_is_not_utf8_is_400(api):
    response = api.app.post('/v2/accelerator_requests',
                            b'{"device_profile_name": "\xff"}',
                            headers=JSON, status=400)
    assert 'request body is not valid UTF-8' in _fault(response)


def test_utf8_text_is_served(api):
    text = 'caf\u00e9 \u6f22\u5b57 \U0001f680'
    api.app.post('/v2/device_profiles', json.dumps(
        [{'name': 'dp', 'description': text, 'groups': GROUPS}],
        ensure_ascii=False).encode(), headers=JSON, status=201)
    assert [p['description'] for p in _profiles(api)] == [text]
    # Valid UTF-8 in the path and the query reaches the controllers.
    quoted = urllib.parse.quote(text)
    api.app.get(f'/v2/device_profiles/{quoted}', headers=version('2.2'),
                status=404)
    assert api.app.get(f'/v2/device_profiles?name={quoted}',
                       headers=ADMIN).json['device_profiles'] == []


def test_body_is_still_size_limited(api):
    api.conf.set_override('max_request_body_size', 64, 'oslo_middleware')
    body = json.dumps([{'name': 'x' * 100, 'groups': GROUPS}]).encode()
    response = api.app.post('/v2/device_profiles', body, headers=JSON,
                            status=413)
    assert 'too large' in _fault(response).lower()
    assert _profiles(api) == []


def test_chunked_body_that_is_not_utf8_is_400(api):
    # No Content-Length: the body is read to its end (within the size
    # limit) and checked like any other.
    def chunked(body: bytes) -> webob.Request:
        request = webob.Request.blank(
            '/v2/device_profiles', method='POST', body=body,
            headers=dict(JSON, **{'Transfer-Encoding': 'chunked'}))
        del request.environ['CONTENT_LENGTH']
        # As waitress hands it over: a stream that ends, not webob's
        # buffered body.
        del request.environ['webob.is_body_seekable']
        request.environ['wsgi.input_terminated'] = True
        return request

    bad = b'[{"name": "caf\xe9", "groups": [{"resources:FPGA": "1"}]}]'
    response = api.app.do_request(chunked(bad), status=400)
    assert 'request body is not valid UTF-8' in _fault(response)
    assert _profiles(api) == []
    good = json.dumps([{'name': 'dp', 'groups': GROUPS}]).encode()
    api.app.do_request(chunked(good), status=201)
    assert [p['name'] for p in _profiles(api)] == ['dp']
    api.conf.set_override('max_request_body_size', 64, 'oslo_middleware')
    big = json.dumps([{'name': 'x' * 100, 'groups': GROUPS}]).encode()
    response = api.app.do_request(chunked(big), status=413)
    assert 'too large' in _fault(response).lower()
    assert [p['name'] for p in _profiles(api)] == ['dp']


@pytest.mark.parametrize('method, path', [
    ('GET', '/v2/device_profiles/a%00b'),
    ('DELETE', '/v2/device_profiles/a%00b'),
    ('POST', '/v2/hosts/cmp%001/discover'),
    ('GET', '/v2/accelerator_requests/%00'),
])
def test_nul_in_a_path_is_400(api_all_dbs, method, path):
    response = api_all_dbs.app.request(path, method=method, headers=version(
        '2.5'), expect_errors=True)
    assert response.status_int == 400
    assert 'request path has a NUL character (%00)' in _fault(response)


@pytest.mark.parametrize('path', [
    '/v2/device_profiles?name=a%00b', '/v2/accelerator_requests?instance=%00',
    '/v2/devices?hostname=x%00', '/v2/attributes?key=%00',
    '/v2/deployables?name=a&%00=1'])
def test_nul_in_a_query_is_400(api_all_dbs, path):
    response = api_all_dbs.app.get(path, headers=ADMIN, status=400)
    assert 'query string has a NUL character (%00)' in _fault(response)


@pytest.mark.parametrize('path', [
    '/v2/device_profiles/%ED%A0%80', '/v2/device_profiles?name=%ED%A0%80',
    '/v2/accelerator_requests?instance=a%ED%BF%BFb'])
def test_percent_encoded_surrogates_are_400(api, path):
    response = api.app.get(path, headers=version('2.2'), status=400)
    assert 'not valid UTF-8' in _fault(response)
