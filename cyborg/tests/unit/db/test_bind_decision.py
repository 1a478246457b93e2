"""Each rule of one bind, decided from what was read (no database)."""
import types

import pytest

from cyborg.db.api import bind_decision as bd

Need = bd.Need


def _target(**changes):
    read = {'id': 7, 'uuid': 'dep-uuid', 'name': 'cmp1_0000:0c:00',
            'driver_name': 'fake', 'driver_disabled_since': None,
            'hostname': 'node1', 'host': 'cmp1', 'status': 'enabled',
            'health': 'healthy', 'health_reason': None,
            'cpid_type': 'PCI', 'cpid_info': '{}'}
    read.update(changes)
    return bd.Target(**read)


def _state(action=None, action_bitstream_id=None, bitstream_id=None):
    return types.SimpleNamespace(action=action,
                                 action_bitstream_id=action_bitstream_id,
                                 bitstream_id=bitstream_id)


def _read(group=None, programming=None, **read):
    """A read that every step so far let through, with ``read`` added."""
    group = group or {}
    made = bd.BindRead('node1', group, _target(), programming or {},
                       bitstream=group.get('accel:bitstream_id'))
    for name, value in read.items():
        setattr(made, name, value)
    return made


LOCKED = {'state': _state(), 'layout_state': 'active'}
TAKEN = {'taken': True, 'handle': object()}


def test_what_was_read_first_refuses_first():
    read = _read()
    read.target = None
    assert bd.decide(read) == bd.Refused(
        'no deployable has this resource provider')
    read.target = _target(status='disabled')
    assert bd.decide(read) == bd.Refused('the device is disabled')


def test_a_function_is_looked_up_before_the_device_is_locked():
    group = {'accel:function_id': 'f1'}
    assert bd.decide(_read(group)) is Need.BITSTREAM
    assert bd.decide(_read(group, looked_up=True, bitstream='b1')) is (
        Need.LOCK)


def test_a_function_no_image_provides_is_refused():
    read = _read({'accel:function_id': 'f1'}, looked_up=True,
                 lookup_error='Bitstream not found: none')
    assert bd.decide(read) == bd.Refused(
        'no image provides function f1: Bitstream not found: none')


def test_the_device_is_locked_before_its_state_decides():
    assert bd.decide(_read()) is Need.LOCK


@pytest.mark.parametrize('layout_state, reason', [
    ('applying', "the device's layout is being changed"),
    ('pending', 'the device waits to be enabled with a new layout'),
])
def test_a_layout_change_refuses(layout_state, reason):
    read = _read(state=_state(), layout_state=layout_state)
    assert bd.decide(read) == bd.Refused(reason)


@pytest.mark.parametrize('bitstream', [None, 'b1'])
def test_a_bind_joins_the_programming_of_its_patch(bitstream):
    group = {'accel:bitstream_id': bitstream} if bitstream else {}
    read = _read(group, programming={7: 'b1'}, **LOCKED, **TAKEN)
    assert bd.decide(read) == bd.Bind(program=True, waits=False)


def test_another_bitstream_than_its_patch_loads_is_refused():
    read = _read({'accel:bitstream_id': 'b2'}, programming={7: 'b1'},
                 **LOCKED)
    assert bd.decide(read) == bd.Refused(
        'another request of this PATCH loads bitstream b1 on the device')


@pytest.mark.parametrize('bitstream', [None, 'b1'])
def test_a_bind_waits_for_the_programming_under_way(bitstream):
    group = {'accel:bitstream_id': bitstream} if bitstream else {}
    read = _read(group, state=_state('programming', 'b1'),
                 layout_state='active', **TAKEN)
    assert bd.decide(read) == bd.Bind(program=False, waits=True)


def test_another_bitstream_than_the_one_being_loaded_is_refused():
    read = _read({'accel:bitstream_id': 'b2'},
                 state=_state('programming', 'b1'), layout_state='active')
    assert bd.decide(read) == bd.Refused(
        'the device is being programmed with bitstream b1')


def test_a_new_bitstream_asks_who_holds_the_device():
    read = _read({'accel:bitstream_id': 'b2'},
                 state=_state(bitstream_id='b1'), layout_state='active')
    assert bd.decide(read) is Need.HOLDERS


def test_a_new_bitstream_is_refused_while_the_device_is_used():
    read = _read({'accel:bitstream_id': 'b2'},
                 state=_state(bitstream_id='b1'), layout_state='active',
                 holders=['arq-1', 'released'])
    assert bd.decide(read) == bd.Refused(
        'bitstream b2 cannot be loaded while accelerator request(s) '
        'arq-1, released use the device')


def test_a_new_bitstream_programs_a_device_nobody_uses():
    read = _read({'accel:bitstream_id': 'b2'},
                 state=_state(bitstream_id='b1'), layout_state='active',
                 holders=[])
    assert bd.decide(read) is Need.HANDLE
    read.taken, read.handle = True, object()
    assert bd.decide(read) == bd.Bind(program=True, waits=False)


@pytest.mark.parametrize('group', [{}, {'accel:bitstream_id': 'b1'}])
def test_what_the_device_holds_binds_without_programming(group):
    read = _read(group, state=_state(bitstream_id='b1'),
                 layout_state='active')
    assert bd.decide(read) is Need.HANDLE
    read.taken, read.handle = True, object()
    assert bd.decide(read) == bd.Bind(program=False, waits=False)


def test_no_free_handle_is_refused():
    read = _read(**LOCKED, taken=True, handle=None)
    assert bd.decide(read) == bd.Refused(
        'the deployable has no free attach handle')
    assert bd.decide(read).reason == bd.NO_FREE_HANDLE


def _job(arq, handle):
    return {'arq_uuid': arq, 'attach_handle_id': handle}


def _started(arq, handle, instance='inst1'):
    return types.SimpleNamespace(uuid=arq, handle_id=handle,
                                 instance_uuid=instance)


def test_binds_end_bound_or_failed_and_owe_their_events():
    read = [_started('b', 2), _started('a', 1)]
    end = bd.ends([_job('b', 2)], [_job('a', 1)], read, True,
                  {'a': 'no mdev'})
    assert (end.bound, end.lost) == (['b'], ['a'])
    # A failure owed to Nova stays BindStarted until Nova has it.
    assert end.states == {'b': 'Bound', 'a': 'BindStarted'}
    assert list(end.states) == ['b', 'a']
    assert end.events == [('a', 'inst1', 'failed', 'no mdev'),
                          ('b', 'inst1', 'completed', None)]
    assert end.started == {'a': read[1], 'b': read[0]}


def test_a_failure_not_owed_ends_bind_failed():
    end = bd.ends([], [_job('a', 1)], [_started('a', 1)], False, {})
    assert end.lost_state == 'BindFailed'
    assert end.states == {'a': 'BindFailed'}
    assert end.events == [('a', 'inst1', 'failed', None)]


def test_a_request_no_longer_holding_the_jobs_handle_is_left_alone():
    # Unbound and bound again meanwhile (another handle), or gone.
    read = [_started('a', 9)]
    end = bd.ends([_job('a', 1)], [_job('b', 2)], read, True, {})
    assert (end.started, end.bound, end.lost) == ({}, [], [])
    assert (end.states, end.events) == ({}, [])
