"""The ids of a run's event stream increase over a client's connections: the time each event
is sent (epoch microseconds), past the `Last-Event-ID` it reconnected with, whatever the clock
of the API process it reached."""

from __future__ import annotations

from api.rest.sse import EventIds, last_event_id
from schemas.clock import FakeClock


def test_ids_are_the_send_time_and_always_increase() -> None:
    clock = FakeClock(1_700_000_000.0)
    ids = EventIds(clock.now)
    first = ids.next()
    assert first == 1_700_000_000_000_000
    assert ids.next() == first + 1  # the same instant: still past the previous one
    clock.advance(0.5)
    assert ids.next() == first + 500_000


def test_a_reconnect_to_a_process_whose_clock_is_behind_continues_past_the_last_id() -> None:
    ahead = EventIds(FakeClock(1_700_000_100.0).now)
    seen = ahead.next()
    behind = EventIds(FakeClock(1_700_000_000.0).now, last_event_id(str(seen)))
    assert behind.next() == seen + 1


def test_a_last_event_id_that_is_not_ours_is_ignored() -> None:
    assert last_event_id(None) is None
    for foreign in ("", "abc", "-5", "1.5", "9" * 41):
        assert last_event_id(foreign) is None, foreign
    assert last_event_id(" 42 ") == 42
