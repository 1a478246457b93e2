"""Attaching to and detaching from a running guest, end to end: the
requests bound and unbound through the API at microversion 2.9, the
devices given to and taken from a real libvirt guest by os-acc.

Placement, cyborg-api, a conductor and an agent (the fake driver's
TEST_PCI handles, and generic_pci over a made-up sysfs for one PCI
function) run as processes on real RabbitMQ. The instance is a tiny QEMU
guest under a real libvirtd (``libvirt_guest``), which takes TEST_PCI
requests as emulated USB tablets. Each request os-acc is given is the one
``GET /v2/accelerator_requests/{uuid}`` returns, as Nova passes it on.

Binding is Cyborg's, attaching nova-compute's: an attach that fails and
is rolled back leaves nothing of its devices in the guest, while the
requests stay Bound; nova-compute unbinds them (or tries again).
"""
import json
import uuid

import pytest
import requests

from cyborg import os_acc
from cyborg.os_acc import exception
from cyborg.os_acc import manager
from cyborg.os_acc import sysfs
from cyborg.os_acc.drivers import fake_pci
from cyborg.os_acc.drivers import pci
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server
from cyborg.tests.harness.libvirt_guest import INACTIVE
from cyborg.tests.harness.libvirt_guest import EmulatedPlugin
from cyborg.tests.harness.libvirt_guest import connection  # noqa: F401
from cyborg.tests.harness.libvirt_guest import domain  # noqa: F401
from cyborg.tests.harness.sysfs import SysfsTree

# One worker for every module on the libvirtd the first starts and its
# last stops (``libvirt_guest.connection``), so that none stops it under
# another (with --dist loadgroup).
pytestmark = pytest.mark.xdist_group('libvirtd')

NODE = 'live-node'
PCI_ADDRESS = '0000:3b:00.0'
PCI_RC = 'CUSTOM_LIVE_PCI'
TOKEN = {'X-Auth-Token': 'admin'}


def _headers(microversion='2.9'):
    return dict(TOKEN, **{'OpenStack-API-Version':
                          f'accelerator {microversion}'})


def _fault(response):
    return json.loads(response.json()['error_message'])['faultstring']


class Api:
    """cyborg-api as Nova calls it."""

    def __init__(self, url, rps):
        self.url = f'{url}/accelerator_requests'
        # resource class -> the provider of node NODE that has it
        self.rps = rps

    def create(self, profile):
        answer = requests.post(self.url, headers=_headers(), timeout=30,
                               json={'device_profile_name': profile})
        assert answer.status_code == 201, answer.text
        return answer.json()['arqs'][0]['uuid']

    def patch(self, body, microversion='2.9'):
        return requests.patch(self.url, headers=_headers(microversion),
                              json=body, timeout=30)

    def bind(self, arq, instance, resource_class='FPGA', hostname=NODE,
             microversion='2.9'):
        return self.patch({arq: [
            {'path': '/hostname', 'op': 'add', 'value': hostname},
            {'path': '/device_rp_uuid', 'op': 'add',
             'value': self.rps[resource_class]},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance}]},
            microversion)

    def unbind(self, arq):
        return self.patch({arq: [
            {'path': f'/{field}', 'op': 'remove'}
            for field in ('hostname', 'device_rp_uuid', 'instance_uuid')]})

    def show(self, arq):
        answer = requests.get(f'{self.url}/{arq}', headers=_headers(),
                              timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def bound(self, arq):
        """The request once Bound, as Nova reads it for os-acc."""
        def check():
            found = self.show(arq)
            return found if found['state'] == 'Bound' else None
        return gate_stack.wait_for(check, f'request {arq} to be Bound', 30,
                                   interval=0.5)


def _providers(placement, root):
    """The provider of each resource class below ``root``, once both
    devices are there."""
    found = {rc: rp for rp in placement.tree(root)
             for rc in placement.inventories(rp)}
    return found if {'FPGA', PCI_RC} <= set(found) else None


def _held(placement, instance):
    """What the instance's allocation in placement holds."""
    return {rp: found['resources'] for rp, found in placement.get(
        f'/allocations/{instance}')['allocations'].items()}


def _in_use(stack, handle):
    answer = requests.get(f'{stack.api_url}/attach_handles',
                          headers=_headers(), timeout=10)
    assert answer.status_code == 200, answer.text
    (found,) = [h for h in answer.json()['attach_handles']
                if h['uuid'] == handle]
    return found['in_use']


@pytest.fixture
def tree(tmp_path):
    """The host's PCI functions: a host bridge and a GPU, which the agent
    reports and os-acc's PCI driver prepares."""
    tree = SysfsTree(tmp_path / 'sysfs')
    tree.add_function('0000:00:00.0', 0x8086, 0x0d57, 0x060000)
    tree.add_function(PCI_ADDRESS, 0x10de, 0x1eb8, 0x030200,
                      driver='nvidia')
    return tree


@pytest.fixture
def plugin(tree):
    """os-acc's library on ``tree``, its libvirt plugin the emulating one
    (which has no entry point to be loaded by)."""
    plugin = EmulatedPlugin()
    host = sysfs.Sysfs(tree.root)
    os_acc._manager = manager.Manager(
        [pci.PciDriver(host), fake_pci.FakePciDriver(host)], [plugin])
    yield plugin
    os_acc._manager = None


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_live_attach_and_detach_through_the_api(
        tmp_path, rabbit_url, db_engine, empty_db_url, fake_nova, tree,
        plugin, domain):  # noqa: F811
    stack = gate_stack.Stack(tmp_path, rabbit_url, empty_db_url,
                             fake_nova.endpoint, fake_nova.token)
    stack.add_placement()
    stack.add_api()
    stack.add_conductor('conductor1')
    stack.add_agent('agent1', NODE, 1, 3,
                    pci_specs=({'address': PCI_ADDRESS,
                                'resource_class': PCI_RC},),
                    sysfs_root=tree.root)
    placement = placement_server.Placement(stack.placement_url)
    instance = domain.UUIDString()
    guest = os_acc.InstanceInfo(instance)
    with stack.running():
        root = stack.bring_up(placement, {'agent1': NODE})[NODE]
        rps = gate_stack.wait_for(
            lambda: _providers(placement, root),
            'the FPGA and the PCI function in placement', 60, interval=0.5)
        api = Api(stack.api_url, rps)
        for name, rc in (('live-fpga', 'FPGA'), ('live-pci', PCI_RC)):
            answer = requests.post(
                f'{stack.api_url}/device_profiles', headers=_headers(),
                timeout=30, json=[{'name': name,
                                   'groups': [{f'resources:{rc}': '1'}]}])
            assert answer.status_code == 201, answer.text
        first, second = api.create('live-fpga'), api.create('live-fpga')

        # The first, as when the instance was built, and attached live.
        assert api.bind(first, instance).status_code == 202
        first_arq = api.bound(first)
        assert first_arq['attach_handle_type'] == 'TEST_PCI'
        [first_van] = os_acc.attach(guest, [first_arq], guest=domain)
        assert plugin.tablets(domain) == {first}

        # Another request for the running instance: refused below 2.9,
        # and on another host than the instance's.
        answer = api.bind(second, instance, microversion='2.8')
        assert answer.status_code == 400, answer.text
        assert "bind all of an instance's accelerator requests in one " \
            'PATCH' in _fault(answer)
        answer = api.bind(second, instance, hostname='other-node')
        assert answer.status_code == 409, answer.text
        assert f'bound on {NODE}, where the instance runs' in _fault(answer)
        assert api.show(second)['state'] == 'Initial'
        assert api.bind(second, instance).status_code == 202
        second_arq = api.bound(second)
        os_acc.attach(guest, [second_arq], guest=domain)
        both = {first, second}
        # Each live bind was added to the instance's allocation.
        assert _held(placement, instance) == {rps['FPGA']: {'FPGA': 2}}
        assert plugin.tablets(domain) == both
        assert plugin.tablets(domain, INACTIVE) == both
        assert first_arq['attach_handle_uuid'] != \
            second_arq['attach_handle_uuid']

        # Bound elsewhere, or not bound: 409, and nothing changes.
        answer = api.bind(second, str(uuid.uuid4()))
        assert answer.status_code == 409, answer.text
        assert f'{second} is Bound' in _fault(answer)
        spare = api.create('live-fpga')
        answer = api.unbind(spare)
        assert answer.status_code == 409, answer.text
        assert f'{spare} is Initial' in _fault(answer)
        assert api.show(second) == second_arq

        # The first detached, then unbound alone; the second stays.
        os_acc.detach(guest, [first_van], guest=domain)
        assert api.unbind(first).status_code == 202
        assert plugin.tablets(domain) == {second}
        assert plugin.tablets(domain, INACTIVE) == {second}
        assert api.show(first)['state'] == 'Unbound'
        assert api.show(second)['state'] == 'Bound'
        assert _held(placement, instance) == {rps['FPGA']: {'FPGA': 1}}
        gate_stack.wait_for(
            lambda: not _in_use(stack, first_arq['attach_handle_uuid']),
            "the first request's handle to be free", 30, interval=0.5)
        assert _in_use(stack, second_arq['attach_handle_uuid'])

        # Two more in one attach: the tablet goes in, libvirt refuses the
        # PCI function (no VFIO here) and the tablet is taken out again.
        pci_request = api.create('live-pci')
        for arq, rc in ((spare, 'FPGA'), (pci_request, PCI_RC)):
            assert api.bind(arq, instance, rc).status_code == 202
        resolved = [api.bound(spare), api.bound(pci_request)]
        assert _held(placement, instance) == {rps['FPGA']: {'FPGA': 2},
                                              rps[PCI_RC]: {PCI_RC: 1}}
        assert resolved[1]['attach_handle_type'] == 'PCI'
        with pytest.raises(exception.AttachFailed) as caught:
            os_acc.attach(guest, resolved, guest=domain)
        assert caught.value.arq == pci_request
        message = str(caught.value)
        assert 'failed at the live attach (plugin libvirt)' in message
        assert message.endswith('Everything this attach had done was undone.')
        assert plugin.tablets(domain) == {second}
        assert plugin.tablets(domain, INACTIVE) == {second}
        assert 'hostdev' not in domain.XMLDesc(0)
        # Cyborg still has them Bound: nova-compute unbinds them.
        assert [api.show(a)['state'] for a in (spare, pci_request)] == [
            'Bound', 'Bound']
