"""The e2e tests' polling helper (`tests.e2e.outage_harness.until`) is bounded: in checks
and in time, a check that hangs included, and fails naming what it waited for."""

from __future__ import annotations

import asyncio

import pytest

from tests.e2e.outage_harness import until


async def test_it_answers_the_first_true_check() -> None:
    answers = iter([None, [], ["SUCCEEDED"]])

    async def check() -> list[str] | None:
        return next(answers)

    assert await until(check, "the third", timeout_s=10, interval_s=0.01) == ["SUCCEEDED"]


async def test_a_check_never_true_is_checked_a_bounded_number_of_times() -> None:
    calls = 0

    async def never() -> bool:
        nonlocal calls
        calls += 1
        return False

    with pytest.raises(AssertionError, match=r"timed out after 0\.5 s waiting for nothing"):
        await until(never, "nothing", timeout_s=0.5, interval_s=0.1)
    assert 1 <= calls <= 6


async def test_a_check_that_hangs_is_cut_by_the_deadline() -> None:
    async def hangs() -> bool:
        await asyncio.Event().wait()
        return True

    with pytest.raises(AssertionError, match="waiting for a hung check"):
        await until(hangs, "a hung check", timeout_s=0.2)
