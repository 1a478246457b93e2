"""Coalescer: concurrent submits answered by batch sends."""
import threading
import time

import pytest

from cyborg.conductor import coalesce


class _Sender:
    """Records each batch; the first ``hold`` batches wait for ``go``."""

    def __init__(self, hold: int = 0) -> None:
        self.batches: list[list[int]] = []
        self.hold = hold
        self.go = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, items: list[int]) -> list[object]:
        with self.lock:
            self.batches.append(list(items))
            held = len(self.batches) <= self.hold
        if held:
            assert self.go.wait(10)
        return [ValueError(f'odd {i}') if i % 2 else i * 10 for i in items]


def _wait_until(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'condition not reached'
        time.sleep(0.005)


def _submit_all(coalescer, items):
    results: dict[int, object] = {}

    def one(item: int) -> None:
        try:
            results[item] = coalescer.submit(item)
        except Exception as exc:
            results[item] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in items]
    for thread in threads:
        thread.start()
    return threads, results


def test_an_item_alone_leaves_at_once():
    sender = _Sender()
    coalescer = coalesce.Coalescer(sender, max_batch=8)
    assert coalescer.submit(4) == 40
    assert sender.batches == [[4]]


def test_items_waiting_for_a_slot_leave_together_in_order():
    sender = _Sender(hold=1)
    coalescer = coalesce.Coalescer(sender, max_batch=4, in_flight=1)
    first, results = _submit_all(coalescer, [0])
    _wait_until(lambda: sender.batches == [[0]])
    rest, answers = [], [results]
    for item in range(2, 12, 2):
        # One at a time, so that the queue's order is known.
        threads, found = _submit_all(coalescer, [item])
        rest += threads
        answers.append(found)
        _wait_until(lambda n=len(rest): len(coalescer._queue) == n)
    sender.go.set()
    for thread in first + rest:
        thread.join(10)
    assert sender.batches == [[0], [2, 4, 6, 8], [10]]
    assert {k: v for found in answers for k, v in found.items()} == {
        i: i * 10 for i in range(0, 12, 2)}


def test_a_failed_item_fails_its_caller_alone():
    sender = _Sender(hold=1)
    coalescer = coalesce.Coalescer(sender, max_batch=8, in_flight=1)
    first, _ = _submit_all(coalescer, [100])
    _wait_until(lambda: len(sender.batches) == 1)
    threads, results = _submit_all(coalescer, [1, 2, 3])
    _wait_until(lambda: len(coalescer._queue) == 3)
    sender.go.set()
    for thread in first + threads:
        thread.join(10)
    assert sorted(map(sorted, sender.batches)) == [[1, 2, 3], [100]]
    assert results[2] == 20
    assert [str(results[i]) for i in (1, 3)] == ['odd 1', 'odd 3']


def test_a_failed_send_fails_its_batch_and_frees_the_slot():
    calls = []

    def send(items):
        calls.append(items)
        if len(calls) == 1:
            raise ConnectionError('broker gone')
        return [i for i in items]

    coalescer = coalesce.Coalescer(send, max_batch=8, in_flight=1)
    with pytest.raises(ConnectionError, match='broker gone'):
        coalescer.submit(1)
    assert coalescer.submit(2) == 2


def test_a_wrong_number_of_results_fails_the_batch():
    coalescer = coalesce.Coalescer(lambda items: [], max_batch=8)
    with pytest.raises(RuntimeError, match='0 results for a batch of 1'):
        coalescer.submit(1)


def test_many_threads_each_get_their_own_answer():
    sender = _Sender()
    coalescer = coalesce.Coalescer(sender, max_batch=5, in_flight=2)
    threads, results = _submit_all(coalescer, range(0, 400, 2))
    for thread in threads:
        thread.join(10)
    assert results == {i: i * 10 for i in range(0, 400, 2)}
    assert sorted(i for b in sender.batches for i in b) == list(
        range(0, 400, 2))
    assert max(map(len, sender.batches)) <= 5


@pytest.mark.parametrize('max_batch, in_flight', [(0, 1), (1, 0)])
def test_limits_must_be_positive(max_batch, in_flight):
    with pytest.raises(ValueError):
        coalesce.Coalescer(lambda items: items, max_batch, in_flight)
