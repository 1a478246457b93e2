"""Why a bind cannot be made, decided from what was read (no database)."""
import types

import pytest

from cyborg.db.api import bind_decision


def _deployable(**changes):
    read = {'hostname': 'node1', 'status': 'enabled', 'health': 'healthy',
            'health_reason': None, 'driver_disabled_since': None,
            'driver_name': 'fake', 'host': 'cmp1'}
    read.update(changes)
    return types.SimpleNamespace(**read)


@pytest.mark.parametrize('deployable, group, reason', [
    (None, {}, 'no deployable has this resource provider'),
    (_deployable(hostname='node2'), {},
     'the deployable is on node2, not node1'),
    (_deployable(status='disabled'), {}, 'the device is disabled'),
    (_deployable(driver_disabled_since='2026-11-27'), {},
     'its driver fake is disabled on cmp1'),
    (_deployable(health='unhealthy', health_reason='fan failure'), {},
     'the device is unhealthy: fan failure'),
    (_deployable(health='unhealthy'), {}, 'the device is unhealthy'),
    (_deployable(), {'accel:bitstream_id': 'b', 'accel:function_id': 'f'},
     'the profile names both accel:bitstream_id and accel:function_id'),
])
def test_refusals(deployable, group, reason):
    assert bind_decision.refusal(deployable, 'node1', group) == reason


@pytest.mark.parametrize('health', ['healthy', 'degraded', 'unknown'])
def test_a_device_that_serves_is_no_refusal(health):
    deployable = _deployable(health=health)
    assert bind_decision.refusal(deployable, 'node1', {}) is None
    assert bind_decision.refusal(deployable, 'node1',
                                 {'accel:function_id': 'f'}) is None


def test_a_disabled_device_elsewhere_is_named_by_its_host():
    # The first reason that stands is the answer: the host Nova named.
    deployable = _deployable(hostname='node2', status='disabled')
    assert bind_decision.refusal(deployable, 'node1', {}) == (
        'the deployable is on node2, not node1')
