"""Project > Accelerators > Device Profiles, through Horizon."""
import copy
import html
from unittest import mock

from django.core.exceptions import ValidationError
from django.urls import reverse

from cyborg.dashboard import api
from cyborg.dashboard.project.device_profiles import forms
from cyborg.tests.unit.dashboard import project_helpers

INDEX = reverse('horizon:project:device_profiles:index')
CREATE = reverse('horizon:project:device_profiles:create')
LISTED = project_helpers.sample(
    'device_profiles/device-profiles-list-resp.json')['device_profiles']
SHOWN = project_helpers.sample(
    'device_profiles/device-profile-show-resp.json')
CREATE_REQ = project_helpers.sample(
    'device_profiles/device-profile-create-private-req.json')[0]
CREATED = project_helpers.sample(
    'device_profiles/device-profile-create-resp.json')
NO_NAME = 'A device profile needs a non-empty name.'
FORBIDDEN = 'Policy doesn\'t allow cyborg:device_profile:get_all.'


def page(items=None, next_marker=None):
    return api.Page(copy.deepcopy(LISTED if items is None else items),
                    next_marker)


@mock.patch.object(api, 'device_profiles')
class IndexTest(project_helpers.TestCase):

    def test_lists_profiles(self, listed):
        listed.return_value = page()
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        self.assertTemplateUsed(
            response, 'accelerators/project/device_profiles/index.html')
        content = response.content.decode()
        self.assertIn('fpga-bitstream-dp', content)
        self.assertIn('Two fake FPGA functions, each on its own card',
                      content)
        # Each group on its line, in placement's words.
        self.assertIn('FPGA: 1; requires CUSTOM_FAKE_DEVICE<br>'
                      'FPGA: 1; requires CUSTOM_FAKE_DEVICE', content)
        self.assertIn('Public', content)
        self.assertIn(reverse('horizon:project:device_profiles:detail',
                              args=[LISTED[0]['uuid']]), content)
        listed.assert_called_once_with(mock.ANY, marker=None, name=None)

    def test_private_profile(self, listed):
        private = dict(copy.deepcopy(LISTED[0]), is_public=False)
        listed.return_value = page([private])
        content = self.client.get(INDEX).content.decode()
        self.assertIn('Private', content)

    def test_next_link_carries_the_apis_marker(self, listed):
        listed.return_value = page(next_marker='m-next')
        content = self.client.get(INDEX).content.decode()
        self.assertIn('?marker=m-next', content)

    def test_marker_goes_to_the_api(self, listed):
        listed.return_value = page()
        self.client.get(INDEX, {'marker': LISTED[1]['uuid']})
        listed.assert_called_once_with(mock.ANY, marker=LISTED[1]['uuid'],
                                       name=None)

    def test_last_page_has_no_next_link(self, listed):
        listed.return_value = page()
        content = self.client.get(INDEX).content.decode()
        self.assertNotIn('marker=', content)

    def test_name_filter_goes_to_the_api(self, listed):
        listed.return_value = page(LISTED[:1])
        response = self.client.post(INDEX, {
            'device_profiles__filter__q_field': 'name',
            'device_profiles__filter__q': ' fpga-dp '})
        self.assertRedirectsNoFollow(response, INDEX)
        self.client.get(INDEX)
        listed.assert_called_once_with(mock.ANY, marker=None,
                                       name='fpga-dp')

    def test_api_error_is_shown_verbatim(self, listed):
        listed.side_effect = api.ApiError(403, FORBIDDEN)
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        self.assertIn(html.escape(FORBIDDEN), response.content.decode())


class PolicyTest(project_helpers.TestCase):
    """A member sees the profiles but neither create nor delete."""

    @mock.patch.object(api, 'device_profiles')
    def test_member_cannot_create_or_delete(self, listed):
        listed.return_value = page()
        with self.enforced():
            content = self.client.get(INDEX).content.decode()
        self.assertIn('fpga-bitstream-dp', content)
        self.assertNotIn('device_profiles__action_create', content)
        self.assertNotIn('device_profiles__delete', content)


class AdminPolicyTest(project_helpers.AdminTestCase):

    @mock.patch.object(api, 'device_profiles')
    def test_admin_may_create_and_delete(self, listed):
        listed.return_value = page()
        with self.enforced():
            content = self.client.get(INDEX).content.decode()
        self.assertIn('device_profiles__action_create', content)
        self.assertIn(f'device_profiles__delete__{LISTED[0]["uuid"]}',
                      content)

    @mock.patch.object(api, 'device_profile_delete')
    @mock.patch.object(api, 'device_profiles')
    def test_delete_calls_the_api(self, listed, deleted):
        listed.return_value = page()
        uuids = [p['uuid'] for p in LISTED]
        with self.enforced():
            response = self.client.post(INDEX, {
                'action': 'device_profiles__delete',
                'object_ids': uuids})
        self.assertRedirectsNoFollow(response, INDEX)
        self.assertEqual([mock.call(mock.ANY, u) for u in uuids],
                         deleted.call_args_list)

    @mock.patch.object(api, 'device_profile_delete')
    @mock.patch.object(api, 'device_profiles')
    def test_delete_refused_shows_the_apis_reason(self, listed, deleted):
        listed.return_value = page()
        reason = 'Device profile fpga-dp is used by 2 accelerator requests.'
        deleted.side_effect = api.ApiError(409, reason)
        self.client.post(INDEX, {
            'action': f'device_profiles__delete__{LISTED[0]["uuid"]}'})
        content = self.client.get(INDEX).content.decode()
        self.assertIn(reason, content)


@mock.patch.object(api, 'device_profile')
class DetailTest(project_helpers.TestCase):

    def test_shows_groups_in_full(self, shown):
        document = copy.deepcopy(SHOWN)
        document['device_profile']['groups'][1] = (
            LISTED[1]['groups'][0])
        shown.return_value = document
        uuid = SHOWN['device_profile']['uuid']
        response = self.client.get(reverse(
            'horizon:project:device_profiles:detail', args=[uuid]))
        self.assertEqual(200, response.status_code)
        content = response.content.decode()
        self.assertIn('fpga-dp', content)
        self.assertIn('Group 2', content)
        self.assertIn('<dt>accel:bitstream_id</dt>'
                      '<dd>0d5a3f5e-7b8c-4d2e-9f1a-6c3b2e1d0f4a</dd>',
                      content)
        self.assertIn('<dt>trait:CUSTOM_FAKE_DEVICE</dt><dd>required</dd>',
                      content)
        shown.assert_called_once_with(mock.ANY, uuid)

    def test_api_error_goes_back_to_the_list(self, shown):
        message = 'Device profile nope could not be found.'
        shown.side_effect = api.ApiError(404, message)
        response = self.client.get(reverse(
            'horizon:project:device_profiles:detail', args=['nope']))
        self.assertRedirectsNoFollow(response, INDEX)
        with mock.patch.object(api, 'device_profiles', return_value=page()):
            content = self.client.get(INDEX).content.decode()
        self.assertIn(message, content)


class CreateTest(project_helpers.AdminTestCase):

    def form(self, **changes):
        data = {'name': CREATE_REQ['name'],
                'description': CREATE_REQ['description'],
                'groups': 'resources:FPGA=1\n'
                          'trait:CUSTOM_FAKE_DEVICE=required\n'}
        data.update(changes)
        return data

    def test_form_renders(self):
        response = self.client.get(CREATE)
        self.assertEqual(200, response.status_code)
        self.assertTemplateUsed(
            response, 'accelerators/project/device_profiles/create.html')

    @mock.patch.object(api, 'device_profile_create')
    def test_create_sends_the_body(self, created):
        created.return_value = dict(CREATED, name=CREATE_REQ['name'])
        response = self.client.post(CREATE, self.form())
        self.assertNoFormErrors(response)
        self.assertRedirectsNoFollow(response, INDEX)
        # The unchecked box: private, as the sample asks.
        created.assert_called_once_with(
            mock.ANY, CREATE_REQ['name'], CREATE_REQ['groups'],
            description=CREATE_REQ['description'], is_public=False)

    @mock.patch.object(api, 'device_profile_create')
    def test_create_from_json_groups(self, created):
        created.return_value = CREATED
        groups = project_helpers.sample(
            'device_profiles/device-profile-create-req.json')[0]['groups']
        response = self.client.post(CREATE, self.form(
            name='fpga-dp', description='', is_public='on',
            groups='[{"resources:FPGA": 1, '
                   '"trait:CUSTOM_FAKE_DEVICE": "required"},'
                   '{"resources:FPGA": "1", '
                   '"trait:CUSTOM_FAKE_DEVICE": "required"}]'))
        self.assertNoFormErrors(response)
        created.assert_called_once_with(mock.ANY, 'fpga-dp', groups,
                                        description=None, is_public=True)

    @mock.patch.object(api, 'device_profile_create')
    def test_invalid_groups_are_not_sent(self, created):
        response = self.client.post(CREATE, self.form(
            groups='trait:CUSTOM_FAKE_DEVICE=required'))
        self.assertFormErrors(response, 1)
        self.assertIn('Group 1 asks for no resource',
                      response.content.decode())
        created.assert_not_called()

    @mock.patch.object(api, 'device_profile_create')
    def test_api_refusal_is_shown_verbatim(self, created):
        created.side_effect = api.ApiError(400, NO_NAME)
        response = self.client.post(CREATE, self.form())
        self.assertEqual(200, response.status_code)
        self.assertIn(NO_NAME, response.content.decode())


class ParseGroupsTest(project_helpers.TestCase):
    """The reading of the groups field, without a request."""

    def test_blocks(self):
        self.assertEqual(
            [{'resources:FPGA': '1', 'trait:CUSTOM_A': 'forbidden'},
             {'resources:CUSTOM_X': '2', 'accel:function_id': 'f1'}],
            forms.parse_groups(
                '# two cards\nresources:FPGA = 1\n'
                'trait:CUSTOM_A=forbidden\n\n  \n'
                'resources:CUSTOM_X=2\naccel:function_id=f1\n'))

    def test_refusals(self):
        for text, said in [
                ('', 'at least one group'),
                ('resources:FPGA', 'key=value'),
                ('resources:FPGA=1\nresources:FPGA=2', 'appears twice'),
                ('resources:FPGA=0', 'positive whole number'),
                ('resources:FPGA=one', 'positive whole number'),
                ('resources:FPGA=1\ntrait:X=yes', '"required" or'),
                ('resource:FPGA=1', 'unknown key'),
                ('[{"resources:FPGA": true}]', 'is a string'),
                ('[{"resources:FPGA": "1"}', 'not JSON'),
                ('[["resources:FPGA"]]', 'list of objects'),
                ('[]', 'at least one group')]:
            with self.subTest(text=text):
                with self.assertRaises(ValidationError) as caught:
                    forms.parse_groups(text)
                self.assertIn(said, ' '.join(caught.exception.messages))
