"""Driver states: how each enabled driver of each agent host last fared.

Written only by the conductor, from the ``drivers`` of an agent's report
(``{driver_name: {"state": ..., "error": ..., "version": ...}}``, see
``cyborg.common.device_report``); read by ``GET /v2/drivers`` through
``cyborg.db.api.drivers``. A host's reports arrive one at a time (its
agent waits for each answer), so the rows of one host have one writer.
"""
import logging
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import writer

LOG = logging.getLogger(__name__)

DriverState = models.DriverState
FAILED = 'failed'


@writer
def apply(context: cyborg_context.RequestContext, host: str,
          reported: dict[str, dict[str, Any]]) -> int:
    """Make the host's rows say what ``reported`` says; rows written.

    One SELECT, then only what differs: a new driver is inserted, a
    driver in a new state gets it with ``since`` now, a failing driver
    whose error changed gets the new error and keeps its ``since``, and
    the rows of drivers the agent no longer runs are deleted. An
    unchanged report writes nothing.
    """
    session = context.session
    rows = {row.driver_name: row for row in session.execute(
        sa.select(DriverState.id, DriverState.driver_name, DriverState.state,
                  DriverState.error, DriverState.version)
        .where(DriverState.host == host))}
    now = timeutils.utcnow()
    inserts: list[dict[str, Any]] = []
    writes = 0
    for name, entry in sorted(reported.items()):
        state, error = entry['state'], entry.get('error')
        # Agents before conductor RPC 1.9 send no version: the stored
        # one stays.
        version = entry.get('version')
        row = rows.pop(name, None)
        if row is None:
            inserts.append({'host': host, 'driver_name': name,
                            'state': state, 'error': error, 'since': now,
                            'version': version})
            _log_change(host, name, None, state, error)
            continue
        version = version or row.version
        if (row.state, row.error, row.version) == (state, error, version):
            continue
        values: dict[str, Any] = {'state': state, 'error': error,
                                  'version': version}
        if row.state != state:
            values['since'] = now
            _log_change(host, name, row.state, state, error)
        elif row.error != error:
            LOG.debug('Host %s: driver %s still fails, now with: %s', host,
                      name, error)
        else:
            LOG.info('Host %s: driver %s is now version %s (was %s).', host,
                     name, version, row.version)
        # Conditional on what was read, as every state change.
        writes += query.changed(
            session, sa.update(DriverState)
            .where(DriverState.id == row.id, DriverState.state == row.state)
            .values(**values))
    if inserts:
        session.execute(sa.insert(DriverState), inserts)
        writes += len(inserts)
    if rows:
        LOG.info('Host %s: no longer reports driver(s) %s.', host,
                 ', '.join(sorted(rows)))
        writes += query.changed(session, sa.delete(DriverState).where(
            DriverState.id.in_([row.id for row in rows.values()])))
    return writes


def _log_change(host: str, name: str, old: str | None, new: str,
                error: str | None) -> None:
    if new == FAILED:
        LOG.warning('Host %s: driver %s failed: %s. Its last known devices '
                    'are kept.', host, name, error)
    elif old == FAILED:
        LOG.info('Host %s: driver %s recovered (%s).', host, name, new)
    else:
        LOG.debug('Host %s: driver %s is %s.', host, name, new)
