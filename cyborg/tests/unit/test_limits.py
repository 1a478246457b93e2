"""Project limits: what a limit is and what goes over it (pure), and how
the conductor reads them from Keystone, through oslo.limit's own fixture
in Keystone's place."""
import pytest
from keystoneauth1 import exceptions as ks_exceptions
from oslo_limit import fixture as limit_fixture
from oslo_limit import limit  # noqa: F401  (registers [oslo_limit])

from cyborg.common import exception
from cyborg.common import outages
from cyborg.conductor import limits as conductor_limits
from cyborg.db.api import usage
from cyborg.tests.utils import Clock

REQUESTS = usage.REQUESTS


def _limits(registered=None, projects=None, **kwargs) -> usage.Limits:
    return usage.Limits(registered or {}, projects or {'p1': {}}, **kwargs)


def test_a_project_limit_goes_before_the_registered_one():
    limits = _limits({REQUESTS: 10, 'class:FPGA': 4},
                     {'p1': {REQUESTS: 3}, 'p2': {}})
    assert limits.limit('p1', REQUESTS) == 3
    assert limits.limit('p2', REQUESTS) == 10
    assert limits.limit('p1', 'class:FPGA') == 4


def test_a_negative_limit_is_none():
    limits = _limits({REQUESTS: -1}, {'p1': {'class:FPGA': -1}})
    assert limits.limit('p1', REQUESTS) is None
    assert limits.limit('p1', 'class:FPGA') is None
    assert limits.over('p1', {}, {REQUESTS: 10 ** 6}) is None


@pytest.mark.parametrize('strategy, listed, requests, fpga', [
    # The default: requests need a registered limit, classes do not.
    ('require', {REQUESTS}, 0, None),
    ('require', set(), None, None),
    ('require', {REQUESTS, 'class:FPGA'}, 0, 0),
    ('ignore', {REQUESTS}, None, 0),
    ('ignore', {REQUESTS, 'class:FPGA'}, None, None),
    ('ignore', set(), 0, 0),
])
def test_a_resource_without_a_registered_limit(strategy, listed, requests,
                                               fpga):
    limits = _limits(strategy=strategy, listed=frozenset(listed))
    assert limits.limit('p1', REQUESTS) == requests
    assert limits.limit('p1', 'class:FPGA') == fpga


def test_over_names_the_limit_the_usage_and_the_request():
    limits = _limits({REQUESTS: 10})
    assert limits.over('p1', {REQUESTS: 8}, {REQUESTS: 2}) is None
    refusal = limits.over('p1', {REQUESTS: 9}, {REQUESTS: 2})
    assert isinstance(refusal, exception.OverLimit)
    assert refusal.code == 403
    assert refusal.message == (
        'Project p1 is over its limit of 10 for accelerator_requests: it '
        'holds 9 and this request makes 2.')
    assert refusal.kwargs['over'] == [{'resource': REQUESTS, 'limit': 10,
                                       'usage': 9, 'delta': 2}]


def test_over_names_each_class_gone_over_and_a_missing_registration():
    limits = _limits({'class:FPGA': 2}, strategy='ignore',
                     listed=frozenset({REQUESTS}))
    refusal = limits.over('p1', {'class:FPGA': 2},
                          {'class:FPGA': 1, 'class:VGPU': 1,
                           REQUESTS: 5})
    assert refusal is not None
    assert refusal.message == (
        'Project p1 is over its limit of 2 for class:FPGA: it holds 2 and '
        'this request binds 1. Project p1 is over its limit of 0 for '
        'class:VGPU: it holds 0 and this request binds 1. No limit is '
        'registered for class:VGPU in Keystone, which makes it 0 ([quota] '
        'unified_limits_resource_list).')


def test_limited_keeps_what_a_limit_bounds():
    limits = _limits({REQUESTS: 10})
    assert limits.limited('p1', {REQUESTS: 2, 'class:FPGA': 1,
                                 'class:VGPU': 0}) == {REQUESTS: 2}


def test_more_reads_other_projects():
    asked = []

    def reader(projects):
        asked.append(set(projects))
        return _limits({REQUESTS: 10}, {'p2': {REQUESTS: 2}})

    limits = _limits({REQUESTS: 10}, {'p1': {REQUESTS: 1}}, reader=reader)
    more = limits.more({'p2'})
    assert (more.limit('p1', REQUESTS), more.limit('p2', REQUESTS)) == (1, 2)
    assert asked == [{'p2'}]
    with pytest.raises(usage.LimitsMissing):
        _limits().more({'p2'})


# The conductor's reading of Keystone.


@pytest.fixture
def keystone(conf):
    """oslo.limit's fixture in Keystone's place: registered limits and
    those of project p1; its mock connection counts the calls."""
    conf.set_override('driver', 'unified_limits', 'quota')
    conf.set_override('endpoint_id', 'cyborg-endpoint', 'oslo_limit')
    fixture = limit_fixture.LimitFixture(
        {REQUESTS: 10, 'class:FPGA': 4}, {'p1': {REQUESTS: 3}})
    fixture.setUp()
    outages.tracker.clear()
    yield fixture
    fixture.cleanUp()
    outages.tracker.clear()


def _calls(keystone) -> tuple[int, int]:
    conn = keystone.mock_conn
    return conn.registered_limits.call_count, conn.limits.call_count


def test_limits_are_read_once_per_cache_period(conf, keystone):
    clock = Clock()
    reader = conductor_limits.KeystoneLimits(conf, clock=clock)
    limits = reader.read(['p1', 'p2', None])
    assert limits.limit('p1', REQUESTS) == 3
    assert limits.limit('p2', REQUESTS) == 10
    assert limits.limit('p2', 'class:FPGA') == 4
    assert limits.limit('p2', 'class:VGPU') is None
    assert _calls(keystone) == (1, 2)
    # Within [quota] cache_seconds (30): Keystone is not asked again, but
    # for a project not read yet.
    clock.now += 29
    reader.read(['p1', 'p2'])
    reader.read(['p3'])
    assert _calls(keystone) == (1, 3)
    clock.now += 1
    reader.read(['p1'])
    assert _calls(keystone) == (2, 4)


def test_no_cache_reads_everything_for_every_write(conf, keystone):
    conf.set_override('cache_seconds', 0, 'quota')
    reader = conductor_limits.KeystoneLimits(conf, clock=Clock())
    reader.read(['p1'])
    reader.read(['p1'])
    assert _calls(keystone) == (2, 2)


def test_a_changed_limit_is_read_after_the_cache_period(conf, keystone):
    clock = Clock()
    reader = conductor_limits.KeystoneLimits(conf, clock=clock)
    assert reader.read(['p1']).limit('p1', REQUESTS) == 3
    keystone.projlimits['p1'][REQUESTS] = 5
    assert reader.read(['p1']).limit('p1', REQUESTS) == 3
    clock.now += 30
    assert reader.read(['p1']).limit('p1', REQUESTS) == 5


def test_the_strategy_comes_from_the_configuration(conf, keystone):
    conf.set_override('unified_limits_resource_strategy', 'ignore',
                      'quota')
    conf.set_override('unified_limits_resource_list', ['class:VGPU'],
                      'quota')
    limits = conductor_limits.KeystoneLimits(conf).read(['p1'])
    assert limits.limit('p1', 'class:VGPU') is None
    assert limits.limit('p1', 'class:CUSTOM_X') == 0


def test_keystone_unreachable_refuses_with_503_and_an_outage(conf,
                                                             keystone):
    keystone.mock_conn.registered_limits.side_effect = (
        ks_exceptions.ConnectFailure('connection refused'))
    reader = conductor_limits.KeystoneLimits(conf)
    with pytest.raises(exception.LimitsUnavailable) as raised:
        reader.read(['p1'])
    assert raised.value.code == 503
    assert 'p1' in raised.value.message and 'Keystone' in raised.value.message
    assert outages.KEYSTONE in outages.tracker.current()
    keystone.mock_conn.registered_limits.side_effect = (
        keystone.get_reglimit_objects)
    reader.read(['p1'])
    assert outages.KEYSTONE not in outages.tracker.current()


def test_an_endpoint_keystone_does_not_have_is_unavailable(conf, keystone):
    conf.clear_override('endpoint_id', 'oslo_limit')
    conf.set_override('endpoint_service_type', 'accelerator', 'oslo_limit')
    keystone.mock_conn.endpoints.side_effect = lambda **query: iter(())
    with pytest.raises(exception.LimitsUnavailable):
        conductor_limits.KeystoneLimits(conf).read(['p1'])


def test_a_write_meeting_another_project_reads_it_and_writes_again(
        conf, keystone):
    reader = conductor_limits.KeystoneLimits(conf)
    seen = []

    def write(limits):
        seen.append(sorted(limits.projects))
        if 'p2' not in limits.projects:
            raise usage.LimitsMissing({'p2'})
        return limits.limit('p2', REQUESTS)

    assert reader.write(lambda: ['p1'], write) == 10
    assert seen == [['p1'], ['p1', 'p2']]


def test_without_limits_nothing_is_read():
    def projects():
        raise AssertionError('no projects are looked up')

    assert conductor_limits.within(None, projects, lambda limits: limits) \
        is None


def test_limits_are_off_by_default(conf):
    assert conductor_limits.from_conf(conf) is None
