"""oslo.messaging plumbing: one transport per process, clients and servers."""
import copy
import functools
import time
from collections.abc import Callable
from typing import Any

import kombu
import oslo_messaging as messaging
from kombu import exceptions as kombu_exceptions
from oslo_config import cfg
from oslo_messaging import opts as messaging_opts
from oslo_messaging.rpc import server as rpc_server
from oslo_serialization import jsonutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import patches
from cyborg.common import profiler
from cyborg.common import rpc_deadline

CONDUCTOR_TOPIC = 'cyborg-conductor'
AGENT_TOPIC = 'cyborg-agent'
ALLOWED_EXMODS = ['cyborg.common.exception']

_TRANSPORT: messaging.Transport | None = None
# Where _TRANSPORT connects: read by ``reach_broker``.
_TRANSPORT_URL: messaging.TransportURL | None = None

# How soon a RabbitMQ listener (a server's queue, a client's reply queue)
# looks up from an empty queue after a message, in seconds; it then doubles
# that each time up to oslo.messaging's 5 s. A message is taken the moment
# it arrives whatever this is: the wait is a socket read. What waits for
# the listener is only work other threads queue for it (a requeue) and the
# heartbeat check, which at 5 s idle already waits longer. oslo.messaging
# starts at 1 ms, so under a steady load of a message every few ms each
# message costs several empty passes through its retry machinery: 10 to
# 15% of a conductor's and an API process's CPU per create.
POLL_AFTER_MESSAGE = 0.1

# How many times a call reconnects to the broker to send its message
# (oslo.messaging's ``retry``; its default retries for ever): a call made
# while the broker is away would otherwise wait for the whole outage and
# be carried out once the broker is back, long after its caller gave up.
# One reconnection still carries a call over a pooled connection that went
# stale while the broker stayed up (a broker restarted since, a cluster
# node gone: kombu moves to the next node of the transport URL on each
# attempt). With the broker away a call then fails after two connection
# attempts a ``rabbit_retry_interval`` (1 s) apart: 1 to 3 s here, with
# connections refused; each attempt can take up to kombu's connect timeout
# (5 s) when the broker's host drops packets instead.
CALL_RETRY = 1
# What a driver raises when it cannot send: oslo.messaging's own, and
# kombu's when a new pooled connection cannot be made.
_SEND_FAILED = (messaging.MessageDeliveryFailure,
                kombu_exceptions.OperationalError)


def init(conf: cfg.ConfigOpts, url: str | None = None) -> None:
    """Create the process's transport from ``[DEFAULT] transport_url``.

    ``url`` overrides the option (the all-in-one service passes
    ``fake://`` to keep every message inside the process).
    """
    global _TRANSPORT, _TRANSPORT_URL
    if _TRANSPORT is None:
        patches.poll_after_message(POLL_AFTER_MESSAGE)
        _TRANSPORT = messaging.get_rpc_transport(
            conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)
        _TRANSPORT_URL = messaging.TransportURL.parse(conf, url)
        # oslo.messaging registers some [DEFAULT] options (the RPC timeout
        # among them) only when the first client is made; cyborg reads
        # them before that.
        for group, opts in messaging_opts.list_opts():
            if group is None:
                conf.register_opts(opts)


def cleanup() -> None:
    global _TRANSPORT, _TRANSPORT_URL
    if _TRANSPORT is not None:
        _TRANSPORT.cleanup()
        _TRANSPORT = None
        _TRANSPORT_URL = None


def reach_broker(conf: cfg.ConfigOpts, timeout: float) -> str:
    """Open and close a connection to a broker of the process's
    transport, each host of its URL in turn until one answers, within
    ``timeout`` seconds per host; what was reached. Raises what the last
    host's connection raised.

    A new connection, not one of oslo.messaging's pool: a pooled
    connection to a broker that went away looks healthy until its
    heartbeat misses, up to ``heartbeat_timeout_threshold`` (60 s). The
    in-process ``fake`` driver has no broker to reach.
    """
    if _TRANSPORT_URL is None:
        raise RuntimeError('cyborg.common.rpc.init() was not called')
    url = _TRANSPORT_URL
    if url.transport != 'rabbit':
        return f'the {url.transport} driver, which has no broker to reach'
    rabbit = conf.oslo_messaging_rabbit
    failure: Exception = RuntimeError('the transport URL names no host')
    for host in url.hosts or [messaging.TransportHost()]:
        where = f'{host.hostname or "localhost"}:{host.port or 5672}'
        connection = kombu.Connection(
            hostname=host.hostname or 'localhost', port=host.port or 5672,
            userid=host.username or 'guest',
            password=host.password or 'guest',
            virtual_host=url.virtual_host or '/',
            ssl=rabbit.ssl or False, connect_timeout=timeout)
        try:
            # One attempt, no pause: kombu's connect() tries again after
            # 2 s.
            connection.ensure_connection(max_retries=1, interval_start=0,
                                         interval_step=0, interval_max=0,
                                         timeout=timeout)
            return f'RabbitMQ at {where}'
        except Exception as error:  # noqa: BLE001 (any failure to connect)
            failure = error
        finally:
            connection.release()
    raise failure


def set_defaults(control_exchange: str = 'cyborg') -> None:
    messaging.set_transport_defaults(control_exchange)


def _transport() -> messaging.Transport:
    if _TRANSPORT is None:
        raise RuntimeError('cyborg.common.rpc.init() was not called')
    return _TRANSPORT


_SIMPLE = (str, int, float, bool, type(None))


def to_primitive(value: Any) -> Any:
    """``jsonutils.to_primitive(value, convert_instances=True)``, with the
    dicts, lists and scalars that make up nearly every payload converted
    here without its tests for every other type on each item."""
    if isinstance(value, _SIMPLE):
        return value
    if type(value) is dict:
        return {to_primitive(k): to_primitive(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return [to_primitive(v) for v in value]
    return jsonutils.to_primitive(value, convert_instances=True)


class _JsonPayloadSerializer(messaging.NoOpSerializer):
    @staticmethod
    def serialize_entity(context: Any, entity: Any) -> Any:
        return to_primitive(entity)


class RequestContextSerializer(messaging.Serializer):
    """Sends contexts as dicts and payloads as plain JSON primitives."""

    def __init__(self) -> None:
        self._base = _JsonPayloadSerializer()

    def serialize_entity(self, context: Any, entity: Any) -> Any:
        return self._base.serialize_entity(context, entity)

    def deserialize_entity(self, context: Any, entity: Any) -> Any:
        return self._base.deserialize_entity(context, entity)

    def serialize_context(self, context: Any) -> dict[str, Any]:
        values = context.to_dict()
        deadline = getattr(context, 'rpc_deadline', None)
        if deadline is not None:
            values[rpc_deadline.DEADLINE_KEY] = deadline
        values.update(profiler.rpc_trace_info())
        return values

    def deserialize_context(self, context: dict[str, Any]
                            ) -> cyborg_context.RequestContext:
        return cyborg_context.RequestContext.from_dict(context)


class _Dispatcher(rpc_deadline.DeadlineDispatcher):
    """Dispatches each call as part of the trace it carries (see
    ``profiler.rpc_call``), its deadline checked first."""

    def dispatch(self, incoming: Any) -> Any:
        return profiler.rpc_call(incoming.ctxt,
                                 incoming.message.get('method'),
                                 functools.partial(super().dispatch,
                                                   incoming))


def get_client(target: messaging.Target,
               version_cap: str | None = None) -> messaging.RPCClient:
    return messaging.get_rpc_client(_transport(), target,
                                    version_cap=version_cap,
                                    serializer=RequestContextSerializer())


def get_server(target: messaging.Target,
               endpoints: list[Any]) -> messaging.MessageHandlingServer:
    """An RPC server that drops calls past their deadline (see
    ``rpc_deadline``) and dispatches the others to ``endpoints``, each
    in the trace of the request it is made for (see ``profiler``)."""
    dispatcher = _Dispatcher(endpoints, RequestContextSerializer())
    return rpc_server.RPCServer(_transport(), target, dispatcher)


def call(client: messaging.RPCClient, context: Any, version: str,
         method: str, unavailable: Callable[[str], Exception],
         server: str | None = None, timeout: float | None = None,
         **kwargs: Any) -> Any:
    """Call ``method`` at ``version`` on ``client``'s topic and wait.

    ``server`` addresses one server of the topic; ``timeout`` overrides
    ``[DEFAULT] rpc_response_timeout``. Sent ``at_least_once``: when no
    server has its queue bound, the broker returns the message and the call
    fails at once instead of waiting for the timeout. The call carries its
    deadline, when it was sent plus its timeout (``rpc_deadline``), and is
    sent with at most ``CALL_RETRY`` reconnections. When the broker cannot
    be reached, nobody listens or answers in time, or the server got the
    call after its deadline, raises ``unavailable(reason)``: the call was
    not carried out, unless a server carried it out and its answer was
    lost or came too late.
    """
    cctxt = client.prepare(
        server=server, version=version, timeout=timeout, retry=CALL_RETRY,
        transport_options=messaging.TransportOptions(at_least_once=True))
    waited = cctxt.timeout or client.conf.rpc_response_timeout
    sent = copy.copy(context)
    sent.rpc_deadline = time.time() + waited
    try:
        return cctxt.call(sent, method, **kwargs)
    except messaging.MessageUndeliverable as exc:
        raise unavailable(f'nothing listens for {method}') from exc
    except _SEND_FAILED as exc:
        raise unavailable(f'the message broker cannot be reached, '
                          f'{method} was not sent') from exc
    except messaging.MessagingTimeout as exc:
        raise unavailable(
            f'no answer to {method} within {waited}s') from exc
    except exception.CallExpired as exc:
        raise unavailable(f'{method} reached its server after its '
                          f'deadline ({waited}s) and was dropped') from exc
