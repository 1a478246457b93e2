"""GET /healthcheck through the whole WSGI pipeline on SQLite and the
in-process transport: no token needed, detail for administrators only,
and what the route table answers for its other methods."""
import pytest

from cyborg.api import app
from cyborg.tests.functional.api.fixtures import ADMIN

PLAIN = {'detailed': False, 'reasons': ['OK', 'OK']}
JSON = {'Accept': 'application/json'}


def test_no_token_needed(api):
    response = api.app.get('/healthcheck')
    assert response.content_type == 'text/plain'
    assert response.text.split() == ['OK', 'OK']
    assert 'x-openstack-request-id' in response.headers
    head = api.app.head('/healthcheck')
    assert (head.status_int, head.body) == (204, b'')


def test_no_detail_unless_configured(api):
    assert api.app.get('/healthcheck', headers=dict(ADMIN, **JSON)
                       ).json == PLAIN


@pytest.fixture
def detailed(api):
    api.conf.set_override('detailed', True, 'healthcheck')
    api.app.app = app.setup_app(api.conf)
    return api


def test_detail_for_an_administrator_only(detailed):
    shown = detailed.app.get('/healthcheck',
                             headers=dict(ADMIN, **JSON)).json
    assert shown['detailed'] is True
    assert [r['details'].split(' (')[0] for r in shown['reasons']] == [
        'database OK: sqlite',
        'message bus OK: the fake driver, which has no broker to reach']
    for headers in ({}, {'X-Auth-Token': 'user:project',
                         'X-Roles': 'member,reader'},
                    # Roles without a token are not an identity.
                    {'X-Roles': 'admin'}):
        assert detailed.app.get('/healthcheck',
                                headers=dict(headers, **JSON)
                                ).json == PLAIN, headers


def test_other_methods_are_the_route_table_s(api):
    allowed = api.app.options('/healthcheck', headers=ADMIN)
    assert allowed.headers['Allow'] == 'GET, HEAD, OPTIONS'
    refused = api.app.post('/healthcheck', headers=ADMIN, status=405)
    assert refused.headers['Allow'] == 'GET, HEAD, OPTIONS'
    assert 'does not serve POST' in refused.json['error_message']
