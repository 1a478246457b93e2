"""The Accelerator Capacity panel, the panels' URLs, and who sees them."""
from unittest import mock

from django import urls

from cyborg.dashboard.admin.accelerator_capacity import charts
from cyborg.tests.unit.dashboard import admin_base

INDEX = urls.reverse('horizon:admin:accelerator_capacity:index')
SAMPLES = {'host': 'capacity/capacity-during-maintenance-resp.json',
           'resource_class': 'capacity/capacity-by-resource-class-resp.json',
           'trait': 'capacity/capacity-by-trait-resp.json'}


def _capacity(request, group_by='host', **kwargs):
    return admin_base.api.Page(
        admin_base.sample(SAMPLES[group_by])['capacity'], None)


def test_bars_scale_to_the_largest_total():
    rows = admin_base.sample(SAMPLES['trait'])['capacity']
    bars = charts.bars(rows, 'trait')
    assert [b['label'] for b in bars] == [r['trait'] for r in rows]
    # 16 of the largest 32: half a bar, all of it available.
    half = {s['name']: s['width'] for s in bars[1]['segments']}
    assert half == {'used': 0.0, 'reserved': 0.0, 'unhealthy': 0.0,
                    'available': 50.0}
    assert charts.bars([], 'trait') == []


class CapacityTests(admin_base.AdminTestCase):

    def test_one_call_per_grouping(self):
        capacity = self.api('capacity', side_effect=_capacity)
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        # One table page of hosts; the few classes and traits at once.
        self.assertEqual(
            [mock.call(response.wsgi_request, group_by=g, limit=n)
             for g, n in (('resource_class', 1000), ('host', 20),
                          ('trait', 1000))],
            capacity.call_args_list)
        html = response.content.decode()
        self.assertIn('CUSTOM_FPGA_BITSTREAM_FAKE_0D5A3F5E7B8C4D2E9F1A6C3B2E'
                      '1D0F4A', html)
        # The host in maintenance: 16 reserved, 16 available of 32.
        self.assertIn('class="cyborg-reserved" style="width: 50.00%" '
                      'title="reserved: 16"', html)
        self.assertIn('id="capacity_host"', html)
        self.assertNotIn('_more"', html)
        self.assertNotIn('Only the first', html)

    def test_the_host_chart_links_to_the_next_hosts(self):
        def page(request, group_by='host', **kwargs):
            found = _capacity(request, group_by)
            if group_by == 'host':
                found.next_marker = found.items[-1]['hostname']
            return found
        self.api('capacity', side_effect=page)
        html = self.client.get(INDEX).content.decode()
        self.assertIn('<a href="/admin/accelerator_hosts/?marker='
                      'compute-1.example" id="capacity_host_more">', html)

    def test_a_chart_of_many_traits_says_it_is_cut(self):
        def page(request, group_by='host', **kwargs):
            found = _capacity(request, group_by)
            if group_by == 'trait':
                found.next_marker = found.items[-1]['trait']
            return found
        self.api('capacity', side_effect=page)
        html = self.client.get(INDEX).content.decode()
        self.assertIn('Only the first 3 are shown.', html)
        self.assertNotIn('_more"', html)

    def test_refusal_verbatim(self):
        error = admin_base.refusal('capacity/capacity-bad-group-by-resp.json')
        self.api('capacity', side_effect=error)
        response = self.client.get(INDEX)
        self.assertEqual(200, response.status_code)
        # Each of the three charts was refused; Horizon shows the same
        # sentence once.
        self.assertEqual([error.message], self.messages(response))


class UrlTests(admin_base.AdminTestCase):

    def test_reverse(self):
        for name, path in (
                ('accelerator_hosts:index', '/admin/accelerator_hosts/'),
                ('accelerator_devices:index', '/admin/accelerator_devices/'),
                ('accelerator_capacity:index',
                 '/admin/accelerator_capacity/')):
            self.assertEqual(path, urls.reverse(f'horizon:admin:{name}'))


class MemberTests(admin_base.AdminTestCase):
    """A project member: no admin panel, no API call."""

    def setActiveUser(self, *args, **kwargs):
        kwargs['roles'] = [{'id': '2', 'name': 'member'},
                           {'id': '3', 'name': 'reader'}]
        return admin_base.helpers.TestCase.setActiveUser(
            self, *args, **kwargs)

    def test_no_admin_panel(self):
        capacity = self.api('capacity')
        devices = self.api('devices')
        for url in (INDEX, urls.reverse('horizon:admin:accelerator_hosts:'
                                        'index'),
                    urls.reverse('horizon:admin:accelerator_devices:index')):
            response = self.client.get(url)
            self.assertNotEqual(200, response.status_code, url)
        capacity.assert_not_called()
        devices.assert_not_called()
