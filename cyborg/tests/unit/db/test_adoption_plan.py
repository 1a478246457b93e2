"""What an adoption would write, from upstream rows given as dicts."""
import json

from cyborg.db import adoption_plan

RP = '11111111-2222-3333-4444-555555555555'
INSTANCE = '9a9a9a9a-0000-0000-0000-000000000001'


def _pci(device: str, function: str) -> str:
    # As upstream's fake driver writes it: spaces, unpadded device.
    return json.dumps({'domain': '0000', 'bus': '0c', 'device': device,
                       'function': function})


def _arq(id_, state, handle=None, instance=None, **extra):
    row = {'id': id_, 'uuid': f'arq-{id_}', 'project_id': 'p1',
           'state': state, 'device_profile_id': 1,
           'device_profile_group_id': 0,
           'hostname': 'h1' if instance else None,
           'device_rp_uuid': RP if instance else None,
           'instance_uuid': instance, 'attach_handle_id': handle,
           'deployable_id': 1 if handle else None, 'created_at': None,
           'updated_at': None}
    row.update(extra)
    return row


def _rows(**overrides):
    src = {
        'devices': [{'id': 1, 'uuid': 'dev-1', 'type': 'FPGA',
                     'vendor': '0xABCD', 'model': 'm', 'hostname': 'h1',
                     'std_board_info': '{}', 'vendor_board_info': 'v',
                     'status': 'enabled', 'device_state': None}],
        'controlpath_ids': [{'id': 1, 'uuid': 'cp-1', 'device_id': 1,
                             'cpid_type': 'PCI',
                             'cpid_info': _pci('00', '0')}],
        'deployables': [{'id': 1, 'uuid': 'dep-1', 'parent_id': None,
                         'root_id': None, 'name': 'h1_FakeDevice',
                         'num_accelerators': 2, 'device_id': 1,
                         'rp_uuid': RP, 'driver_name': 'fake',
                         'bitstream_id': None}],
        'attributes': [
            {'id': 1, 'uuid': 'at-1', 'deployable_id': 1, 'key': 'rc',
             'value': 'FPGA'},
            {'id': 2, 'uuid': 'at-2', 'deployable_id': 1, 'key': 'rc',
             'value': 'CUSTOM_FPGA'}],
        'attach_handles': [
            {'id': n, 'uuid': f'ah-{n}', 'deployable_id': 1, 'cpid_id': 1,
             'in_use': n == 2, 'attach_type': 'TEST_PCI',
             'attach_info': _pci('0', str(n))} for n in (1, 2)],
        'device_profiles': [{'id': 1, 'uuid': 'dp-1', 'name': 'fpga',
                             'description': None, 'profile_json':
                             json.dumps({'groups': [{'resources:FPGA': 1}]})}],
        'extended_accelerator_requests': [
            _arq(1, 'Bound', handle=1, instance=INSTANCE),
            _arq(2, 'Initial'), _arq(3, 'Unbound', handle=2)],
    }
    src.update(overrides)
    return src


def test_rows_come_across_with_their_ids_and_providers():
    plan = adoption_plan.make_plan(_rows())
    assert plan.problems == []
    [dep] = plan.rows['deployables']
    assert (dep['id'], dep['uuid'], dep['rp_uuid']) == (1, 'dep-1', RP)
    [device] = plan.rows['devices']
    assert device['host'] == device['hostname'] == 'h1'
    assert plan.rows['controlpath_ids'][0]['cpid_info'] == (
        '{"bus":"0c","device":"00","domain":"0000","function":"0"}')
    handles = {h['uuid']: h for h in plan.rows['attach_handles']}
    assert handles['ah-1']['attach_info'] == (
        '{"bus":"0c","device":"00","domain":"0000","function":"1"}')
    # In use exactly when a request holds it.
    assert (handles['ah-1']['in_use'], handles['ah-2']['in_use']) == (
        True, False)
    arqs = {a['uuid']: a for a in plan.rows['accelerator_requests']}
    assert arqs['arq-1']['attach_handle_id'] == 1
    assert arqs['arq-1']['device_profile_name'] == 'fpga'
    assert json.loads(arqs['arq-1']['device_profile_group']) == {
        'resources:FPGA': '1'}
    # An Unbound request naming a handle lets go of it.
    assert arqs['arq-3']['attach_handle_id'] is None
    assert plan.rows['instance_claims'] == [
        {'instance_uuid': INSTANCE,
         'created_at': plan.rows['instance_claims'][0]['created_at']}]
    # The newest attribute of a repeated key wins.
    assert [(a['key'], a['value']) for a in plan.rows['attributes']] == [
        ('rc', 'CUSTOM_FPGA')]
    assert plan.changes == [
        '1 device(s) with board info in plain text, kept as a JSON string',
        '1 control path address(es) rewritten in cyborg\'s canonical form',
        '1 attribute(s) repeating a key of their deployable dropped (the '
        'newest of each key is kept)',
        '1 Initial or Unbound request(s) let go of the attach handle they '
        'still named',
        '2 attach handle address(es) rewritten in cyborg\'s canonical form',
        '1 attach handle(s) marked in use without a request holding them '
        'become free']


def test_types_and_states_are_mapped():
    src = _rows()
    src['devices'][0].update(type='NVME', device_state='error')
    plan = adoption_plan.make_plan(src)
    assert plan.problems == []
    [device] = plan.rows['devices']
    assert (device['type'], device['status']) == ('SSD', 'maintaining')


def test_every_row_that_cannot_come_across_is_named():
    src = _rows()
    src['devices'].append(dict(src['devices'][0], id=2, uuid='dev-2',
                               type='MDEV'))
    src['extended_accelerator_requests'] += [
        _arq(4, 'Bound', instance=INSTANCE),
        _arq(5, 'Bound', handle=1, instance=INSTANCE),
        _arq(6, 'Initial', device_profile_group_id=3),
        _arq(7, 'Bound', handle=2, instance=INSTANCE,
             device_rp_uuid='22222222-2222-3333-4444-555555555555')]
    plan = adoption_plan.make_plan(src)
    assert plan.problems == [
        'devices of a type cyborg does not have (it has GPU, FPGA, AICHIP, '
        'QAT, NIC, SSD, PCI): dev-2 (MDEV)',
        'accelerator requests whose device profile or group is gone: arq-6',
        'Bound accelerator requests without an attach handle, deployable, '
        'instance or host: arq-4',
        'accelerator requests whose attach handle is not on their '
        'deployable, or whose deployable is not their resource provider: '
        'arq-7',
        'attach handles held by two accelerator requests: arq-1 and arq-5']


def test_a_long_list_of_rows_is_cut():
    src = _rows(extended_accelerator_requests=[
        _arq(n, 'Bound', instance=INSTANCE) for n in range(1, 9)])
    [problem] = adoption_plan.make_plan(src).problems
    assert problem.endswith('arq-1, arq-2, arq-3, arq-4, arq-5 and 3 more')
