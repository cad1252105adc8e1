"""The one wording of a wait (`schemas.waiting.wait_text`) and what a group of waiting
children may say of all of them (`engine.store.children.common_message`)."""

from __future__ import annotations

import pytest

from engine.store.children import common_message
from schemas.waiting import BREAKER_IS_OPEN, wait_text

OPEN = f"circuit open: the tenant breaker of 'd' (tenant 'acme') {BREAKER_IS_OPEN}"
HALF = "circuit open: the tenant breaker of 'd' (tenant 'acme') is half-open with every probe"


@pytest.mark.parametrize(
    ("reason", "message", "until", "expected"),
    [
        ("breaker_open", OPEN, 112.2, f"{OPEN}; half-open in 13 s"),
        (
            "breaker_open",
            f"redispatch 1/3 after {OPEN}",
            130,
            f"redispatch 1/3 after {OPEN}; half-open in 30 s",
        ),
        ("breaker_open", OPEN, 90, f"{OPEN}; half-open in 0 s"),  # late: never negative
        ("breaker_open", HALF, 101, f"{HALF}; asks again in 1 s"),
        ("breaker_open", OPEN, None, OPEN),  # no time known: no countdown
        (
            "tenant_rate_limit",
            "tenant t is at its rate limit",
            105,
            "tenant t is at its rate limit",
        ),
    ],
)
def test_a_breaker_wait_counts_down_to_its_half_open(
    reason: str, message: str, until: float | None, expected: str
) -> None:
    assert wait_text(reason, message, until, 100.0) == expected


@pytest.mark.parametrize(
    ("least", "greatest", "expected"),
    [
        ("same", "same", "same"),
        (f"redispatch 1/3 after {OPEN}", f"redispatch 2/3 after {OPEN}", OPEN),
        (
            f"redispatch 1/3 after {OPEN}",
            f"{OPEN}; this opening already counted as redispatch 2/3, so the step waits",
            OPEN,
        ),
        (f"redispatch 1/3 after {OPEN}", f"redispatch 2/3 after {HALF}", ""),  # nothing shared
        ("redispatch 1/3 after HTTP 503", "redispatch 2/3 after HTTP 429", ""),
    ],
)
def test_a_group_says_only_what_all_its_children_share(
    least: str, greatest: str, expected: str
) -> None:
    assert common_message(least, greatest) == expected
