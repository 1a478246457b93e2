"""middleware.routes over the route table: 404 below a path's
microversion, 405 and OPTIONS with the table's Allow header."""
import json

import pytest

from cyborg.api import versions
from cyborg.api.controllers import root
from cyborg.api.middleware import routes
from cyborg.api.versions import Microversion

TABLE = {'/': ('GET', None),
         '/v2/things': ('GET POST', Microversion.INITIAL),
         '/v2/things/{uuid}/poke': ('POST', Microversion.LIFECYCLE)}


def _call(method: str, path: str, version: str | None = None
          ) -> tuple[str, dict[str, str], bytes]:
    served = []

    def app(environ, start_response):
        served.append(environ['PATH_INFO'])
        start_response('200 OK', [])
        return [b'served']

    environ = {'REQUEST_METHOD': method, 'PATH_INFO': path,
               'QUERY_STRING': ''}
    if version is not None:
        environ['HTTP_OPENSTACK_API_VERSION'] = f'accelerator {version}'
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer.update(status=status, headers=dict(headers))

    body = b''.join(routes.Routes(app, TABLE)(environ, start_response))
    return answer['status'], answer['headers'], body


def test_a_path_is_served_from_its_microversion_on():
    assert _call('POST', '/v2/things/x/poke', '2.8')[2] == b'served'
    assert _call('POST', '/v2/things/x/poke', 'latest')[2] == b'served'
    for version in (None, '2.0', '2.7'):
        status, _, body = _call('POST', '/v2/things/x/poke', version)
        assert status.startswith('404'), version
        assert routes.NOT_FOUND in json.loads(
            json.loads(body)['error_message'])['faultstring']
    # Below it even OPTIONS and the methods it does not serve are 404s.
    assert _call('OPTIONS', '/v2/things/x/poke', '2.7')[0].startswith('404')
    assert _call('GET', '/v2/things/x/poke', '2.7')[0].startswith('404')


def test_a_bad_version_is_routed_as_the_latest():
    # The microversion hook answers 406 for it later.
    assert _call('POST', '/v2/things/x/poke', '2.99')[2] == b'served'


def test_405_and_options_answer_with_the_table_methods():
    status, headers, _ = _call('DELETE', '/v2/things', '2.0')
    assert status.startswith('405')
    assert headers['Allow'] == 'GET, HEAD, POST, OPTIONS'
    status, headers, body = _call('OPTIONS', '/v2/things/x/poke', '2.8')
    assert (status, headers['Allow'], body) == ('200 OK',
                                                'POST, OPTIONS', b'')


@pytest.mark.parametrize('added_in, read', [
    (None, None), (Microversion.INITIAL, None),
    (Microversion.HEALTH, (2, 6))])
def test_a_version_is_read_only_for_a_later_path(added_in, read):
    route = routes.Route('/v2/x', 'GET', added_in)
    assert route.added_in == read
    assert type(route.added_in) in (tuple, type(None))


def test_every_v2_path_names_its_microversion():
    for path, (methods, added_in) in root.ROUTES.items():
        assert methods.split(), path
        if path == '/v2' or path.startswith('/v2/'):
            assert added_in in versions.Microversion, path
        else:
            assert added_in is None, path
