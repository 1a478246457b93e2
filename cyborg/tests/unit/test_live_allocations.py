"""The decisions of live allocations: what a live attach adds to an
instance's allocation, what a detach takes out, and which provider lacks
room."""
from cyborg.conductor import live_allocations as la

RP1 = 'aaaaaaaa-0000-4000-8000-000000000001'
RP2 = 'aaaaaaaa-0000-4000-8000-000000000002'
CN = 'cccccccc-0000-4000-8000-000000000000'


def _inventory(total, reserved=0, ratio=1.0, max_unit=None):
    return {'total': total, 'reserved': reserved, 'allocation_ratio': ratio,
            'max_unit': total if max_unit is None else max_unit,
            'min_unit': 1, 'step_size': 1}


def test_group_resources_are_the_resources_keys_only():
    group = {'resources:FPGA': '2', 'resources:CUSTOM_X': '1',
             'trait:CUSTOM_FAKE_DEVICE': 'required',
             'accel:bitstream_id': 'b', 'resources:VGPU': '0'}
    assert la.group_resources(group) == {'FPGA': 2, 'CUSTOM_X': 1}


def test_requested_sums_by_provider_and_class():
    assert la.requested([
        (RP1, {'resources:FPGA': '1'}),
        (RP1, {'resources:FPGA': '1', 'resources:CUSTOM_X': '3'}),
        (RP2, {'resources:FPGA': '1'}),
        (RP2, {'trait:CUSTOM_Y': 'required'}),
    ]) == {RP1: {'FPGA': 2, 'CUSTOM_X': 3}, RP2: {'FPGA': 1}}
    assert la.requested([(RP1, {'trait:CUSTOM_Y': 'required'})]) == {}


def test_held_reads_placements_answer():
    body = {'allocations': {CN: {'generation': 3,
                                 'resources': {'VCPU': 2}},
                            RP1: {'generation': 1,
                                  'resources': {'FPGA': 1}}},
            'consumer_generation': 1, 'project_id': 'p', 'user_id': 'u'}
    assert la.held(body) == {CN: {'VCPU': 2}, RP1: {'FPGA': 1}}
    assert la.held({'allocations': {}}) == {}


def test_plus_adds_to_what_is_held_and_keeps_the_rest():
    current = {CN: {'VCPU': 2, 'MEMORY_MB': 512}, RP1: {'FPGA': 1}}
    added = la.plus(current, {RP1: {'FPGA': 1}, RP2: {'FPGA': 1}})
    assert added == {CN: {'VCPU': 2, 'MEMORY_MB': 512}, RP1: {'FPGA': 2},
                     RP2: {'FPGA': 1}}
    # What it was given is left alone.
    assert current == {CN: {'VCPU': 2, 'MEMORY_MB': 512}, RP1: {'FPGA': 1}}


def test_minus_drops_classes_and_providers_left_empty():
    current = {CN: {'VCPU': 2}, RP1: {'FPGA': 2}, RP2: {'FPGA': 1}}
    assert la.minus(current, {RP1: {'FPGA': 1}, RP2: {'FPGA': 1}}) == {
        CN: {'VCPU': 2}, RP1: {'FPGA': 1}}


def test_minus_never_goes_below_nothing():
    # A detach of a request whose resources are gone already (removed by
    # hand, or the instance's allocation deleted) changes nothing.
    current = {CN: {'VCPU': 2}}
    assert la.minus(current, {RP1: {'FPGA': 1}}) == current
    assert la.minus({RP1: {'FPGA': 1}}, {RP1: {'FPGA': 3}}) == {}


def test_shortages_name_the_provider_class_and_what_is_free():
    inventories = {RP1: {'FPGA': _inventory(1)},
                   RP2: {'FPGA': _inventory(4, reserved=1)}}
    usages = {RP1: {'FPGA': 1}, RP2: {'FPGA': 1}}
    found = la.shortages({RP1: {'FPGA': 1}, RP2: {'FPGA': 2}}, {},
                         inventories, usages)
    assert found == [la.Shortage(RP1, 'FPGA', 1, 0)]
    assert la.shortages({RP2: {'FPGA': 3}}, {}, inventories, usages) == [
        la.Shortage(RP2, 'FPGA', 3, 2)]


def test_shortages_count_the_allocation_ratio_and_max_unit():
    inventories = {RP1: {'FPGA': _inventory(2, ratio=2.0, max_unit=2)}}
    # Capacity 4, one used: 3 free, but one consumer holds at most 2,
    # and this one holds 1 already.
    assert la.shortages({RP1: {'FPGA': 1}}, {RP1: {'FPGA': 1}},
                        inventories, {RP1: {'FPGA': 1}}) == []
    assert la.shortages({RP1: {'FPGA': 2}}, {RP1: {'FPGA': 1}},
                        inventories, {RP1: {'FPGA': 1}}) == [
        la.Shortage(RP1, 'FPGA', 2, 1)]


def test_a_class_the_provider_has_no_inventory_of_has_nothing_free():
    assert la.shortages({RP1: {'CUSTOM_GONE': 1}}, {},
                        {RP1: {'FPGA': _inventory(1)}}, {RP1: {}}) == [
        la.Shortage(RP1, 'CUSTOM_GONE', 1, 0)]


def test_describe_names_the_instance_provider_requests_and_free():
    text = la.describe('inst', [la.Shortage(RP1, 'FPGA', 1, 0)],
                       {RP1: ['arq1']})
    assert text == (
        f'Cannot attach accelerators to instance inst: resource provider '
        f'{RP1} has 0 FPGA free for it, accelerator request(s) arq1 need 1. '
        'Bind to a device (resource provider) with room, or free one first.')
