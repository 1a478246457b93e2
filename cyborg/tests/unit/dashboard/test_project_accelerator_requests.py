"""Project > Accelerators > Accelerator Requests, through Horizon."""
import copy
import html
from unittest import mock

from django.urls import reverse

from cyborg.dashboard import api
from cyborg.tests.unit.dashboard import project_helpers

INDEX = reverse('horizon:project:accelerator_requests:index')
LISTED = project_helpers.sample(
    'accelerator_requests/arqs-list-resp.json')['arqs']
BOUND = project_helpers.sample(
    'accelerator_requests/arq-show-bound-resp.json')
INSTANCE = BOUND['instance_uuid']
INSTANCE_PAGE = reverse('horizon:project:instances:detail', args=[INSTANCE])
NOT_UUID = 'Invalid input for field/attribute instance. Value: nope. ' \
           'Expected a UUID.'


def page(items=None, next_marker=None):
    return api.Page(copy.deepcopy(LISTED[1:] + [BOUND]
                                  if items is None else items), next_marker)


@mock.patch.object(api, 'arqs')
class IndexTest(project_helpers.TestCase):

    def test_lists_requests(self, listed):
        listed.return_value = page()
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        self.assertTemplateUsed(
            response, 'accelerators/project/accelerator_requests/index.html')
        content = response.content.decode()
        self.assertIn(reverse('horizon:project:accelerator_requests:detail',
                              args=[LISTED[1]['uuid']]), content)
        self.assertIn('Initial', content)
        self.assertIn('Bound', content)
        self.assertIn('fpga-dp / group 1', content)
        self.assertIn('fpga-dp / group 0', content)
        self.assertIn('compute-1.example', content)
        # The instance, linked to Horizon's own page of it.
        self.assertIn(f'href="{INSTANCE_PAGE}"', content)
        self.assertIn('31951eda-dc0d-51cd-80da-4c88ab69731d TEST_PCI: '
                      'bus=0c, device=00, domain=0000, function=1', content)
        listed.assert_called_once_with(mock.ANY, instance=None, marker=None)

    def test_next_link_carries_the_apis_marker(self, listed):
        listed.return_value = page(next_marker=LISTED[0]['uuid'])
        content = self.client.get(INDEX).content.decode()
        self.assertIn(f'?marker={LISTED[0]["uuid"]}', content)

    def test_marker_goes_to_the_api(self, listed):
        listed.return_value = page()
        self.client.get(INDEX, {'marker': 'm-1'})
        listed.assert_called_once_with(mock.ANY, instance=None, marker='m-1')

    def test_instance_filter_goes_to_the_api(self, listed):
        listed.return_value = page([BOUND])
        self.client.post(INDEX, {
            'accelerator_requests__filter__q_field': 'instance',
            'accelerator_requests__filter__q': INSTANCE})
        self.client.get(INDEX)
        listed.assert_called_once_with(mock.ANY, instance=INSTANCE,
                                       marker=None)

    def test_api_error_is_shown_verbatim(self, listed):
        listed.side_effect = api.ApiError(400, NOT_UUID)
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        self.assertIn(html.escape(NOT_UUID), response.content.decode())


class PolicyTest(project_helpers.TestCase):

    @mock.patch.object(api, 'arqs')
    def test_member_sees_the_panel(self, listed):
        listed.return_value = page()
        with self.enforced():
            response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        self.assertIn('Accelerator Requests', response.content.decode())
        listed.assert_called_once()

    def test_panel_hidden_without_cyborg_in_the_catalog(self):
        self.service_catalog.remove(project_helpers.ACCELERATOR)
        self._setup_user()
        response = self.client.get(INDEX)
        self.assertNotEqual(200, response.status_code)


@mock.patch.object(api, 'arq')
class DetailTest(project_helpers.TestCase):

    def test_shows_the_request(self, shown):
        shown.return_value = copy.deepcopy(BOUND)
        response = self.client.get(reverse(
            'horizon:project:accelerator_requests:detail',
            args=[BOUND['uuid']]))
        self.assertEqual(200, response.status_code)
        content = response.content.decode()
        for value in (BOUND['uuid'], 'Bound', 'compute-1.example',
                      BOUND['device_rp_uuid'], BOUND['attach_handle_uuid'],
                      'TEST_PCI', 'bus=0c, device=00, domain=0000, '
                      'function=1', 'fpga-dp / group 0'):
            self.assertIn(value, content)
        self.assertIn(f'<a href="{INSTANCE_PAGE}">{INSTANCE}</a>', content)
        shown.assert_called_once_with(mock.ANY, BOUND['uuid'])

    def test_api_error_goes_back_to_the_list(self, shown):
        message = 'Accelerator request nope could not be found.'
        shown.side_effect = api.ApiError(404, message)
        response = self.client.get(reverse(
            'horizon:project:accelerator_requests:detail', args=['nope']))
        self.assertRedirectsNoFollow(response, INDEX)
        with mock.patch.object(api, 'arqs', return_value=page()):
            content = self.client.get(INDEX).content.decode()
        self.assertIn(message, content)
