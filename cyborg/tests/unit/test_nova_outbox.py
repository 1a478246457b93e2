"""Which answers of Nova settle an owed event, and when it is tried again
(no database)."""
import datetime

from cyborg.conductor import nova_client
from cyborg.conductor import nova_outbox
from cyborg.db.api import nova_events

NOW = datetime.datetime(2026, 11, 27, 12, 0, 0)
TIMEOUT = 300.0


def _owed(arq, status='completed', attempts=0, age=0.0):
    return nova_events.Owed(arq, 'instance-' + arq, status, 'claim', None,
                            attempts, NOW - datetime.timedelta(seconds=age))


def test_taken_or_gone_are_done_a_dropped_failure_is_not():
    rows = [_owed('a'), _owed('b', 'failed'), _owed('c'),
            _owed('d', 'failed'), _owed('e', 'failed', attempts=2)]
    outcome = nova_client.EventsOutcome(
        delivered=True, status=207, accepted=['a'],
        rejected={'b': 404, 'c': 422, 'd': 422, 'e': None})
    verdict = nova_outbox.judge(outcome, rows, NOW, TIMEOUT)
    assert [r.arq_uuid for r in verdict.done] == ['a', 'b', 'c']
    assert [(r.arq_uuid, d) for r, d in verdict.unless_resolved] == [
        ('d', 0.5)]
    assert [(r.arq_uuid, d) for r, d in verdict.retry] == [('e', 2.0)]
    assert verdict.expired == []


def test_no_answer_leaves_every_event_owed():
    # Nova unreachable: a completed event is owed until Nova answers.
    rows = [_owed('a', attempts=9), _owed('b', 'failed')]
    verdict = nova_outbox.judge(nova_client.EventsOutcome(status=503), rows,
                                NOW, TIMEOUT)
    assert verdict.done == []
    assert [(r.arq_uuid, d) for r, d in verdict.retry] == [
        ('a', nova_outbox.MAX_DELAY), ('b', 0.5)]


def test_a_failure_not_taken_within_the_bind_timeout_is_given_up():
    rows = [_owed('a', 'failed', age=TIMEOUT), _owed('b', age=TIMEOUT * 9)]
    outcome = nova_client.EventsOutcome(delivered=True, status=207,
                                        rejected={'a': 422, 'b': 500})
    verdict = nova_outbox.judge(outcome, rows, NOW, TIMEOUT)
    assert [r.arq_uuid for r in verdict.done] == ['a']
    assert verdict.expired == ['a']
    assert [r.arq_uuid for r, _ in verdict.retry] == ['b']


def test_the_delay_doubles_up_to_its_cap():
    assert [nova_outbox.delay(n) for n in range(1, 7)] == [
        0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
