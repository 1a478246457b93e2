"""Which answers of Nova settle a failed bind's event (no database)."""
from cyborg.conductor import bind_failures
from cyborg.conductor import nova_client

A, B, C, D = 'arq-a', 'arq-b', 'arq-c', 'arq-d'


def test_taken_or_gone_settle_and_the_rest_stay_owed():
    outcome = nova_client.EventsOutcome(
        delivered=True, status=207, accepted=[A],
        rejected={B: 404, C: 422, D: None})
    assert bind_failures.settled(outcome, [A, B, C, D]) == {A, B}


def test_only_the_requests_asked_about():
    outcome = nova_client.EventsOutcome(delivered=True, status=200,
                                        accepted=[A, B])
    assert bind_failures.settled(outcome, [B, C]) == {B}


def test_no_answer_settles_nothing():
    # Nova unreachable, or [nova] send_events off.
    assert bind_failures.settled(nova_client.EventsOutcome(), [A]) == set()
    failed = nova_client.EventsOutcome(status=503)
    assert bind_failures.settled(failed, [A]) == set()
