"""What one PATCH does with the requests it names (no database)."""
import types

import pytest

from cyborg.common import exception
from cyborg.db.api import patch_decision as pd

BOUND = {'hostname': 'node1', 'device_rp_uuid': 'rp1',
         'instance_uuid': 'inst1'}
NEW = {'hostname': 'node1', 'device_rp_uuid': 'rp2',
       'instance_uuid': 'inst2'}


def _request(state, **binding):
    values = dict.fromkeys(BOUND)
    values.update(binding)
    return types.SimpleNamespace(state=state, **values)


@pytest.mark.parametrize('live', [False, True])
def test_every_request_named_must_exist(live):
    found = {'a': _request('Initial')}
    made = pd.plan(found, {'a': NEW, 'z': NEW}, ['y', 'a'], live)
    assert isinstance(made.refused, exception.ARQNotFound)
    assert str(made.refused) == (
        'Accelerator request(s) y, z could not be found.')


@pytest.mark.parametrize('live', [False, True])
@pytest.mark.parametrize('state', pd.BOUND_TO)
def test_a_bind_sent_again_changes_nothing(live, state):
    found = {'a': _request(state, **BOUND), 'b': _request('Initial')}
    made = pd.plan(found, {'a': BOUND, 'b': NEW}, [], live)
    assert made == pd.Plan({'b': NEW}, [], same={'a': state})


@pytest.mark.parametrize('state', ['Initial', 'Unbound', 'UnbindFailed'])
def test_a_binding_kept_only_while_bound_repeats(state):
    found = {'a': _request(state, **BOUND)}
    made = pd.plan(found, {'a': BOUND}, [], False)
    assert made.same == {}
    assert list(made.binds) == ['a']


def test_a_bind_of_a_request_bound_elsewhere_waits_for_the_claims():
    found = {'a': _request('Initial'), 'b': _request('Bound', **BOUND),
             'c': _request('BindFailed', **BOUND)}
    made = pd.plan(found, {'a': NEW, 'b': NEW, 'c': NEW}, [], False)
    assert made.refused is None
    assert list(made.binds) == ['a', 'b', 'c']
    # The first one sent is named.
    assert isinstance(made.stuck, exception.ARQBadState)
    assert str(made.stuck) == ('Accelerator request b is Bound; binding '
                               'needs one of: Initial, Unbound.')


def test_a_live_bind_of_a_request_bound_elsewhere_is_a_conflict():
    found = {'a': _request('Bound', **BOUND), 'b': _request('Initial')}
    made = pd.plan(found, {'a': NEW}, ['b'], True)
    assert isinstance(made.refused, exception.Conflict)
    assert str(made.refused) == (
        'Conflict: Accelerator request a is Bound, bound to instance inst1 '
        'on host node1. Unbind it first (a PATCH of "remove" operations) '
        'to bind it elsewhere.')
    assert made.stuck is None


def test_a_live_unbind_of_a_request_never_bound_is_a_conflict():
    found = {'a': _request('Bound', **BOUND), 'b': _request('Initial')}
    made = pd.plan(found, {}, ['a', 'b'], True)
    assert isinstance(made.refused, exception.Conflict)
    assert str(made.refused) == (
        'Conflict: Accelerator request b is Initial: it is bound to no '
        'instance, so there is nothing to unbind. Leave it out of the '
        'PATCH.')


def test_a_live_unbind_sent_again_changes_nothing():
    found = {'a': _request('Bound', **BOUND), 'b': _request('Unbound')}
    made = pd.plan(found, {}, ['b', 'a'], True)
    assert made == pd.Plan({}, ['a'], again=['b'])


def test_without_live_every_unbind_is_made():
    found = {'a': _request('Initial'), 'b': _request('Unbound')}
    assert pd.plan(found, {}, ['a', 'b'], False) == pd.Plan({}, ['a', 'b'])


def test_a_claim_taken_is_the_patchs():
    assert pd.claim('inst1', True, False) is pd.Claim.TAKEN
    assert pd.claim('inst1', True, True) is pd.Claim.TAKEN


def test_a_live_attach_joins_the_claim_held():
    assert pd.claim('inst1', False, True) is pd.Claim.JOIN


def test_a_second_patch_for_an_instance_is_refused():
    refused = pd.claim('inst1', False, False)
    assert isinstance(refused, exception.Invalid)
    assert str(refused) == (
        "Invalid input: Cannot bind accelerator requests to instance inst1: "
        "bind all of an instance's accelerator requests in one PATCH.")
