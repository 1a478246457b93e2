"""Microversion 2.11 through HTTP: a create's Idempotency-Key
(draft-ietf-httpapi-idempotency-key-header)."""
import concurrent.futures
import datetime
import json

import pytest
import requests
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.db import models
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401

ARQS = '/v2/accelerator_requests'
ARQ = models.AcceleratorRequest
P1 = user('p1')
P2 = user('p2')


def _headers(key, microversion='2.11', who=P1):
    headers = version(microversion, who)
    if key is not None:
        headers['Idempotency-Key'] = key
    return headers


def _post(api, key, profile='dp1', status=201, **kwargs):
    return api.app.post_json(ARQS, {'device_profile_name': profile},
                             headers=_headers(key, **kwargs), status=status)


def _uuids(response):
    return [a['uuid'] for a in response.json['arqs']]


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


@pytest.fixture
def profiles(api):
    api.dp('dp1', [{'resources:FPGA': '2'}])
    api.dp('dp2')
    return api


def test_a_create_sent_again_answers_the_first(profiles):
    api = profiles
    first = _post(api, 'c0ffee-1')
    assert len(first.json['arqs']) == 2
    again = _post(api, 'c0ffee-1')
    # The same answer, as the requests are now (unchanged): nothing new.
    assert again.json == first.json
    # The key as the draft writes it, a quoted string, is the same key.
    assert _uuids(_post(api, '"c0ffee-1"')) == _uuids(first)
    listed = api.app.get(ARQS, headers=P1).json['arqs']
    assert sorted(a['uuid'] for a in listed) == sorted(_uuids(first))


def test_the_answer_shows_the_requests_as_they_are_now(profiles):
    api = profiles
    first = _uuids(_post(api, 'k'))
    api.app.delete(f'{ARQS}/{first[0]}', headers=P1, status=204)
    assert _uuids(_post(api, 'k')) == first[1:]
    api.app.delete(f'{ARQS}/{first[1]}', headers=P1, status=204)
    # Once they are all gone the key creates again.
    assert not set(_uuids(_post(api, 'k'))) & set(first)


def test_a_key_used_for_another_profile_is_a_422(profiles):
    api = profiles
    _post(api, 'k')
    refused = _post(api, 'k', profile='dp2', status=422)
    assert _fault(refused) == (
        "Idempotency-Key 'k' was used for device profile dp1 by an earlier "
        'create of this project, not for dp2; send another key to create '
        'requests of dp2.')


def test_keys_are_per_project(profiles):
    api = profiles
    mine = _uuids(_post(api, 'k'))
    theirs = _uuids(_post(api, 'k', who=P2))
    assert not set(mine) & set(theirs)
    # Another project's key never refuses either: p2 may use it for
    # another profile.
    _post(api, 'k2')
    _post(api, 'k2', profile='dp2', who=P2)


def test_a_key_creates_again_after_the_ttl(profiles, sqlite_engine):
    api = profiles
    first = _uuids(_post(api, 'k'))
    with sqlite_engine.begin() as conn:
        conn.execute(sa.update(ARQ).values(
            created_at=timeutils.utcnow() - datetime.timedelta(
                seconds=api.conf.conductor.unbound_request_ttl + 1)))
    assert not set(_uuids(_post(api, 'k'))) & set(first)


@pytest.mark.parametrize('key', [
    '', '   ', '""', 'x' * 256, '"' + 'x' * 256 + '"', 'caf\xe9',
    'a\x01b', '"unterminated', '"a"b"'])
def test_a_bad_key_is_a_400(profiles, key):
    refused = _post(profiles, key, status=400)
    message = _fault(refused)
    assert message.startswith(
        'Invalid input: The Idempotency-Key header must be 1 to 255 '
        'printable ASCII characters, bare or as a quoted string '
        '(draft-ietf-httpapi-idempotency-key-header)')
    assert profiles.app.get(ARQS, headers=P1).json['arqs'] == []


@pytest.mark.parametrize('key', ['x' * 255, '"' + 'x' * 255 + '"',
                                 'with spaces and "quotes"',
                                 r'"escaped \" and \\"'])
def test_the_longest_and_oddest_keys_are_taken(profiles, key):
    first = _uuids(_post(profiles, key))
    assert _uuids(_post(profiles, key)) == first


@pytest.mark.parametrize('microversion', ['2.0', '2.9'])
def test_before_2_11_the_header_is_ignored(profiles, microversion):
    api = profiles
    one = _uuids(_post(api, 'k', microversion=microversion))
    two = _uuids(_post(api, 'k', microversion=microversion))
    assert not set(one) & set(two)
    # A bad key too, and another profile.
    _post(api, '', microversion=microversion)
    _post(api, 'k', profile='dp2', microversion=microversion)
    # The requests made then have no key: 2.11 creates anew.
    assert not set(_uuids(_post(api, 'k'))) & set(one + two)


def test_without_a_key_each_create_makes_requests(profiles):
    api = profiles
    one = _uuids(_post(api, None))
    assert not set(one) & set(_uuids(_post(api, None)))


def test_concurrent_creates_with_one_key(live_api):  # noqa: F811
    """Through the API server's threads, whose creates go in batch calls
    (one key twice in a batch) and in calls of their own."""
    api = live_api
    api.dp('dp1', [{'resources:FPGA': '2'}])

    def post(_):
        return requests.post(
            f'{api.url}/accelerator_requests',
            json={'device_profile_name': 'dp1'},
            headers=_headers('k', who=ADMIN), timeout=30)

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(post, range(12)))
    assert {r.status_code for r in responses} == {201}
    answers = {tuple(a['uuid'] for a in r.json()['arqs'])
               for r in responses}
    assert len(answers) == 1
    listed = requests.get(f'{api.url}/accelerator_requests', headers=ADMIN,
                          timeout=30).json()['arqs']
    assert sorted(a['uuid'] for a in listed) == sorted(answers.pop())


def test_under_a_cap_below_rpc_1_13_a_key_is_refused(api):
    """Conductors before 1.13 would drop the key and create again: a
    create with one is a 503 that creates nothing; one without works."""
    # Before the first request, which makes the API's RPC client.
    api.conf.set_override('conductor', '1.12', 'upgrade_levels')
    api.dp('dp1', [{'resources:FPGA': '2'}])
    fault = _fault(_post(api, 'k', status=503))
    assert 'Idempotency-Key' in fault and 'RPC 1.13' in fault
    assert api.app.get(ARQS, headers=P1).json['arqs'] == []
    assert len(_post(api, None).json['arqs']) == 2
