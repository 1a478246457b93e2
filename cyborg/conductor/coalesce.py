"""Coalescing: concurrent calls of one process answered by batch calls."""
import threading
from collections.abc import Callable
from typing import Generic
from typing import TypeVar

Item = TypeVar('Item')
Result = TypeVar('Result')


class _Entry(Generic[Item, Result]):
    __slots__ = ('item', 'done', 'result', 'error')

    def __init__(self, item: Item) -> None:
        self.item = item
        self.done = False
        self.result: Result | None = None
        self.error: BaseException | None = None


class Coalescer(Generic[Item, Result]):
    """Answers ``submit(item)`` from threads with calls of ``send(items)``.

    ``send`` takes a list of items and returns one result per item, in
    order; a result that is an exception is raised to that item's caller
    alone, and an exception ``send`` raises reaches every caller of the
    batch. At most ``in_flight`` batches are sent at a time and each holds
    at most ``max_batch`` items, oldest first.

    There is no timer: an item submitted while fewer than ``in_flight``
    batches are out leaves at once, alone if it is alone. Items submitted
    while every slot is busy wait, and leave together when a slot frees;
    so batches grow with the load and not otherwise. The threads that
    submit do the sending, so there is no thread of its own to start or
    stop.

    One batch in flight is the default because it is what makes batches:
    measured with 4 concurrent creates per API process, a second slot let
    most of them leave alone again and cost as much CPU per create as no
    batching at all.
    """

    def __init__(self, send: Callable[[list[Item]], list[Result | Exception]],
                 max_batch: int, in_flight: int = 1) -> None:
        if max_batch < 1 or in_flight < 1:
            raise ValueError('max_batch and in_flight must be at least 1')
        self._send = send
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._cond = threading.Condition()
        self._queue: list[_Entry[Item, Result]] = []
        self._sending = 0

    def submit(self, item: Item) -> Result:
        entry: _Entry[Item, Result] = _Entry(item)
        with self._cond:
            self._queue.append(entry)
            while True:
                if entry.done:
                    break
                if self._sending < self._in_flight and self._queue:
                    # A free slot: send what waits, this entry or not;
                    # whoever sends, every waiting entry gets its answer.
                    batch = self._queue[:self._max_batch]
                    del self._queue[:self._max_batch]
                    self._sending += 1
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                        self._sending -= 1
                        self._cond.notify_all()
                    continue
                self._cond.wait()
        if entry.error is not None:
            raise entry.error
        return entry.result  # type: ignore[return-value]

    def _run(self, batch: list[_Entry[Item, Result]]) -> None:
        try:
            results = self._send([e.item for e in batch])
            if len(results) != len(batch):
                raise RuntimeError(f'{len(results)} results for a batch of '
                                   f'{len(batch)}')
        except Exception as exc:
            for entry in batch:
                entry.error = exc
        else:
            for entry, result in zip(batch, results, strict=True):
                if isinstance(result, Exception):
                    entry.error = result
                else:
                    entry.result = result
        finally:
            # After the result: a waiter that sees done finds its answer.
            # The sender then wakes the waiters under the lock.
            for entry in batch:
                entry.done = True
