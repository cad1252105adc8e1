"""The counting rule behind a breaker refusal: one redispatch per opening, a park for a
repeat refusal by the same opening (`engine.execution.breaker_parks`)."""

from __future__ import annotations

import pytest

from engine.execution.breaker_parks import (
    MIN_PARK_S,
    OPENING_PARK_LIMIT_S,
    PARK_JITTER,
    park_delay,
    park_message,
    repeat_refusal,
)
from schemas.errors import BreakerOpen, BreakerOpening, BreakerRefusal, FailureKind, StepFailure

OPENED = 1_700_000_000.123456


def refusal(layer: str = "tenant", opened_at: float = OPENED, after_s: float = 25.0) -> BreakerOpen:
    return BreakerOpen(
        "circuit open: the tenant breaker of 'd' (tenant 'acme') is open",
        destination="d",
        layer=layer,
        retry_after_s=after_s,
        opened_at=opened_at,
    )


def test_the_opening_travels_through_the_stored_error_exactly() -> None:
    stored = refusal().as_dict()
    assert stored["kind"] == "external_overload"
    assert BreakerOpening.of_error(stored) == BreakerOpening("tenant", OPENED)


@pytest.mark.parametrize(
    "error",
    [
        None,
        "text",
        {"kind": "external_overload", "message": "503"},  # another failure
        {"breaker": "tenant"},
        {"breaker": {"layer": "tenant"}},
        {"breaker": {"layer": 3, "openedAt": OPENED}},
        {"breaker": {"layer": "tenant", "openedAt": "soon"}},
        {"breaker": {"layer": "tenant", "openedAt": 0}},  # never opened
    ],
)
def test_an_error_that_names_no_opening_reads_as_none(error: object) -> None:
    assert BreakerOpening.of_error(error) is None


def test_the_stored_error_names_the_breaker_to_reset() -> None:
    """A step waiting behind the breaker names it to the front doors (the monitor's link to
    its Reset): the destination and the layer, read back from the stored error."""
    assert BreakerRefusal.of_error(refusal().as_dict()) == BreakerRefusal("d", "tenant")
    assert BreakerRefusal.of_error(refusal("global").as_dict()) == BreakerRefusal("d", "global")


@pytest.mark.parametrize(
    "error",
    [
        None,
        {"kind": "external_overload", "message": "503"},
        {"breaker": {"layer": "tenant", "openedAt": OPENED}},  # stored before it named one
        {"breaker": {"layer": "tenant", "destination": ""}},
        {"breaker": {"layer": "other", "destination": "d"}},
    ],
)
def test_an_error_that_names_no_breaker_reads_as_none(error: object) -> None:
    assert BreakerRefusal.of_error(error) is None


def test_a_refusal_by_the_counted_opening_parks() -> None:
    failure = refusal()
    assert repeat_refusal(failure, BreakerOpening("tenant", OPENED), OPENED + 40) is failure


@pytest.mark.parametrize(
    "counted",
    [
        None,  # never counted under a breaker
        BreakerOpening("tenant", OPENED - 31),  # an earlier opening: this one counts
        BreakerOpening("global", OPENED),  # the other layer's opening
    ],
)
def test_a_refusal_by_another_opening_counts(counted: BreakerOpening | None) -> None:
    assert repeat_refusal(refusal(), counted, OPENED + 1) is None


def test_other_failures_always_count() -> None:
    failure = StepFailure(FailureKind.EXTERNAL_OVERLOAD, "HTTP 503")
    assert repeat_refusal(failure, BreakerOpening("tenant", OPENED), OPENED + 1) is None


def test_an_opening_parks_a_step_only_for_a_bounded_time() -> None:
    counted = BreakerOpening("tenant", OPENED)
    assert repeat_refusal(refusal(), counted, OPENED + OPENING_PARK_LIMIT_S) is not None
    assert repeat_refusal(refusal(), counted, OPENED + OPENING_PARK_LIMIT_S + 0.001) is None


@pytest.mark.parametrize(
    ("after_s", "spread", "expected"),
    [
        (25.0, 0.0, 25.0),  # until it half-opens, exactly: the countdown shown is true
        (25.0, 0.5, 25.0),
        (0.2, 0.0, MIN_PARK_S),  # half-open, every permit taken: never a spin
        (0.2, 0.5, MIN_PARK_S * (1 + PARK_JITTER / 2)),  # spread out
        (0.0, 0.0, MIN_PARK_S),
    ],
)
def test_a_park_lasts_until_probes_pass_and_at_least_a_second(
    after_s: float, spread: float, expected: float
) -> None:
    assert park_delay(refusal(after_s=after_s), spread) == pytest.approx(expected)


def test_the_park_message_says_the_opening_was_counted_already() -> None:
    text = park_message(refusal(), 2, 3)
    assert text.startswith("circuit open: the tenant breaker of 'd'")
    assert "already counted as redispatch 2/3" in text
