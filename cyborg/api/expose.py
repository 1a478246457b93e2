"""``expose``: WSME's wsexpose, with every error mapped to a status here.

A CyborgException reaches the client with its own status and message. An
outage (no conductor answered; the database cannot be reached, by this
process or by the conductor that took the call) is a 503 with a
Retry-After header, logged as one warning line with the request id. So is
a client's error that microversions 2.0-2.3 answer with a 500
(LegacyServerError): it is no bug, and needs no traceback. Any other
exception is a bug: WSME logs it with its traceback, and the client
gets a 500 naming the request id, never the internal message (which may
hold SQL, hosts or addresses).
"""
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import pecan
from wsmeext.pecan import wsexpose

from cyborg.api import errors
from cyborg.common import exception
from cyborg.common import outages
from cyborg.common import patches

LOG = logging.getLogger(__name__)

# Seconds a client is asked to wait before it retries after a 503: long
# enough for a database or conductor restart to be under way, short
# enough that keystoneauth's retries (which honour it) end soon after.
RETRY_AFTER = 5


class _Outages:
    """``function``, raising a database outage as DatabaseUnavailable.

    WSME takes the status from the ``code`` of what the function raised,
    before format_exception sees it, so the outage is recognised here. An
    object, not a function: WSME and pecan read the arguments from its
    signature, and a function's would be copied onto WSME's own wrapper,
    which pecan must keep seeing as (self, *args, **kwargs).
    """

    __wrapped__: Callable[..., Any]

    def __init__(self, function: Callable) -> None:
        functools.update_wrapper(self, function)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.__wrapped__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.__wrapped__(*args, **kwargs)
        except Exception as exc:
            if not outages.database_down(exc):
                raise
            raise exception.DatabaseUnavailable() from exc


def expose(*args: Any, **kwargs: Any) -> Callable[[Callable], Callable]:
    """``wsexpose``, with database outages answered as such."""
    decorate = wsexpose(*args, **kwargs)
    return lambda function: decorate(_Outages(function))


def _request_id() -> str:
    try:
        return pecan.request.environ.get('openstack.request_id', '-')
    except (AttributeError, RuntimeError):
        return '-'


def _cause(error: BaseException) -> str:
    """'; cause: ' and the first line of what ``error`` was raised from."""
    cause = error.__cause__
    lines = str(cause).strip().splitlines() if cause is not None else []
    return f'; cause: {lines[0]}' if lines else ''


def format_exception(excinfo: Any, debug: bool = False, *,
                     default: Callable[..., dict[str, Any]]
                     ) -> dict[str, Any]:
    """WSME's fault document (``default`` makes it); the message hidden
    for unexpected errors."""
    error = excinfo[1]
    if isinstance(error, exception.ServiceUnavailable):
        # Expected while a dependency is down: WSME would log it as a
        # server error, with a traceback. oslo.log ends the line with the
        # exception being handled, this one, which says what the client got.
        LOG.warning('Request %s answered %d%s', _request_id(), error.code,
                    _cause(error))
        pecan.response.headers['Retry-After'] = str(RETRY_AFTER)
        return errors.fault(error.code, error.message)
    if isinstance(error, exception.LegacyServerError):
        # WSME's own formatter logs every 5xx as an ERROR with the
        # traceback; this 500 is the client's mistake, answered as
        # clients of 2.0-2.3 expect (see schemas.legacy_error).
        LOG.warning('Request %s answered %d for a client error (a 4xx '
                    'from microversion 2.4 on): %s', _request_id(),
                    error.code, error.message)
        return errors.fault(error.code, error.message)
    fault = default(excinfo, debug)
    if isinstance(error, exception.CyborgException):
        # Not str(error): an error a conductor raised comes back from
        # oslo.messaging with the conductor's traceback in str().
        fault['faultstring'] = error.message
    if not isinstance(error, exception.CyborgException) and (
            fault.get('faultcode') == 'Server'):
        fault['faultstring'] = errors.unexpected(_request_id())
    return fault


patches.format_wsme_faults(format_exception)
