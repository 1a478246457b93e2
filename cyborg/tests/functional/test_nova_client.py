"""The conductor's Nova client, over keystoneauth, against a fake Nova."""
import json
import logging
import threading
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from cyborg.conductor import nova_client
from cyborg.tests.fakes.fixtures import nova_conf

LOGGER = 'cyborg.conductor.nova_client'
# Seconds between tries here, instead of the 1.25 s of a conductor.
DELAY = 0.01


def new_uuid() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def client(conf, fake_nova) -> nova_client.NovaClient:
    nova_conf(conf, fake_nova)
    conf.set_override('connect_retry_delay', DELAY, 'nova')
    conf.set_override('status_code_retry_delay', DELAY, 'nova')
    return nova_client.NovaClient(conf)


def errors(caplog) -> list[logging.LogRecord]:
    """The client's own warnings and errors (keystoneauth warns of each
    retry besides)."""
    return [r for r in caplog.records
            if r.name == LOGGER and r.levelno >= logging.WARNING]


def bound(state: str = 'Bound', instance: str | None = None
          ) -> nova_client.BindEvent:
    return nova_client.BindEvent(instance or new_uuid(), new_uuid(), state)


def wire(event: nova_client.BindEvent, status: str) -> dict[str, str]:
    return {'name': 'accelerator-request-bound',
            'server_uuid': event.instance_uuid, 'tag': event.arq_uuid,
            'status': status}


def test_one_post_carries_every_event(client, fake_nova):
    instance = new_uuid()
    events = [bound('Bound', instance), bound('BindFailed', instance),
              bound('Deleting')]

    outcome = client.send_bound_events(events)

    [post] = fake_nova.requests
    assert (post.method, post.path) == ('POST',
                                        '/v2.1/os-server-external-events')
    assert post.headers['x-auth-token'] == fake_nova.token
    assert post.headers['openstack-api-version'] == 'compute 2.82'
    assert post.body == {'events': [wire(events[0], 'completed'),
                                    wire(events[1], 'failed'),
                                    wire(events[2], 'failed')]}
    assert post.status == 200
    assert outcome == nova_client.EventsOutcome(
        delivered=True, status=200,
        accepted=[event.arq_uuid for event in events])


@pytest.mark.parametrize('state, status', [('Bound', 'completed'),
                                           ('BindFailed', 'failed'),
                                           ('Deleting', 'failed')])
def test_status_follows_the_final_state(client, fake_nova, state, status):
    event = bound(state)
    client.send_bound_events([event])
    assert fake_nova.events() == [wire(event, status)]


@pytest.mark.parametrize('state', ['Initial', 'BindStarted', 'Unbound', ''])
def test_only_the_end_of_a_bind_is_an_event(state):
    with pytest.raises(ValueError):
        bound(state)


def test_per_event_codes_are_reported_not_raised(client, fake_nova, caplog):
    not_on_host, unknown, refused, fine = (bound() for _ in range(4))
    fake_nova.answer(not_on_host.instance_uuid, 422)
    fake_nova.answer(unknown.instance_uuid, 404)
    fake_nova.answer(refused.instance_uuid, 400)
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    outcome = client.send_bound_events([not_on_host, unknown, refused, fine])

    assert [post.status for post in fake_nova.requests] == [207]
    assert outcome.delivered
    assert outcome.status == 207
    assert outcome.accepted == [fine.arq_uuid]
    assert outcome.rejected == {not_on_host.arq_uuid: 422,
                                unknown.arq_uuid: 404,
                                refused.arq_uuid: 400}
    levels = {arq: [r.levelno for r in caplog.records if arq in r.message]
              for arq in (not_on_host.arq_uuid, unknown.arq_uuid,
                          refused.arq_uuid)}
    assert levels == {not_on_host.arq_uuid: [logging.DEBUG],
                      unknown.arq_uuid: [logging.WARNING],
                      refused.arq_uuid: [logging.ERROR]}


@pytest.mark.parametrize('first', [500, 502, 503, None],
                         ids=['500', '502', '503', 'hang-up'])
def test_a_failed_try_is_retried(client, fake_nova, first):
    if first is None:
        fake_nova.drop_next(1)
    else:
        fake_nova.fail_next(1, first)
    event = bound()

    outcome = client.send_bound_events([event])

    assert [post.status for post in fake_nova.posts()] == [first, 200]
    assert fake_nova.events() == [wire(event, 'completed')]
    assert outcome == nova_client.EventsOutcome(
        delivered=True, status=200, accepted=[event.arq_uuid])


@pytest.mark.parametrize('status', [400, 403, 404, 409, 422, 429])
def test_a_client_error_is_not_retried(client, fake_nova, caplog, status):
    # Nova answers a 4xx the same way however often it is asked.
    fake_nova.fail_next(3, status)
    event = bound()

    outcome = client.send_bound_events([event])

    assert [post.status for post in fake_nova.posts()] == [status]
    assert fake_nova.events() == []
    assert outcome == nova_client.EventsOutcome(status=status)
    [error] = errors(caplog)
    assert f'HTTP {status}' in error.message


@pytest.mark.parametrize('status', [503, None], ids=['503', 'hang-up'])
def test_persistent_failure_gives_up_without_raising(client, fake_nova,
                                                     caplog, status):
    if status is None:
        fake_nova.drop_next(5)
    else:
        fake_nova.fail_next(5, status)
    events = [bound(), bound('BindFailed')]

    outcome = client.send_bound_events(events)

    # Three tries in all.
    assert [post.status for post in fake_nova.posts()] == [status] * 3
    assert fake_nova.events() == []
    assert outcome == nova_client.EventsOutcome(status=status)
    [error] = errors(caplog)
    # A warning: the caller sends the events again (nova_outbox).
    assert error.levelno == logging.WARNING
    assert all(event.arq_uuid in error.message for event in events)


def test_an_unreachable_nova_gives_up_without_raising(client, fake_nova,
                                                      caplog):
    fake_nova.stop()
    event = bound()

    outcome = client.send_bound_events([event])

    assert outcome == nova_client.EventsOutcome()
    [error] = errors(caplog)
    assert 'ConnectFailure' in error.message
    assert event.arq_uuid in error.message
    # The connection was refused three times: keystoneauth warned of the
    # two retries.
    retries = [r for r in caplog.records
               if r.name.startswith('keystoneauth')
               and 'Retrying' in r.getMessage()]
    assert len(retries) == 2


def test_retry_settings_yield_to_nova_options(conf, fake_nova):
    nova_conf(conf, fake_nova)
    adapter = nova_client.NovaClient(conf)._get_adapter()
    assert (adapter.connect_retries, adapter.status_code_retries) == (2, 2)
    assert (adapter.connect_retry_delay,
            adapter.status_code_retry_delay) == (1.25, 1.25)
    assert adapter.retriable_status_codes == list(range(500, 600))

    conf.set_override('status_code_retries', 0, 'nova')
    conf.set_override('retriable_status_codes', [502], 'nova')
    adapter = nova_client.NovaClient(conf)._get_adapter()
    assert (adapter.connect_retries, adapter.status_code_retries) == (2, 0)
    assert adapter.retriable_status_codes == [502]


def test_an_unconfigured_group_gives_up_without_raising(conf, fake_nova):
    client = nova_client.NovaClient(conf)
    outcome = client.send_bound_events([bound()])
    assert outcome == nova_client.EventsOutcome()
    assert fake_nova.requests == []


def test_nothing_is_sent_when_events_are_off(client, conf, fake_nova):
    conf.set_override('send_events', False, group='nova')
    outcome = client.send_bound_events([bound()])
    assert outcome == nova_client.EventsOutcome()
    assert fake_nova.requests == []


def test_nothing_is_sent_for_no_events(client, fake_nova):
    assert client.send_bound_events([]) == nova_client.EventsOutcome()
    assert fake_nova.requests == []


def test_threads_share_one_adapter(client, fake_nova):
    events = [bound() for _ in range(8)]
    outcomes: list[nova_client.EventsOutcome] = []
    threads = [threading.Thread(
        target=lambda e=event: outcomes.append(client.send_bound_events([e])))
        for event in events]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert all(outcome.delivered for outcome in outcomes)
    assert sorted(e['tag'] for e in fake_nova.events()) == sorted(
        event.arq_uuid for event in events)
    assert client._get_adapter() is client._get_adapter()


# The fake must refuse what Nova refuses, or the tests above prove nothing.

def post(fake_nova, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(
        fake_nova.endpoint + '/os-server-external-events',
        json.dumps(body).encode(), method='POST',
        headers={'Content-Type': 'application/json', **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


@pytest.mark.parametrize('headers, status', [
    ({'OpenStack-API-Version': 'compute 2.82'}, 401),
    ({'X-Auth-Token': 'other', 'OpenStack-API-Version': 'compute 2.82'}, 401),
    ({'X-Auth-Token': 'TOKEN'}, 400),
    ({'X-Auth-Token': 'TOKEN', 'OpenStack-API-Version': 'compute 2.81'}, 400),
    ({'X-Auth-Token': 'TOKEN', 'OpenStack-API-Version': 'compute 9.0'}, 406),
    ({'X-Auth-Token': 'TOKEN', 'OpenStack-API-Version': 'compute 2.82'}, 200),
])
def test_the_fake_checks_token_and_microversion(fake_nova, headers, status):
    if headers.get('X-Auth-Token') == 'TOKEN':
        headers = {**headers, 'X-Auth-Token': fake_nova.token}
    event = wire(bound(), 'completed')
    assert post(fake_nova, {'events': [event]}, headers)[0] == status


@pytest.mark.parametrize('change', [
    {'tag': None}, {'status': 'done'}, {'server_uuid': 'not-a-uuid'},
    {'name': 'accelerator-request-done'}, {'extra': 'x'}])
def test_the_fake_checks_the_body(fake_nova, change):
    event = {**wire(bound(), 'completed'), **change}
    if change == {'tag': None}:
        # Without a tag the event alone is refused, as Nova does.
        del event['tag']
        expected = (207, 400)
    else:
        expected = (400, None)
    status, body = post(fake_nova, {'events': [event]},
                        {'X-Auth-Token': fake_nova.token,
                         'OpenStack-API-Version': 'compute 2.82'})
    code = body['events'][0]['code'] if status == 207 else None
    assert (status, code) == expected
