"""API microversions: the list of them, the range and header negotiation."""
import dataclasses
import enum
import re
import typing
from typing import Any

SERVICE_TYPE = 'accelerator'
HEADER = 'OpenStack-API-Version'
MIN_HEADER = 'OpenStack-API-Minimum-Version'
MAX_HEADER = 'OpenStack-API-Maximum-Version'
# HEADER as the WSGI environ holds it.
_ENVIRON_HEADER = 'HTTP_' + HEADER.upper().replace('-', '_')
# Where ``requested`` keeps what it parsed: the version, or why the header
# asks for none.
_PARSED = 'cyborg.api_version'


class _Number(typing.NamedTuple):
    major: int
    minor: int


@enum.unique
class Microversion(_Number, enum.Enum):
    """Every microversion, oldest first, named for what it added; see
    doc/source/reference/api-version-history.rst.

    The one list of them: the supported range, the version documents and
    the headers follow the last; ``controllers.root.ROUTES`` names the
    one each path appeared in; code compares a request's version with
    them. A member is a ``(major, minor)`` tuple.
    """

    # device profiles, accelerator requests, devices, deployables and
    # attributes
    INITIAL = 2, 0
    # the /project_id operation in the accelerator request PATCH
    PROJECT_ID = 2, 1
    # GET /device_profiles/{name}
    PROFILE_BY_NAME = 2, 2
    # the status of devices
    DEVICE_STATUS = 2, 3
    # 400s where 2.0-2.3 answered 500; limit/marker pagination
    STRICT = 2, 4
    # the operators' resources: GET /services, GET /drivers,
    # POST /hosts/{host}/discover
    OPERATOR = 2, 5
    # device health, and the impact of taking a device out (a dry run)
    HEALTH = 2, 6
    # GET /capacity
    CAPACITY = 2, 7
    # the device lifecycle: drivers managed per host, device layouts,
    # preparation and cleaning
    LIFECYCLE = 2, 8
    # live attach and detach: a PATCH may bind requests to an instance
    # that has bound ones, and unbinding one that is not bound is a 409
    LIVE_ATTACH = 2, 9
    # private device profiles: is_public, the projects a private profile
    # is for (PATCH /device_profiles/{uuid_or_name},
    # /device_profiles/{uuid_or_name}/projects)
    PRIVATE_PROFILES = 2, 10
    # POST /accelerator_requests takes an Idempotency-Key header
    IDEMPOTENT_CREATE = 2, 11
    # GET /capacity pages its groups: limit, marker and a next link
    CAPACITY_PAGES = 2, 12


# As plain tuples: what the headers, the version documents and the
# clients' tests (which replace MAX_VERSION) read.
VERSIONS = tuple((v.major, v.minor) for v in Microversion)
MIN_VERSION = VERSIONS[0]
MAX_VERSION = VERSIONS[-1]

# ASCII digits only (\d also takes other scripts' digits), nine at most:
# no longer number is a version, and int() of thousands of digits is slow.
_VERSION_RE = re.compile(r'([0-9]{1,9})\.([0-9]{1,9})')


def as_string(version: tuple[int, int]) -> str:
    return '%d.%d' % version


class InvalidVersion(ValueError):
    """The header asks for a version this service does not have."""


@dataclasses.dataclass(frozen=True)
class APIVersion:
    major: int
    minor: int

    def __str__(self) -> str:
        return f'{self.major}.{self.minor}'

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)


def parse_header(value: str | None) -> APIVersion:
    """The version a request asks for; 2.0 when it asks for none.

    Accepts ``accelerator X.Y``, ``accelerator latest`` and, as some old
    clients send it, a bare ``X.Y``. A header naming another service type
    is ignored (a client may send versions for several services).
    """
    if value is None or not value.strip():
        return APIVersion(*MIN_VERSION)
    wanted = None
    for part in value.split(','):
        words = part.split()
        if len(words) == 2 and words[0].lower() == SERVICE_TYPE:
            wanted = words[1]
        elif len(words) == 1:
            wanted = words[0]
    if wanted is None:
        return APIVersion(*MIN_VERSION)
    if wanted.lower() == 'latest':
        return APIVersion(*MAX_VERSION)
    match = _VERSION_RE.fullmatch(wanted)
    if not match:
        raise InvalidVersion(
            f'Invalid value for {HEADER} header: {value!r}. Use '
            f'"{SERVICE_TYPE} X.Y", for example "{SERVICE_TYPE} '
            f'{as_string(MAX_VERSION)}".')
    version = (int(match.group(1)), int(match.group(2)))
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise InvalidVersion(
            f'Version {as_string(version)} was requested but the minor '
            'version is not supported by this service. The supported '
            f'version range is: [{as_string(MIN_VERSION)}, '
            f'{as_string(MAX_VERSION)}].')
    return APIVersion(*version)


def requested(environ: dict[str, Any]) -> APIVersion:
    """The version the request of ``environ`` asks for, as parse_header
    reads its header (InvalidVersion included), parsed on the first call
    and kept in the environ for every other."""
    parsed = environ.get(_PARSED)
    if parsed is None:
        try:
            parsed = parse_header(environ.get(_ENVIRON_HEADER))
        except InvalidVersion as exc:
            parsed = str(exc)
        environ[_PARSED] = parsed
    if isinstance(parsed, str):
        raise InvalidVersion(parsed)
    return parsed
