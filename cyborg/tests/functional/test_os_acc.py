"""os-acc against the API on a real HTTP port, as nova-compute uses it.

The requests are created and bound through the API, then ``plug`` reads
the resolved ones itself with keystoneauth and attaches them, and
``unplug`` releases them. The PCI case runs the agent's generic PCI
driver and os-acc's PCI driver over one fake sysfs tree.
"""
import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg import os_acc
from cyborg.accelerator.drivers import generic_pci
from cyborg.db import models
from cyborg.db.api import inventory
from cyborg.os_acc import client as client_lib
from cyborg.os_acc import exception
from cyborg.os_acc import objects
from cyborg.tests.functional.api.fixtures import api  # noqa: F401
from cyborg.tests.functional.clients.conftest import SERVICE_TOKEN
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401
from cyborg.tests.harness.sysfs import SysfsTree

INSTANCE = objects.InstanceInfo('29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60')
FPGA_GROUPS = [{'resources:FPGA': '2', 'trait:CUSTOM_FAKE_DEVICE':
                'required'}]
GPU = '0000:3b:00.0'


@pytest.fixture
def tree(tmp_path) -> SysfsTree:
    tree = SysfsTree(tmp_path / 'host')
    tree.add_function('0000:00:00.0', 0x8086, 0x0d57, 0x060000)
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    return tree


@pytest.fixture
def library(tree) -> Iterator[None]:
    os_acc.initialize(reset=True, sysfs_root=tree.root)
    yield
    os_acc._manager = None


@pytest.fixture
def session() -> ks_session.Session:
    """Whoever nova-compute is: under noauth, token 'admin'."""
    return ks_session.Session(auth=token_endpoint.Token(None, 'admin'))


def _create_and_bind(live_api, session, profile, rp_uuid):  # noqa: F811
    created = session.post(
        f'{live_api.url}/accelerator_requests',
        json={'device_profile_name': profile}).json()['arqs']
    # As Nova's conductor binds them, with its service token.
    session.patch(
        f'{live_api.url}/accelerator_requests',
        headers={'X-Service-Token': SERVICE_TOKEN},
        json={a['uuid']: [
            {'path': '/hostname', 'op': 'add', 'value': 'node1'},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
            {'path': '/instance_uuid', 'op': 'add',
             'value': INSTANCE.uuid}] for a in created})
    return [a['uuid'] for a in created]


def _fetches(live_api):  # noqa: F811
    return [(s.method, s.path, s.query, s.status) for s in live_api.seen
            if s.method == 'GET']


def test_plug_fake_devices_read_from_the_api(live_api, session,  # noqa: F811
                                             library):
    [device] = live_api.seed('cmp1', hostname='node1')
    live_api.dp('dp1', FPGA_GROUPS)
    uuids = _create_and_bind(live_api, session, 'dp1',
                             device['deployables'][0]['rp_uuid'])
    client = client_lib.Client.from_session(
        session, endpoint_override=live_api.url)

    vans = os_acc.plug(INSTANCE, client=client)

    assert _fetches(live_api) == [
        ('GET', '/v2/accelerator_requests',
         f'instance={INSTANCE.uuid}&bind_state=resolved', 200)]
    assert sorted(v.arq_uuid for v in vans) == sorted(uuids)
    assert {v.attach_handle_type for v in vans} == {'TEST_PCI'}
    assert sorted(v.device_info['address'] for v in vans) == [
        '0000:0c:00.1', '0000:0c:00.2']
    assert all(v.config is None and v.plugin == 'libvirt'
               and v.device_state == objects.DeviceState.PLUGGED
               for v in vans)
    kept = json.dumps([v.to_dict() for v in vans])

    os_acc.unplug(INSTANCE, [objects.VAN.from_dict(v)
                             for v in json.loads(kept)])
    # Server delete: Nova deletes the requests afterwards.
    response = session.delete(f'{live_api.url}/accelerator_requests',
                              params={'instance': INSTANCE.uuid},
                              headers={'X-Service-Token': SERVICE_TOKEN})
    assert response.status_code == 204


def test_plug_a_pci_function_the_agent_reported(live_api, session,  # noqa: F811,E501
                                                tree, library):
    conf = live_api.conf
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', tree.root, 'agent')
    conf.set_override('device_specs', [json.dumps({'address': GPU})],
                      'generic_pci')
    report = {'hostname': 'node1', 'devices': [
        d.to_dict() for d in generic_pci.GenericPciDriver(conf).discover()]}
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, 'cmp1', report)
    [device] = inventory.get_host_devices(ctx, 'cmp1')
    live_api.dp('gpu', [{'resources:CUSTOM_PCI': '1'}])
    [arq_uuid] = _create_and_bind(live_api, session, 'gpu',
                                  device['deployables'][0]['rp_uuid'])

    # What Nova's own client already fetched can be passed in as well.
    arqs = client_lib.Client.from_session(
        session, endpoint_override=live_api.url).resolved_arqs(INSTANCE.uuid)
    [van] = os_acc.plug(INSTANCE, arqs)

    assert (van.arq_uuid, van.attach_handle_type, van.driver) == (
        arq_uuid, 'PCI', 'pci')
    assert van.device_info['original_driver'] == 'nvidia'
    assert van.config == (
        '<hostdev mode="subsystem" type="pci" managed="yes"><source>'
        '<address domain="0x0000" bus="0x3b" slot="0x00" function="0x0" />'
        '</source></hostdev>')
    os_acc.unplug(INSTANCE, [van])
    assert van.device_state == objects.DeviceState.RELEASED


def test_requests_still_being_bound(live_api, session, sqlite_engine,  # noqa: F811,E501
                                    library):
    [device] = live_api.seed('cmp1', hostname='node1')
    live_api.dp('dp1', FPGA_GROUPS)
    _create_and_bind(live_api, session, 'dp1',
                     device['deployables'][0]['rp_uuid'])
    with sqlite_engine.begin() as conn:
        conn.execute(sa.update(models.AcceleratorRequest).values(
            state='BindStarted'))
    client = client_lib.Client.from_session(
        session, endpoint_override=live_api.url)
    with pytest.raises(exception.FetchFailed,
                       match='some are still being bound \\(423\\)'):
        os_acc.plug(INSTANCE, client=client)


def test_client_from_os_acc_options(live_api, tmp_path, library):  # noqa: F811,E501
    [device] = live_api.seed('cmp1', hostname='node1')
    live_api.dp('dp1', FPGA_GROUPS)
    session = ks_session.Session(auth=token_endpoint.Token(None, 'admin'))
    uuids = _create_and_bind(live_api, session, 'dp1',
                             device['deployables'][0]['rp_uuid'])
    # nova-compute's own ConfigOpts, not cyborg's global one.
    conf = cfg.ConfigOpts()
    client_lib.register_opts(conf)
    config = tmp_path / 'nova.conf'
    config.write_text('[os_acc]\nauth_type = admin_token\n'
                      f'endpoint = {live_api.url}\ntoken = admin\n'
                      f'endpoint_override = {live_api.url}\n')
    conf(['--config-file', str(config)], default_config_files=[])
    client = client_lib.Client.from_conf(conf, 'os_acc')
    assert client.adapter.service_type == 'accelerator'
    vans = os_acc.plug(INSTANCE, client=client)
    assert sorted(v.arq_uuid for v in vans) == sorted(uuids)


def test_api_unreachable(library):
    session = ks_session.Session(auth=token_endpoint.Token(None, 'admin'))
    client = client_lib.Client.from_session(
        session, endpoint_override='http://127.0.0.1:9/v2')
    with pytest.raises(exception.FetchFailed,
                       match=f'requests of instance {INSTANCE.uuid} from '
                             'Cyborg: Unable to establish connection'):
        os_acc.plug(INSTANCE, client=client)
