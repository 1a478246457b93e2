"""oslo.messaging plumbing: one transport per process, clients and servers."""
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_messaging import opts as messaging_opts
from oslo_serialization import jsonutils

from cyborg import context as cyborg_context

CONDUCTOR_TOPIC = 'cyborg-conductor'
AGENT_TOPIC = 'cyborg-agent'
ALLOWED_EXMODS = ['cyborg.common.exception']

_TRANSPORT: messaging.Transport | None = None


def init(conf: cfg.ConfigOpts, url: str | None = None) -> None:
    """Create the process's transport from ``[DEFAULT] transport_url``.

    ``url`` overrides the option (the all-in-one service passes
    ``fake://`` to keep every message inside the process).
    """
    global _TRANSPORT
    if _TRANSPORT is None:
        _TRANSPORT = messaging.get_rpc_transport(
            conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)
        # oslo.messaging registers some [DEFAULT] options (the RPC timeout
        # among them) only when the first client is made; cyborg reads
        # them before that.
        for group, opts in messaging_opts.list_opts():
            if group is None:
                conf.register_opts(opts)


def cleanup() -> None:
    global _TRANSPORT
    if _TRANSPORT is not None:
        _TRANSPORT.cleanup()
        _TRANSPORT = None


def set_defaults(control_exchange: str = 'cyborg') -> None:
    messaging.set_transport_defaults(control_exchange)


def _transport() -> messaging.Transport:
    if _TRANSPORT is None:
        raise RuntimeError('cyborg.common.rpc.init() was not called')
    return _TRANSPORT


class _JsonPayloadSerializer(messaging.NoOpSerializer):
    @staticmethod
    def serialize_entity(context: Any, entity: Any) -> Any:
        return jsonutils.to_primitive(entity, convert_instances=True)


class RequestContextSerializer(messaging.Serializer):
    """Sends contexts as dicts and payloads as plain JSON primitives."""

    def __init__(self) -> None:
        self._base = _JsonPayloadSerializer()

    def serialize_entity(self, context: Any, entity: Any) -> Any:
        return self._base.serialize_entity(context, entity)

    def deserialize_entity(self, context: Any, entity: Any) -> Any:
        return self._base.deserialize_entity(context, entity)

    def serialize_context(self, context: Any) -> dict[str, Any]:
        return context.to_dict()

    def deserialize_context(self, context: dict[str, Any]
                            ) -> cyborg_context.RequestContext:
        return cyborg_context.RequestContext.from_dict(context)


def get_client(target: messaging.Target,
               version_cap: str | None = None) -> messaging.RPCClient:
    return messaging.get_rpc_client(_transport(), target,
                                    version_cap=version_cap,
                                    serializer=RequestContextSerializer())


def get_server(target: messaging.Target,
               endpoints: list[Any]) -> messaging.MessageHandlingServer:
    return messaging.get_rpc_server(
        _transport(), target, endpoints,
        serializer=RequestContextSerializer())
