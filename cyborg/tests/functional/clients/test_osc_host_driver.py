"""``openstack accelerator host driver list|enable|disable|reload``, run
as a user runs them: the real ``openstack`` program against the API on a
port, with an agent service listening in-process."""
import importlib.metadata

from cyborg import context as cyborg_context
from cyborg.db.api import inventory
from cyborg.tests.functional.api.test_hosts import HOST
from cyborg.tests.functional.api.test_hosts import agent  # noqa: F401
from cyborg.tests.functional.clients.test_osc_plugin import _calls
from cyborg.tests.functional.clients.test_osc_plugin import _json
from cyborg.tests.functional.clients.test_osc_plugin import _run
from cyborg.tests.utils import serving

VERSION = importlib.metadata.version('cyborg')


def _devices():
    return inventory.get_host_devices(cyborg_context.get_admin_context(),
                                      HOST)


def test_list_disable_enable_reload(live_api, agent, tmp_path):  # noqa: F811
    rows = {r['Name']: r for r in _json(
        live_api, tmp_path, 'accelerator', 'host', 'driver', 'list', HOST)}
    assert rows['fake_driver'] == {
        'Name': 'fake_driver', 'Driver Name': 'fake', 'Version': VERSION,
        'Enabled': True, 'State': None, 'Error': None}
    assert rows['intel_qat']['Enabled'] is False

    serving(agent.endpoints, 'discover').discover(
        cyborg_context.get_admin_context())
    before = _devices()
    assert len(before) == 2
    shown = _json(live_api, tmp_path, 'accelerator', 'host', 'driver',
                  'disable', HOST, 'fake_driver')
    assert shown == {'host': HOST, 'name': 'fake_driver',
                     'driver_name': 'fake', 'version': VERSION,
                     'enabled': False, 'state': 'disabled', 'error': None,
                     'changed': True, 'reported': True}
    # Kept, reserved, while the driver is off.
    assert _devices() == before
    shown = _json(live_api, tmp_path, 'accelerator', 'host', 'driver',
                  'enable', HOST, 'fake_driver')
    assert (shown['enabled'], shown['state']) == (True, 'ok')
    assert _devices() == before

    rows = {r['Name']: r for r in _json(
        live_api, tmp_path, 'accelerator', 'host', 'driver', 'reload', HOST)}
    assert rows['fake_driver']['Enabled'] is True

    calls = _calls(live_api)
    assert [(c.method, c.path, c.status) for c in calls] == [
        ('GET', f'/v2/hosts/{HOST}/drivers', 200),
        ('POST', f'/v2/hosts/{HOST}/drivers/fake_driver/disable', 200),
        ('POST', f'/v2/hosts/{HOST}/drivers/fake_driver/enable', 200),
        ('POST', f'/v2/hosts/{HOST}/drivers/reload', 200)]
    assert {c.headers['openstack-api-version'] for c in calls} == {
        'accelerator 2.8'}


def test_unknown_driver_says_what_is_installed(live_api, agent,  # noqa: F811
                                               tmp_path):
    failed = _run(live_api, tmp_path, 'accelerator', 'host', 'driver',
                  'enable', HOST, 'nope', check=False)
    assert failed.returncode == 1
    assert '400' in failed.stderr
    assert 'No driver named nope is installed on host' in failed.stderr
    assert 'fake_driver' in failed.stderr
