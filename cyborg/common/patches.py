"""Every change cyborg makes to a library's private internals, in one place.

Each function here is called once by the layer that needs it and says what
it changes, why, and what it was measured to save. A public API for the
same effect would replace it; until then each has a guard test in
``cyborg/tests/unit/test_patches.py`` that fails when an upgrade of the
library turns the patch into a no-op or breaks it, rather than letting the
saving or the behaviour go silently. Each imports its library itself: the
agent, which makes RPC calls, must not load the API's or the database's.
"""
import collections
import functools
import inspect
from collections.abc import Callable
from typing import Any

ArgSpec = collections.namedtuple(
    'ArgSpec', 'args varargs keywords defaults')
_argspecs: dict[Any, Any] = {}


def _cached_argspec(func: Callable[..., Any]) -> Any:
    """pecan's argspec of ``func``, computed once per function."""
    key = getattr(func, '__func__', func)
    try:
        return _argspecs[key]
    except KeyError:
        spec = ArgSpec(*inspect.getfullargspec(func)[:4])
        _argspecs[key] = spec
        return spec


def cache_pecan_argspecs() -> None:
    """Make pecan inspect each controller's signature once, not per request.

    pecan routes every request by inspecting controller signatures through
    ``pecan.util.getargspec``, whose helper ``_getargspec`` builds a new
    namedtuple class on each call: a third of a small request's time. A
    signature never changes, so it is kept.
    """
    import pecan.util

    pecan.util._getargspec = _cached_argspec


def format_wsme_faults(formatter: Callable[..., dict[str, Any]]) -> None:
    """Make WSME build every fault document with ``formatter``.

    ``wsmeext.pecan`` has no hook for it: it looks ``format_exception`` up
    on ``wsme.api`` at every error, so that is where it goes. ``formatter``
    is called as ``formatter(excinfo, debug, default=<WSME's own>)``;
    cyborg's hides unexpected errors' messages and answers outages as 503s
    (``cyborg.api.expose``).
    """
    import wsme.api

    global _wsme_format_exception
    if _wsme_format_exception is None:
        _wsme_format_exception = wsme.api.format_exception
    wsme.api.format_exception = functools.partial(
        formatter, default=_wsme_format_exception)


_wsme_format_exception: Callable[..., dict[str, Any]] | None = None


def poll_after_message(seconds: float) -> None:
    """Set how soon an AMQP listener looks up from an empty queue.

    oslo.messaging's RabbitMQ listeners (a server's queue, a client's reply
    queue) start at 1 ms after each message and double up to 5 s; it has
    no option for it. Read when a listener is made and after each message
    it takes, so call this before the first transport is made.
    ``cyborg.common.rpc.POLL_AFTER_MESSAGE`` says why and what it saves.
    """
    from oslo_messaging._drivers import amqpdriver

    amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN = seconds


def poll_idle_at_most(seconds: float) -> None:
    """Make an idle AMQP listener look up from its queue ``seconds`` apart
    at most, so that stopping it never waits longer.

    oslo.messaging's listeners block up to 5 s in one read and have no
    option for it; ``cyborg.cmd.common.IDLE_POLL`` says what it costs. Read
    after each empty poll. impl_rabbit bounds its kombu_reconnect_delay
    option by 0.9 times this value when it is imported, and would refuse
    that option's default of 1 s below 1.12 s: call it after the transport
    was made, which imports impl_rabbit.
    """
    from oslo_messaging._drivers import amqpdriver

    amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX = seconds


def transaction_factory(engine: Any, maker: Any, context_manager: Any) -> Any:
    """A factory for ``context_manager`` that uses ``engine`` and ``maker``.

    oslo.db's ``patch_engine()`` first starts the configured factory, that
    is it makes an engine for ``[database] connection``, which the tests
    and the all-in-one service do not have. Its ``_TestTransactionFactory``
    takes the engine directly; oslo.db documents it as exported for other
    projects' test suites, but names it private, as it does the context
    manager's own factory, whose settings the new one copies.
    """
    from oslo_db.sqlalchemy import enginefacade

    return enginefacade._TestTransactionFactory(
        engine, maker, apply_global=False,
        from_factory=context_manager._factory)
