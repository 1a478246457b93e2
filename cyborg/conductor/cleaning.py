"""Cleaning attach handles after use, through their hosts' agents.

An unbind or delete that gives back a handle to clean commits it
``cleaning`` (``cyborg.db.api.cleaning``); then a worker of the conductor's
pool asks the handle's agent to clean it (agent RPC 1.2 ``clean_handle``)
and frees it, or holds it in maintenance with the agent's error. When the
agent cannot be reached the handle stays ``cleaning``, and the periodic
``retry_stale`` pass tries again, first after ``RETRY_AFTER`` seconds,
then after twice as long each time, up to ``MAX_BACKOFF``. Placement is
written for the handle's host at each change, so its ``reserved`` follows
at once.
"""
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

import futurist
import oslo_messaging as messaging
from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.db.api import cleaning
from cyborg.db.api import services

LOG = logging.getLogger(__name__)

# Seconds an attempt may run before the periodic pass takes the handle
# again: long enough for the attempt begun after an unbind to end (the
# first periodic pass then finds it done), short enough that a handle
# whose agent was down is cleaned within about a minute of its return.
RETRY_AFTER = 60
# The longest wait between two attempts on a handle whose agent stays
# unreachable (60 s doubled four times): a host down for a day costs a
# hundred RPCs, not 1,440.
MAX_BACKOFF = 960
# How long one clean may take on the host: formatting a multi-terabyte
# NVMe drive or re-flashing an FPGA's golden image takes minutes.
CLEAN_TIMEOUT = 600.0


class Cleaner:
    """Publishes the handles given back, runs the cleans of those to clean
    in the worker pool, and retries those left."""

    def __init__(self, conf: cfg.ConfigOpts,
                 executor: futurist.ThreadPoolExecutor,
                 agent_api: Callable[[], agent_rpcapi.AgentAPI],
                 sync: Callable[[str], int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conf = conf
        self.executor = executor
        self._agent_api = agent_api
        self.sync = sync
        self.clock = clock
        # Handle id -> (when this conductor may try again, the wait after
        # that): the backoff of handles whose agent did not answer here.
        self._backoff: dict[int, tuple[float, float]] = {}

    def publish(self, context: cyborg_context.RequestContext,
                handle_ids: list[int]) -> None:
        """Write the placement of the hosts of these handles."""
        for hostname in cleaning.hostnames(context, handle_ids):
            self.sync(hostname)

    def handles_returned(self, context: cyborg_context.RequestContext,
                         handle_ids: list[int]) -> None:
        """After the commit that confirmed these released handles'
        device-side state gone: publish that placement no longer reserves
        them, and clean those to clean after use."""
        if not handle_ids:
            return
        self.publish(context, handle_ids)
        self.start(handle_ids)

    def start(self, handle_ids: list[int]) -> None:
        """After the commit that made ``handle_ids`` cleaning (their
        reservation is published): clean those ready in the worker
        pool."""
        if not handle_ids:
            return
        self.executor.submit(self._clean_ready, handle_ids)

    def _clean_ready(self, handle_ids: list[int]) -> None:
        context = cyborg_context.get_admin_context()
        for handle in cleaning.to_clean(context, handle_ids):
            self.clean(context, handle, handle['clean_since'])

    def clean(self, context: cyborg_context.RequestContext,
              handle: dict[str, Any], since: Any) -> str:
        """One attempt, the one that started at ``since``: ``cleaned``,
        ``maintenance``, ``waiting`` (the agent did not answer) or
        ``superseded`` (another attempt or an operator changed it).
        An agent whose service record says it is down is not asked: the
        handle waits, without a backoff, for the first pass after the
        agent is back."""
        if services.down_agents(context, [handle['host']],
                                self.conf.service_down_time):
            cleaning.note(context, handle['id'], since,
                          'waiting for the agent: its service is down')
            return 'waiting'
        try:
            self._agent_api().clean_handle(
                context, handle['host'], handle['driver_name'],
                handle['attach_type'], handle['attach_info'], handle['uuid'],
                timeout=CLEAN_TIMEOUT)
        except (exception.AgentUnavailable,
                messaging.MessagingException) as exc:
            LOG.warning('Cannot clean attach handle %s on host %s now (%s); '
                        'it stays cleaning and is tried again.',
                        handle['uuid'], handle['host'], exc)
            cleaning.note(context, handle['id'], since,
                          f'waiting for the agent: {exc}')
            self._back_off(handle['id'])
            return 'waiting'
        except exception.CyborgException as exc:
            error: str | None = str(exc)
        else:
            error = None
        self._backoff.pop(handle['id'], None)
        hostnames = cleaning.finish(context, handle['id'], since, error)
        if not hostnames:
            LOG.info('Attach handle %s was changed while it was cleaned; '
                     'this clean\'s result is dropped.', handle['uuid'])
            return 'superseded'
        if error is None:
            LOG.info('Attach handle %s on host %s is clean and free.',
                     handle['uuid'], handle['host'])
        else:
            LOG.error('Cleaning attach handle %s on host %s failed; it is '
                      'held in maintenance: %s', handle['uuid'],
                      handle['host'], error)
        for hostname in hostnames:
            self.sync(hostname)
        return 'cleaned' if error is None else 'maintenance'

    def _back_off(self, handle_id: int) -> None:
        _, wait = self._backoff.get(handle_id, (0.0, RETRY_AFTER / 2))
        wait = min(wait * 2, MAX_BACKOFF)
        self._backoff[handle_id] = (self.clock() + wait, wait)

    def retry_stale(self) -> dict[str, int]:
        """The periodic pass: attempt again every handle cleaning for
        longer than ``RETRY_AFTER`` seconds (an agent that was down, a
        conductor that stopped mid-clean) whose backoff is over. Each is
        claimed first, so that of several conductors one tries it. How
        many attempts ended each way."""
        context = cyborg_context.get_admin_context()
        cutoff = timeutils.utcnow() - datetime.timedelta(seconds=RETRY_AFTER)
        outcomes: dict[str, int] = {}
        stale = cleaning.to_clean(context, started_before=cutoff)
        live = {h['id'] for h in stale}
        for handle_id in set(self._backoff) - live:
            del self._backoff[handle_id]
        for handle in stale:
            due, _ = self._backoff.get(handle['id'], (0.0, 0.0))
            if self.clock() < due:
                continue
            since = cleaning.claim(context, handle['id'],
                                   handle['clean_since'])
            if since is None:
                continue
            outcome = self.clean(context, handle, since)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return outcomes

    # An operator's actions (conductor RPC 1.9).

    def retry(self, context: cyborg_context.RequestContext, uuid: str
              ) -> dict[str, Any]:
        """Clean a handle in maintenance again; the handle, now
        ``cleaning``. The clean runs in the worker pool: it may take
        longer than an RPC call waits."""
        handle, hostnames = cleaning.retry(context, uuid)
        for hostname in hostnames:
            self.sync(hostname)
        LOG.info('Attach handle %s: cleaning again, as an operator asked.',
                 uuid)
        self.executor.submit(self._clean_ready, [handle['id']])
        return handle

    def release(self, context: cyborg_context.RequestContext, uuid: str
                ) -> dict[str, Any]:
        """Give a handle in maintenance back without cleaning it."""
        handle, hostnames = cleaning.release(context, uuid)
        for hostname in hostnames:
            self.sync(hostname)
        LOG.info('Attach handle %s released from maintenance uncleaned, '
                 'as an operator asked.', uuid)
        return handle
