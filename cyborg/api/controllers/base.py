"""What every resource controller shares: body type, checks, pagination."""
import datetime
import re
import urllib.parse
import uuid as uuid_lib
from typing import Any

import pecan
from oslo_utils import timeutils
from oslo_utils import uuidutils
from wsme import types as wtypes

from cyborg import context as cyborg_context
from cyborg.api import policy
from cyborg.api import schemas
from cyborg.api.controllers import link
from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db.api import query

# The first microversion with 400s where 2.0-2.3 answered 500, and with
# limit/marker pagination.
STRICT_VERSION = (2, 4)
# The first microversion with the operators' resources: /services,
# /drivers and /hosts/{host}/discover.
OPERATOR_VERSION = (2, 5)


class JsonType(wtypes.UserType):
    """A request body passed through as parsed JSON, validated by hand.

    WSME's parse of it is the only one a request gets, once
    ``middleware.json_only`` has refused what no handler should see (not
    JSON, nested too deep, lone surrogates, NUL).
    """

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


def canonical_uuid(value: Any) -> str | None:
    """``value`` as a uuid in the one form stored and shown (lower case,
    with dashes), from any form oslo accepts ("{...}", "urn:uuid:...",
    upper case, without dashes); None if it is no uuid."""
    if not isinstance(value, str) or not uuidutils.is_uuid_like(value):
        return None
    return str(uuid_lib.UUID(value))


def check_uuid(value: Any, what: str) -> str:
    """The canonical form of a uuid sent in a body or query; Invalid if
    it is none."""
    canonical = canonical_uuid(value)
    if canonical is None:
        raise exception.Invalid(reason=f'{what} must be a UUID, not '
                                       f'{schemas.shown(value)}.')
    return canonical


def path_uuid(value: str, resource: str) -> str:
    """The canonical form of a uuid in a path; ResourceNotFound (404)
    when it is none, as for a uuid nothing has."""
    canonical = canonical_uuid(value)
    if canonical is None:
        raise exception.ResourceNotFound(resource=resource, id=value)
    return canonical


# Decimal in ASCII digits: int() also takes "٣", " 3", "+3" and "3_000".
_DECIMAL = re.compile(r'-?[0-9]+')
# More digits than any column's range has: such a number is not parsed
# (int() refuses more than 4300 digits) but known to be out of range.
_DIGITS_MAX = 40


def _integer(value: str, name: str) -> int:
    if not _DECIMAL.fullmatch(value):
        raise exception.Invalid(
            reason=f'{name} must be an integer in ASCII digits, not '
                   f'{schemas.shown(value)}.')
    if len(value.lstrip('-')) > _DIGITS_MAX:
        return (-1 if value.startswith('-') else 1) * 10 ** _DIGITS_MAX
    return int(value)


def id_param(value: str | None, name: str, column: Any) -> int | None:
    """A query parameter naming a row by the integer ``column`` (an id
    or a reference to one), or None when absent; Invalid outside the
    range the column holds, from 1."""
    if value is None:
        return None
    number = _integer(value, name)
    top = query.integer_range(column)[1]
    if not 1 <= number <= top:
        raise exception.Invalid(
            reason=f'{name} must be an integer from 1 to {top}, not '
                   f'{schemas.shown(value)}.')
    return number


# Items one comma-separated query parameter may name.
LIST_MAX = 1000


def split_list(value: str | None, name: str = 'the list') -> list[str]:
    """``a,b`` (or ``a%2Cb``, already decoded by the framework) → list;
    Invalid beyond LIST_MAX items."""
    if value is None:
        return []
    items = [item.strip() for item in value.split(',') if item.strip()]
    if len(items) > LIST_MAX:
        raise exception.Invalid(
            reason=f'{name} names {len(items)} items; at most {LIST_MAX} '
                   'per request.')
    return items


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

    ``marker`` is the uuid of the last item seen or, for items without a
    uuid, its integer id in ``id_column``.
    """

    def __init__(self, limit: str | None, marker: str | None,
                 id_column: Any = None) -> None:
        self.key = 'uuid' if id_column is None else 'id'
        self.limit: int | None = None
        self.marker: str | int | None = None
        if limit is None and marker is None:
            return
        require_version(*STRICT_VERSION, feature='Pagination (limit, marker)')
        if limit is not None:
            self.limit = _integer(limit, 'limit')
            if self.limit < 1:
                raise exception.Invalid(
                    reason=f'limit must be a positive integer, not '
                           f'{schemas.shown(limit)}.')
            self.limit = min(self.limit, CONF.api.max_limit)
        if marker is not None and id_column is not None:
            self.marker = id_param(marker, 'marker', id_column)
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
        params = {k: v for k, v in pecan.request.GET.items()
                  if k not in ('limit', 'marker')}
        params['limit'] = str(self.size)
        params['marker'] = str(items[-1][self.key])
        return (link.make_link('next', 'v2', collection)['href'] + '?'
                + urllib.parse.urlencode(params))
