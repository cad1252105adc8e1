"""AIMD arithmetic, fed samples directly: no Redis, no clock, no sleeping."""

from __future__ import annotations

import pytest

from admission.aimd import Aimd, AimdConfig, AimdState, slots

CAP = 100


def test_new_destination_starts_at_the_initial_limit_within_its_cap() -> None:
    aimd = Aimd(AimdConfig(initial_limit=10))
    assert aimd.initial(CAP) == AimdState(10.0, 0)
    assert aimd.initial(4).limit == 4.0


def test_a_window_of_limit_successes_adds_about_one() -> None:
    aimd = Aimd(AimdConfig(initial_limit=10, slow_start=False))
    state = aimd.initial(CAP)
    for _ in range(10):
        state = aimd.on_success(state, in_flight=10, cap=CAP)
    assert 10.9 < state.limit < 11.0
    for _ in range(11):
        state = aimd.on_success(state, in_flight=11, cap=CAP)
    assert 11.9 < state.limit < 12.0
    assert state.epoch == 0


def test_success_while_app_limited_does_not_raise_the_limit() -> None:
    aimd = Aimd(AimdConfig(initial_limit=10, min_utilization=0.5, slow_start=False))
    state = aimd.initial(CAP)
    assert aimd.on_success(state, in_flight=4, cap=CAP) == state
    assert aimd.on_success(state, in_flight=5, cap=CAP).limit == pytest.approx(10.1)


def test_overload_cuts_multiplicatively_and_starts_a_new_epoch() -> None:
    aimd = Aimd(AimdConfig(initial_limit=20, backoff_ratio=0.7, slow_start=False))
    state = aimd.on_overload(aimd.initial(CAP), slot_epoch=0, cap=CAP)
    assert state.limit == pytest.approx(14.0)
    assert state.epoch == 1


def test_twenty_simultaneous_overloads_make_one_cut() -> None:
    aimd = Aimd(AimdConfig(initial_limit=20, backoff_ratio=0.9, slow_start=False))
    state = aimd.initial(CAP)
    acquired_at = [state.epoch] * 20  # twenty calls in flight, all acquired before any cut
    for slot_epoch in acquired_at:
        state = aimd.on_overload(state, slot_epoch=slot_epoch, cap=CAP)
    assert state.limit == pytest.approx(18.0)
    assert state.epoch == 1
    # A call acquired after that cut belongs to the next window and may cut again.
    state = aimd.on_overload(state, slot_epoch=1, cap=CAP)
    assert state.limit == pytest.approx(16.2)
    assert state.epoch == 2


def test_limit_never_leaves_floor_and_cap() -> None:
    aimd = Aimd(AimdConfig(initial_limit=2, backoff_ratio=0.5))
    state = aimd.initial(3)
    for epoch in range(10):
        state = aimd.on_overload(state, slot_epoch=epoch, cap=3)
    assert state.limit == 1.0
    for _ in range(100):
        state = aimd.on_success(state, in_flight=3, cap=3)
    assert state.limit == 3.0
    # A lowered cap applies at once, whatever the stored limit.
    assert aimd.on_success(state, in_flight=3, cap=2).limit == 2.0


def test_slots_are_whole_calls_between_one_and_the_cap() -> None:
    assert slots(10.99, 100) == 10
    assert slots(0.5, 100) == 1
    assert slots(50.0, 20) == 20


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backoff_ratio": 1.0},
        {"backoff_ratio": 0.0},
        {"min_limit": 0.5},
        {"initial_limit": 0.5},
        {"min_utilization": 1.5},
    ],
)
def test_invalid_configuration_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        AimdConfig(**kwargs)


def test_a_cut_with_retry_after_holds_growth_just_under_the_cut_level_until_then() -> None:
    aimd = Aimd(AimdConfig(initial_limit=20, backoff_ratio=0.5, max_hold_s=10, slow_start=False))
    cut = aimd.on_overload(aimd.initial(CAP), slot_epoch=0, cap=CAP, now=100.0, retry_after_s=1)
    assert (cut.limit, cut.epoch, cut.hold_until, cut.hold_ceiling) == (10.0, 1, 101.0, 19.0)
    # During the hold the limit grows back, but not past one below the level that overloaded.
    state = cut
    for _ in range(200):
        state = aimd.on_success(state, in_flight=int(state.limit), cap=CAP, now=100.5)
    assert state.limit == 19.0
    # After it, additive increase probes beyond again.
    grown = aimd.on_success(state, in_flight=19, cap=CAP, now=101.0)
    assert grown.limit == pytest.approx(19.0 + 1 / 19)
    # An overload of the window already answered neither cuts nor moves the hold.
    late = aimd.on_overload(cut, slot_epoch=0, cap=CAP, now=100.5, retry_after_s=30)
    assert late == cut


def test_probes_that_keep_failing_double_the_hold_and_a_late_one_starts_over() -> None:
    aimd = Aimd(AimdConfig(initial_limit=20, backoff_ratio=0.9, max_hold_s=10, slow_start=False))
    state, now, lengths = aimd.initial(CAP), 0.0, []
    # A destination answering 429 with Retry-After: 1 each time the limit probes past the
    # hold, just after the hold ends: the holds grow 1, 2, 4, 8, then stay at max_hold_s.
    for _ in range(6):
        state = aimd.on_overload(state, slot_epoch=state.epoch, cap=CAP, now=now, retry_after_s=1)
        lengths.append(state.hold_s)
        assert state.hold_until == pytest.approx(now + state.hold_s)
        now = state.hold_until + 0.2
    assert lengths == [1, 2, 4, 8, 10, 10]
    # A cut during the hold doubles too (the same congestion, seen again): never past the cap,
    # and the hold never ends sooner than it already would.
    during = aimd.on_overload(
        state, slot_epoch=state.epoch, cap=CAP, now=state.hold_until - 5, retry_after_s=1
    )
    assert (during.hold_s, during.hold_until) == (10, state.hold_until + 5)
    # A cut more than one hold's length after the hold ended: the capacity held more for a
    # while, so the hold is the Retry-After again.
    later = state.hold_until + state.hold_s + 0.1
    fresh = aimd.on_overload(state, slot_epoch=state.epoch, cap=CAP, now=later, retry_after_s=1)
    assert (fresh.hold_s, fresh.hold_until) == (1, later + 1)
    # A longer Retry-After wins over the doubling; a cut without one keeps the hold as it is.
    longer = aimd.on_overload(fresh, slot_epoch=fresh.epoch, cap=CAP, now=later, retry_after_s=5)
    assert longer.hold_s == 5
    plain = aimd.on_overload(longer, slot_epoch=longer.epoch, cap=CAP, now=later + 1)
    assert (plain.hold_s, plain.hold_until, plain.epoch) == (5, longer.hold_until, state.epoch + 3)


def test_the_hold_is_bounded_and_needs_a_retry_after() -> None:
    aimd = Aimd(AimdConfig(initial_limit=20, max_hold_s=10))
    long = aimd.on_overload(aimd.initial(CAP), slot_epoch=0, cap=CAP, now=0.0, retry_after_s=3600)
    assert long.hold_until == 10.0
    plain = aimd.on_overload(aimd.initial(CAP), slot_epoch=0, cap=CAP, now=5.0)
    assert plain.hold_until == 0.0  # a timeout or a 503 without Retry-After holds nothing
    with pytest.raises(ValueError, match="max_hold_s"):
        AimdConfig(max_hold_s=-1)


def test_slow_start_doubles_each_window_until_the_first_overload_halves_it() -> None:
    aimd = Aimd(AimdConfig(initial_limit=10, backoff_ratio=0.9))
    state = aimd.initial(CAP)
    for _ in range(10):  # one window of 10 successes
        state = aimd.on_success(state, in_flight=10, cap=CAP)
    assert state.limit == 20.0
    for _ in range(20):
        state = aimd.on_success(state, in_flight=20, cap=CAP)
    assert state.limit == 40.0
    ended = aimd.on_overload(state, slot_epoch=0, cap=CAP, now=5.0, retry_after_s=1.0)
    assert (ended.limit, ended.epoch, ended.hold_ceiling) == (20.0, 1, 29.0)
    # From now on additive; during the hold only up to the middle of (20, 40).
    assert aimd.on_success(ended, in_flight=20, cap=CAP, now=5.5).limit == pytest.approx(20.05)
    held = ended
    for _ in range(1000):
        held = aimd.on_success(held, in_flight=int(held.limit), cap=CAP, now=5.5)
    assert held.limit == 29.0
    # Later overloads cut by backoff_ratio.
    again = aimd.on_overload(ended, slot_epoch=1, cap=CAP)
    assert again.limit == pytest.approx(18.0)
