"""Placement follows a device's health only when the device goes into or
out of ``unhealthy``, the only change that moves its ``reserved``: other
changes are stored and announced without a placement sync of the host."""
import pytest

from cyborg.tests.functional.test_device_health import _reading
from cyborg.tests.functional.test_device_health import _setup
from cyborg.tests.functional.test_device_health import conductor  # noqa: F401
from cyborg.tests.functional.test_device_health import node  # noqa: F401


@pytest.fixture
def syncs(conductor, monkeypatch):  # noqa: F811
    """The hosts the conductor publishes to placement, in order."""
    seen: list[str] = []
    sync_host = conductor.placement.sync_host

    def counted(hostname):
        seen.append(hostname)
        return sync_host(hostname)

    monkeypatch.setattr(conductor.placement, 'sync_host', counted)
    return seen


def test_placement_is_synced_only_on_flips(conf, conductor,  # noqa: F811
                                           placement, node,  # noqa: F811
                                           syncs):
    ctx, (device,) = _setup(conf, conductor, node, count=1)
    rp = device['deployables'][0]['rp_uuid']
    syncs.clear()

    def reserved():
        return placement.inventories(rp)['FPGA']['reserved']

    # unknown -> degraded -> healthy -> degraded (operator): no flip.
    assert conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'degraded', 'link at x8')]) == 1
    assert conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'healthy')]) == 1
    conductor.device_set_health(ctx, device['uuid'], 'degraded', 'fan')
    assert syncs == []
    assert reserved() == 0

    # Into unhealthy (operator), and a new reason that stays unhealthy.
    conductor.device_set_health(ctx, device['uuid'], 'unhealthy', 'fan')
    assert (syncs, reserved()) == ([node['name']], 4)
    assert conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'unhealthy', 'ECC storm')]) == 0
    shown = conductor.device_set_health(ctx, device['uuid'], None, None)
    assert (shown['health'], shown['health_reason']) == (
        'unhealthy', 'ECC storm')
    assert (syncs, reserved()) == ([node['name']], 4)

    # Out of unhealthy (agent).
    assert conductor.device_health_update(
        ctx, conf.host, [_reading(device, 'healthy')]) == 1
    assert (syncs, reserved()) == ([node['name']] * 2, 0)
