"""os-acc's objects: PCI addresses, requests as read, and VANs."""
import json
import re

import pytest

from cyborg.os_acc import exception
from cyborg.os_acc import objects
from cyborg.tests.unit.os_acc import fakes


@pytest.mark.parametrize('info, address', [
    ({'domain': '0000', 'bus': '0c', 'device': '00', 'function': '1'},
     '0000:0c:00.1'),
    ({'domain': '0x0000', 'bus': '0xAF', 'device': '0x1f',
      'function': '0x7'}, '0000:af:1f.7'),
    ({'domain': '10000', 'bus': '0', 'device': '2', 'function': '0'},
     '10000:00:02.0'),
])
def test_pci_address(info, address):
    assert str(objects.PciAddress.from_info(info)) == address


@pytest.mark.parametrize('info, message', [
    ({'bus': '0c', 'device': '00', 'function': '1'}, "no 'domain'"),
    ({'domain': 0, 'bus': '0c', 'device': '00', 'function': '1'},
     "'domain' is 0 (int), not a string of hex digits"),
    ({'domain': '0000', 'bus': '', 'device': '00', 'function': '1'},
     "'bus' is '', not a string"),
    ({'domain': '0000', 'bus': '100', 'device': '00', 'function': '1'},
     "'bus' is '100', larger than 0xff"),
    ({'domain': '0000', 'bus': '0c', 'device': '-1', 'function': '1'},
     "'device' is '-1', not a string"),
])
def test_bad_pci_address(info, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        objects.PciAddress.from_info(info)


def test_arq_keeps_what_os_acc_uses():
    raw = fakes.arq('PCI')
    arq = objects.ARQ.from_dict(raw)
    assert (arq.uuid, arq.state, arq.instance_uuid, arq.hostname) == (
        raw['uuid'], 'Bound', fakes.INSTANCE, 'node1')
    assert arq.attach_handle_info == raw['attach_handle_info']
    assert arq.attach_handle_info is not raw['attach_handle_info']


@pytest.mark.parametrize('raw, message', [
    ('an arq', 'it is a str, not a mapping'),
    ({'uuid': 'x'}, "its uuid is 'x'"),
    (dict(fakes.arq(), state=None), 'state is None, not a string'),
    (dict(fakes.arq(), attach_handle_type=None),
     'attach_handle_type is None'),
    (dict(fakes.arq(), hostname=5), 'hostname is 5, not a string'),
])
def test_bad_arq(raw, message):
    with pytest.raises(ValueError, match=message):
        objects.ARQ.from_dict(raw)


def _van():
    van = objects.VAN.for_arq(objects.ARQ.from_dict(fakes.arq('PCI')),
                              'pci', address='0000:0c:00.1')
    van.plugin = 'libvirt'
    van.config = '<hostdev/>'
    return van


def test_van_round_trip_through_json():
    van = _van()
    data = json.loads(json.dumps(van.to_dict()))
    assert data['version'] == '1.0'
    assert data['device_state'] == 'prepared'
    assert objects.VAN.from_dict(data) == van


def test_van_of_a_newer_minor_version():
    van = _van()
    data = dict(van.to_dict(), version='1.7', added_later='x')
    assert objects.VAN.from_dict(data) == van


@pytest.mark.parametrize('change, message', [
    ({'version': '2.0'}, 'version 2.0 is not compatible with this os-acc '
                         r'\(VAN 1.0\)'),
    ({'version': None}, 'its version is None'),
    ({'driver': None}, 'driver is None'),
    ({'device_state': 'lost'}, "'lost' is not a valid DeviceState"),
    ({'device_info': {'a': 1}}, 'device_info is not a mapping of strings'),
    ({'config': 5}, 'config is 5, not a string'),
])
def test_bad_van(change, message):
    data = dict(_van().to_dict(), **change)
    with pytest.raises(exception.InvalidVAN,
                       match=f'Cannot use VAN {data["arq_uuid"]}: '
                             f'{message}'):
        objects.VAN.from_dict(data)
