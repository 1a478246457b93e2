"""The RPC plumbing: payload conversion."""
import collections
import datetime
import decimal
import ipaddress
import uuid

import pytest
from oslo_serialization import jsonutils

from cyborg.common import rpc


class _Thing:
    def __init__(self) -> None:
        self.name = 'thing'
        self.when = datetime.datetime(2026, 1, 2, 3, 4, 5)


PAYLOADS = [
    None, True, 0, -7, 2 ** 70, 1.5, '', 'caf\u00e9',
    [], (), {}, [1, (2, 3), {'a': [None, {'b': (4,)}]}],
    {'arqs': [{'uuid': str(uuid.uuid4()), 'attach_handle_info': {
        'bus': '0c', 'device': '00'}, 'device_profile_group_id': 0,
        'created_at': datetime.datetime(2026, 11, 23, 7, 0, 1)}]},
    {1: 'int key', None: 'none key', 'when': datetime.date(2026, 1, 1)},
    collections.OrderedDict(a=1, b=[2]), collections.defaultdict(list),
    {'id': uuid.UUID(int=5), 'price': decimal.Decimal('1.10'),
     'ip': ipaddress.ip_address('10.0.0.1'), 'bytes': b'raw'},
    {'set': {3}, 'frozen': frozenset(), 'range': range(3)},
    [_Thing(), {'nested': _Thing()}],
    ValueError('boom'),
]


@pytest.mark.parametrize('payload', PAYLOADS)
def test_to_primitive_is_oslo_serialization(payload):
    expected = jsonutils.to_primitive(payload, convert_instances=True)
    assert rpc.to_primitive(payload) == expected
    assert jsonutils.dumps(rpc.to_primitive(payload)) == jsonutils.dumps(
        expected)


def test_serializer_uses_it():
    serializer = rpc.RequestContextSerializer()
    payload = {'when': datetime.datetime(2026, 1, 1), 'rows': ({'a': 1},)}
    assert serializer.serialize_entity(None, payload) == (
        jsonutils.to_primitive(payload, convert_instances=True))
