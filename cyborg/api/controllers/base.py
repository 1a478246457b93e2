"""What every resource controller shares: body type, checks, pagination."""
import datetime
import urllib.parse
from typing import Any

import pecan
from oslo_utils import timeutils
from oslo_utils import uuidutils
from wsme import types as wtypes

from cyborg import context as cyborg_context
from cyborg.api.controllers import link
from cyborg.common import exception
from cyborg.common import policy
from cyborg.conf import CONF

# The first microversion with 400s where 2.0-2.3 answered 500, and with
# limit/marker pagination.
STRICT_VERSION = (2, 4)
# The first microversion with the operators' resources: /services,
# /drivers and /hosts/{host}/discover.
OPERATOR_VERSION = (2, 5)


class JsonType(wtypes.UserType):
    """A request body passed through as parsed JSON, validated by hand."""

    basetype = wtypes.text
    name = 'json'

    def validate(self, value: Any) -> Any:
        return value

    @staticmethod
    def frombasetype(value: Any) -> Any:
        return value


jsontype = JsonType()

# [{str: str}], e.g. links and device-profile groups.
LIST_OF_STRING_DICTS = wtypes.ArrayType(
    wtypes.DictType(wtypes.text, wtypes.text))


def context() -> cyborg_context.RequestContext:
    return pecan.request.context


def authorize(action: str) -> cyborg_context.RequestContext:
    """Check ``action`` for the caller and return the caller's context."""
    ctx = context()
    policy.authorize(ctx, action)
    return ctx


def version_at_least(major: int, minor: int) -> bool:
    return pecan.request.version.at_least(major, minor)


def strict() -> bool:
    """Whether this request gets 2.4's strict status codes."""
    return version_at_least(*STRICT_VERSION)


def legacy_error(message: str) -> exception.CyborgException:
    """400 from 2.4 on; 500 before, as the clients of 2.0-2.3 expect."""
    if strict():
        return exception.Invalid(reason=message)
    return exception.LegacyServerError(reason=message)


def require_version(major: int, minor: int, feature: str) -> None:
    if not version_at_least(major, minor):
        raise exception.NotAcceptable(
            reason=f'{feature} needs microversion {major}.{minor} or later; '
                   f'send "OpenStack-API-Version: accelerator '
                   f'{major}.{minor}".')


def check_uuid(value: Any, what: str) -> str:
    if not isinstance(value, str) or not uuidutils.is_uuid_like(value):
        raise exception.Invalid(reason=f'{what} must be a UUID, not '
                                       f'{value!r}.')
    return value


def int_param(value: str | None, name: str) -> int | None:
    """A decimal integer query parameter, or None when absent."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise exception.Invalid(
            reason=f'{name} must be an integer, not {value!r}.') from None


def split_list(value: str | None) -> list[str]:
    """``a,b`` (or ``a%2Cb``, already decoded by the framework) → list."""
    if value is None:
        return []
    return [item.strip() for item in value.split(',') if item.strip()]


def timestamp(value: datetime.datetime | str | None) -> str | None:
    """ISO 8601 in UTC; RPC results carry datetimes as strings."""
    if value is None:
        return None
    if isinstance(value, str):
        value = timeutils.parse_isotime(value)
    return value.replace(tzinfo=datetime.timezone.utc,
                         microsecond=0).isoformat()


class Page:
    """``limit`` and ``marker`` of a list request (microversion 2.4+).

    ``marker`` is the ``key`` of the last item seen: its uuid, or its
    integer id for items without a uuid.
    """

    def __init__(self, limit: str | None, marker: str | None,
                 key: str = 'uuid') -> None:
        self.key = key
        self.limit: int | None = None
        self.marker: str | int | None = None
        if limit is None and marker is None:
            return
        require_version(*STRICT_VERSION, feature='Pagination (limit, marker)')
        if limit is not None:
            try:
                self.limit = int(limit)
            except ValueError:
                self.limit = -1
            if self.limit < 1:
                raise exception.Invalid(
                    reason=f'limit must be a positive integer, not '
                           f'{limit!r}.')
            self.limit = min(self.limit, CONF.api.max_limit)
        if marker is not None and key == 'id':
            self.marker = int_param(marker, 'marker')
        elif marker is not None:
            self.marker = check_uuid(marker, 'marker')

    @property
    def size(self) -> int | None:
        """How many items to return: the limit, capped, when paginating."""
        if self.limit is None and self.marker is None:
            return None
        return self.limit or CONF.api.max_limit

    def collection(self, cls: type, key: str, wire: Any, path: str,
                   items: list[dict[str, Any]], has_more: bool) -> Any:
        """The list response ``cls(key=[...])``, with a ``next`` link
        when more items follow this page."""
        result = cls(**{key: [wire.from_dict(i) for i in items]})
        next_link = self._next_link(path, items, has_more)
        if next_link:
            result.next = next_link
        return result

    def _next_link(self, collection: str, items: list[dict[str, Any]],
                   has_more: bool) -> str | None:
        if not has_more or not items:
            return None
        query = {k: v for k, v in pecan.request.GET.items()
                 if k not in ('limit', 'marker')}
        query['limit'] = str(self.size)
        query['marker'] = str(items[-1][self.key])
        return (link.make_link('next', 'v2', collection)['href'] + '?'
                + urllib.parse.urlencode(query))
