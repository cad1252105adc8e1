"""What a worker remembers of a step between its executions (`StepMemory`)."""

from __future__ import annotations

from engine.execution.step_memory import StepMemory
from schemas.waiting import WaitReason

DOWN = WaitReason.COORDINATION_UNAVAILABLE


def test_store_errors_count_in_a_row_and_a_park_for_another_reason_starts_again() -> None:
    memory = StepMemory()
    assert [memory.store_error(1) for _ in range(3)] == [1, 2, 3]
    assert memory.store_error(2) == 1  # another step's are its own
    memory.parked(1, WaitReason.TENANT_RATE_LIMIT)
    assert memory.store_error(1) == 1
    memory.forget(1)
    assert memory.store_error(1) == 1


def test_an_outage_is_said_once_until_the_step_waits_for_something_else() -> None:
    memory = StepMemory()
    assert [memory.parked(1, DOWN) for _ in range(3)] == [True, False, False]
    assert memory.parked(1, WaitReason.BREAKER_OPEN)  # not an outage: always said
    assert memory.parked(1, WaitReason.BREAKER_OPEN)
    assert memory.parked(1, DOWN)  # a new outage
    memory.forget(1)
    assert memory.parked(1, DOWN)


def test_the_least_recently_executed_steps_are_forgotten_first() -> None:
    memory = StepMemory(size=2)
    memory.parked(1, DOWN)
    memory.parked(2, DOWN)
    assert not memory.parked(1, DOWN)  # 1 is now the most recent
    memory.parked(3, DOWN)  # pushes out 2
    assert memory.parked(2, DOWN)
    assert not memory.parked(3, DOWN)
