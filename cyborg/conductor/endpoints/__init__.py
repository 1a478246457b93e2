"""The conductor's RPC endpoints, one per noun; ``rpcapi.ConductorAPI``
is their client.

oslo.messaging gives a call to the first endpoint whose target's version
is compatible with the call's and that has the method; it refuses the
call as UnsupportedVersion only when no endpoint's version is. So every
endpoint serves the client's ``RPC_API_VERSION`` (``TARGET``): an endpoint
left at an older version would make the others answer its newer calls
with NoSuchMethod, which clients do not fall back on. The public
attributes of an endpoint are its RPC methods; collaborators stay private.
"""
import logging
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging

from cyborg.common import exception
from cyborg.conductor import rpcapi

LOG = logging.getLogger(__name__)

TARGET = messaging.Target(version=rpcapi.ConductorAPI.RPC_API_VERSION)

Call = Callable[..., Any]


def expose(call: Call) -> Call:
    """``call`` as an RPC method: a CyborgException it raises goes back
    to the caller as expected, not logged as a server error."""
    return messaging.expected_exceptions(exception.CyborgException)(call)


def check_from_agent(host: Any, validate: Callable[[str, Any], None],
                     payload: Any, what: str) -> None:
    """Raise InvalidReport, logged, unless ``host`` is a name and
    ``validate`` takes ``payload``."""
    try:
        if not isinstance(host, str) or not host:
            raise exception.InvalidReport(host=host,
                                          reason='host must be a name')
        validate(host, payload)
    except exception.InvalidReport as exc:
        LOG.error('Rejected %s: %s', what, exc)
        raise
