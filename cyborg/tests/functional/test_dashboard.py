"""cyborg's Horizon plugin in a real browser, against a real deployment.

Debian's ``chromium`` and ``chromium-driver`` packages are installed by
the test when missing (``harness/system_packages.py``, through
``harness/browser.py``); selenium drives that Chromium, headless,
through /usr/bin/chromedriver. One stack for the module: Keystone
(fernet tokens, under waitress, its database on MariaDB) with cyborg's
``accelerator`` endpoint in its catalog, placement, cyborg-api
validating tokens against that Keystone, a conductor, an agent with the
fake driver (two cards of two FPGA functions) on SQLite and RabbitMQ,
and Horizon (openstack_dashboard, ``harness/horizon_server.py``) with
the plugin's enabled files installed as Horizon documents. Users of the
project ``dashboard``: an administrator and a member; a member of a
second project owns a request the first project must not see.

Left out of the default run (the marker ``dashboard``, conftest.py):
it needs the ``dashboard`` extra (Horizon). ``tox -e dashboard`` runs
it. CYBORG_DASHBOARD_SCREENSHOTS=<dir> saves a PNG of each main page
there (``dashboard-<page>.png``, the documentation's images).
"""
import os
import pathlib
from collections.abc import Iterator

import pytest

from cyborg.tests import conftest
from cyborg.tests.harness import dashboard_cloud
from cyborg.tests.harness.dashboard_cloud import AGENT_HOST
from cyborg.tests.harness.dashboard_cloud import HOSTNAME
from cyborg.tests.harness.dashboard_cloud import PROFILE

pytestmark = pytest.mark.dashboard

SCREENSHOTS = 'CYBORG_DASHBOARD_SCREENSHOTS'


@pytest.fixture(scope='module')
def cloud(tmp_path_factory) -> Iterator[dashboard_cloud.Cloud]:
    conftest.require_module('selenium')
    # Here, not at the top: the browser harness imports selenium, a test
    # requirement checked just above.
    from cyborg.tests.harness import browser as browser_lib
    browser_lib.install()
    workdir = tmp_path_factory.mktemp('dashboard')
    with dashboard_cloud.running(workdir) as made:
        yield made


@pytest.fixture
def browser(cloud: dashboard_cloud.Cloud) -> Iterator[object]:
    from cyborg.tests.harness import browser as browser_lib
    found = browser_lib.Browser(cloud.workdir)
    try:
        yield found
    finally:
        found.quit()


def _shot(browser, name: str) -> None:
    """A PNG of the page as ``dashboard-<name>.png`` in the directory
    CYBORG_DASHBOARD_SCREENSHOTS names, when it names one."""
    directory = os.environ.get(SCREENSHOTS)
    if directory:
        browser.screenshot(pathlib.Path(directory) / f'dashboard-{name}.png')


def _sign_in(cloud: dashboard_cloud.Cloud, browser, user: str) -> None:
    browser.login(cloud.horizon_url, user, cloud.passwords[user])


def _visit(cloud: dashboard_cloud.Cloud, browser, path: str) -> str:
    """Open the page at ``path``, check Horizon showed no error on it,
    and return its visible text."""
    browser.open(cloud.horizon_url + path)
    assert not browser.errors(), (path, browser.errors())
    return browser.text('#content_body, .page-content, body')


def test_an_administrator_sees_the_accelerator_service(cloud, browser):
    """Signed in, an administrator's System Information lists the
    ``accelerator`` endpoint Horizon's panels call."""
    _sign_in(cloud, browser, cloud.admin)
    assert '/admin/info/' in browser.navigation()
    _visit(cloud, browser, '/admin/info/')
    services = {row.get('Service') for row in browser.table('services')}
    assert 'accelerator' in services, services


def test_the_admin_accelerator_panels_render(cloud, browser):
    """Every panel of Admin > Accelerators answers without an error, and
    one of them lists the agent's host and its cards' health."""
    _sign_in(cloud, browser, cloud.admin)
    panels = browser.panels('admin', 'accelerators')
    assert panels, ('no Accelerators panel in the Admin dashboard',
                    browser.navigation())
    texts = {}
    for label, path in panels.items():
        texts[label] = _visit(cloud, browser, path)
        _shot(browser, 'admin-' + path.strip('/').split('/')[-1])
    assert any(HOSTNAME in text and 'healthy' in text
               for text in texts.values()), texts


def test_a_member_sees_only_the_project_panels(cloud, browser):
    """No Admin dashboard for a member; the Project dashboard's
    Accelerators panels show the project's own request, not another
    project's."""
    _sign_in(cloud, browser, cloud.member)
    navigation = browser.navigation()
    assert not [path for path in navigation
                if path.startswith('/admin/')], navigation
    panels = browser.panels('project', 'accelerators')
    assert panels, ('no Accelerators panel in the Project dashboard',
                    navigation)
    texts = {}
    for label, path in panels.items():
        texts[label] = _visit(cloud, browser, path)
        _shot(browser, 'project-' + path.strip('/').split('/')[-1])
    assert any(PROFILE in text for text in texts.values()), texts
    assert any(cloud.own_arq in text for text in texts.values()), texts
    assert not any(cloud.other_arq in text for text in texts.values())


def test_a_wrong_password_is_refused(cloud, browser):
    from cyborg.tests.harness import browser as browser_lib
    with pytest.raises(browser_lib.LoginFailed):
        browser.login(cloud.horizon_url, cloud.member, 'not-the-password')


# -- actions ---------------------------------------------------------------

PROFILES = '/project/device_profiles/'
DEVICES = '/admin/accelerator_devices/'


def _device(cloud: dashboard_cloud.Cloud, index: int) -> dict:
    """The ``index``-th of the agent's two cards, by uuid, from the API
    (each action test takes a card of its own)."""
    found = cloud.api(cloud.admin, 'GET', '/devices', 200).json()['devices']
    return sorted(found, key=lambda d: d['uuid'])[index]


def _profiles(cloud: dashboard_cloud.Cloud, name: str) -> list[dict]:
    return cloud.api(cloud.admin, 'GET', f'/device_profiles?name={name}',
                     200).json()['device_profiles']


def _create_profile(browser, name: str, groups: str) -> None:
    browser.click('Create Device Profile', '.table_actions')
    browser.fill('#id_name', name)
    browser.fill('#id_description', 'made in the browser')
    browser.fill('#id_groups', groups)
    browser.submit_modal()


def test_an_administrator_creates_and_deletes_a_device_profile(
        cloud, browser):
    """Create Device Profile's modal form makes the profile the API then
    lists, with its groups; Delete, confirmed, removes it."""
    name = 'made-in-browser'
    _sign_in(cloud, browser, cloud.admin)
    _visit(cloud, browser, PROFILES)
    _create_profile(browser, name, 'resources:FPGA=1\n'
                                   'trait:CUSTOM_FAKE_DEVICE=required')
    browser.message('success', f'Created device profile "{name}".')
    [made] = _profiles(cloud, name)
    assert made['groups'] == [{'resources:FPGA': '1',
                               'trait:CUSTOM_FAKE_DEVICE': 'required'}]
    assert made['description'] == 'made in the browser'
    rows = {row['Name']: row for row in browser.table('device_profiles')}
    assert rows[name]['Groups'] == 'FPGA: 1; requires CUSTOM_FAKE_DEVICE'

    browser.row_action('device_profiles', made['uuid'],
                       'Delete Device Profile')
    browser.confirm()
    browser.message('success', f'Deleted Device Profile: {name}')
    assert _profiles(cloud, name) == []
    assert name not in {row['Name'] for row in
                        browser.table('device_profiles')}


def test_a_refused_create_shows_the_api_sentence(cloud, browser):
    """A name already taken: the API's 409 sentence, word for word, in
    the form, which stays open; nothing is created."""
    _sign_in(cloud, browser, cloud.admin)
    _visit(cloud, browser, PROFILES)
    _create_profile(browser, PROFILE, 'resources:FPGA=2')
    browser.message('danger',
                    f'A device profile named {PROFILE} already exists.')
    assert browser.element('.modal.in #id_name').get_attribute(
        'value') == PROFILE
    [kept] = _profiles(cloud, PROFILE)
    assert kept['groups'][0]['resources:FPGA'] == '1'


def test_an_operator_health_is_set_and_cleared(cloud, browser):
    """Set the Health (unhealthy, with a reason) from the device's page:
    the API, the device list and the host's page show it; Clear gives
    the health back to the agent."""
    device = _device(cloud, 0)
    uuid = device['uuid']
    reason = 'fan failure seen in the browser test'
    _sign_in(cloud, browser, cloud.admin)
    _visit(cloud, browser, f'{DEVICES}{uuid}/?tab=device_details__health')
    browser.click('Set the Health', '.tab-content')
    browser.choose('#id_health', 'unhealthy')
    browser.fill('#id_reason', reason)
    browser.submit_modal()
    browser.message('success', f'Health of {uuid} set to unhealthy.')
    found = cloud.api(cloud.admin, 'GET', f'/devices/{uuid}', 200).json()
    assert (found['health'], found['health_reason'],
            found['health_source']) == ('unhealthy', reason, 'operator')

    for path, table in ((DEVICES, 'devices'),
                        (f'/admin/accelerator_hosts/{HOSTNAME}/',
                         'host_devices')):
        _visit(cloud, browser, path)
        rows = {row['UUID']: row for row in browser.table(table)}
        assert (rows[uuid]['Health'], rows[uuid]['Health reason']) == (
            'unhealthy', reason), (path, rows[uuid])

    _visit(cloud, browser, f'{DEVICES}{uuid}/?tab=device_details__health')
    browser.click("Clear the Operator's Health", '.tab-content')
    browser.message('success', f"Cleared the operator's health of {uuid}")
    found = cloud.api(cloud.admin, 'GET', f'/devices/{uuid}', 200).json()
    assert (found['health'], found['health_source']) == ('healthy', 'agent')
    assert "Clear the Operator's Health" not in browser.text('.tab-content')


def test_a_device_is_disabled_and_enabled_again(cloud, browser):
    """The device list's Disable and Enable: the API's
    status follows, and the row offers the other action."""
    uuid = _device(cloud, 1)['uuid']
    _sign_in(cloud, browser, cloud.admin)
    _visit(cloud, browser, DEVICES)
    browser.row_action('devices', uuid, 'Disable')
    browser.message('success', f'Disabled device {uuid}')
    status = cloud.api(cloud.admin, 'GET', f'/devices/{uuid}',
                       200).json()['status']
    # maintaining while requests of the device's profile are open.
    assert status in ('disabled', 'maintaining'), status
    rows = {row['UUID']: row for row in browser.table('devices')}
    assert rows[uuid]['Status'] == status

    browser.row_action('devices', uuid, 'Enable')
    browser.message('success', f'Enabled device {uuid}.')
    assert cloud.api(cloud.admin, 'GET', f'/devices/{uuid}',
                     200).json()['status'] == 'enabled'


def _drivers(cloud: dashboard_cloud.Cloud) -> dict[str, dict]:
    return {d['name']: d for d in cloud.api(
        cloud.admin, 'GET', f'/hosts/{AGENT_HOST}/drivers',
        200).json()['drivers']}


def test_a_driver_is_disabled_enabled_and_reloaded(cloud, browser):
    """The host's Drivers tab, though the agent's host is not the node's
    name: Disable and Enable of the fake driver change what
    the API reports; Reload Drivers answers."""
    driver = 'fake_driver'
    page = f'/admin/accelerator_hosts/{HOSTNAME}/?tab=host_details__drivers'
    try:
        _drive_the_drivers(cloud, browser, page, driver)
    finally:
        # The other tests need the fake driver's devices.
        cloud.api(cloud.admin, 'POST',
                  f'/hosts/{AGENT_HOST}/drivers/{driver}/enable', 200)


def _drive_the_drivers(cloud: dashboard_cloud.Cloud, browser, page: str,
                       driver: str) -> None:
    _sign_in(cloud, browser, cloud.admin)
    _visit(cloud, browser, page)
    rows = {row['Name']: row for row in browser.table('drivers')}
    assert rows[driver]['State'] == 'ok', rows
    browser.row_action('drivers', driver, 'Disable')
    browser.message('success', f'Disabled driver {driver}.')
    assert (_drivers(cloud)[driver]['enabled'],
            _drivers(cloud)[driver]['state']) == (False, 'disabled')

    _visit(cloud, browser, page)
    browser.row_action('drivers', driver, 'Enable')
    browser.message('success', f'Enabled driver {driver}.')
    assert _drivers(cloud)[driver]['enabled'] is True

    _visit(cloud, browser, page)
    browser.click('Reload Drivers', '.table_actions')
    browser.message('success', 'Reloaded the drivers.')
    assert not browser.errors()
    assert _drivers(cloud)[driver]['state'] == 'ok'


def test_a_refused_layout_shows_the_api_sentence(cloud, browser):
    """The Layout tab offers what the fake card offers (an image for its
    region); an image the image service does not have is refused, and
    the page shows the API's sentence as it is."""
    uuid = _device(cloud, 0)['uuid']
    image = 'no-such-image'
    _sign_in(cloud, browser, cloud.admin)
    _visit(cloud, browser, f'{DEVICES}{uuid}/?tab=device_details__layout')
    assert 'region_image' in browser.text('.tab-content')
    browser.click('Set the Layout', '.tab-content')
    browser.fill('#id_region_image', image)
    browser.submit_modal()
    refused = cloud.api(cloud.admin, 'PUT', f'/devices/{uuid}/layout', 400,
                        json={'region_image': image})
    sentence = dashboard_cloud.fault(refused)
    assert image in sentence
    browser.message('danger', sentence)
    assert cloud.api(cloud.admin, 'GET', f'/devices/{uuid}/layout',
                     200).json()['layout'] is None


def test_a_member_gets_no_administrator_action(cloud, browser):
    """A member lists the device profiles without Create or Delete (the
    policy's admin_api), and the Admin devices panel is not theirs."""
    _sign_in(cloud, browser, cloud.member)
    _visit(cloud, browser, PROFILES)
    assert PROFILE in {row['Name'] for row in
                       browser.table('device_profiles')}
    actions = browser.text('#device_profiles')
    assert 'Create Device Profile' not in actions
    assert 'Delete Device Profile' not in actions
    assert not browser.elements('#device_profiles__action_create, '
                                '#device_profiles__action_delete, '
                                '[id$="__action_delete"]')
    browser.open(cloud.horizon_url + DEVICES)
    reached = browser.url.split('?')[0].endswith(DEVICES)
    assert not reached or 'not authorized' in browser.errors(), browser.url
    assert not browser.elements('table#devices')
