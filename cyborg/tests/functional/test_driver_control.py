"""Drivers managed at runtime on one agent: the operator's choices kept
across restarts, reports of disabled drivers and versions, and a reload
that picks up an upgraded package; the agent reports into a conductor
manager on every database."""
import os
import textwrap

import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator import drivers as accel_drivers
from cyborg.agent import cache as agent_cache
from cyborg.agent import driver_control
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.db.api import drivers
from cyborg.db.api import inventory
from cyborg.tests.utils import InProcess

HOST = 'cmp3'

MODULE = '''
"""A driver installed from a package of version {version}."""
from cyborg.accelerator.drivers import base
from cyborg.common import device_report as r


class UpgradedDriver(base.AcceleratorDriver):
    driver_name = 'upgraded'
    # What the code of this version says, read back by the test.
    CODE_VERSION = '{version}'

    def discover(self):
        address = r.pci_address('0000', '82', '00', '0')
        return [r.DriverDevice(
            type='GPU', vendor='0x10de', model='0x1eb8',
            controlpath_id=address,
            deployables=[r.DriverDeployable(
                name='gpu0', num_accelerators=1,
                driver_name=self.driver_name,
                attach_handles=[r.DriverAttachHandle('PCI', address)])])]
'''


def _install(root, version, fail=False):
    """A package ``cyborg-test-upgraded`` of ``version`` under ``root``:
    its module and a dist-info with the entry point, as pip leaves them.
    """
    body = MODULE.format(version=version)
    if fail:
        body += '\nraise ImportError("gone")\n'
    module = root / 'cyborg_test_upgraded.py'
    before = module.stat().st_mtime if module.exists() else None
    module.write_text(textwrap.dedent(body))
    if before is not None:
        # Python trusts cached bytecode whose source has the same size and
        # mtime, to the second: a rewrite within a second must look newer,
        # as a real upgrade's files do.
        os.utime(module, (before + 2, before + 2))
    for old in root.glob('cyborg_test_upgraded-*.dist-info'):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    info = root / f'cyborg_test_upgraded-{version}.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text(
        f'Metadata-Version: 2.1\nName: cyborg-test-upgraded\n'
        f'Version: {version}\n')
    (info / 'entry_points.txt').write_text(
        '[cyborg.accelerator.driver]\n'
        'upgraded = cyborg_test_upgraded:UpgradedDriver\n')
    # A same-second rewrite must still look new to the metadata caches.
    stamp = os.stat(root).st_mtime + 1
    os.utime(root, (stamp, stamp))


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / 'site'
    root.mkdir()
    _install(root, '1.0')
    monkeypatch.syspath_prepend(str(root))
    yield root
    import sys
    sys.modules.pop('cyborg_test_upgraded', None)


def _agent(conf):
    """An agent's tracker and driver control as cyborg-agent starts them,
    its cache read from the state path (a restart reads it again)."""
    cache = agent_cache.AgentCache.load(agent_cache.cache_path(conf))
    tracker = resource_tracker.ResourceTracker(
        conf, [], InProcess(conductor_manager.ConductorManager(conf)),
        cache=cache)
    return tracker, driver_control.DriverControl.start(conf, tracker)


@pytest.fixture
def agent_conf(conf, db_engine):
    conf.set_override('host', HOST)
    conf.set_override('device_count', 2, 'fake_driver')
    # The conductor manager makes its agent client; no call goes out.
    rpc.init(conf, url='fake://')
    try:
        yield conf
    finally:
        rpc.cleanup()


def _rows():
    return {d['driver_name']: (d['state'], d['version'], d['devices'])
            for d in drivers.get_all(cyborg_context.get_admin_context(),
                                     host=HOST)}


def _device_count():
    return len(inventory.get_host_devices(
        cyborg_context.get_admin_context(), HOST))


def test_choices_outlive_a_restart(agent_conf):
    tracker, control = _agent(agent_conf)
    version = accel_drivers.installed_drivers()['fake_driver'].version
    tracker.update()
    assert _rows() == {'fake': ('ok', version, 2)}

    change = control.set_enabled('fake_driver', False)
    assert (change['enabled'], change['state'], change['reported'],
            change['changed']) == (False, 'disabled', True, True)
    assert tracker.drivers == []
    # Kept while the driver is off (their providers reserved).
    assert _device_count() == 2
    assert _rows() == {'fake': ('disabled', version, 2)}

    # Restarted: the config file still enables fake_driver, the cache
    # says the operator disabled it.
    tracker, control = _agent(agent_conf)
    assert tracker.drivers == []
    assert {d['name']: d['state'] for d in control.entries()}[
        'fake_driver'] == 'disabled'
    tracker.update(force=True)
    assert _rows() == {'fake': ('disabled', version, 2)}

    control.set_enabled('fake_driver', True)
    tracker, control = _agent(agent_conf)
    assert [type(d).driver_name for d in tracker.drivers] == ['fake']
    tracker.update(force=True)
    assert _rows() == {'fake': ('ok', version, 2)}


def test_config_stays_the_default_for_untouched_drivers(agent_conf):
    tracker, control = _agent(agent_conf)
    control.set_enabled('generic_pci', False)
    # Not in the config, disabled anyway: nothing to unload.
    assert [type(d).driver_name for d in tracker.drivers] == ['fake']
    agent_conf.set_override('enabled_drivers', [], 'agent')
    tracker, control = _agent(agent_conf)
    # fake_driver was never chosen for: the config file decides.
    assert tracker.drivers == []


def test_unknown_driver_is_refused_listing_the_installed(agent_conf):
    tracker, control = _agent(agent_conf)
    with pytest.raises(exception.UnknownDriver) as err:
        control.set_enabled('nope', True)
    assert 'fake_driver' in str(err.value)
    assert tracker.cache.driver_choices == {}


def test_reload_picks_up_an_upgrade(agent_conf, package):
    tracker, control = _agent(agent_conf)
    change = control.set_enabled('upgraded', True)
    assert (change['driver_name'], change['version'], change['state']) == (
        'upgraded', '1.0', 'ok')
    [_, first] = tracker.drivers
    assert first.CODE_VERSION == '1.0'
    assert _rows()['upgraded'] == ('ok', '1.0', 1)

    _install(package, '2.0')
    # Until the reload the agent runs what it loaded.
    assert tracker.drivers[1] is first
    listing = {d['name']: d for d in control.reload()}
    assert listing['upgraded']['version'] == '2.0'
    [_, second] = tracker.drivers
    assert second.CODE_VERSION == '2.0'
    assert _rows()['upgraded'] == ('ok', '2.0', 1)


def test_a_driver_that_breaks_in_an_upgrade_is_failed(agent_conf, package):
    tracker, control = _agent(agent_conf)
    control.set_enabled('upgraded', True)
    _install(package, '3.0', fail=True)
    listing = {d['name']: d for d in control.reload()}
    assert listing['upgraded']['state'] == 'failed'
    assert 'gone' in listing['upgraded']['error']
    assert listing['fake_driver']['state'] == 'ok'
    assert [type(d).driver_name for d in tracker.drivers] == ['fake']
    # Reported failed, its device kept as last reported, as a driver that
    # fails its discovery.
    state, version, devices = _rows()['upgraded']
    assert (state, devices) == ('failed', 1)
    assert _device_count() == 3


def test_enable_of_a_driver_that_cannot_load_changes_nothing(agent_conf,
                                                             package):
    _install(package, '3.0', fail=True)
    tracker, control = _agent(agent_conf)
    with pytest.raises(exception.DriverLoadFailed) as err:
        control.set_enabled('upgraded', True)
    assert 'gone' in str(err.value)
    assert tracker.cache.driver_choices == {}
    assert [type(d).driver_name for d in tracker.drivers] == ['fake']
