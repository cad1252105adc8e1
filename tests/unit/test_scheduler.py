"""Redispatch rules and keys (docs/architecture.md, 'Redispatch'), with plain values."""

from __future__ import annotations

import pytest

from engine.execution import step_rules as scheduler
from engine.store.records import ClaimedStep
from schemas.errors import FailureKind, StepFailure

DELAYS = (5.0, 10.0, 20.0)
OVERLOAD = StepFailure(FailureKind.EXTERNAL_OVERLOAD, "429")


@pytest.mark.parametrize(("used", "expected"), [(0, 105.0), (1, 110.0), (2, 120.0)])
def test_overload_is_redispatched_5_10_20_seconds_later(used: int, expected: float) -> None:
    at = scheduler.redispatch_at(
        OVERLOAD, max_auto_retries=3, auto_retries_used=used, now=100.0, delays_s=DELAYS
    )
    assert at == expected


@pytest.mark.parametrize("spread", [0.0, 0.5, 0.999])
def test_redispatches_are_spread_but_never_sooner(spread: float) -> None:
    at = scheduler.redispatch_at(
        OVERLOAD, max_auto_retries=3, auto_retries_used=1, now=100.0, delays_s=DELAYS,
        spread=spread,
    )  # fmt: skip
    assert at == pytest.approx(100.0 + 10.0 * (1 + scheduler.REDISPATCH_JITTER * spread))
    assert at is not None and 110.0 <= at < 112.0


def test_overload_is_terminal_once_max_auto_retries_are_used() -> None:
    assert (
        scheduler.redispatch_at(
            OVERLOAD, max_auto_retries=3, auto_retries_used=3, now=0.0, delays_s=DELAYS
        )
        is None
    )


def test_max_auto_retries_zero_never_redispatches() -> None:
    assert (
        scheduler.redispatch_at(
            OVERLOAD, max_auto_retries=0, auto_retries_used=0, now=0.0, delays_s=DELAYS
        )
        is None
    )


def test_retry_after_later_than_the_delay_wins() -> None:
    failure = StepFailure(FailureKind.EXTERNAL_OVERLOAD, "429", retry_after_s=12.0)
    at = scheduler.redispatch_at(
        failure, max_auto_retries=3, auto_retries_used=0, now=0.0, delays_s=DELAYS
    )
    assert at == 12.0


@pytest.mark.parametrize("kind", [k for k in FailureKind if k is not FailureKind.EXTERNAL_OVERLOAD])
def test_other_failures_are_terminal_on_the_first_attempt(kind: FailureKind) -> None:
    at = scheduler.redispatch_at(
        StepFailure(kind, "x"), max_auto_retries=3, auto_retries_used=0, now=0.0, delays_s=DELAYS
    )
    assert at is None


def test_idempotency_key_is_stable_and_distinct() -> None:
    key = scheduler.idempotency_key("run-1", "charge")
    assert key == scheduler.idempotency_key("run-1", "charge")
    assert key != scheduler.idempotency_key("run-1", "refund")
    assert key != scheduler.idempotency_key("run-2", "charge")
    assert key.startswith("sb-")


def test_expression_context_shape() -> None:
    step = ClaimedStep(
        step_id=1,
        claim_token="t",
        run_id="r",
        vertex_id="b",
        tenant_id="acme",
        attempts=1,
        auto_retries=0,
        workflow_name="w",
        workflow_version=1,
        timeout_tier="process",
        run_input={"x": 1},
        outputs={"a": {"status": 200}},
    )
    assert scheduler.expression_context(step) == {
        "input": {"x": 1},
        "vertices": {"a": {"output": {"status": 200}}},
        "run": {"id": "r", "tenantId": "acme"},
    }
