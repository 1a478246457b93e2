"""RPC endpoint of attach handles: cleaning after use (1.9) and an
agent's reconcile of the mdevs it made (1.6)."""
import logging
from typing import Any

import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import cleaning
from cyborg.conductor.endpoints import TARGET
from cyborg.conductor.endpoints import expose
from cyborg.db.api import attach_handles

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext


def _check_names(name: str, value: Any) -> None:
    if not isinstance(value, list) or not all(
            isinstance(v, str) for v in value):
        raise exception.Invalid(reason=f'{name} must be a list of strings')


class AttachHandleEndpoint:
    """An operator's clean and release of a handle held in maintenance
    are the cleaner's; the mdevs an agent made are looked up here."""

    target = TARGET

    def __init__(self, cleaner: cleaning.Cleaner) -> None:
        self._cleaner = cleaner
        self.attach_handle_clean = expose(cleaner.retry)
        self.attach_handle_release = expose(cleaner.release)

    @messaging.expected_exceptions(exception.CyborgException)
    def mdevs_owned(self, context: Context, host: str,
                    mdev_uuids: list[str]) -> list[str]:
        _check_names('mdev_uuids', mdev_uuids)
        return attach_handles.owned_handles(context, host, mdev_uuids)

    @messaging.expected_exceptions(exception.CyborgException)
    def mdevs_removed(self, context: Context, host: str,
                      mdev_uuids: list[str]) -> int:
        _check_names('mdev_uuids', mdev_uuids)
        freed = attach_handles.free_removed(context, host, mdev_uuids)
        if freed:
            LOG.info('Host %s removed the mediated devices of %d released '
                     'attach handle(s); they are free (or cleaning, when '
                     'cleaned after use).', host, len(freed))
        self._cleaner.handles_returned(context, freed)
        return len(freed)
