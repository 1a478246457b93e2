"""A fake Nova API serving ``POST /v2.1/os-server-external-events``.

It checks what real Nova checks before it takes an event: a token (401
without the right one, as keystonemiddleware answers), the microversion
(the event name is valid only from 2.82; 400 below, 406 above the maximum)
and the body's schema; then it answers 200, or 207 with a code per event
when a test made some instances unknown (404) or not yet on a host (422).
"""
import re
import uuid
from typing import Any

from cyborg.tests.fakes import http

# The event names Nova accepts, by the microversion that added them.
_NAMES_SINCE = {
    'network-changed': (2, 0),
    'network-vif-plugged': (2, 0),
    'network-vif-unplugged': (2, 0),
    'network-vif-deleted': (2, 0),
    'volume-extended': (2, 51),
    'power-update': (2, 76),
    'accelerator-request-bound': (2, 82),
    'volume-reimaged': (2, 93),
}
# Events whose tag Nova requires; without one the event gets code 400.
_NAMES_WITH_TAG = ('volume-extended', 'power-update',
                   'accelerator-request-bound')
_STATUSES = ('failed', 'completed', 'in-progress')
_FIELDS = ('name', 'server_uuid', 'status', 'tag')
_VERSION = re.compile(r'^([1-9]\d*)\.([1-9]\d*|0)$')

Version = tuple[int, int]


class FakeNova(http.FakeHTTPServer):
    """Nova's external events API under ``prefix`` (``/v2.1``).

    Every instance is known and on a host unless ``answer()`` says
    otherwise.
    """

    def __init__(self, token: str = 'nova-admin-token',
                 prefix: str = '/v2.1',
                 max_version: str = '2.104') -> None:
        super().__init__()
        self.token = token
        self.prefix = prefix
        self.max_version = _parse_version(max_version)
        self._answers: dict[str, int] = {}
        # How many more events of an instance get its answer, by instance;
        # absent: every one.
        self._times: dict[str, int] = {}
        # (tag, code) of every event answered.
        self._given: list[tuple[str | None, int]] = []
        self.route('POST', self.events_path, self._create_events)

    @property
    def events_path(self) -> str:
        return f'{self.prefix}/os-server-external-events'

    @property
    def endpoint(self) -> str:
        """The compute endpoint, as the service catalog would give it."""
        return self.url + self.prefix

    def answer(self, instance_uuid: str, code: int,
               times: int | None = None) -> None:
        """Give ``code`` to every event for ``instance_uuid``, or to the
        next ``times`` of them and 200 after: 404 as for an unknown
        instance, 422 as for one not on a host yet (as nova-api answers
        until nova-compute has claimed the instance), 200 again to undo."""
        with self._lock:
            self._answers[instance_uuid] = code
            self._times.pop(instance_uuid, None)
            if times is not None:
                self._times[instance_uuid] = times

    def codes(self, tag: str) -> list[int]:
        """The code each event tagged ``tag`` got, in order."""
        with self._lock:
            return [code for given, code in self._given if given == tag]

    def _code(self, instance_uuid: str) -> int:
        with self._lock:
            code = self._answers.get(instance_uuid, 200)
            left = self._times.get(instance_uuid)
            if left is not None:
                if left <= 1:
                    del self._times[instance_uuid]
                    self._answers.pop(instance_uuid, None)
                else:
                    self._times[instance_uuid] = left - 1
            return code

    def posts(self) -> list[http.Request]:
        """Every POST of events received, answered or not."""
        return self.requests_to('POST', self.events_path)

    def events(self) -> list[dict[str, Any]]:
        """The events of every POST answered with 200 or 207, in order, as
        they were sent."""
        return [event for request in self.posts()
                if request.status in (200, 207)
                for event in request.body['events']]

    def fault_response(self, status: int) -> http.Response:
        return _fault(status, 'Injected fault')

    def _create_events(self, request: http.Request) -> http.Response:
        if request.headers.get('x-auth-token') != self.token:
            return http.json_response(
                {'error': {'code': 401, 'title': 'Unauthorized',
                           'message': 'The request you have made requires '
                                      'authentication.'}}, 401)
        version = _requested_version(request.headers)
        if isinstance(version, str):
            return _fault(400, f'API Version String {version} is of invalid '
                               'format. Must be of format MajorNum.MinorNum.')
        if version is None:
            version = self.max_version
        if not (2, 1) <= version <= self.max_version:
            return _fault(406, 'Version %d.%d is not supported by the API. '
                               'Minimum is 2.1 and maximum is %d.%d.'
                          % (version + self.max_version))
        problem = _invalid_body(request.body, version)
        if problem:
            return _fault(400, f'Invalid input for field/attribute {problem}')
        answered = []
        for event in request.body['events']:
            code = self._code(event['server_uuid'])
            # Nova looks for the instance first, then for the tag, then
            # for the instance's host.
            if code != 404 and event['name'] in _NAMES_WITH_TAG \
                    and 'tag' not in event:
                code = 400
            # Nova echoes each event, with the status it settled on.
            status = 'completed' if code == 200 else 'failed'
            answered.append({**event, 'status': status, 'code': code})
        with self._lock:
            self._given.extend((e.get('tag'), e['code']) for e in answered)
        multi = any(event['code'] != 200 for event in answered)
        return http.json_response({'events': answered}, 207 if multi else 200)


def _fault(status: int, message: str) -> http.Response:
    name = {400: 'badRequest', 404: 'itemNotFound'}.get(status,
                                                        'computeFault')
    return http.json_response({name: {'code': status, 'message': message}},
                              status)


def _requested_version(headers: dict[str, str]) -> Version | str | None:
    """The compute microversion asked for: (major, minor), None for
    'latest', or the malformed string. Without one Nova serves 2.1."""
    asked = None
    for part in headers.get('openstack-api-version', '').split(','):
        service, _, value = part.strip().partition(' ')
        if service.lower() == 'compute':
            asked = value.strip()
    if asked is None:
        asked = headers.get('x-openstack-nova-api-version', '2.1').strip()
    if asked == 'latest':
        return None
    try:
        return _parse_version(asked)
    except ValueError:
        return asked


def _parse_version(text: str) -> Version:
    match = _VERSION.match(text)
    if not match:
        raise ValueError(text)
    return int(match.group(1)), int(match.group(2))


def _invalid_body(body: Any, version: Version) -> str | None:
    """What Nova's schema for ``version`` rejects in ``body``, or None."""
    if not isinstance(body, dict) or set(body) != {'events'}:
        return 'body: one key, "events", is allowed and required'
    events = body['events']
    if not isinstance(events, list) or not events:
        return 'events: a non-empty list is required'
    for index, event in enumerate(events):
        where = f'events/{index}'
        if not isinstance(event, dict):
            return f'{where}: an object is required'
        extra = set(event) - set(_FIELDS)
        if extra:
            return f'{where}: additional properties {sorted(extra)}'
        name = event.get('name')
        since = _NAMES_SINCE.get(name) if isinstance(name, str) else None
        if since is None or version < since:
            return f'{where}/name: {name!r} is not one of ' \
                   f'the names of version {version[0]}.{version[1]}'
        try:
            uuid.UUID(str(event.get('server_uuid')))
        except ValueError:
            return f'{where}/server_uuid: {event.get("server_uuid")!r} is ' \
                   'not a uuid'
        if 'status' in event and event['status'] not in _STATUSES:
            return f'{where}/status: {event["status"]!r} is not one of ' \
                   f'{list(_STATUSES)}'
        tag = event.get('tag', '')
        if not isinstance(tag, str) or len(tag) > 255:
            return f'{where}/tag: a string of at most 255 characters is ' \
                   'required'
    return None
