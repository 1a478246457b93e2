"""Validation and hashing of agent reports."""
import copy

import pytest

from cyborg.common import device_report
from cyborg.common import exception


def _report():
    return {
        'hostname': 'node1',
        'devices': [{
            'type': 'FPGA', 'vendor': '0xabcd', 'model': 'm',
            'controlpath_id': {'cpid_type': 'PCI',
                               'cpid_info': {'domain': '0000', 'bus': '0c',
                                             'device': '00',
                                             'function': '0'}},
            'deployables': [{
                'name': 'd1', 'num_accelerators': 2, 'driver_name': 'fake',
                'attributes': {'rc': 'FPGA'},
                'attach_handles': [
                    {'attach_type': 'TEST_PCI', 'attach_info': {'f': '1'}},
                    {'attach_type': 'TEST_PCI', 'attach_info': {'f': '2'}},
                ]}],
        }],
    }


def test_valid_report_passes():
    device_report.validate_report('h', _report())


@pytest.mark.parametrize('mutate, expected', [
    (lambda r: r.pop('hostname'), "'hostname' is a required property"),
    (lambda r: r['devices'][0].update(type='TOASTER'), 'devices/0/type'),
    (lambda r: r['devices'][0]['deployables'][0].update(
        num_accelerators=-1), 'num_accelerators'),
    (lambda r: r['devices'][0]['deployables'][0]['attach_handles'][0]
     .update(attach_info={'f': 1}), 'attach_info/f'),
    (lambda r: r['devices'][0].update(surprise=True), 'surprise'),
    (lambda r: r['devices'].append(copy.deepcopy(r['devices'][0])),
     'share control path'),
    (lambda r: r['devices'][0]['deployables'][0]['attach_handles'].append(
        {'attach_type': 'PCI', 'attach_info': {'f': '1'}}),
     'repeats an attach handle'),
    (lambda r: r['devices'][0]['deployables'].append(
        copy.deepcopy(r['devices'][0]['deployables'][0])),
     'repeats a deployable name'),
])
def test_invalid_reports_name_the_problem(mutate, expected):
    report = _report()
    mutate(report)
    with pytest.raises(exception.InvalidReport) as err:
        device_report.validate_report('h', report)
    assert expected in str(err.value)
    assert 'host h' in str(err.value)


def test_not_a_dict_is_rejected():
    with pytest.raises(exception.InvalidReport):
        device_report.validate_report('h', ['devices'])


def test_hash_ignores_order_but_not_content():
    a = _report()
    b = copy.deepcopy(a)
    b['devices'][0]['deployables'][0]['attach_handles'].reverse()
    assert device_report.report_hash(a) == device_report.report_hash(b)
    b['devices'][0]['deployables'][0]['attributes']['rc'] = 'PGPU'
    assert device_report.report_hash(a) != device_report.report_hash(b)
