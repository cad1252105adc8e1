"""The GATEWAY retry policy as pure functions: no I/O, no clock."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from schemas.definitions import RetryPolicy
from schemas.errors import FailureKind
from vertices import gateway_retry as gr

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def test_default_backoff_is_1_2_4_seconds() -> None:
    policy = RetryPolicy()
    waits = [gr.retry_delay_s(n, policy, status=503, retry_after_s=None) for n in (1, 2, 3)]
    assert waits == [1.0, 2.0, 4.0]
    assert sum(waits) == 7.0  # the documented "four attempts over about 7 s"


@pytest.mark.parametrize(("retry", "expected"), [(1, 0.05), (2, 0.1), (3, 0.2), (4, 0.4)])
def test_backoff_doubles_from_the_base(retry: int, expected: float) -> None:
    assert gr.backoff_s(retry, 50) == pytest.approx(expected)


def test_backoff_is_capped_for_extreme_policies() -> None:
    assert gr.backoff_s(10, 60_000) == gr.MAX_BACKOFF_S
    assert gr.backoff_s(10_000, 1) == gr.MAX_BACKOFF_S  # the exponent itself is bounded


def test_backoff_rejects_retry_zero() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        gr.backoff_s(0, 1000)


def test_zero_base_means_no_wait() -> None:
    assert gr.backoff_s(3, 0) == 0.0


def test_full_jitter_stays_within_zero_and_the_wait() -> None:
    rng = random.Random(7)
    policy = RetryPolicy(jitter="full")
    draws = [
        gr.retry_delay_s(3, policy, status=None, retry_after_s=None, rng=rng) for _ in range(500)
    ]
    assert all(0.0 <= d <= 4.0 for d in draws)
    assert min(draws) < 0.5 and max(draws) > 3.5  # spread over the whole range
    assert len(set(draws)) > 400


def test_full_jitter_is_reproducible_with_a_seeded_rng() -> None:
    policy = RetryPolicy(jitter="full")
    first = gr.retry_delay_s(2, policy, status=500, retry_after_s=None, rng=random.Random(1))
    again = gr.retry_delay_s(2, policy, status=500, retry_after_s=None, rng=random.Random(1))
    assert first == again


def test_no_jitter_ignores_the_rng() -> None:
    rng = random.Random(3)
    assert gr.jittered_s(2.0, "none", rng) == 2.0


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_wins_over_backoff_for_overload(status: int) -> None:
    policy = RetryPolicy(jitter="full")
    assert gr.retry_delay_s(1, policy, status=status, retry_after_s=2.0) == 2.0


def test_retry_after_is_capped_at_30_seconds() -> None:
    assert gr.retry_delay_s(1, RetryPolicy(), status=429, retry_after_s=120.0) == 30.0


def test_retry_after_on_other_statuses_is_ignored() -> None:
    assert gr.retry_delay_s(1, RetryPolicy(), status=500, retry_after_s=9.0) == 1.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2", 2.0), (" 120 ", 120.0), ("0", 0.0), ("1.5", 1.5)],
)
def test_retry_after_seconds(value: str, expected: float) -> None:
    assert gr.parse_retry_after(value, NOW) == expected


def test_retry_after_http_date() -> None:
    later = format_datetime(NOW + timedelta(seconds=12), usegmt=True)
    assert gr.parse_retry_after(later, NOW) == 12.0


def test_retry_after_date_in_the_past_means_now() -> None:
    earlier = format_datetime(NOW - timedelta(minutes=5), usegmt=True)
    assert gr.parse_retry_after(earlier, NOW) == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "-3", "nan", "inf", "Mon, 99 Foo"])
def test_unreadable_retry_after_is_none(value: str | None) -> None:
    assert gr.parse_retry_after(value, NOW) is None


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (502, True), (503, True), (599, True), (429, True), (400, False),
     (404, False), (409, False), (301, False), (200, False)],
)  # fmt: skip
def test_retryable_statuses(status: int, retryable: bool) -> None:
    assert gr.is_retryable_status(status) is retryable


def test_success_defaults_to_2xx() -> None:
    assert gr.is_success(200, None) and gr.is_success(299, None)
    assert not gr.is_success(199, None) and not gr.is_success(300, None)


def test_success_codes_replace_the_default() -> None:
    assert gr.is_success(404, [200, 404])
    assert not gr.is_success(201, [200, 404])


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, FailureKind.EXTERNAL_OVERLOAD),
        (503, FailureKind.EXTERNAL_OVERLOAD),
        (500, FailureKind.HTTP_ERROR),
        (502, FailureKind.HTTP_ERROR),
        (400, FailureKind.HTTP_ERROR),
        (404, FailureKind.HTTP_ERROR),
    ],
)
def test_failure_kind_of_a_final_status(status: int, kind: FailureKind) -> None:
    assert gr.failure_kind_for_status(status) is kind
