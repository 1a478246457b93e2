"""The deadline every RPC call carries, after which no server acts on it.

A caller that gives up on a call (its timeout passed, it answered 503)
must not find the call carried out later: a create would leave a request
nobody knows of, a bind would take a device for an instance Nova has
given up on. Yet a call can reach its server late whatever its caller
does: it can wait in a server's socket or executor while the server's
link to the broker is stalled or its threads are busy, and RabbitMQ's
per-message TTL (oslo.messaging sets it to the call's timeout) only
drops a message still waiting in a queue, not one already delivered.

So ``rpc.call`` puts an absolute wall-clock expiry, the moment it sends
the call plus the call's timeout, in the context it sends
(``DEADLINE_KEY``), and every RPC server made by ``rpc.get_server``
drops, before dispatching, a call whose expiry has passed. A call
without one (a caller from before deadlines, during a rolling upgrade) is
carried out as before. Casts carry none: nobody waits for them.
"""
import logging
import time
from typing import Any

import oslo_messaging as messaging

from cyborg.common import exception
from cyborg.common import outages

LOG = logging.getLogger(__name__)

# The key of the deadline, in seconds since the epoch, in the context dict
# a call carries. Servers before deadlines ignore keys they do not know.
DEADLINE_KEY = 'rpc_deadline'

# Seconds a deadline is stretched on the server, for the clocks of the
# caller's and the server's hosts, which differ: chrony or ntpd keep the
# hosts of a cloud within milliseconds of each other, and a host whose
# time service stopped drifts about 20 ppm (a quartz clock), 1.7 s a day.
# A server whose clock runs ahead by more than this drops calls that
# reach it in their last seconds; one whose clock lags carries out calls
# up to that much later than their caller gave up.
CLOCK_SKEW = 2.0


def overdue(ctxt: dict[str, Any], now: float) -> float | None:
    """Seconds by which the call of context dict ``ctxt`` is past its
    deadline and ``CLOCK_SKEW`` at wall-clock time ``now``; None while it
    is not, or when it carries no deadline (an older caller)."""
    deadline = ctxt.get(DEADLINE_KEY)
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        return None
    late = now - deadline - CLOCK_SKEW
    return late if late > 0 else None


def _request_ids(ctxt: dict[str, Any], args: dict[str, Any]) -> list[str]:
    """The request ids a call is made for: its context's, and those of
    the items of a batch call (one HTTP request each)."""
    ids = [ctxt.get('request_id')]
    for value in args.values():
        if isinstance(value, list):
            ids.extend(item.get('request_id') for item in value
                       if isinstance(item, dict))
    return [i for i in ids if isinstance(i, str)]


class DeadlineDispatcher(messaging.RPCDispatcher):
    """oslo.messaging's dispatcher, dropping calls past their deadline
    before anything of them runs.

    A call that fails for an outage (``outages.kind_of``: the database is
    down) is answered with its error, told to ``outages.tracker`` and not
    logged with a traceback: oslo.messaging would log one per call.
    """

    def dispatch(self, incoming: Any) -> Any:
        # The caller's context becomes this thread's (oslo.context keeps
        # one per thread, and oslo.log writes its request ids on every
        # line) before anything is logged for the call: oslo.messaging
        # sets it only once it dispatches, and until then this executor
        # thread still holds the context of the last call it served.
        self.serializer.deserialize_context(incoming.ctxt)
        method = incoming.message.get('method')
        late = overdue(incoming.ctxt, time.time())
        if late is None:
            started = time.monotonic()
            try:
                return super().dispatch(incoming)
            except messaging.ExpectedException:
                raise
            except Exception as exc:
                if not outages.tracker.handled(exc, f'RPC call {method}'):
                    raise
                # The caller gets ``exc`` itself: ExpectedException
                # carries the exception being handled.
                raise messaging.ExpectedException() from exc
            finally:
                LOG.debug('RPC call %s handled in %.3f s.', method,
                          time.monotonic() - started)
        LOG.warning('Dropped RPC call %s of request %s: it arrived %.1f s '
                    'after its deadline; nothing was done.',
                    method, ', '.join(_request_ids(
                        incoming.ctxt, incoming.message.get('args') or {}))
                    or '(none)', late + CLOCK_SKEW)
        try:
            raise exception.CallExpired(method=method)
        except exception.CallExpired as expired:
            # Answered as an error the caller expects, without a
            # traceback in the server's log. A caller may still wait: its
            # timeout counts from when the broker took the message, which
            # can be later, or the clocks are apart by more than
            # CLOCK_SKEW; ``rpc.call`` makes that a 503 too.
            raise messaging.ExpectedException() from expired
