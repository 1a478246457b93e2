"""How an RPC call carries a trace and a server takes it up
(``cyborg.common.profiler``); osprofiler's thread-local state checked
directly, no backend involved."""
import pytest
from osprofiler import profiler as osprofiler

from cyborg.common import profiler

KEY = 'trace-key'


@pytest.fixture
def tracing(monkeypatch):
    """This process traces (as ``profiler.setup`` leaves it with
    ``[profiler] enabled``), and its thread's trace is cleared after."""
    monkeypatch.setattr(profiler, '_enabled', True)
    yield
    osprofiler.clean()


def test_a_call_carries_the_callers_span_as_parent(tracing):
    assert profiler.rpc_trace_info() == {}
    caller = osprofiler.init(KEY)
    caller.start('wsgi')
    carried = profiler.rpc_trace_info()
    assert carried == {'trace_info': {
        'hmac_key': KEY, 'base_id': caller.get_base_id(),
        'parent_id': caller.get_id()}}


def test_a_server_traces_the_call_and_forgets_it_after(tracing):
    ctxt = {'request_id': 'req-1', 'trace_info': {
        'hmac_key': KEY, 'base_id': 'b1', 'parent_id': 'p1'}}
    def handle():
        current = osprofiler.get()
        assert current is not None
        assert current.get_base_id() == 'b1'
        # Inside the call's span, whose parent is the caller's.
        assert current.get_parent_id() == 'p1'
        assert current.get_id() not in ('b1', 'p1')
        return profiler.rpc_trace_info()['trace_info']['base_id']

    assert profiler.rpc_call(ctxt, 'host_drivers_list', handle) == 'b1'
    # The thread's next call may carry no trace.
    assert osprofiler.get() is None


def test_a_server_forgets_the_trace_when_the_call_fails(tracing):
    ctxt = {'trace_info': {'hmac_key': KEY, 'base_id': 'b1',
                           'parent_id': 'p1'}}
    def handle():
        raise ValueError('failed')

    with pytest.raises(ValueError):
        profiler.rpc_call(ctxt, 'm', handle)
    assert osprofiler.get() is None


@pytest.mark.parametrize('info', [
    None, 'b1', {'base_id': 'b1'},
    {'hmac_key': KEY, 'base_id': 1, 'parent_id': 'p1'}])
def test_a_call_without_a_whole_trace_is_not_traced(tracing, info):
    assert profiler.rpc_call({'trace_info': info}, 'm',
                             osprofiler.get) is None


def test_a_process_that_does_not_trace_ignores_the_trace():
    assert profiler._enabled is False
    ctxt = {'trace_info': {'hmac_key': KEY, 'base_id': 'b1',
                           'parent_id': 'p1'}}
    assert profiler.rpc_call(ctxt, 'm', osprofiler.get) is None
    # Nor does it pass on a trace: it has none to pass on.
    osprofiler.init(KEY)
    try:
        assert profiler.rpc_trace_info() == {}
    finally:
        osprofiler.clean()
