"""The Accelerator Hosts panel, against Horizon with cyborg's API
patched to answer its documented samples."""
from unittest import mock

from django import urls

from cyborg.tests.unit.dashboard import admin_base

INDEX = urls.reverse('horizon:admin:accelerator_hosts:index')
HOST = 'compute-1.example'
AGENT = 'agent-7'
DETAIL = urls.reverse('horizon:admin:accelerator_hosts:detail', args=[HOST])


def _rows():
    healthy = admin_base.sample('capacity/capacity-by-host-resp.json')[
        'capacity'][0]
    reserved = dict(healthy, hostname='compute-2.example', used=0,
                    reserved=16, available=16)
    broken = dict(healthy, hostname='compute-3.example', unhealthy=16,
                  available=14)
    return [healthy, reserved, broken]


class HostsIndexTests(admin_base.AdminTestCase):

    def test_one_capacity_call_and_health_colours(self):
        capacity = self.api('capacity', return_value=admin_base.api.Page(
            _rows(), None))
        devices = self.api('devices')
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        capacity.assert_called_once_with(response.wsgi_request,
                                         group_by='host', marker=None)
        devices.assert_not_called()
        html = response.content.decode()
        for host in ('compute-1.example', 'compute-2.example',
                     'compute-3.example'):
            self.assertIn(urls.reverse(
                'horizon:admin:accelerator_hosts:detail', args=[host]), html)
        self.assertIn('cyborg-health-healthy', html)
        self.assertIn('cyborg-health-reserved" title="">16 reserved', html)
        self.assertIn('cyborg-health-unhealthy" title="">16 unhealthy', html)

        # The last page: no link to another.
        self.assertNotIn('marker=', html)

    def test_paged_by_the_last_hostname(self):
        rows = _rows()
        capacity = self.api('capacity', return_value=admin_base.api.Page(
            rows, rows[-1]['hostname']))
        html = self.client.get(INDEX).content.decode()
        self.assertIn('?marker=compute-3.example', html)
        response = self.client.get(INDEX + '?marker=compute-3.example')
        self.assertEqual(200, response.status_code)
        self.assertEqual(
            mock.call(response.wsgi_request, group_by='host',
                      marker='compute-3.example'), capacity.call_args)

    def test_api_refusal_shown_verbatim(self):
        error = admin_base.refusal('capacity/capacity-bad-group-by-resp.json')
        self.api('capacity', side_effect=error)
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        self.assertEqual([error.message], self.messages(response))


class HostDetailTests(admin_base.AdminTestCase):

    def setUp(self):
        super().setUp()
        listed = admin_base.sample('devices/devices-list-2.4-page-resp.json')
        self.devices = self.api('devices', return_value=admin_base.api.Page(
            listed['devices'], listed['devices'][-1]['uuid']))
        self.drivers = self.api('host_drivers', return_value=admin_base.sample(
            'hosts/host-drivers-list-resp.json')['drivers'])
        # The agent on the node registered under a name of its own.
        self.agent = self.api('agent_host', return_value=AGENT)

    def test_devices_and_drivers(self):
        response = self.client.get(DETAIL)
        self.assertEqual(200, response.status_code)
        request = response.wsgi_request
        self.devices.assert_called_once_with(request, hostname=HOST,
                                             marker=None)
        self.agent.assert_called_once_with(request, HOST)
        self.drivers.assert_called_once_with(request, AGENT)
        html = response.content.decode()
        self.assertIn('7b1134dd-e477-47fa-b618-3e8110aea75c', html)
        self.assertIn('fake_driver', html)
        # Paged: the next page's link carries the last row's uuid.
        self.assertIn('device_marker=7b1134dd-e477-47fa-b618-3e8110aea75c',
                      html)
        # Enable offered for a disabled driver, Disable for an enabled one.
        self.assertIn('drivers__enable__amd_gpu', html)
        self.assertIn('drivers__disable__fake_driver', html)
        self.assertNotIn('drivers__enable__fake_driver', html)

    def test_marker_passed(self):
        response = self.client.get(DETAIL + '?device_marker=abc')
        self.devices.assert_called_once_with(response.wsgi_request,
                                             hostname=HOST, marker='abc')

    def test_health_and_reason_of_a_device(self):
        unhealthy = admin_base.sample(
            'devices/devices-list-2.6-unhealthy-resp.json')['devices']
        self.devices.return_value = admin_base.api.Page(unhealthy, None)
        html = self.client.get(DETAIL).content.decode()
        self.assertIn('cyborg-health-unhealthy" title="fan failure">'
                      'unhealthy', html)
        self.assertNotIn('device_marker=', html)

    def test_enable_driver(self):
        enable = self.api('host_driver_enable', return_value=admin_base.sample(
            'hosts/host-driver-enable-resp.json'))
        response = self.client.post(
            DETAIL, {'action': 'drivers__enable__generic_pci'}, follow=True)
        enable.assert_called_once_with(mock.ANY, AGENT,
                                       'generic_pci')
        self.assertIn('Enabled driver generic_pci.', self.messages(response))

    def test_disable_driver_refused(self):
        error = admin_base.api.ApiError(
            409, 'Driver fake_driver holds ARQ b789: delete it first.')
        disable = self.api('host_driver_disable', side_effect=error)
        response = self.client.post(
            DETAIL, {'action': 'drivers__disable__fake_driver'}, follow=True)
        disable.assert_called_once_with(mock.ANY, AGENT,
                                        'fake_driver')
        self.assertEqual(200, response.status_code)
        self.assertIn(error.message, self.messages(response))

    def test_reload_drivers(self):
        reload = self.api('host_drivers_reload', return_value=admin_base
                          .sample('hosts/host-drivers-reload-resp.json'))
        response = self.client.post(DETAIL, {'action': 'drivers__reload'},
                                    follow=True)
        reload.assert_called_once_with(mock.ANY, AGENT)
        self.assertIn('Reloaded the drivers.', self.messages(response))

    def test_drivers_refusal_verbatim(self):
        error = admin_base.refusal(
            'hosts/host-driver-enable-unknown-resp.json')
        self.drivers.side_effect = error
        response = self.client.get(DETAIL)
        self.assertEqual(200, response.status_code)
        self.assertIn(error.message, self.messages(response))


def _agents(*hostnames: str) -> list[dict[str, str]]:
    return [{'host': f'agent-{i}', 'hostname': name,
             'binary': admin_base.api.AGENT_BINARY}
            for i, name in enumerate(hostnames)]


class AgentHostTests(admin_base.AdminTestCase):
    """The drivers API names an agent by its own host; the hosts panel
    knows the compute node's name."""

    def test_same_name_one_call(self):
        services = self.api('services', return_value=admin_base.api.Page(
            [{'host': HOST, 'hostname': HOST}], None))
        self.assertEqual(HOST, admin_base.api.agent_host('request', HOST))
        services.assert_called_once_with('request', binary='cyborg-agent',
                                         host=HOST, limit=1)

    def test_agent_of_another_name_found_on_a_later_page(self):
        services = self.api('services', side_effect=[
            admin_base.api.Page([], None),
            admin_base.api.Page(_agents('compute-9.example'), '1'),
            admin_base.api.Page(_agents('compute-8.example', HOST), None)])
        self.assertEqual('agent-1',
                         admin_base.api.agent_host('request', HOST))
        self.assertEqual([mock.call('request', binary='cyborg-agent',
                                    host=HOST, limit=1),
                          mock.call('request', binary='cyborg-agent',
                                    marker=None, limit=1000),
                          mock.call('request', binary='cyborg-agent',
                                    marker='1', limit=1000)],
                         services.call_args_list)

    def test_no_agent_keeps_the_node_name(self):
        self.api('services', side_effect=[
            admin_base.api.Page([], None),
            admin_base.api.Page(_agents('compute-9.example'), None)])
        self.assertEqual(HOST, admin_base.api.agent_host('request', HOST))
