"""Version documents and microversion negotiation, through HTTP."""
import json

import pytest
import webtest

from cyborg.api import app
from cyborg.api import versions


@pytest.fixture
def api(conf):
    """The app with keystone authentication: version documents need none.

    Nothing here reaches the conductor, so no transport is needed.
    """
    conf.set_override('auth_strategy', 'keystone', 'api')
    return webtest.TestApp(app.setup_app(conf))


# The newest microversion, which these tests follow.
LATEST = versions.as_string(versions.MAX_VERSION)


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])


def test_root_lists_v2_and_deprecated_v1_without_a_token(api):
    body = api.get('/').json
    v2, v1 = body['versions']
    assert v2 == body['default_version']
    assert (v2['id'], v2['status']) == ('v2', 'CURRENT')
    assert (v2['min_version'], v2['max_version']) == ('2.0', LATEST)
    assert v2['links'] == [{'rel': 'self', 'href': 'http://localhost/v2/'}]
    assert v1 == {'id': 'v1', 'status': 'DEPRECATED',
                  'links': [{'rel': 'self',
                             'href': 'http://localhost/v1/'}]}


@pytest.mark.parametrize('path', ['/v1', '/v1/'])
def test_v1_document_is_deprecated_and_has_no_microversions(api, path):
    response = api.get(path)
    assert response.json == {'id': 'v1', 'status': 'DEPRECATED',
                             'links': [{'rel': 'self',
                                        'href': 'http://localhost/v1/'}]}
    assert 'OpenStack-API-Version' not in response.headers


@pytest.mark.parametrize('path', ['/v2', '/v2/'])
def test_v2_document_and_headers(api, path):
    response = api.get(path)
    assert response.json['id'] == 'v2.0'
    assert response.json['links'][0]['href'] == 'http://localhost/v2/'
    assert response.headers['OpenStack-API-Version'] == 'accelerator 2.0'
    assert response.headers['OpenStack-API-Minimum-Version'] == '2.0'
    assert response.headers['OpenStack-API-Maximum-Version'] == LATEST
    assert 'OpenStack-API-Version' in response.headers['Vary']


@pytest.mark.parametrize('header, expected', [
    ('accelerator 2.2', 'accelerator 2.2'),
    ('accelerator latest', f'accelerator {LATEST}'),
    ('2.1', 'accelerator 2.1'),
    ('compute 2.90', 'accelerator 2.0'),
    ('compute 2.90, accelerator 2.3', 'accelerator 2.3'),
])
def test_microversion_negotiation(api, header, expected):
    response = api.get('/v2', headers={'OpenStack-API-Version': header})
    assert response.headers['OpenStack-API-Version'] == expected


@pytest.mark.parametrize('header, message', [
    ('accelerator 2.99',
     f'The supported version range is: [2.0, {LATEST}]'),
    ('accelerator 1.0', 'Version 1.0 was requested'),
    ('accelerator 10', 'Invalid value for OpenStack-API-Version'),
    # int() refuses more than 4,300 digits: a 500 once.
    ('accelerator 2.' + '5' * 5000, 'Invalid value'),
])
def test_unsupported_versions_get_406(api, header, message):
    response = api.get('/v2', headers={'OpenStack-API-Version': header},
                       status=406)
    fault = _fault(response)
    assert message in fault['faultstring']
    assert fault['faultcode'] == 'Client'
    # No version was served: the range is given, not a version.
    assert 'OpenStack-API-Version' not in response.headers
    assert response.headers['OpenStack-API-Minimum-Version'] == '2.0'
    assert response.headers['Vary'] == 'OpenStack-API-Version'



def test_public_endpoint_sets_links(api, conf):
    conf.set_override('public_endpoint', 'https://cloud.example/accelerator/',
                      'api')
    body = api.get('/').json
    assert body['versions'][0]['links'][0]['href'] == (
        'https://cloud.example/accelerator/v2/')


def test_unknown_path_is_a_json_404(api, conf):
    conf.set_override('auth_strategy', 'noauth', 'api')
    noauth = webtest.TestApp(app.setup_app(conf))
    fault = _fault(noauth.get('/v2/no_such_thing', status=404,
                              headers={'X-Auth-Token': 'admin'}))
    assert 'could not be found' in fault['faultstring']


def test_links_follow_the_mount_point(api):
    response = api.get('/v2', extra_environ={'SCRIPT_NAME': '/accelerator'})
    assert response.json['links'][0]['href'] == (
        'http://localhost/accelerator/v2/')
