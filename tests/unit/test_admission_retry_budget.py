"""Retry budget token bucket, pure arithmetic."""

from __future__ import annotations

import pytest

from admission.config import RetryBudgetConfig
from admission.retry_budget import RetryBudget


def test_failures_exhaust_the_budget_at_half_the_bucket() -> None:
    budget = RetryBudget(RetryBudgetConfig(max_tokens=100, token_ratio=0.1))
    tokens = budget.full()
    for _ in range(49):
        tokens = budget.on_failure(tokens)
    assert budget.allows_retry(tokens)  # 51 left
    tokens = budget.on_failure(tokens)
    assert not budget.allows_retry(tokens)  # 50 left: not more than half


def test_successes_earn_the_budget_back_slowly() -> None:
    budget = RetryBudget(RetryBudgetConfig(max_tokens=10, token_ratio=0.5))
    tokens = 5.0
    assert not budget.allows_retry(tokens)
    tokens = budget.on_success(tokens)
    assert budget.allows_retry(tokens)
    for _ in range(100):
        tokens = budget.on_success(tokens)
    assert tokens == 10.0  # never above the bucket size


def test_tokens_never_go_negative() -> None:
    budget = RetryBudget(RetryBudgetConfig(max_tokens=2))
    tokens = budget.full()
    for _ in range(5):
        tokens = budget.on_failure(tokens)
    assert tokens == 0.0


def test_an_outage_allows_a_bounded_number_of_retries() -> None:
    """Every item of a dead destination fails; retries stop after max_tokens / 2 failures."""
    budget = RetryBudget()
    tokens, retries = budget.full(), 0
    for _ in range(1_000):  # 1,000 items, each would like 3 retries
        tokens = budget.on_failure(tokens)
        for _ in range(3):
            if not budget.allows_retry(tokens):
                break
            retries += 1
            tokens = budget.on_failure(tokens)
    assert retries <= 50


@pytest.mark.parametrize("kwargs", [{"max_tokens": 0}, {"token_ratio": 0}, {"token_ratio": 200}])
def test_invalid_configuration_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryBudgetConfig(**kwargs)


def test_the_bucket_refills_slowly_with_time() -> None:
    budget = RetryBudget(RetryBudgetConfig(max_tokens=100, refill_per_s=1.0))
    assert budget.refilled(40.0, 5.0) == 45.0
    assert budget.refilled(99.5, 60.0) == 100.0  # never past the size
    assert budget.refilled(40.0, -3.0) == 40.0  # clocks going backwards add nothing
    assert RetryBudget(RetryBudgetConfig(refill_per_s=0)).refilled(10.0, 1e6) == 10.0
    with pytest.raises(ValueError, match="refill_per_s"):
        RetryBudgetConfig(refill_per_s=-1)
