"""What every resource controller shares: wire types, checks, pagination."""
import datetime
import re
import urllib.parse
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import TypeVar

import pecan
from oslo_config import cfg
from oslo_utils import timeutils
from wsme import types as wtypes

from cyborg import context as cyborg_context
from cyborg.api import policy
from cyborg.api import schemas
from cyborg.api.controllers import link
from cyborg.api.versions import Microversion
from cyborg.common import exception
from cyborg.db.api import query


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


def conf() -> cfg.ConfigOpts:
    """The configuration the application serving this request was built
    with (``app.setup_app``)."""
    return pecan.request.conf


def authorize(action: str) -> cyborg_context.RequestContext:
    """Check ``action`` for the caller and return the caller's context."""
    ctx = context()
    policy.authorize(pecan.request.enforcer, ctx, action)
    return ctx


def allowed(action: str) -> bool:
    """Whether the caller may do ``action``, without raising."""
    return policy.check(pecan.request.enforcer, context(), action)


def version_at_least(version: Microversion) -> bool:
    return pecan.request.version.at_least(version.major, version.minor)


def strict() -> bool:
    """Whether this request gets 2.4's strict status codes."""
    return version_at_least(Microversion.STRICT)


def legacy_error(message: str) -> exception.CyborgException:
    """400 from 2.4 on; 500 before, as the clients of 2.0-2.3 expect."""
    return schemas.legacy_error(message, strict())


def require_version(version: Microversion, feature: str) -> None:
    if not version_at_least(version):
        number = f'{version.major}.{version.minor}'
        raise exception.NotAcceptable(
            reason=f'{feature} needs microversion {number} or later; '
                   f'send "OpenStack-API-Version: accelerator {number}".')


def path_uuid(value: str, resource: str) -> str:
    """The canonical form of a uuid in a path; ResourceNotFound (404)
    when it is none, as for a uuid nothing has."""
    canonical = schemas.canonical_uuid(value)
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


def split_list(value: str | None, name: str = 'the list') -> list[str]:
    """``a,b`` (or ``a%2Cb``, already decoded by the framework) → list;
    Invalid beyond schemas.LIST_MAX items."""
    if value is None:
        return []
    items = [item.strip() for item in value.split(',') if item.strip()]
    if len(items) > schemas.LIST_MAX:
        raise exception.Invalid(
            reason=f'{name} names {len(items)} items; at most '
                   f'{schemas.LIST_MAX} per request.')
    return items


def timestamp(value: datetime.datetime | str | None) -> str | None:
    """ISO 8601 in UTC; RPC results carry datetimes as strings."""
    if value is None:
        return None
    if isinstance(value, str):
        value = timeutils.parse_isotime(value)
    return value.replace(tzinfo=datetime.timezone.utc,
                         microsecond=0).isoformat()


def up_or_down(alive: bool | None) -> str | None:
    """A service's state as shown: None when it never registered."""
    return None if alive is None else ('up' if alive else 'down')


class Field(wtypes.wsattr):
    """An attribute of a ``Resource`` that is not shown as stored.

    ``source`` is the key of the stored dict it shows (the attribute's own
    name by default) and ``convert`` turns that value into the one shown.
    ``since`` is the microversion that added the attribute: below it the
    attribute is left unset, and WSME leaves it out of the response. With
    a ``default``, a key the dict lacks shows the default.
    """

    def __init__(self, datatype: Any, *, source: str | None = None,
                 convert: Callable[[Any], Any] | None = None,
                 since: Microversion | None = None,
                 default: Any = wtypes.Unset) -> None:
        super().__init__(datatype, default=default)
        self.source = source
        self.convert = convert
        self.since = since

    def value(self, values: Mapping[str, Any]) -> Any:
        """What ``values`` show in this attribute, or Unset."""
        if self.since is not None and not version_at_least(self.since):
            return wtypes.Unset
        key = self.source or self.key
        if self.default is not wtypes.Unset and key not in values:
            return wtypes.Unset
        value = values[key]
        return value if self.convert is None else self.convert(value)


def timestamp_field() -> Field:
    """A date and time, shown as ``timestamp`` shows it."""
    return Field(wtypes.text, convert=timestamp)


def links_field(version: str, collection: str,
                bookmark: bool = False) -> Field:
    """``links`` of an item: ``self`` at /<version>/<collection>/<uuid>
    and, with ``bookmark``, the same without the version."""
    def links(uuid: str) -> list[dict[str, str]]:
        found = [link.make_link('self', version, collection, uuid)]
        if bookmark:
            found.append(link.make_link('bookmark', collection, uuid))
        return found
    return Field(LIST_OF_STRING_DICTS, source='uuid', convert=links)


_R = TypeVar('_R', bound='Resource')


class Resource(wtypes.Base):
    """A wire type whose instances are made from the dicts the database
    layer and the conductor return.

    Each attribute is declared once, in the order of the JSON response:
    a plain type shows the key of the same name, a ``Field`` says where
    its value comes from.
    """

    # Only the resources themselves are WSME types.
    __registry__ = None

    @classmethod
    def from_dict(cls: type[_R], values: Mapping[str, Any]) -> _R:
        resource = cls()
        for attr in wtypes.list_attributes(cls):
            value = (attr.value(values) if isinstance(attr, Field)
                     else values[attr.key])
            if value is not wtypes.Unset:
                setattr(resource, attr.key, value)
        return resource


class Page:
    """``limit`` and ``marker`` of a list request (microversion 2.4+).

    ``marker`` is the uuid of the last item seen or, for items without a
    uuid, its integer id in ``id_column``. A list of groups (capacity)
    names its ``key`` instead: the marker is that key's value of the last
    item, any text, and the page starts after it in the list's order.
    """

    def __init__(self, limit: str | None, marker: str | None,
                 id_column: Any = None, key: str | None = None) -> None:
        self.key = key or ('uuid' if id_column is None else 'id')
        self.limit: int | None = None
        self.marker: str | int | None = None
        if limit is None and marker is None:
            return
        require_version(Microversion.STRICT,
                        feature='Pagination (limit, marker)')
        if limit is not None:
            self.limit = _integer(limit, 'limit')
            if self.limit < 1:
                raise exception.Invalid(
                    reason=f'limit must be a positive integer, not '
                           f'{schemas.shown(limit)}.')
            self.limit = min(self.limit, conf().api.max_limit)
        if marker is not None and key is not None:
            self.marker = marker
        elif marker is not None and id_column is not None:
            self.marker = id_param(marker, 'marker', id_column)
        elif marker is not None:
            self.marker = schemas.check_uuid(marker, 'marker')

    @property
    def size(self) -> int | None:
        """How many items to return: the limit, capped, when paginating."""
        if self.limit is None and self.marker is None:
            return None
        return self.limit or conf().api.max_limit

    def collection(self, cls: type, key: str, wire: type[Resource],
                   path: str, items: list[dict[str, Any]],
                   has_more: bool) -> Any:
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
