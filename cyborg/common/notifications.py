"""Versioned notifications: what happened to devices, deployables and ARQs.

Sent through oslo.messaging's Notifier as configured in
``[oslo_messaging_notifications]``; with no driver, or ``noop``, nothing is
built or sent. Each event has one payload, named and versioned as Nova's
versioned notifications are (``cyborg_object.name``, ``.version``,
``.namespace``, ``.data``), whose fields are declared once below; the
admin guide (``doc/source/admin/notifications.rst``) shows a sample of
each. Sending never raises and never waits for a broker that is down: a
notification that cannot go is dropped, and an outage is logged once.
"""
import dataclasses
import datetime
import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_messaging import opts as messaging_opts

from cyborg import context as cyborg_context
from cyborg.common import device_health
from cyborg.common import rpc

LOG = logging.getLogger(__name__)

GROUP = 'oslo_messaging_notifications'
# Where versioned notifications go unless ``topics`` says otherwise: Nova's
# topic for its own, which consumers of versioned notifications listen on
# (oslo's default, ``notifications``, carries the unversioned ones).
DEFAULT_TOPICS = ['versioned_notifications']
NAMESPACE = 'cyborg'
INFO = 'INFO'
ERROR = 'ERROR'

_STR: dict[str, Any] = {'type': 'string'}
_OPT_STR: dict[str, Any] = {'type': ['string', 'null']}
_INT: dict[str, Any] = {'type': 'integer'}
_OPT_INT: dict[str, Any] = {'type': ['integer', 'null']}
_OPT_NUM: dict[str, Any] = {'type': ['number', 'null']}
_STRINGS: dict[str, Any] = {'type': 'array', 'items': _STR}


def _object(properties: dict[str, Any], nullable: bool = False
            ) -> dict[str, Any]:
    return {'type': ['object', 'null'] if nullable else 'object',
            'additionalProperties': False, 'required': list(properties),
            'properties': properties}


@dataclasses.dataclass(frozen=True)
class Payload:
    """A payload's name, version and fields (a JSON schema per field).

    A field added is a minor version, one changed or removed a major one.
    """

    name: str
    version: str
    fields: dict[str, Any]

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON schema of the payload's ``cyborg_object.data``."""
        return _object(self.fields)

    def wrap(self, data: dict[str, Any]) -> dict[str, Any]:
        """The envelope around the declared fields of ``data``."""
        return {'cyborg_object.name': self.name,
                'cyborg_object.namespace': NAMESPACE,
                'cyborg_object.version': self.version,
                'cyborg_object.data': {k: data[k] for k in self.fields}}


DEVICE = Payload('DevicePayload', '1.0', {
    'uuid': _STR, 'type': _STR, 'vendor': _STR, 'model': _STR,
    'std_board_info': {'type': 'object'},
    'vendor_board_info': {'type': 'object'},
    'host': _STR, 'hostname': _STR, 'status': _STR,
    'created_at': _OPT_STR, 'updated_at': _OPT_STR})
DEVICE_HEALTH = Payload('DeviceHealthPayload', '1.0', {
    **DEVICE.fields, 'health': _STR, 'health_reason': _OPT_STR,
    'health_source': _OPT_STR, 'health_changed_at': _OPT_STR,
    'previous_health': _STR, 'previous_reason': _OPT_STR})
_USAGE = _object({
    'temperature_celsius': _OPT_NUM, 'power_watts': _OPT_NUM,
    'utilization_percent': _OPT_NUM, 'memory_used_bytes': _OPT_INT,
    'memory_total_bytes': _OPT_INT,
    'counters': {'type': 'object', 'additionalProperties': _INT},
    'gauges': {'type': 'object', 'additionalProperties': {
        'type': 'number'}}}, nullable=True)
_SAMPLE = _object({
    'controlpath_id': {'type': 'object'}, 'type': _STR, 'vendor': _STR,
    'model': _STR, 'product_id': _STR, 'address': _STR,
    'driver_name': _STR, 'device_uuid': _OPT_STR,
    'health': _object({'state': _STR, 'reason': _STR}),
    'usage': _USAGE, 'instances': _STRINGS, 'projects': _STRINGS})
DEVICE_USAGE = Payload('DeviceUsagePayload', '1.0', {
    'host': _STR, 'samples': {'type': 'array', 'items': _SAMPLE}})
PROGRAM = Payload('DeployableProgramPayload', '1.0', {
    'deployable_uuid': _STR, 'deployable_name': _STR, 'host': _STR,
    'driver_name': _STR, 'image_uuid': _STR, 'arq_uuids': _STRINGS,
    'reason': _OPT_STR})
# 1.1: ``reason``, why a request went that no API call deleted
# (``expired``); null otherwise.
ARQ = Payload('ARQPayload', '1.1', {
    'uuid': _STR, 'state': _STR, 'device_profile_name': _STR,
    'device_profile_group_id': _INT, 'project_id': _OPT_STR,
    'instance_uuid': _OPT_STR, 'hostname': _OPT_STR,
    'device_rp_uuid': _OPT_STR, 'attach_handle_type': _STR,
    'attach_handle_uuid': _OPT_STR, 'created_at': _OPT_STR,
    'updated_at': _OPT_STR, 'reason': _OPT_STR})
ARQ_BIND_ERROR = Payload('ARQBindErrorPayload', '1.0', {
    **ARQ.fields, 'reason': _STR})

# Every event: its payload and priority (the topic's suffix).
EVENTS: dict[str, tuple[Payload, str]] = {
    'accelerator.device.create': (DEVICE, INFO),
    'accelerator.device.update': (DEVICE, INFO),
    'accelerator.device.delete': (DEVICE, INFO),
    'accelerator.device.health.update': (DEVICE_HEALTH, INFO),
    'accelerator.device.usage': (DEVICE_USAGE, INFO),
    'accelerator.deployable.program.start': (PROGRAM, INFO),
    'accelerator.deployable.program.end': (PROGRAM, INFO),
    'accelerator.deployable.program.error': (PROGRAM, ERROR),
    'accelerator.arq.create': (ARQ, INFO),
    'accelerator.arq.bind.end': (ARQ, INFO),
    'accelerator.arq.bind.error': (ARQ_BIND_ERROR, ERROR),
    'accelerator.arq.unbind': (ARQ, INFO),
    'accelerator.arq.delete': (ARQ, INFO),
}


def _time(value: Any) -> str | None:
    if isinstance(value, datetime.datetime):
        return value.replace(
            tzinfo=value.tzinfo or datetime.timezone.utc).isoformat()
    return value


def _board_info(value: Any) -> dict[str, Any]:
    """The DB layer keeps board infos as JSON strings."""
    if isinstance(value, str):
        return dict(json.loads(value or '{}'))
    return dict(value or {})


def device_data(device: dict[str, Any]) -> dict[str, Any]:
    """A ``devices.to_dict()`` dict in payload form."""
    return dict(device, std_board_info=_board_info(device['std_board_info']),
                vendor_board_info=_board_info(device['vendor_board_info']),
                created_at=_time(device.get('created_at')),
                updated_at=_time(device.get('updated_at')))


def arq_data(arq: dict[str, Any], reason: str | None = None
             ) -> dict[str, Any]:
    """An ``arqs.to_dict()`` dict in payload form."""
    return dict(arq, created_at=_time(arq.get('created_at')),
                updated_at=_time(arq.get('updated_at')), reason=reason)


class _FailedSends(logging.Filter):
    """Catches oslo.messaging's logs of a notification it could not send.

    Its Notifier and its messaging drivers never raise: they log each
    failure with a traceback and the whole message. While this thread
    sends, such a record is kept for the sender, which logs an outage
    once, and dropped.
    """

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def start(self) -> None:
        self._local.failures = []

    def stop(self) -> list[str]:
        failures, self._local.failures = self._local.failures, None
        return list(failures or [])

    def filter(self, record: logging.LogRecord) -> bool:
        failures = getattr(self._local, 'failures', None)
        if failures is None:
            return True
        if record.exc_info and record.exc_info[1] is not None:
            failures.append(str(record.exc_info[1]))
        else:
            failures.append(record.getMessage())
        return False


_FAILED = _FailedSends()
for _logger in ('oslo_messaging.notify.notifier',
                'oslo_messaging.notify.messaging'):
    logging.getLogger(_logger).addFilter(_FAILED)


def _register(conf: cfg.ConfigOpts) -> None:
    """oslo.messaging registers its notification options only when a
    notifier is made; whether to make one depends on them.

    Only those: its [DEFAULT] transport options are registered by the
    transport itself, and a copy registered here would differ from them
    once ``rpc.set_defaults`` has changed ``control_exchange``'s default,
    which oslo.config refuses as a duplicate.
    """
    for group, opts in messaging_opts.list_opts():
        if group == GROUP:
            conf.register_opts(opts, group=group)
    conf.set_default('topics', DEFAULT_TOPICS, group=GROUP)


def _transport_url(conf: cfg.ConfigOpts) -> str | None:
    """``[DEFAULT] transport_url``; None where no transport registered it
    yet (a process that has not made one)."""
    try:
        url: str | None = conf.transport_url
    except cfg.NoSuchOptError:
        return None
    return url


def configured(conf: cfg.ConfigOpts) -> bool:
    """Whether ``[oslo_messaging_notifications] driver`` sends anywhere."""
    _register(conf)
    return bool(set(conf[GROUP].driver) - {'noop'})


class Notifier:
    """Sends a process's versioned notifications; see the module doc."""

    def __init__(self, conf: cfg.ConfigOpts, binary: str) -> None:
        self.publisher_id = (f'accelerator.{binary.removeprefix("cyborg-")}'
                             f':{conf.host}')
        self._lock = threading.Lock()
        self._down = False
        self._notifier: messaging.Notifier | None = None
        self._transport: messaging.Transport | None = None
        if not configured(conf):
            return
        # oslo's default, -1, retries for ever: a broker that is down would
        # hold every bind and report that sends a notification. Unless the
        # operator chose a number, a notification is tried once.
        retry = max(conf[GROUP].retry, 0)
        self._transport = messaging.get_notification_transport(conf)
        self._notifier = messaging.Notifier(
            self._transport, publisher_id=self.publisher_id,
            serializer=rpc.RequestContextSerializer(), retry=retry,
            topics=conf[GROUP].topics)

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    def cleanup(self) -> None:
        if self._transport is not None:
            self._transport.cleanup()

    def _send(self, context: cyborg_context.RequestContext | None,
              event_type: str, data: dict[str, Any]) -> None:
        if self._notifier is None:
            return
        payload, priority = EVENTS[event_type]
        try:
            body = payload.wrap(data)
        except Exception:
            # A bug here must not fail what is being notified.
            LOG.exception('Cannot build notification %s', event_type)
            return
        send = (self._notifier.error if priority == ERROR
                else self._notifier.info)
        _FAILED.start()
        try:
            send(context or cyborg_context.get_admin_context(), event_type,
                 body)
        except Exception:
            # oslo.messaging logs its drivers' errors itself; a
            # serializer's would come here.
            _FAILED.stop()
            LOG.exception('Cannot send notification %s', event_type)
            return
        self._outcome(event_type, _FAILED.stop())

    def _outcome(self, event_type: str, failures: list[str]) -> None:
        with self._lock:
            was_down, self._down = self._down, bool(failures)
        if failures and not was_down:
            LOG.warning('Notifications cannot be sent (%s); they are '
                        'dropped until they can again.', failures[0])
        elif failures:
            LOG.debug('Notification %s dropped: %s', event_type, failures[0])
        elif was_down:
            LOG.warning('Notifications are sent again.')

    # Devices

    def device_create(self, context: cyborg_context.RequestContext | None,
                      devices: Iterable[dict[str, Any]]) -> None:
        """One ``accelerator.device.create`` per ``devices.to_dict()``."""
        for device in devices:
            self._send(context, 'accelerator.device.create',
                       device_data(device))

    def device_update(self, context: cyborg_context.RequestContext | None,
                      devices: Iterable[dict[str, Any]]) -> None:
        for device in devices:
            self._send(context, 'accelerator.device.update',
                       device_data(device))

    def device_delete(self, context: cyborg_context.RequestContext | None,
                      devices: Iterable[dict[str, Any]]) -> None:
        for device in devices:
            self._send(context, 'accelerator.device.delete',
                       device_data(device))

    def device_health_update(self,
                             context: cyborg_context.RequestContext | None,
                             device: dict[str, Any], previous_state: str,
                             previous_reason: str | None) -> None:
        """``device`` also carries ``health``, ``health_reason`` and
        ``health_source``, as they are now."""
        self._send(context, 'accelerator.device.health.update',
                   dict(device_data(device), previous_health=previous_state,
                        previous_reason=previous_reason,
                        health_changed_at=_time(
                            device.get('health_changed_at'))))

    def device_usage(self, context: cyborg_context.RequestContext | None,
                     host: str, samples: list[device_health.DeviceSample]
                     ) -> None:
        """One notification for an agent's whole health pass."""
        if self._notifier is None:
            return
        self._send(context, 'accelerator.device.usage',
                   {'host': host, 'samples': [s.to_dict() for s in samples]})

    # Deployables. ``program`` holds ``deployable_uuid``,
    # ``deployable_name``, ``host``, ``driver_name``, ``image_uuid`` and
    # ``arq_uuids`` (the binds that program it; none for an operator's
    # request).

    def program_start(self, context: cyborg_context.RequestContext | None,
                      program: dict[str, Any]) -> None:
        self._send(context, 'accelerator.deployable.program.start',
                   dict(program, reason=None))

    def program_end(self, context: cyborg_context.RequestContext | None,
                    program: dict[str, Any]) -> None:
        self._send(context, 'accelerator.deployable.program.end',
                   dict(program, reason=None))

    def program_error(self, context: cyborg_context.RequestContext | None,
                      program: dict[str, Any], reason: str) -> None:
        self._send(context, 'accelerator.deployable.program.error',
                   dict(program, reason=reason))

    # Accelerator requests, as ``arqs.to_dict()`` gives them. Unbind and
    # delete carry the request as it was bound, with its new state.

    def arq_create(self, context: cyborg_context.RequestContext | None,
                   arqs: Iterable[dict[str, Any]]) -> None:
        for arq in arqs:
            self._send(context, 'accelerator.arq.create', arq_data(arq))

    def arq_bind_end(self, context: cyborg_context.RequestContext | None,
                     arq: dict[str, Any]) -> None:
        self._send(context, 'accelerator.arq.bind.end', arq_data(arq))

    def arq_bind_error(self, context: cyborg_context.RequestContext | None,
                       arq: dict[str, Any], reason: str) -> None:
        self._send(context, 'accelerator.arq.bind.error',
                   arq_data(arq, reason))

    def arq_unbind(self, context: cyborg_context.RequestContext | None,
                   arq: dict[str, Any]) -> None:
        self._send(context, 'accelerator.arq.unbind', arq_data(arq))

    def arq_delete(self, context: cyborg_context.RequestContext | None,
                   arq: dict[str, Any], reason: str | None = None) -> None:
        """``reason``: why a request no API call deleted went
        (``expired``, see ``unbound_expiry``)."""
        self._send(context, 'accelerator.arq.delete', arq_data(arq, reason))


_NOTIFIERS: dict[tuple[Any, ...], Notifier] = {}
_NOTIFIERS_LOCK = threading.Lock()


def get_notifier(conf: cfg.ConfigOpts, binary: str) -> Notifier:
    """The process's notifier for ``binary`` (``cyborg-conductor``,
    ``cyborg-agent``), made on first use; publisher id
    ``accelerator.<binary without cyborg->:<[DEFAULT] host>``.

    Cached per configuration object and the options it is built from, so
    that a changed configuration (a test's) gets a notifier of its own.
    """
    _register(conf)
    options = conf[GROUP]
    key = (id(conf), binary, conf.host, tuple(options.driver),
           options.transport_url, _transport_url(conf),
           tuple(options.topics),
           options.retry)
    with _NOTIFIERS_LOCK:
        notifier = _NOTIFIERS.get(key)
        if notifier is None:
            notifier = _NOTIFIERS[key] = Notifier(conf, binary)
        return notifier


def cleanup() -> None:
    """Close every notifier's transport (a service stopping, a test)."""
    with _NOTIFIERS_LOCK:
        for notifier in _NOTIFIERS.values():
            notifier.cleanup()
        _NOTIFIERS.clear()
