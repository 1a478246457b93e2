"""The Accelerator Devices panel, against Horizon with cyborg's API
patched to answer its documented samples."""
import re
from unittest import mock

from django import urls

from cyborg.tests.unit.dashboard import admin_base

Page = admin_base.api.Page
INDEX = urls.reverse('horizon:admin:accelerator_devices:index')
UUID = '7b1134dd-e477-47fa-b618-3e8110aea75c'
DETAIL = urls.reverse('horizon:admin:accelerator_devices:detail',
                      args=[UUID])
LAYOUT = urls.reverse('horizon:admin:accelerator_devices:layout',
                      args=[UUID])
HEALTH = urls.reverse('horizon:admin:accelerator_devices:health',
                      args=[UUID])


class DevicesIndexTests(admin_base.AdminTestCase):

    def setUp(self):
        super().setUp()
        listed = admin_base.sample('devices/devices-list-2.4-page-resp.json')
        self.devices = self.api('devices', return_value=Page(
            listed['devices'], UUID))

    def test_page_and_marker(self):
        response = self.client.get(INDEX + '?marker=abc')
        self.assertEqual(200, response.status_code)
        self.devices.assert_called_once_with(response.wsgi_request,
                                             marker='abc')
        html = response.content.decode()
        self.assertIn(DETAIL, html)
        self.assertIn(f'marker={UUID}', html)
        # Enabled: Disable offered, Enable not.
        self.assertIn(f'devices__disable__{UUID}', html)
        self.assertNotIn(f'devices__enable__{UUID}', html)

    def test_server_filter_passed_to_the_api(self):
        self.client.post(INDEX, {'devices__filter__q': 'unhealthy',
                                 'devices__filter__q_field': 'health'})
        response = self.client.get(INDEX)
        self.devices.assert_called_with(response.wsgi_request, marker=None,
                                        health='unhealthy')

    def test_health_colour_and_reason(self):
        self.devices.return_value = Page(admin_base.sample(
            'devices/devices-list-2.6-unhealthy-resp.json')['devices'], None)
        html = self.client.get(INDEX).content.decode()
        self.assertIn('cyborg-health-unhealthy" title="fan failure">'
                      'unhealthy', html)
        self.assertRegex(html, r'>\s*fan failure\s*</td>')

    def test_disable(self):
        disable = self.api('device_disable', return_value=None)
        response = self.client.post(
            INDEX, {'action': f'devices__disable__{UUID}'}, follow=True)
        disable.assert_called_once_with(mock.ANY, UUID)
        self.assertTrue(any(UUID in m for m in self.messages(response)))

    def test_enable_refusal_verbatim(self):
        error = admin_base.api.ApiError(
            409, 'Device 7b11 could not be prepared: fpga busy.')
        self.devices.return_value = Page([dict(
            self.devices.return_value.items[0], status='maintaining')], None)
        enable = self.api('device_enable', side_effect=error)
        response = self.client.post(
            INDEX, {'action': f'devices__enable__{UUID}'}, follow=True)
        enable.assert_called_once_with(mock.ANY, UUID)
        self.assertIn(error.message, self.messages(response))

    def test_list_refusal_verbatim(self):
        error = admin_base.refusal(
            'devices/devices-list-2.3-limit-resp.json')
        self.devices.side_effect = error
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        self.assertEqual([error.message], self.messages(response))


class DeviceDetailTests(admin_base.AdminTestCase):

    def setUp(self):
        super().setUp()
        self.device = self.api('device', return_value=admin_base.sample(
            'devices/device-show-2.6-resp.json'))
        self.impact = self.api('device_impact', return_value=admin_base
                               .sample('devices/device-impact-resp.json'))
        handles = admin_base.sample(
            'attach_handles/attach-handles-list-resp.json')['attach_handles']
        handles[0]['clean_state'] = 'maintenance'
        handles[0]['clean_reason'] = 'reset failed'
        self.handles = self.api('attach_handles', return_value=Page(
            handles, handles[-1]['uuid']))
        self.deployable = self.api('deployable', return_value=admin_base
                                   .sample('deployables/deployables-list-resp'
                                           '.json')['deployables'][0])

    def test_tabs(self):
        response = self.client.get(DETAIL)
        self.assertEqual(200, response.status_code)
        request = response.wsgi_request
        self.device.assert_called_once_with(request, UUID)
        self.impact.assert_called_once_with(request, UUID)
        self.handles.assert_called_once_with(request, device_uuid=UUID,
                                             marker=None)
        self.deployable.assert_called_once_with(
            request, '52fb6f55-4cba-4e45-9869-010d30adae52')
        html = response.content.decode()
        self.assertIn('compute-1.example_0000:0c:00.0', html)
        self.assertIn('7a3e0d2c-91b4-4c57-a8f6-2d1e5b9c0f3a', html)
        self.assertIn('reset failed', html)
        self.assertIn('handle_marker=f5b1aff5-a093-4668-8a3b-ef74f4d63a90',
                      html)
        # Clean and Release only for the handle in maintenance.
        self.assertIn('attach_handles__clean__3f2fb2ad', html)
        self.assertIn('attach_handles__release__3f2fb2ad', html)
        self.assertNotIn('attach_handles__clean__f5b1aff5', html)

    def test_health_clear_form_carries_the_csrf_token(self):
        self.device.return_value = dict(self.device.return_value,
                                        health_source='operator')
        response = self.client.get(DETAIL + '?tab=device_details__health')
        html = response.content.decode()
        clear = urls.reverse('horizon:admin:accelerator_devices:health_clear',
                             args=[UUID])
        form = html[html.index(f'action="{clear}"'):]
        form = form[:form.index('</form>')]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"',
                          form)
        self.assertIsNotNone(token, form)

    def test_layout_tab_asks_the_agent_only_when_opened(self):
        layout = self.api('device_layout', return_value=admin_base.sample(
            'devices/device-layout-show-resp.json'))
        self.client.get(DETAIL)
        layout.assert_not_called()
        response = self.client.get(DETAIL + '?tab=device_details__layout')
        layout.assert_called_once_with(response.wsgi_request, UUID)
        self.assertIn(LAYOUT, response.content.decode())

    def test_handles_marker_passed(self):
        response = self.client.get(DETAIL + '?handle_marker=abc')
        self.handles.assert_any_call(response.wsgi_request,
                                     device_uuid=UUID, marker='abc')

    def test_clean_refusal_verbatim(self):
        error = admin_base.refusal('attach_handles/attach-handle-clean-not-'
                                   'in-maintenance-resp.json')
        clean = self.api('attach_handle_clean', side_effect=error)
        handle = '3f2fb2ad-4d78-4c16-91e3-408c7acc9834'
        response = self.client.post(
            DETAIL, {'action': f'attach_handles__clean__{handle}'},
            follow=True)
        clean.assert_called_once_with(mock.ANY, handle)
        self.assertIn(error.message, self.messages(response))

    def test_release(self):
        release = self.api('attach_handle_release', return_value={})
        handle = '3f2fb2ad-4d78-4c16-91e3-408c7acc9834'
        self.client.post(
            DETAIL, {'action': f'attach_handles__release__{handle}'})
        release.assert_called_once_with(mock.ANY, handle)

    def test_missing_device_back_to_list(self):
        error = admin_base.api.ApiError(404, 'Device 7b11 not found.')
        self.device.side_effect = error
        self.api('devices', return_value=Page([], None))
        response = self.client.get(DETAIL, follow=True)
        self.assertEqual(200, response.status_code)
        self.assertIn(error.message, self.messages(response))


class DeviceFormsTests(admin_base.AdminTestCase):

    def setUp(self):
        super().setUp()
        layout = admin_base.sample('devices/device-layout-show-resp.json')
        layout['options'] = {
            'vf_count': {'min': 0, 'max': 8},
            'mdev_type': {'nvidia-35': 16, 'nvidia-36': 8},
            'mdev_count': {'min': 0, 'max': 16}}
        self.layout = self.api('device_layout', return_value=layout)

    def test_layout_form_built_from_the_options(self):
        response = self.client.get(LAYOUT)
        self.assertEqual(200, response.status_code)
        form = response.context['form']
        self.assertEqual({'vf_count', 'mdev_type', 'mdev_count'},
                         set(form.fields))
        self.assertEqual(8, form.fields['vf_count'].max_value)
        self.assertIn(('nvidia-36', 'nvidia-36 (8)'),
                      form.fields['mdev_type'].choices)

    def test_layout_set_typed(self):
        set_layout = self.api('device_layout_set', return_value=admin_base
                              .sample('devices/device-layout-set-resp.json'))
        response = self.client.post(LAYOUT, {'vf_count': '4',
                                             'mdev_type': '',
                                             'mdev_count': ''})
        set_layout.assert_called_once_with(mock.ANY, UUID, {'vf_count': 4})
        self.assertRedirects(response, DETAIL, fetch_redirect_response=False)

    def test_layout_refusal_verbatim(self):
        error = admin_base.refusal(
            'devices/device-layout-set-not-offered-resp.json')
        self.api('device_layout_set', side_effect=error)
        response = self.client.post(LAYOUT, {'vf_count': '8'},
                                    HTTP_X_REQUESTED_WITH='XMLHttpRequest')
        self.assertEqual(200, response.status_code)
        # In the modal that stays open, not queued for the next page.
        self.assertEqual([error.message],
                         list(response.context['form'].non_field_errors()))
        self.assertEqual([], self.messages(response))

    def test_health_form_shows_impact_and_sets(self):
        impact = self.api('device_impact', return_value=admin_base.sample(
            'devices/device-impact-resp.json'))
        response = self.client.get(HEALTH)
        self.assertEqual(200, response.status_code)
        impact.assert_called_once_with(response.wsgi_request, UUID)
        self.assertIn('7a3e0d2c-91b4-4c57-a8f6-2d1e5b9c0f3a',
                      response.content.decode())
        set_health = self.api('device_health_set', return_value=admin_base
                              .sample('devices/device-health-set-resp.json'))
        response = self.client.post(HEALTH, {'health': 'unhealthy',
                                             'reason': 'fan failure'})
        set_health.assert_called_once_with(mock.ANY, UUID, 'unhealthy',
                                           'fan failure')
        self.assertRedirects(response, DETAIL, fetch_redirect_response=False)

    def test_health_clear(self):
        clear = self.api('device_health_clear', return_value=admin_base
                         .sample('devices/device-health-clear-resp.json'))
        response = self.client.post(urls.reverse(
            'horizon:admin:accelerator_devices:health_clear', args=[UUID]))
        clear.assert_called_once_with(mock.ANY, UUID)
        self.assertEqual(302, response.status_code)
