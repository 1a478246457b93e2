"""The deadline of RPC calls: what is overdue, and a real RPC server (on
oslo.messaging's in-process transport) dropping a call past it before
its endpoint runs, while calls of callers without deadlines still run."""
import logging
import time
import uuid
from collections.abc import Iterator

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import rpc_deadline

NOW = 1_800_000_000.0


@pytest.mark.parametrize('ctxt, late', [
    ({}, None),
    ({'rpc_deadline': None}, None),
    # Not a number: not a deadline of ours; carried out as before.
    ({'rpc_deadline': 'soon'}, None),
    ({'rpc_deadline': True}, None),
    ({'rpc_deadline': NOW + 5}, None),
    ({'rpc_deadline': NOW}, None),
    # Within the allowance for clocks apart.
    ({'rpc_deadline': NOW - rpc_deadline.CLOCK_SKEW}, None),
    ({'rpc_deadline': NOW - rpc_deadline.CLOCK_SKEW - 0.5}, 0.5),
    ({'rpc_deadline': int(NOW) - 60}, 60 - rpc_deadline.CLOCK_SKEW),
])
def test_overdue(ctxt, late):
    assert rpc_deadline.overdue(ctxt, NOW) == late


class _Endpoint:
    target = messaging.Target(version='1.0')

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def create(self, context, name):
        self.calls.append((name, context.to_dict()))
        return name

    def create_many(self, context, requests):
        self.calls.extend((r['name'], context.to_dict()) for r in requests)
        return len(requests)


class _Unavailable(Exception):
    pass


@pytest.fixture
def server(conf) -> Iterator[tuple[_Endpoint, messaging.RPCClient]]:
    """A server of a topic of its own and a client of it."""
    topic = f'deadline-{uuid.uuid4().hex[:8]}'
    rpc.init(conf, url='fake://')
    endpoint = _Endpoint()
    server = rpc.get_server(messaging.Target(topic=topic, server='s1'),
                            [endpoint])
    server.start()
    try:
        yield endpoint, rpc.get_client(messaging.Target(topic=topic))
    finally:
        server.stop()
        server.wait()
        rpc.cleanup()


def _context(deadline: float | None = None
             ) -> cyborg_context.RequestContext:
    context = cyborg_context.RequestContext(request_id='req-' + str(
        uuid.uuid4()))
    context.rpc_deadline = deadline
    return context


def test_a_call_carries_its_deadline_and_runs(server):
    endpoint, client = server
    context = _context()
    before = time.time()
    assert rpc.call(client, context, '1.0', 'create', _Unavailable,
                    timeout=30, name='a') == 'a'
    [(name, received)] = endpoint.calls
    assert name == 'a' and received['request_id'] == context.request_id
    # The deadline travels in the message only: the caller's context and
    # the one the endpoint got have none.
    assert context.rpc_deadline is None
    assert 'rpc_deadline' not in received
    sent = rpc.RequestContextSerializer().serialize_context(
        _context(before + 30))
    assert sent['rpc_deadline'] == before + 30


def test_a_call_without_a_deadline_runs(server):
    """A caller from before deadlines (a rolling upgrade)."""
    endpoint, client = server
    assert client.prepare(version='1.0').call(_context(), 'create',
                                              name='old') == 'old'
    assert [name for name, _ in endpoint.calls] == ['old']


def test_an_expired_call_is_dropped_with_a_warning(server, caplog):
    caplog.set_level(logging.WARNING)
    endpoint, client = server
    context = _context(time.time() - rpc_deadline.CLOCK_SKEW - 30)
    with pytest.raises(exception.CallExpired):
        client.prepare(version='1.0').call(context, 'create', name='late')
    assert endpoint.calls == []
    [line] = [r for r in caplog.records if r.name == rpc_deadline.__name__]
    assert line.levelno == logging.WARNING
    message = line.getMessage()
    assert message.startswith(
        f'Dropped RPC call create of request {context.request_id}: it '
        'arrived 3')
    assert message.endswith('nothing was done.')
    # Dropped without a traceback in the server's log.
    assert not [r for r in caplog.records if r.exc_info], caplog.text


def test_a_dropped_batch_names_every_request(server, caplog):
    caplog.set_level(logging.WARNING)
    endpoint, client = server
    ids = ['req-1', 'req-2']
    with pytest.raises(exception.CallExpired):
        client.prepare(version='1.0').call(
            _context(time.time() - 60), 'create_many',
            requests=[{'name': 'x', 'request_id': i} for i in ids])
    assert endpoint.calls == []
    [line] = [r.getMessage() for r in caplog.records
              if r.name == rpc_deadline.__name__]
    assert ', '.join(ids) in line


def test_the_caller_still_waiting_gets_unavailable(server, monkeypatch):
    """A server whose clock runs an hour ahead of its caller's finds the
    call expired while its caller still waits: the caller is told the
    call was dropped, as it is told of a call nobody answered."""
    endpoint, client = server
    monkeypatch.setattr(rpc_deadline, 'CLOCK_SKEW', -3600)
    with pytest.raises(_Unavailable) as raised:
        rpc.call(client, _context(), '1.0', 'create',
                 lambda reason: _Unavailable(reason), timeout=30, name='b')
    assert str(raised.value) == (
        'create reached its server after its deadline (30s) and was '
        'dropped')
    assert endpoint.calls == []

