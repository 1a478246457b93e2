"""Microversion 2.9 through HTTP: binding accelerator requests to an
instance that has bound ones (live attach) and unbinding one of them
(live detach), on SQLite, MariaDB and PostgreSQL."""
import json

import pytest

from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

ARQS = '/v2/accelerator_requests'
INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'
OTHER = '11111111-2222-4333-8444-555555555555'
# Nova's calls: the user's token and its own service token.
NOVA_A = user('pa', service_token=True)
NOVA_B = user('pb', service_token=True)


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


class Cloud:
    """Two compute nodes of the fake driver, node1 and node2, and a
    profile of one accelerator."""

    def __init__(self, api):
        self.app = api.app
        self.rp = {}
        for host, hostname in (('cmp1', 'node1'), ('cmp2', 'node2')):
            devices = api.seed(host, count=2, hostname=hostname)
            self.rp[hostname] = devices[0]['deployables'][0]['rp_uuid']
        api.dp('dp1')

    def create(self, headers=NOVA_A):
        [arq] = self.app.post_json(ARQS, {'device_profile_name': 'dp1'},
                                   headers=headers, status=201).json['arqs']
        return arq['uuid']

    def patch(self, body, microversion='2.9', headers=NOVA_A, status=202):
        if microversion is not None:
            headers = version(microversion, headers)
        return self.app.patch_json(ARQS, body, headers=headers,
                                   status=status)

    def bind(self, arqs, instance=INSTANCE, hostname='node1', **kwargs):
        return self.patch({arq: [
            {'path': '/hostname', 'op': 'add', 'value': hostname},
            {'path': '/device_rp_uuid', 'op': 'add',
             'value': self.rp[hostname]},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
            for arq in arqs}, **kwargs)

    def unbind(self, arqs, **kwargs):
        return self.patch({arq: [
            {'path': f'/{field}', 'op': 'remove'}
            for field in ('hostname', 'device_rp_uuid', 'instance_uuid')]
            for arq in arqs}, **kwargs)

    def show(self, arq):
        return self.app.get(f'{ARQS}/{arq}', headers=ADMIN).json

    def states(self, instance=INSTANCE, headers=NOVA_A):
        return {a['uuid']: a['state'] for a in self.app.get(
            f'{ARQS}?instance={instance}', headers=headers).json['arqs']}


@pytest.fixture
def cloud(api_all_dbs):
    return Cloud(api_all_dbs)


def test_2_9_binds_more_requests_to_an_instance_with_bound_ones(cloud):
    first, second, third = cloud.create(), cloud.create(), cloud.create()
    cloud.bind([first], microversion=None)
    # Below 2.9, as before: one PATCH binds all of an instance's requests.
    response = cloud.bind([second], microversion='2.8', status=400)
    assert _fault(response) == (
        f'Invalid input: Cannot bind accelerator requests to instance '
        f"{INSTANCE}: bind all of an instance's accelerator requests in one "
        'PATCH.')
    assert cloud.show(second)['state'] == 'Initial'
    cloud.bind([second])
    cloud.bind([third], microversion='latest')
    assert cloud.states() == {first: 'Bound', second: 'Bound',
                              third: 'Bound'}
    handles = {cloud.show(a)['attach_handle_uuid']
               for a in (first, second, third)}
    assert len(handles) == 3


def test_2_9_unbinds_one_request_and_leaves_the_others_bound(cloud):
    first, second = cloud.create(), cloud.create()
    cloud.bind([first, second], microversion=None)
    cloud.unbind([second])
    assert cloud.states() == {first: 'Bound'}
    gone = cloud.show(second)
    assert gone['state'] == 'Unbound' and gone['instance_uuid'] is None
    # Attached again, to the instance that kept the other.
    cloud.bind([second])
    assert cloud.states() == {first: 'Bound', second: 'Bound'}
    # The last one unbound frees the instance: a first bind again, below
    # 2.9 too.
    cloud.unbind([first, second])
    assert cloud.states() == {}
    cloud.bind([first], microversion=None)
    assert cloud.states() == {first: 'Bound'}


def test_a_later_bind_on_another_host_than_the_instances_is_409(cloud):
    first, second = cloud.create(), cloud.create()
    cloud.bind([first])
    response = cloud.bind([second], hostname='node2', status=409)
    assert _fault(response) == (
        f'Conflict: Cannot bind accelerator request {second} to instance '
        f'{INSTANCE} on host node2: the instance\'s other accelerator '
        'requests are bound on node1, where the instance runs. Bind it to a '
        'device of that host.')
    assert cloud.show(second)['state'] == 'Initial'
    assert cloud.states() == {first: 'Bound'}


def test_a_later_bind_to_another_projects_instance_is_refused(cloud):
    a_arq, b_arq, b_second = (cloud.create(NOVA_A), cloud.create(NOVA_B),
                              cloud.create(NOVA_B))
    cloud.bind([a_arq], headers=NOVA_A)
    response = cloud.bind([b_arq], headers=NOVA_B, status=409)
    assert _fault(response) == (
        f'Conflict: Cannot bind accelerator request {b_arq} to instance '
        f'{INSTANCE}: the instance holds accelerator requests of another '
        'project. Bind it to an instance of its own project.')
    # Nor by a service that sees every project.
    response = cloud.bind([b_arq], headers=SERVICE, status=409)
    assert 'another project' in _fault(response)
    assert cloud.show(b_arq)['state'] == 'Initial'
    assert cloud.states(headers=ADMIN) == {a_arq: 'Bound'}
    # B attaches to its own instance as A does.
    cloud.bind([b_arq], OTHER, headers=NOVA_B)
    cloud.bind([b_second], OTHER, headers=NOVA_B)
    assert cloud.states(OTHER, NOVA_B) == {b_arq: 'Bound',
                                           b_second: 'Bound'}


def test_binding_a_request_bound_elsewhere_is_409(cloud):
    arq = cloud.create()
    cloud.bind([arq])
    for instance, hostname in ((OTHER, 'node1'), (INSTANCE, 'node2')):
        response = cloud.bind([arq], instance, hostname, status=409)
        assert _fault(response) == (
            f'Conflict: Accelerator request {arq} is Bound, bound to '
            f'instance {INSTANCE} on host node1. Unbind it first (a PATCH '
            'of "remove" operations) to bind it elsewhere.')
    # The same bind sent again is still accepted and changes nothing.
    before = cloud.show(arq)
    cloud.bind([arq])
    assert cloud.show(arq) == before


def test_unbinding_a_request_that_is_not_bound_is_409_from_2_9(cloud):
    bound, initial = cloud.create(), cloud.create()
    cloud.bind([bound])
    response = cloud.unbind([bound, initial], status=409)
    assert _fault(response) == (
        f'Conflict: Accelerator request {initial} is Initial: it is bound '
        'to no instance, so there is nothing to unbind. Leave it out of the '
        'PATCH.')
    # Nothing of the PATCH was done.
    assert cloud.states() == {bound: 'Bound'}
    # Below 2.9 such an unbind succeeds, as before.
    cloud.unbind([bound, initial], microversion='2.8')
    assert cloud.show(initial)['state'] == 'Unbound'


def test_an_unbind_sent_again_changes_nothing_from_2_9(cloud):
    first, second = cloud.create(), cloud.create()
    cloud.bind([first, second])
    cloud.unbind([first])
    unbound = cloud.show(first)
    assert unbound['state'] == 'Unbound'
    # The same PATCH again, as a client whose answer was lost sends it:
    # 202, as a bind sent again is, and nothing changes.
    cloud.unbind([first])
    assert cloud.show(first) == unbound
    # Beside an unbind still to do, that one is done.
    cloud.unbind([first, second])
    assert cloud.show(first) == unbound
    assert cloud.show(second)['state'] == 'Unbound'
    assert cloud.states() == {}
