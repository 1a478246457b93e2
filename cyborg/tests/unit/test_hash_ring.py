"""The consistent hash ring that shares hosts between conductors."""
import collections

import pytest

from cyborg.conductor import hash_ring

HOSTS = [f'compute-{i:04d}.example' for i in range(3000)]


def test_every_key_has_one_owner_among_the_members():
    ring = hash_ring.HashRing(['ctl1', 'ctl2', 'ctl3'])
    owners = collections.Counter(ring.owner(host) for host in HOSTS)
    assert set(owners) == {'ctl1', 'ctl2', 'ctl3'}
    # Roughly even: no member owns less than a quarter or over 40 %.
    assert all(len(HOSTS) / 4 < n < len(HOSTS) * 0.4
               for n in owners.values())


def test_the_owner_does_not_depend_on_the_order_or_repeats():
    one = hash_ring.HashRing(['ctl1', 'ctl2', 'ctl3'])
    other = hash_ring.HashRing(['ctl3', 'ctl1', 'ctl2', 'ctl1'])
    assert [one.owner(h) for h in HOSTS] == [other.owner(h) for h in HOSTS]


def test_a_member_that_leaves_moves_only_its_own_keys():
    three = hash_ring.HashRing(['ctl1', 'ctl2', 'ctl3'])
    two = hash_ring.HashRing(['ctl1', 'ctl3'])
    for host in HOSTS:
        if three.owner(host) != 'ctl2':
            assert two.owner(host) == three.owner(host)
        else:
            assert two.owner(host) in ('ctl1', 'ctl3')


def test_a_ring_needs_a_member():
    with pytest.raises(ValueError):
        hash_ring.HashRing([])
