"""Private device profiles (microversion 2.10) through HTTP.

A private profile is seen and used by the projects of its access list and
by whoever sees every project (``cyborg:device_profile:all_projects``,
administrators); any other caller gets for it exactly what it gets for a
profile that does not exist, in lists, shows, name filters, markers and
accelerator-request creates. Administrators make a profile private or
public (PATCH) and manage its access list through the conductor.
"""
import json

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

DPS = '/v2/device_profiles'
ARQS = '/v2/accelerator_requests'
GROUPS = [{'resources:FPGA': '1'}]
ADMIN_210 = version('2.10')
# Members of projects pa, pb and pc, at 2.10.
A, B, C = (version('2.10', user(p)) for p in ('pa', 'pb', 'pc'))
NOWHERE = '0c000000-0000-4000-8000-00000000000c'
UNSET = object()


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _create(api, name, is_public=UNSET, headers=ADMIN_210, status=201):
    profile = {'name': name, 'groups': GROUPS}
    if is_public is not UNSET:
        profile['is_public'] = is_public
    return api.app.post_json(DPS, [profile], headers=headers,
                             status=status)


def _names(api, headers, query=''):
    return [d['name'] for d in api.app.get(
        f'{DPS}{query}', headers=headers).json['device_profiles']]


def _projects(api, ref):
    return api.app.get(f'{DPS}/{ref}/projects',
                       headers=ADMIN_210).json['projects']


class Profiles:
    """``private`` for project pa, ``public``, and ``hidden``, private
    with an empty access list."""

    def __init__(self, api):
        self.api = api
        self.private = _create(api, 'private', False).json
        self.public = _create(api, 'public').json
        self.hidden = _create(api, 'hidden', False).json
        api.app.put(f'{DPS}/{self.private["uuid"]}/projects/pa',
                    headers=ADMIN_210, status=204)


@pytest.fixture
def profiles(api):
    return Profiles(api)


@pytest.fixture
def profiles_all_dbs(api_all_dbs):
    """``profiles`` on each of SQLite, MariaDB and PostgreSQL."""
    return Profiles(api_all_dbs)


def test_is_public_is_taken_and_shown_from_2_10(api):
    created = _create(api, 'mine', False).json
    assert created['is_public'] is False
    assert _create(api, 'ours').json['is_public'] is True
    assert _create(api, 'theirs', True).json['is_public'] is True
    shown = api.app.get(f'{DPS}/{created["uuid"]}',
                        headers=ADMIN_210).json['device_profile']
    assert shown['is_public'] is False
    listed = api.app.get(DPS, headers=ADMIN_210).json['device_profiles']
    assert [d['is_public'] for d in listed] == [False, True, True]
    for headers in (ADMIN, version('2.9')):
        shown = api.app.get(f'{DPS}/{created["uuid"]}',
                            headers=headers).json['device_profile']
        assert 'is_public' not in shown
        assert all('is_public' not in d for d in api.app.get(
            DPS, headers=headers).json['device_profiles'])


@pytest.mark.parametrize('headers', [ADMIN, version('2.9')])
def test_is_public_below_2_10_is_refused_as_an_unknown_field(api, headers):
    unknown = _fault(api.app.post_json(
        DPS, [{'name': 'x', 'groups': GROUPS, 'colour': 'red'}],
        headers=headers, status=400))
    fault = _fault(_create(api, 'x', False, headers=headers, status=400))
    assert fault == unknown.replace("'colour'", "'is_public'")
    assert api.app.get(DPS, headers=ADMIN).json['device_profiles'] == []


@pytest.mark.parametrize('value', ['false', 0, None, []])
def test_is_public_must_be_a_boolean(api, value):
    fault = _fault(_create(api, 'x', value, status=400))
    assert 'is_public' in fault and 'boolean' in fault
    assert api.app.get(DPS, headers=ADMIN).json['device_profiles'] == []


def test_each_project_sees_its_own_and_the_public_ones(profiles_all_dbs):
    api = profiles_all_dbs.api
    assert _names(api, ADMIN_210) == ['private', 'public', 'hidden']
    assert _names(api, A) == ['private', 'public']
    assert _names(api, B) == ['public']
    assert _names(api, user('pb')) == ['public']
    assert _names(api, A, '?name=private,hidden') == ['private']
    assert _names(api, B, '?name=private') == []
    # Nova's look-up by name.
    assert _names(api, user('pa'), '?name=private') == ['private']


def test_others_private_profiles_are_404_as_nonexistent_ones(
        profiles_all_dbs):
    profiles = profiles_all_dbs
    api = profiles.api
    private = profiles.private
    for ref, missing in ((private['uuid'], NOWHERE),
                         ('private', 'nowhere')):
        seen = api.app.get(f'{DPS}/{ref}', headers=A).json
        assert seen['device_profile']['uuid'] == private['uuid']
        hidden = api.app.get(f'{DPS}/{ref}', headers=B, status=404)
        absent = api.app.get(f'{DPS}/{missing}', headers=B, status=404)
        assert _fault(hidden) == _fault(absent).replace(missing, ref)
    # A marker naming it is as unknown a marker.
    faults = [_fault(api.app.get(f'{DPS}?limit=1&marker={marker}',
                                 headers=B, status=400)).replace(marker, 'M')
              for marker in (private['uuid'], NOWHERE)]
    assert faults[0] == faults[1]
    page = api.app.get(f'{DPS}?limit=1&marker={private["uuid"]}',
                       headers=A).json
    assert [d['name'] for d in page['device_profiles']] == ['public']


def test_creating_from_anothers_private_profile_is_as_from_none(
        profiles_all_dbs):
    api = profiles_all_dbs.api

    def create(name, headers, status=201):
        return api.app.post_json(ARQS, {'device_profile_name': name},
                                 headers=headers, status=status)

    refused = create('private', user('pb'), 404)
    unknown = create('nowhere', user('pb'), 404)
    assert _fault(refused) == _fault(unknown).replace('nowhere', 'private')
    assert create('private', user('pa')).json['arqs'][0][
        'project_id'] == 'pa'
    assert create('hidden', ADMIN).json['arqs'][0]['project_id'] == 'admin'
    create('hidden', user('pa'), 404)
    create('public', user('pb'))
    # Once B is in the list, or the profile public, B may.
    api.app.put(f'{DPS}/private/projects/pb', headers=ADMIN_210, status=204)
    create('private', user('pb'))
    api.app.patch_json(f'{DPS}/hidden', [
        {'op': 'replace', 'path': '/is_public', 'value': True}],
        headers=ADMIN_210)
    create('hidden', user('pc'))
    arqs_of = {a['project_id'] for a in api.app.get(
        ARQS, headers=ADMIN).json['arqs']}
    assert arqs_of == {'pa', 'pb', 'pc', 'admin'}


def test_one_batch_decides_each_create_on_every_db(db_engine):
    """The conductor's one SELECT for a batch of creates of several
    projects: each request gets what it would get alone."""
    ctx = cyborg_context.get_admin_context()
    for name, public in (('private', False), ('public', True),
                         ('hidden', False)):
        device_profiles.create(ctx, {'name': name, 'groups': GROUPS,
                                     'is_public': public})
    device_profiles.add_project(ctx, 'pa', name='private')
    device_profiles.add_project(ctx, 'pc', name='private')
    asked = [arqs.Create('private', 'pa'), arqs.Create('private', 'pb'),
             arqs.Create('private', 'pb', True),
             arqs.Create('hidden', 'pa'), arqs.Create('public', 'pb'),
             arqs.Create('private', 'pc'), arqs.Create('private', None),
             ('public', 'pd'), arqs.Create('nowhere', 'pa', True)]
    results = arqs.create_many(ctx, asked)
    refused = [not isinstance(r, list) for r in results]
    assert refused == [False, True, False, True, False, False, True, False,
                       True]
    for request, result in zip(asked, results, strict=True):
        if isinstance(result, list):
            assert [a['project_id'] for a in result] == [request[1]]
        else:
            assert result.code == 404
            assert result.message == (
                f'Device profile {request[0]} could not be found.')
    # Only private profiles the batch may not use: none is selected.
    assert not isinstance(arqs.create_many(ctx, [
        arqs.Create('hidden', 'pa'), arqs.Create('private', 'pb')])[1], list)


def test_administrators_manage_the_access_list(profiles):
    api, private = profiles.api, profiles.private
    for ref in (private['uuid'], 'private'):
        assert _projects(api, ref) == ['pa']
    # Adding twice changes nothing; the list comes sorted.
    for project in ('pc', 'pb', 'pc'):
        api.app.put(f'{DPS}/private/projects/{project}', headers=ADMIN_210,
                    status=204)
    assert _projects(api, private['uuid']) == ['pa', 'pb', 'pc']
    api.app.delete(f'{DPS}/{private["uuid"]}/projects/pb',
                   headers=ADMIN_210, status=204)
    fault = _fault(api.app.delete(f'{DPS}/private/projects/pb',
                                  headers=ADMIN_210, status=404))
    assert fault == ('Project pb is not in the access list of device '
                     'profile private.')
    assert _projects(api, 'private') == ['pa', 'pc']
    # A public profile has a list too; it counts once it is private.
    api.app.put(f'{DPS}/public/projects/pa', headers=ADMIN_210, status=204)
    assert _projects(api, 'public') == ['pa']
    api.app.patch_json(f'{DPS}/public', [
        {'op': 'replace', 'path': '/is_public', 'value': False}],
        headers=ADMIN_210)
    assert _names(api, A) == ['private', 'public']
    assert _names(api, B) == []


@pytest.mark.parametrize('method, path', [
    ('GET', '{ref}/projects'), ('PUT', '{ref}/projects/pa'),
    ('DELETE', '{ref}/projects/pa'), ('PATCH', '{ref}')])
@pytest.mark.parametrize('ref', [NOWHERE, 'nowhere'])
def test_managing_a_missing_profile_is_404(api, method, path, ref):
    body = {}
    if method == 'PATCH':
        body = {'body': json.dumps([{'op': 'replace', 'path': '/is_public',
                                     'value': False}]).encode(),
                'content_type': 'application/json'}
    response = api.app.request(
        f'{DPS}/{path.format(ref=ref)}', method=method, headers=ADMIN_210,
        expect_errors=True, **body)
    assert response.status_int == 404
    assert _fault(response) == f'Device profile {ref} could not be found.'


def test_patch_makes_a_profile_private_or_public(profiles):
    api = profiles.api
    body = [{'op': 'replace', 'path': '/is_public', 'value': False}]
    patched = api.app.patch_json(f'{DPS}/{profiles.public["uuid"]}', body,
                                 headers=ADMIN_210, status=200).json
    assert patched['is_public'] is False
    assert patched['uuid'] == profiles.public['uuid']
    assert patched['updated_at'] is not None
    assert _names(api, B) == []
    body[0]['value'] = True
    assert api.app.patch_json(f'{DPS}/public', body,
                              headers=ADMIN_210).json['is_public'] is True
    assert _names(api, B) == ['public']


@pytest.mark.parametrize('body, says', [
    ({'is_public': False}, 'is not of type'),
    ([], 'should be non-empty'),
    ([{'op': 'add', 'path': '/is_public', 'value': False}],
     "'add' is not one of ['replace']"),
    ([{'op': 'replace', 'path': '/name', 'value': 'x'}],
     "'/name' is not one of ['/is_public']"),
    ([{'op': 'replace', 'path': '/is_public', 'value': 'false'}],
     "'false' is not of type boolean"),
    ([{'op': 'replace', 'path': '/is_public'}], "'value' is a required"),
    ([{'op': 'replace', 'path': '/is_public', 'value': False}] * 2,
     'has more than 1 items'),
])
def test_bad_patches_are_400_saying_what_to_send(profiles, body, says):
    api = profiles.api
    fault = _fault(api.app.patch_json(f'{DPS}/private', body,
                                      headers=ADMIN_210, status=400))
    assert says in fault
    assert ('send [{"op": "replace", "path": "/is_public", "value": '
            'false}]') in fault
    assert _names(api, B) == ['public']


@pytest.mark.parametrize('project, says', [
    ('x' * 65, "'xxxx"), ('a%20b', "'a b'"), ('%C3%A9t%C3%A9', "'été'"),
    ('a.b', "'a.b'")])
def test_project_ids_are_keystone_ids(profiles, project, says):
    api = profiles.api
    for method in ('PUT', 'DELETE'):
        response = api.app.request(f'{DPS}/private/projects/{project}',
                                   method=method, headers=ADMIN_210,
                                   expect_errors=True)
        assert response.status_int == 400, response.body
        fault = _fault(response)
        assert fault.startswith('Invalid input: project_id must be a '
                                'Keystone project ID: 1 to 64 letters')
        assert says in fault
    assert _projects(api, 'private') == ['pa']


def test_new_paths_and_patch_need_2_10(profiles):
    api = profiles.api
    for headers in (ADMIN, version('2.9')):
        api.app.get(f'{DPS}/private/projects', headers=headers, status=404)
        api.app.put(f'{DPS}/private/projects/pb', headers=headers,
                    status=404)
        api.app.delete(f'{DPS}/private/projects/pa', headers=headers,
                       status=404)
        fault = _fault(api.app.patch_json(f'{DPS}/private', [
            {'op': 'replace', 'path': '/is_public', 'value': True}],
            headers=headers, status=406))
        assert '2.10' in fault
    assert _projects(api, 'private') == ['pa']
    assert _names(api, B) == ['public']


def test_deleting_a_profile_deletes_its_access_list(profiles_all_dbs,
                                                    db_engine):
    api = profiles_all_dbs.api
    api.app.put(f'{DPS}/hidden/projects/pb', headers=ADMIN_210, status=204)
    api.app.delete(f'{DPS}/private', headers=ADMIN, status=204)
    with db_engine.connect() as conn:
        left = conn.execute(sa.select(
            models.DeviceProfileProject.project_id)).scalars().all()
    assert left == ['pb']


def test_under_a_cap_below_rpc_1_12_nothing_is_made_private(api):
    """While ``[upgrade_levels] conductor`` holds conductors before 1.12,
    which would make it public, no profile becomes private; public ones
    and accelerator requests are made as before."""
    api.conf.set_override('conductor', '1.11', 'upgrade_levels')
    fault = _fault(_create(api, 'mine', False, status=503))
    assert 'needs conductor RPC 1.12' in fault
    assert '[upgrade_levels] conductor' in fault
    api.app.patch_json(f'{DPS}/nowhere', [
        {'op': 'replace', 'path': '/is_public', 'value': False}],
        headers=ADMIN_210, status=503)
    api.app.put(f'{DPS}/nowhere/projects/pa', headers=ADMIN_210, status=503)
    _create(api, 'ours')
    api.app.post_json(ARQS, {'device_profile_name': 'ours'},
                      headers=user('pa'), status=201)
    assert _names(api, ADMIN) == ['ours']
    # A private profile made before the cap: creates go as RPC 1.1, which
    # a conductor of 1.12 answers as for a caller of its project alone,
    # the administrator's too.
    ctx = cyborg_context.get_admin_context()
    device_profiles.create(ctx, {'name': 'mine', 'groups': GROUPS,
                                 'is_public': False})
    device_profiles.add_project(ctx, 'pa', name='mine')
    for headers, status in ((user('pa'), 201), (user('pb'), 404),
                            (ADMIN, 404)):
        api.app.post_json(ARQS, {'device_profile_name': 'mine'},
                          headers=headers, status=status)

