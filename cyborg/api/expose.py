"""``expose``: WSME's wsexpose, with unexpected errors kept internal.

A CyborgException reaches the client with its own status and message. Any
other exception is a bug or an outage: WSME logs it with its traceback, and
the client gets a 500 naming the request id, never the internal message
(which may hold SQL, hosts or addresses).
"""
import logging
from typing import Any

import pecan
import wsme.api
from wsmeext.pecan import wsexpose

from cyborg.common import exception

LOG = logging.getLogger(__name__)

expose = wsexpose

_format_exception = wsme.api.format_exception


def _request_id() -> str:
    try:
        return pecan.request.environ.get('openstack.request_id', '-')
    except (AttributeError, RuntimeError):
        return '-'


def format_exception(excinfo: Any, debug: bool = False) -> dict[str, Any]:
    """WSME's fault document; the message hidden for unexpected errors."""
    fault = _format_exception(excinfo, debug)
    error = excinfo[1]
    if isinstance(error, exception.CyborgException):
        # Not str(error): an error a conductor raised comes back from
        # oslo.messaging with the conductor's traceback in str().
        fault['faultstring'] = error.message
    if not isinstance(error, exception.CyborgException) and (
            fault.get('faultcode') == 'Server'):
        fault['faultstring'] = (
            f'An unexpected error occurred (request {_request_id()}); see '
            'the cyborg-api log.')
    return fault


# wsmeext.pecan looks the function up on the module at every error.
wsme.api.format_exception = format_exception
