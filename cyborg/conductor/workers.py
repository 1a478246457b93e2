"""The conductor's worker pool: what binds, unbinds and deletes leave to
do once committed.

Its work may submit more: a released handle's mdev removal, once the
handle is freed, submits the handle's clean (``DeviceSide.free`` ->
``Cleaner.start``). futurist's ``shutdown(wait=True)`` (3.4 and 3.5)
waits for its queue while it holds the lock ``submit`` takes, so such
work, run while the pool stopped, waited for that lock and the stop for
the work, for ever. This pool waits for its work, and for the work that
work submits, before futurist's shutdown starts.
"""

import threading
from collections.abc import Callable
from typing import Any
from typing import ParamSpec
from typing import TypeVar

import futurist
from futurist import waiters

_P = ParamSpec('_P')
_T = TypeVar('_T')


class Workers(futurist.ThreadPoolExecutor):
    """A ``futurist.ThreadPoolExecutor`` whose stop waits for chained
    work without holding the lock ``submit`` takes."""

    def __init__(self, max_workers: int | None = None) -> None:
        super().__init__(max_workers=max_workers)
        self._pending: set[futurist.Future[Any]] = set()
        self._pending_lock = threading.Lock()

    def submit(  # type: ignore[override]
            self, fn: Callable[_P, _T], *args: _P.args,
            **kwargs: _P.kwargs) -> futurist.Future[_T]:
        # Added before the callback: a future already done is discarded
        # by the callback at once.
        future = super().submit(fn, *args, **kwargs)
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: futurist.Future[Any]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def shutdown(self, wait: bool = True, *,
                 cancel_futures: bool = False) -> None:
        # Work submits its follow-up before it ends, so once what was
        # pending is done, what it submitted is pending in turn.
        while wait:
            with self._pending_lock:
                pending = list(self._pending)
            if not pending:
                break
            waiters.wait_for_all(pending)
        super().shutdown(wait, cancel_futures=cancel_futures)
