"""Every request value against what its column holds and what is sane:
a 400 naming the value and the limit, never a 500, on every database."""
import json
import pathlib

import pytest
import yaml

from cyborg import context as cyborg_context
from cyborg.api import schemas as validation
from cyborg.api.schemas import arqs as arq_schema
from cyborg.api.schemas import device_profiles as dp_schema
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import query
from cyborg.db.api import services
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import version

DOCUMENT = (pathlib.Path(__file__).parents[4] / 'doc' / 'source'
            / 'reference' / 'openapi.yaml')

LATEST = version('2.5')
FPGA = [{'resources:FPGA': '1'}]
UUID = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
# What oslo's is_uuid_like accepts of UUID, besides UUID itself.
UUID_FORMS = ['{%s}' % UUID.upper(), f'urn:uuid:{UUID}', UUID.upper(),
              UUID.replace('-', '')]


def _fault(response) -> str:
    assert response.content_type == 'application/json'
    fault = json.loads(response.json['error_message'])
    assert fault['faultcode'] == 'Client', fault
    return fault['faultstring']


def _create_dp(api, profile, status, headers=ADMIN):
    return api.app.post_json('/v2/device_profiles', [profile],
                             headers=headers, status=status)


def _profiles(api) -> list:
    return api.app.get('/v2/device_profiles',
                       headers=ADMIN).json['device_profiles']


def _arqs(api) -> list:
    return api.app.get('/v2/accelerator_requests',
                       headers=ADMIN).json['arqs']


# -- resource counts --------------------------------------------------------

@pytest.mark.parametrize('count', [
    '\u00b2', '\u2460', '\u0663', '\uff11', '9' * 5000, ' +1', '1_0', '0x1',
    '1.0', 1.0, True, -1, 0, '0', 2 ** 31, 10 ** 30, str(10 ** 30)])
def test_resource_counts_outside_ascii_positive_integers_are_400(api, count):
    """Only JSON integers and ASCII digits: "²" and "①" pass isdigit()
    but not int(), int() takes "٣" (Arabic-Indic 3) and "１"; 5,000 digits
    are more than int() parses."""
    group = {'resources:NET_BW_EGR_KILOBIT_PER_SEC': count,
             'resources:FPGA': '1'}
    response = _create_dp(api, {'name': 'dp', 'groups': [group]}, 400)
    assert 'resources:NET_BW_EGR_KILOBIT_PER_SEC' in _fault(response)
    assert len(_fault(response)) < 500
    assert _profiles(api) == []


def test_counts_are_stored_as_plain_strings(api):
    dp = _create_dp(api, {'name': 'dp', 'groups': [
        {'resources:FPGA': 2, 'resources:CUSTOM_X': ' 007 ',
         'resources:NET_BW_EGR_KILOBIT_PER_SEC': 2147483647}]}, 201).json
    assert dp['groups'] == [{'resources:FPGA': '2', 'resources:CUSTOM_X': '7',
                             'resources:NET_BW_EGR_KILOBIT_PER_SEC':
                             '2147483647'}]


def test_amounts_make_no_accelerator_requests(api):
    """Display heads, bandwidth and encryption contexts come with a
    device; they are no accelerators of their own."""
    api.dp('nic', [{'resources:SRIOV_NET_VF': '1',
                    'resources:NET_BW_EGR_KILOBIT_PER_SEC': '100',
                    'resources:NET_BW_IGR_KILOBIT_PER_SEC': '100'},
                   {'resources:VGPU': '2', 'resources:VGPU_DISPLAY_HEAD': '4'},
                   {'resources:FPGA': '1',
                    'resources:MEM_ENCRYPTION_CONTEXT': '7'}])
    arqs = api.app.post_json('/v2/accelerator_requests',
                             {'device_profile_name': 'nic'},
                             headers=ADMIN, status=201).json['arqs']
    assert [a['device_profile_group_id'] for a in arqs] == [0, 1, 1, 2]


# -- how many accelerators, groups and keys ---------------------------------

@pytest.mark.parametrize('groups, option', [
    ([{'resources:FPGA': '33'}], 'max_accelerators_per_group'),
    ([{'resources:FPGA': '20', 'resources:CUSTOM_X': '13'}],
     'max_accelerators_per_group'),
    ([{'resources:FPGA': '32'}] * 2 + [{'resources:PGPU': '1'}],
     'max_accelerators_per_profile'),
    ([{'resources:FPGA': '1'}] * 17, 'max_groups_per_profile'),
])
def test_accelerators_and_groups_are_bounded(api, groups, option):
    response = _create_dp(api, {'name': 'dp', 'groups': groups}, 400)
    assert f'[api] {option}' in _fault(response)
    assert str(getattr(api.conf.api, option)) in _fault(response)
    assert _profiles(api) == []


def test_the_limits_are_the_options(api):
    largest = [{'resources:FPGA': '32'}, {'resources:FPGA': '32'}]
    _create_dp(api, {'name': 'largest', 'groups': largest}, 201)
    api.conf.set_override('max_accelerators_per_profile', 65, 'api')
    api.conf.set_override('max_accelerators_per_group', 33, 'api')
    api.conf.set_override('max_groups_per_profile', 17, 'api')
    _create_dp(api, {'name': 'more', 'groups': [{'resources:FPGA': '33'},
                                                {'resources:FPGA': '32'}]},
               201)
    _create_dp(api, {'name': 'groups', 'groups': FPGA * 17}, 201)


def test_keys_and_names_of_a_group_are_bounded(api):
    many = {f'trait:CUSTOM_T{i}': 'required' for i in range(64)}
    response = _create_dp(api, {'name': 'dp', 'groups': [
        dict(many, **{'resources:FPGA': '1'})]}, 400)
    assert 'more than 64 keys' in _fault(response)
    for key in ('trait:CUSTOM_' + 'X' * 250, 'accel:' + 'x' * 256,
                'resources:CUSTOM_' + 'X' * 250):
        response = _create_dp(api, {'name': 'dp', 'groups': [
            {'resources:FPGA': '1', key: 'required'}]}, 400)
        assert '255' in _fault(response)
    response = _create_dp(api, {'name': 'dp', 'groups': [
        {'resources:FPGA': '1', 'accel:x': 'v' * 256}]}, 400)
    assert 'accel:x has at most 255' in _fault(response)
    assert _profiles(api) == []


def test_groups_larger_than_their_column_are_400(api_all_dbs):
    """The groups column is a TEXT: 65535 bytes on MariaDB."""
    api = api_all_dbs
    group = {f'accel:k{i}': 'v' * 255 for i in range(63)}
    group['resources:FPGA'] = '1'
    response = _create_dp(api, {'name': 'dp', 'groups': [group] * 5}, 400)
    assert 'at most 65535' in _fault(response)
    assert _profiles(api) == []
    _create_dp(api, {'name': 'dp', 'groups': [group] * 3}, 201)


def test_arq_create_from_a_profile_above_the_limits_is_400(api_all_dbs):
    """A profile stored before the limits were lowered: no request is
    made, rather than one per accelerator it asks for."""
    api = api_all_dbs
    api.dp('big', [{'resources:FPGA': '8'}, {'resources:PGPU': '4'}])
    api.dp('small', FPGA)
    api.conf.set_override('max_accelerators_per_profile', 8, 'api')
    response = api.app.post_json('/v2/accelerator_requests',
                                 {'device_profile_name': 'big'},
                                 headers=ADMIN, status=400)
    assert '12 accelerators' in _fault(response)
    assert '[api] max_accelerators_per_profile' in _fault(response)
    api.conf.set_override('max_accelerators_per_group', 4, 'api')
    response = api.app.post_json('/v2/accelerator_requests',
                                 {'device_profile_name': 'big'},
                                 headers=version('2.0'), status=400)
    assert '[api] max_accelerators_per_group' in _fault(response)
    assert _arqs(api) == []
    api.app.post_json('/v2/accelerator_requests',
                      {'device_profile_name': 'small'}, headers=ADMIN,
                      status=201)
    assert len(_arqs(api)) == 1
    # In a batch of creates, such a profile fails its own request only.
    big, small = arqs.create_many(cyborg_context.get_admin_context(),
                                  [('big', 'p1'), ('small', 'p1')])
    assert isinstance(big, exception.Invalid)
    assert [a['device_profile_name'] for a in small] == ['small']


# -- integers in queries ----------------------------------------------------

@pytest.mark.parametrize('path', [
    '/v2/deployables?device_id=', '/v2/attributes?deployable_id=',
    '/v2/services?marker='])
def test_integer_parameters_outside_their_column_are_400(api_all_dbs, path):
    """Ids are 32-bit on MariaDB and PostgreSQL; SQLite refuses anything
    beyond 64 bits with an OverflowError."""
    name = path.split('?')[1][:-1]
    for value in ('99999999999999999999', '9' * 5000, '2147483648', '-1',
                  '0', '%D9%A3', '+1', '%201', '1_0', '1.0', '0x1', ''):
        response = api_all_dbs.app.get(path + value, headers=LATEST,
                                       status=400)
        assert name in _fault(response)
        assert len(_fault(response)) < 500
    # The largest id is a valid one that nothing has.
    response = api_all_dbs.app.get(path + '2147483647', headers=LATEST,
                                   expect_errors=True)
    if name == 'marker':
        assert 'does not name an item' in _fault(response)
    else:
        assert response.status_int == 200


def test_limit_is_ascii_digits_and_huge_is_capped(api):
    api.dp('a')
    api.dp('b')
    for value in ('%D9%A3', '+1', '1_0', '1.0', '-1', '0'):
        response = api.app.get(f'/v2/device_profiles?limit={value}',
                               headers=LATEST, status=400)
        assert 'limit' in _fault(response)
    for value in ('99999999999999999999', '9' * 5000, '00002'):
        page = api.app.get(f'/v2/device_profiles?limit={value}',
                           headers=LATEST).json
        assert len(page['device_profiles']) == 2


def test_a_service_marker_in_range_pages_on(api):
    ctx = cyborg_context.get_admin_context()
    for host in ('h1', 'h2'):
        services.heartbeat(ctx, host, 'cyborg-agent', '1.0')
    first = api.app.get('/v2/services?limit=1', headers=LATEST).json
    rest = api.app.get(f'/v2/services?marker={first["services"][0]["id"]}',
                       headers=LATEST).json['services']
    assert [s['host'] for s in rest] == ['h2']
    api.app.get('/v2/services?marker=2147483647', headers=LATEST,
                status=400)


# -- uuids ------------------------------------------------------------------

@pytest.mark.parametrize('form', UUID_FORMS)
def test_a_profile_uuid_is_stored_in_canonical_form(api_all_dbs, form):
    api = api_all_dbs
    dp = _create_dp(api, {'name': 'dp', 'uuid': form, 'groups': FPGA},
                    201).json
    assert dp['uuid'] == UUID
    got = api.app.get(f'/v2/device_profiles/{UUID}', headers=ADMIN).json
    assert got['device_profile']['name'] == 'dp'
    again = {'name': 'other', 'uuid': UUID, 'groups': FPGA}
    _create_dp(api, again, 409, headers=version('2.4'))


def test_uuids_in_any_form_in_paths_and_bodies(api_all_dbs):
    """Every uuid coming in is read in any form oslo accepts and used in
    the canonical one: never a 500 (MariaDB refuses 38 characters in a
    36-character column), and what it names is found."""
    api = api_all_dbs
    api.conf.set_override('bind_timeout', 1, 'conductor')
    # No agent: programming answers 503 at once rather than fetching.
    api.seed('cmp1', hostname='node1', agent=False)
    device = api.app.get('/v2/devices', headers=ADMIN).json['devices'][0]
    deployable = api.app.get('/v2/deployables',
                             headers=ADMIN).json['deployables'][0]
    dp = api.dp('dp1')
    arq = api.app.post_json('/v2/accelerator_requests',
                            {'device_profile_name': 'dp1'},
                            headers=ADMIN).json['arqs'][0]

    def forms(uuid):
        return ['{%s}' % uuid.upper(), f'urn:uuid:{uuid}', uuid.upper(),
                uuid.replace('-', '')]

    attribute = api.app.post_json(
        '/v2/attributes', {'deployable_uuid': forms(deployable['uuid'])[0],
                           'key': 'k', 'value': 'v'},
        headers=ADMIN, status=201).json
    for form in forms(device['uuid']):
        assert api.app.get(f'/v2/devices/{form}',
                           headers=ADMIN).json['uuid'] == device['uuid']
    for form in forms(deployable['uuid']):
        assert api.app.get(f'/v2/deployables/{form}',
                           headers=ADMIN).json['uuid'] == deployable['uuid']
    for form in forms(attribute['uuid']):
        assert api.app.get(f'/v2/attributes/{form}',
                           headers=ADMIN).json['uuid'] == attribute['uuid']
    for form in forms(dp['uuid']):
        assert api.app.get(f'/v2/device_profiles/{form}', headers=ADMIN
                           ).json['device_profile']['uuid'] == dp['uuid']
    for form in forms(arq['uuid']):
        assert api.app.get(f'/v2/accelerator_requests/{form}', headers=ADMIN,
                           expect_errors=True).status_int in (200, 404)
    # A program names its image in the deployable's 36-character column:
    # the agent does not answer here (503), the database was written.
    program = [{'path': '/program', 'op': 'replace',
                'value': [{'image_uuid': '{%s}' % UUID}]}]
    response = api.app.patch_json(
        f'/v2/deployables/{forms(deployable["uuid"])[1]}/program', program,
        headers=ADMIN, expect_errors=True)
    assert response.status_int in (200, 503), response.text
    # A bind stores the provider and instance uuids.
    bind = {forms(arq['uuid'])[0]: [
        {'op': 'add', 'path': '/hostname', 'value': 'node1'},
        {'op': 'add', 'path': '/device_rp_uuid',
         'value': forms(deployable['rp_uuid'])[0]},
        {'op': 'add', 'path': '/instance_uuid', 'value': forms(UUID)[1]}]}
    api.app.patch_json('/v2/accelerator_requests', bind, headers=SERVICE,
                       status=202)
    bound = api.app.get(f'/v2/accelerator_requests/{arq["uuid"]}',
                        headers=ADMIN).json
    assert bound['instance_uuid'] == UUID
    assert bound['device_rp_uuid'] == deployable['rp_uuid']
    for form in forms(attribute['uuid'])[:1]:
        api.app.delete(f'/v2/attributes/{form}', headers=ADMIN, status=204)
    api.app.delete(f'/v2/device_profiles/{forms(dp["uuid"])[2]}',
                   headers=ADMIN, status=204)


def test_a_bitstream_is_an_image_uuid(api):
    response = _create_dp(api, {'name': 'dp', 'groups': [
        {'resources:FPGA': '1', 'accel:bitstream_id': 'x' * 40}]}, 400)
    assert 'accel:bitstream_id must be a UUID' in _fault(response)
    dp = _create_dp(api, {'name': 'dp', 'groups': [
        {'resources:FPGA': '1', 'accel:bitstream_id': f'urn:uuid:{UUID}'}]},
        201).json
    assert dp['groups'][0]['accel:bitstream_id'] == UUID


# -- strings against their columns ------------------------------------------

def _bind_body(arq_uuid, **values):
    body = {'hostname': 'node1', 'device_rp_uuid': UUID,
            'instance_uuid': UUID, **values}
    return {arq_uuid: [{'op': 'add', 'path': f'/{k}', 'value': v}
                       for k, v in body.items()]}


def test_strings_longer_than_their_column_are_400(api_all_dbs):
    api = api_all_dbs
    api.seed()
    deployable = api.app.get('/v2/deployables',
                             headers=ADMIN).json['deployables'][0]
    api.dp('dp1')
    arq = api.app.post_json('/v2/accelerator_requests',
                            {'device_profile_name': 'dp1'},
                            headers=ADMIN).json['arqs'][0]
    cases = [
        ('POST', '/v2/device_profiles', ADMIN,
         [{'name': 'd', 'description': 'x' * 4097, 'groups': FPGA}],
         'description: is longer than 4096'),
        ('POST', '/v2/device_profiles', version('2.4'),
         [{'name': 'x' * 256, 'groups': FPGA}], 'at most 255'),
        ('POST', '/v2/accelerator_requests', ADMIN,
         {'device_profile_name': 'x' * 256},
         'device_profile_name: is longer than 255'),
        ('POST', '/v2/attributes', ADMIN,
         {'deployable_uuid': deployable['uuid'], 'key': 'k' * 256,
          'value': 'v'}, 'key: is longer than 255'),
        ('POST', '/v2/attributes', ADMIN,
         {'deployable_uuid': deployable['uuid'], 'key': 'k',
          'value': '\u00e9' * 32768}, 'value: is longer than 65535 bytes'),
        ('PATCH', '/v2/accelerator_requests', version('2.1', SERVICE),
         _bind_body(arq['uuid'], hostname='h' * 256),
         'is longer than 255'),
        ('PATCH', '/v2/accelerator_requests', version('2.1', SERVICE),
         _bind_body(arq['uuid'], project_id='p' * 256),
         'is longer than 255'),
    ]
    for method, path, headers, body, message in cases:
        response = api.app.request(
            path, method=method, headers=dict(headers, **{
                'Content-Type': 'application/json'}),
            body=json.dumps(body, ensure_ascii=False).encode(),
            expect_errors=True)
        assert response.status_int == 400, (path, response.text)
        assert message in _fault(response), (path, message)
    # Below 2.4 an over-long profile name stays the server error that
    # clients of those versions expect.
    api.app.post_json('/v2/device_profiles',
                      [{'name': 'x' * 256, 'groups': FPGA}], headers=ADMIN,
                      status=500)
    assert [p['name'] for p in _profiles(api)] == ['dp1']


# -- patterns, types and lists ----------------------------------------------

@pytest.mark.parametrize('name', ['dp1\n', '\ndp1', 'dp1\r', 'dp\u0661'])
def test_a_profile_name_is_letters_digits_dash_underscore_only(api, name):
    """Python's "$" matches before a final newline; "\\d" and "\\w"
    match other scripts' digits and letters."""
    response = _create_dp(api, {'name': name, 'groups': FPGA}, 400)
    assert 'may only contain' in _fault(response)
    assert _profiles(api) == []


def test_json_integers_are_integers(api):
    """JSON Schema takes 1.0 for an integer; an id is sent as one."""
    api.seed()
    before = api.app.get('/v2/attributes', headers=ADMIN).json
    for value, message in ((1.0, 'not of type'), (True, 'not of type'),
                           ('1', 'not of type'), (0, 'at least 1'),
                           (2 ** 31, 'at most 2147483647')):
        body = {'deployable_id': value, 'key': 'k', 'value': 'v'}
        response = api.app.post_json('/v2/attributes', body, headers=ADMIN,
                                     status=400)
        assert 'deployable_id' in _fault(response)
        assert message in _fault(response)
    assert api.app.get('/v2/attributes', headers=ADMIN).json == before


def test_lists_in_a_query_are_bounded(api):
    api.dp('keep')
    names = ','.join(f'n{i}' for i in range(validation.LIST_MAX + 1))
    for method, path in (('DELETE', f'/v2/device_profiles?value={names}'),
                         ('GET', f'/v2/device_profiles?name={names}'),
                         ('DELETE', f'/v2/accelerator_requests?arqs='
                                    f'{",".join([UUID] * 1001)}')):
        response = api.app.request(path, method=method, headers=ADMIN,
                                   expect_errors=True)
        assert response.status_int == 400, (path[:40], response.text)
        assert f'at most {validation.LIST_MAX}' in _fault(response)
    assert len(_profiles(api)) == 1


def test_a_patch_names_each_request_once(api):
    api.seed()
    api.dp('dp1')
    arq = api.app.post_json('/v2/accelerator_requests',
                            {'device_profile_name': 'dp1'},
                            headers=ADMIN).json['arqs'][0]['uuid']
    body = dict(_bind_body(arq), **_bind_body(arq.upper()))
    response = api.app.patch_json('/v2/accelerator_requests', body,
                                  headers=SERVICE, status=400)
    assert 'appears twice' in _fault(response)
    ops = _bind_body(arq)[arq] * 2
    api.app.patch_json('/v2/accelerator_requests', {arq: ops},
                       headers=SERVICE, status=400)


# -- the reference states every limit ---------------------------------------

def test_the_openapi_document_states_the_limits(conf):
    with DOCUMENT.open() as f:
        document = yaml.safe_load(f)
    schemas = document['components']['schemas']
    profile = schemas['DeviceProfileCreate']['properties']
    assert profile['name']['maxLength'] == dp_schema.NAME_MAX
    assert profile['description']['maxLength'] == dp_schema.DESCRIPTION_MAX
    assert profile['groups']['maxItems'] == conf.api.max_groups_per_profile
    group = schemas['RequestGroupCreate']
    assert group['maxProperties'] == dp_schema.GROUP_KEYS_MAX
    counts = group['patternProperties']['^\\s*resources\\s*:']['oneOf']
    assert counts[0]['maximum'] == dp_schema.AMOUNT_MAX
    attribute = schemas['AttributeCreate']['properties']
    assert attribute['deployable_id']['maximum'] == query.integer_range(
        models.Attribute.deployable_id)[1]
    assert attribute['key']['maxLength'] == query.max_chars(
        models.Attribute.key)
    assert attribute['value']['maxLength'] == query.max_bytes(
        models.Attribute.value)
    patch = schemas['ARQPatch']
    assert patch['maxProperties'] == validation.LIST_MAX
    assert patch['additionalProperties']['maxItems'] == len(
        arq_schema.PATCH_PATHS)
    assert patch['additionalProperties']['items']['properties']['value'][
        'maxLength'] == arq_schema.OPS_SCHEMA['items']['properties'][
        'value']['maxLength']
    create = document['paths']['/v2/accelerator_requests']['post'][
        'requestBody']['content']['application/json']['schema']
    assert create['properties']['device_profile_name']['maxLength'] == (
        arq_schema.CREATE_SCHEMA['properties']['device_profile_name'][
            'maxLength'])
    parameters = {p['name']: p['schema'] for path in ('/v2/deployables',
                                                      '/v2/attributes',
                                                      '/v2/services')
                  for p in document['paths'][path]['get']['parameters']
                  if 'name' in p}
    for name in ('device_id', 'deployable_id', 'marker'):
        assert parameters[name]['minimum'] == 1
        assert parameters[name]['maximum'] == 2 ** 31 - 1


def test_characters_beyond_the_basic_plane_are_kept(api_all_dbs):
    """An emoji is stored, shown and compared like any other character
    (MariaDB needed the four-byte utf8mb4 connection for it)."""
    app = api_all_dbs.app
    created = app.post_json(
        '/v2/device_profiles',
        [{'name': 'dp-emoji', 'description': 'rocket \U0001F680',
          'groups': FPGA}], headers=LATEST).json
    shown = app.get(f'/v2/device_profiles/{created["uuid"]}',
                    headers=LATEST).json['device_profile']
    assert shown['description'] == 'rocket \U0001F680'
    found = app.get('/v2/devices?hostname=%F0%9F%98%80',
                    headers=LATEST).json
    assert found['devices'] == []
