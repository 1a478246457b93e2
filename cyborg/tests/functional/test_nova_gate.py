"""Nova 34's real services booting servers with cyborg's accelerators.

Keystone, placement, Glance, nova-api (uWSGI), nova-conductor,
nova-scheduler and two nova-computes (the fake virt driver) run beside
cyborg-api, cyborg-conductor and one cyborg-agent per compute host, each
a process (``cyborg.tests.nova_stack``). A member of a project drives
them through openstacksdk as a user would, with flavors whose
``accel:device_profile`` names device profiles an administrator made.
After each scenario the invariants of ``nova_stack.checks`` hold.

Marked ``nova``: selected only by ``-m nova`` (``tox -e nova``), or by
``-m nova_reduced`` for the reduced run (a boot with one FPGA and its
delete, the same flavor without an accelerator, the bind failure known
when Nova binds, and a project over its limits); all on one xdist
worker (``xdist_group``, with ``--dist loadgroup``) so that the
deployment starts once. On any failure the end of every service's log
is printed.
"""
from collections.abc import Iterator
from typing import Any

import openstack
import pytest

from cyborg.cmd import aio_glance
from cyborg.tests import conftest
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.nova_stack import checks
from cyborg.tests.nova_stack import cloud as cloud_lib
from cyborg.tests.nova_stack import stack as stack_lib

pytestmark = [
    pytest.mark.nova,
    pytest.mark.xdist_group('nova-gate'),
    # The SDK's notices about its own future releases.
    pytest.mark.filterwarnings('ignore::PendingDeprecationWarning'),
    pytest.mark.filterwarnings('ignore::DeprecationWarning')]

FPGA_GROUP = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}
# A function no image in Glance provides: known to fail when Nova binds.
MISSING_FUNCTION = 'no-such-function'
# The function of a second bitstream, which no FPGA has loaded before the
# scenario that makes programming fail.
SECOND_FUNCTION = 'nova-gate-second-function'
TWO_FPGAS = {'resources:FPGA': '2', 'trait:CUSTOM_FAKE_DEVICE': 'required'}
# More than any fake FPGA has (stack_lib.ACCELERATORS).
TOO_MANY_FPGAS = {'resources:FPGA': '3',
                  'trait:CUSTOM_FAKE_DEVICE': 'required'}
PROFILES = {
    'nova-fpga': [FPGA_GROUP],
    'nova-fpga-missing-function': [
        {**FPGA_GROUP, 'accel:function_id': MISSING_FUNCTION}],
    'nova-fpga2-one-group': [TWO_FPGAS],
    'nova-fpga-two-groups': [FPGA_GROUP, FPGA_GROUP],
    'nova-fpga-function': [
        {**FPGA_GROUP, 'accel:function_id': aio_glance.DEMO_FUNCTION_ID}],
    'nova-fpga-too-many': [TOO_MANY_FPGAS],
    'nova-fpga-second-function': [
        {**FPGA_GROUP, 'accel:function_id': SECOND_FUNCTION}],
    # The type's trait as the nvidia_gpu driver reports it.
    'nova-vgpu': [{'resources:VGPU': '1',
                   f'trait:{stack_lib.VGPU_TRAIT}': 'required'}],
}
# flavor -> its device profile (None: no accelerator)
FLAVORS = {'fpga1': 'nova-fpga', 'plain': None,
           'fpga-missing-function': 'nova-fpga-missing-function',
           'fpga2-one-group': 'nova-fpga2-one-group',
           'fpga-two-groups': 'nova-fpga-two-groups',
           'fpga-function': 'nova-fpga-function',
           'fpga-too-many': 'nova-fpga-too-many',
           'fpga-second-function': 'nova-fpga-second-function',
           'vgpu': 'nova-vgpu',
           # fpga1 with more memory: what a resize would go to.
           'fpga1-large': 'nova-fpga'}
# What Nova answers an operation it refuses for accelerators.
REFUSED = 'not supported with instances that have accelerators'
SERVER_WAIT = cloud_lib.SERVER_WAIT


def refused(call: Any, *args: Any, **kwargs: Any) -> str:
    """Nova's 400 for an operation it refuses with accelerators."""
    with pytest.raises(openstack.exceptions.BadRequestException) as err:
        call(*args, **kwargs)
    assert REFUSED in str(err.value), err.value
    return str(err.value)


@pytest.fixture(scope='module')
def cloud(tmp_path_factory) -> Iterator[cloud_lib.Cloud]:
    conftest.require_module('nova')
    conftest.require_module('keystone')
    workdir = tmp_path_factory.mktemp('nova-gate')
    with stack_lib.NovaStack.open(workdir) as stack:
        stack.bring_up()
        print(f'stack up: {stack.timings}')
        populated = cloud_lib.populate(stack, PROFILES, FLAVORS)
        yield populated
        populated.engine.dispose()


@pytest.mark.nova_reduced
def test_boot_with_one_fpga_and_delete(cloud):
    with cloud.watched(), cloud.server('fpga1') as server:
        host = cloud.host_of(server)
        [arq] = cloud.bound(server, 1)
        assert cloud.allocations(server.id)[arq['device_rp_uuid']] == {
            'FPGA': 1}
        [spawn] = cloud.spawns_of(server.id)
        assert spawn['host'] == host
        assert [a['uuid'] for a in spawn['accel_info']] == [arq['uuid']]
        assert spawn['accel_info'][0]['attach_handle_info'] == \
            arq['attach_handle_info']
        assert checks.handles_in_use(cloud.engine) == 1
        cloud.assert_invariants()

        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


@pytest.mark.nova_reduced
def test_boot_the_same_flavor_without_an_accelerator(cloud):
    with cloud.watched(), cloud.server('plain') as server:
        assert cloud.arqs(server.id) == []
        roots = cloud.stack.compute_nodes(cloud.admin_http)
        assert set(cloud.allocations(server.id)) == {
            roots[cloud.host_of(server)]}
        [spawn] = cloud.spawns_of(server.id)
        assert spawn['accel_info'] == []
        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


@pytest.mark.nova_reduced
def test_bind_failure_known_at_patch_time_fails_the_server(cloud):
    """No image provides the profile's function: cyborg refuses the bind
    PATCH, nova-conductor deletes the requests and the server ends in
    ERROR, on no host, with no request and no handle left behind.

    The allocation the scheduler made stays with the ERROR server until it
    is deleted: Nova 34's ``_cleanup_build_artifacts`` (nova-conductor)
    puts the server in ERROR and leaves its allocations, device included,
    as for any build that fails in the conductor."""
    with cloud.watched(), cloud.server('fpga-missing-function',
                                       status='ERROR') as server:
        assert cloud.spawns_of(server.id) == []
        assert cloud.arqs(server.id) == []
        assert checks.arqs_of(cloud.engine, server.id) == []
        assert checks.handles_in_use(cloud.engine) == 0
        assert sum(cloud.device_allocations(server).values()) == 1
        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
    cloud.assert_invariants()


def test_two_fpgas_in_one_group(cloud):
    with cloud.watched(), cloud.server('fpga2-one-group') as server:
        first, second = cloud.bound(server, 2)
        assert first['device_rp_uuid'] == second['device_rp_uuid']
        assert cloud.device_allocations(server) == {
            first['device_rp_uuid']: 2}
        [spawn] = cloud.spawns_of(server.id)
        assert sorted(a['uuid'] for a in spawn['accel_info']) == sorted(
            [first['uuid'], second['uuid']])
        cloud.assert_invariants()
        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


def test_two_fpgas_in_two_groups(cloud):
    with cloud.watched(), cloud.server('fpga-two-groups') as server:
        arqs = cloud.bound(server, 2)
        assert [a['device_profile_group_id'] for a in arqs] == [0, 1]
        allocated = cloud.device_allocations(server)
        assert sum(allocated.values()) == 2
        assert {a['device_rp_uuid'] for a in arqs} == set(allocated)
        cloud.assert_invariants()
        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


def test_fpga_programmed_by_function_at_bind(cloud):
    """accel:function_id: cyborg finds the bitstream in Glance by its
    function and the agent loads it while Nova waits for the bind."""
    with cloud.watched(), cloud.server('fpga-function') as server:
        [arq] = cloud.bound(server, 1)
        deployable = cloud.deployable_of(arq['device_rp_uuid'])
        assert deployable['bitstream_id'] == cloud.bitstream
        [spawn] = cloud.spawns_of(server.id)
        assert [a['uuid'] for a in spawn['accel_info']] == [arq['uuid']]
        cloud.assert_invariants()
        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


def test_boot_with_a_vgpu_whose_mdev_nova_creates(cloud):
    """nova-cn1's T4 under ``mdev_creator = nova``: the request is Bound
    with the vGPU's parent and type, nova-compute spawns with them and
    creates the mdev; the delete frees everything but the mdev, which
    Nova 34 never removes and cyborg leaves alone."""
    stack = cloud.stack
    agent = stack.processes[stack_lib.HOSTS[stack_lib.VGPU_HOST]]
    with cloud.watched(), cloud.server('vgpu') as server:
        assert cloud.host_of(server) == stack_lib.VGPU_HOST
        [arq] = cloud.bound(server, 1)
        rp = arq['device_rp_uuid']
        assert cloud.allocations(server.id)[rp] == {'VGPU': 1}
        # The T4's nvidia-223 vGPUs (its max_instance), one provider.
        assert stack.placement(
            cloud.admin_http, f'/resource_providers/{rp}/inventories'
        )['inventories']['VGPU']['total'] == 8
        [spawn] = cloud.spawns_of(server.id)
        [given] = spawn['accel_info']
        assert (given['uuid'], given['attach_handle_type'],
                given['attach_handle_uuid']) == (
            arq['uuid'], 'MDEV', arq['attach_handle_uuid'])
        info = given['attach_handle_info']
        assert {key: info[key] for key in (
            'domain', 'bus', 'device', 'function', 'asked_type',
            'mdev_creator')} == {
            'domain': '0000', 'bus': 'af', 'device': '00', 'function': '0',
            'asked_type': stack_lib.VGPU_TYPE, 'mdev_creator': 'nova'}
        mdev = stack.gpu_tree.path(
            f'sys/bus/mdev/devices/{given["attach_handle_uuid"]}')
        gate_stack.wait_for(mdev.exists, 'the mdev nova-compute creates')
        assert checks.handles_in_use(cloud.engine) == 1
        cloud.assert_invariants()

        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()
        # The mdev stays for the handle's next instance: only Nova's
        # create reached the kernel, and the agent was asked for none.
        assert mdev.exists()
        assert [(entry['event'], entry.get('uuid'), entry.get('error'))
                for entry in sysfs_kernel.read_log(stack.gpu_tree.root)] \
            == [('mdev_create', given['attach_handle_uuid'], None)]
        assert agent.rpc_calls('create_mdev', 'remove_mdev') == (0, 0)


def test_no_valid_host_leaves_nothing(cloud):
    with cloud.watched(), cloud.server('fpga-too-many',
                                       status='ERROR') as server:
        fault = cloud.admin.compute.get_server(server.id).fault
        assert 'No valid host' in fault['message'], fault
        cloud.assert_nothing_left(server.id)
        cloud.delete(server)
        cloud.assert_invariants()


@pytest.mark.nova_reduced
@pytest.mark.parametrize('resource,fault', [
    ('accelerator_requests', 'Failed to create accelerator requests'),
    ('class:FPGA', 'Failed to bind accelerator requests')])
def test_a_project_over_its_limit_gets_an_error_server(cloud, resource,
                                                       fault):
    """The member's project limited to 0 of ``resource`` (Keystone's
    unified limits; the conductor reads them for every write here): the
    create (accelerator_requests) or the bind (class:FPGA) that Nova asks
    for is refused with a 403, and the server ends in ERROR with Nova's
    fault saying which call failed and the 403 (Nova 34 shows no body),
    and nothing of it left in cyborg. Every other scenario runs under the
    generous registered limits (stack_lib.GENEROUS_LIMITS)."""
    keystone = cloud.stack.keystone
    limit = keystone.set_limit(keystone.project(cloud_lib.MEMBER),
                               resource, 0)
    try:
        with cloud.watched(), cloud.server('fpga1',
                                           status='ERROR') as server:
            reported = cloud.admin.compute.get_server(server.id).fault
            assert fault in reported['message'], reported
            assert '<Response [403]>' in reported['message'], reported
            assert cloud.spawns_of(server.id) == []
            assert cloud.arqs(server.id) == []
            assert checks.arqs_of(cloud.engine, server.id) == []
            assert checks.handles_in_use(cloud.engine) == 0
            cloud.delete(server)
            cloud.assert_nothing_left(server.id)
    finally:
        keystone.delete_limit(limit)
    cloud.assert_invariants()
    # Back under the registered limit, the same flavor boots.
    with cloud.watched(), cloud.server('fpga1') as server:
        cloud.bound(server, 1)


def test_server_actions_keep_the_accelerator(cloud):
    """The member's actions: reboot, stop and start, pause and unpause,
    rebuild keep the same Bound request; suspend, resize and cold
    migration (an administrator's) are refused and change nothing;
    shelving offloads the requests and unshelving binds new ones."""
    compute = cloud.member.compute
    with cloud.watched(), cloud.server('fpga1') as server:
        host = cloud.host_of(server)
        [arq] = cloud.bound(server, 1)
        allocations = cloud.device_allocations(server)

        def unchanged() -> None:
            assert cloud.bound(server, 1) == [arq]
            assert cloud.device_allocations(server) == allocations
            cloud.assert_invariants()

        compute.reboot_server(server, 'HARD')
        gate_stack.wait_for(
            lambda: [c for c in cloud.spawns_of(server.id)
                     if c['call'] == 'reboot-hard'], 'the hard reboot')
        cloud.wait(server)
        [reboot] = [c for c in cloud.spawns_of(server.id)
                    if c['call'] == 'reboot-hard']
        assert [a['uuid'] for a in reboot['accel_info']] == [arq['uuid']]
        unchanged()
        for action, back, status in (
                (compute.stop_server, compute.start_server, 'SHUTOFF'),
                (compute.pause_server, compute.unpause_server, 'PAUSED')):
            action(server)
            cloud.wait(server, status)
            unchanged()
            back(server)
            cloud.wait(server)
            unchanged()

        refused(compute.suspend_server, server)
        refused(compute.resize_server, server, cloud.flavors['fpga1-large'])
        refused(cloud.admin.compute.migrate_server, server)
        assert compute.get_server(server.id).status == 'ACTIVE'
        unchanged()

        compute.rebuild_server(server, cloud.image)
        # Nova rebuilds on the fake driver by destroying and spawning.
        spawned = gate_stack.wait_for(
            lambda: [c for c in cloud.spawns_of(server.id)
                     if c['call'] == 'spawn'][1:], 'the rebuild\'s spawn')
        cloud.wait(server)
        assert cloud.host_of(server) == host
        [rebuilt] = cloud.bound(server, 1)
        assert [a['uuid'] for a in spawned[0]['accel_info']] == [
            rebuilt['uuid']]
        cloud.assert_invariants()

        compute.shelve_server(server)
        cloud.wait(server, 'SHELVED_OFFLOADED')
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()
        compute.unshelve_server(server)
        cloud.wait(server)
        [unshelved] = cloud.bound(server, 1)
        assert unshelved['uuid'] not in (arq['uuid'], rebuilt['uuid'])
        assert cloud.device_allocations(server) == {
            unshelved['device_rp_uuid']: 1}
        cloud.assert_invariants()

        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
        cloud.assert_invariants()


def test_programming_failure_fails_the_server(cloud):
    """Every agent fails to program (``[fake_driver] program_fail``): the
    bind fails in the background, after cyborg's answer to the PATCH;
    the server ends in ERROR with nothing left behind."""
    stack = cloud.stack
    with cloud.watched():
        cloud.upload_bitstream('nova-gate-second', SECOND_FUNCTION)
        stack.restart_agents({'fake_driver': {'program_fail': 'true'}})
        try:
            with cloud.server('fpga-second-function',
                              status='ERROR') as server:
                cloud.assert_nothing_left(server.id)
                assert [c for c in cloud.spawns_of(server.id)
                        if c['accel_info']] == []
                cloud.assert_invariants()
                cloud.delete(server)
        finally:
            stack.restart_agents()
        cloud.assert_invariants()


def test_unshelve_onto_the_other_host(cloud):
    """An administrator unshelves the member's server onto the other
    host (microversion 2.91): new requests bind there. Nova created them
    under the administrator's project; the member's hard reboot still
    gives the guest its accelerator (nova-compute reads the instance's
    requests with the member's token and its service token), and the
    member's delete then leaves nothing."""
    with cloud.watched(), cloud.server('fpga1') as server:
        host = cloud.host_of(server)
        other = next(h for h in stack_lib.HOSTS if h != host)
        cloud.member.compute.shelve_server(server)
        cloud.wait(server, 'SHELVED_OFFLOADED')
        cloud.assert_nothing_left(server.id)
        cloud.admin.compute.unshelve_server(server, host=other)
        cloud.wait(server)
        assert cloud.host_of(server) == other
        [arq] = cloud.bound(server, 1)
        assert cloud.device_allocations(server) == {arq['device_rp_uuid']: 1}
        cloud.assert_invariants()
        cloud.member.compute.reboot_server(server, 'HARD')
        [reboot] = gate_stack.wait_for(
            lambda: [c for c in cloud.spawns_of(server.id)
                     if c['call'] == 'reboot-hard'], 'the hard reboot')
        cloud.wait(server)
        assert [a['uuid'] for a in reboot['accel_info']] == [arq['uuid']]
        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
    cloud.assert_invariants()


def test_evacuate_binds_again_on_the_other_host(cloud):
    """nova-compute and the agent of the server's host stop, the host is
    forced down and the server evacuated (and stopped, as from
    microversion 2.95): its requests bind again on the other host. The
    dead host's handle is free once its agent is back, and its
    nova-compute, back too, gives up the evacuated instance's
    allocations there."""
    stack = cloud.stack
    with cloud.watched(), cloud.server('fpga1') as server:
        host = cloud.host_of(server)
        other = next(h for h in stack_lib.HOSTS if h != host)
        [before] = cloud.bound(server, 1)
        [row] = checks.arqs_of(cloud.engine, server.id)
        stopped = stack.stop(f'nova-compute-{host}', stack_lib.HOSTS[host])
        assert set(stopped.values()) <= {0}, stopped
        cloud.admin.compute.update_service_forced_down(
            None, host=host, binary='nova-compute', forced=True)
        try:
            cloud.admin.compute.evacuate_server(server)
            # From microversion 2.95 an evacuated server is stopped on its
            # new host.
            gate_stack.wait_for(
                lambda: cloud.settled_on(server, other, 'SHUTOFF'),
                'the evacuation to the other host', cloud_lib.SERVER_WAIT, 1)
            [after] = cloud.bound(server, 1)
            assert after['uuid'] != before['uuid']
            assert after['device_rp_uuid'] in cloud.device_allocations(
                server)
        finally:
            stack.add_host_agent(host).start()
            stack.ready(stack_lib.HOSTS[host])
            stack.processes[f'nova-compute-{host}'].start()
            # Nova refuses until the restarted nova-compute has completed
            # the evacuation's migration records.
            gate_stack.wait_for(lambda: cloud.forced_up(host),
                                f'{host} to be forced up', 180, 2)
        gate_stack.wait_for(
            lambda: not checks.handle_in_use(cloud.engine,
                                             row['attach_handle_id']),
            'the dead host\'s handle to be free', 120, 1)
        gate_stack.wait_for(
            lambda: before['device_rp_uuid'] not in
            cloud.allocations(server.id),
            'the source host\'s allocations to go', 180, 1)
        assert cloud.bound(server, 1) == [after]
        cloud.assert_invariants()

        cloud.delete(server)
        cloud.assert_nothing_left(server.id)
    cloud.assert_invariants()
