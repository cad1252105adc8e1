"""A retry (single or batch) or a resolve of a FAILED run committed at the same moment as its
start over: exactly one of them takes effect, never both, on both backends. Either the action
reopens the run (and the start over, now of a run that is going, is refused `run_not_ended`),
or the start over creates the new run (and the action is refused `started_over`): otherwise
the old run's calls run again beside the new run's. Two start overs at once make one run.

Each round fires the two on separate connections of the store's pool (`asyncio.gather`); on
PostgreSQL their transactions overlap, on SQLite its writers take turns. Real store, no
worker (a reopened run's steps stay READY), no timing assertion."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import func, select

from engine.operations import Operations
from engine.runtime import Runtime
from engine.store.models import Run
from engine.store.records import ClaimedStep, StepFailed
from schemas.definitions import Workflow
from schemas.errors import WrongState
from tests.integration.actions_harness import BAD

ROUNDS = 20
"""Runs raced per action; each race is one FAILED run."""

runs = Run.__table__  # type: ignore[attr-defined]

PAIR = Workflow.model_validate(
    {
        "name": "pair",
        "vertices": {
            "first": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/first"}},
            "second": {
                "type": "GATEWAY",
                "dependsOn": ["first"],
                "config": {"url": "http://127.0.0.1:1/second"},
            },
        },
    }
)
"""first → second: a run FAILED at `first` has a call left after it, so a resolve of `first`
runs `second` (it does not end the run), as a retry runs `first` again."""


async def failed_pairs(runtime: Runtime, n: int) -> list[str]:
    """`n` runs of PAIR whose `first` step failed terminally (driven through the store, no
    worker and no call): FAILED runs waiting for an operator."""
    await runtime.store.publish(PAIR)
    ids = await runtime.store.create_runs(await runtime.store.get_version("pair"), [{}] * n)
    claimed: list[ClaimedStep] = []
    for _ in range(n):  # bounded: each round claims some
        claimed += await runtime.store.claim(n, lease_s=120)
        if len(claimed) >= n:
            break
    assert sorted(step.run_id for step in claimed) == sorted(ids)
    await runtime.store.complete([StepFailed(step, BAD) for step in claimed])
    return ids


async def _restarts_of(runtime: Runtime, run_id: str) -> int:
    """How many runs were created as start overs of `run_id`."""
    async with runtime.store._engines.read.connect() as conn:
        query = select(func.count()).select_from(runs).where(runs.c.restarted_from == run_id)
        return int((await conn.execute(query)).scalar_one())


def _refusal(result: Any, code: str) -> bool:
    """Whether `result` (of a gather) is the refusal `code`; any other error fails the test."""
    if isinstance(result, WrongState) and result.code == code:
        return True
    if isinstance(result, BaseException):
        raise result
    return False


async def _race(ops: Operations, runtime: Runtime, run_id: str, action: str) -> None:
    """Fire `action` ("retry", "batch_retry", "resolve") on `run_id` and its start over at
    once; check that one took effect, that the other was refused as the rules say, and that
    the store agrees."""
    actions = ops.actions
    act: Any
    if action == "retry":
        act = actions.retry(run_id, actor="cli")
    elif action == "batch_retry":
        act = actions.batch_retry([run_id], actor="cli")
    else:
        act = actions.resolve(run_id, "first", {"status": 200}, actor="cli")
    done, started = await asyncio.gather(
        act, actions.start_over(run_id, actor="cli"), return_exceptions=True
    )
    if action == "batch_retry" and not isinstance(done, BaseException):
        acted = done.retried == [run_id]
        if not acted:
            (skipped,) = done.skipped
            assert skipped.reason == "started_over", skipped
    else:
        acted = not _refusal(done, "started_over")
    created = not _refusal(started, "run_not_ended")
    assert (acted, created) != (True, True), f"{action} and start over of {run_id} both took effect"
    assert acted or created, f"neither {action} nor start over of {run_id} took effect"
    if created:
        assert started.changed  # type: ignore[union-attr]
    run = await ops.runs.get(run_id)
    assert run.status == ("FAILED" if created else "RUNNING")
    assert await _restarts_of(runtime, run_id) == (1 if created else 0)


async def test_a_retry_and_a_start_over_at_once_never_both_take_effect(
    ops: Operations, runtime: Runtime
) -> None:
    run_ids = await failed_pairs(runtime, ROUNDS)
    for run_id in run_ids:
        await _race(ops, runtime, run_id, "retry")


async def test_a_batch_retry_and_a_start_over_at_once_never_both_take_effect(
    ops: Operations, runtime: Runtime
) -> None:
    run_ids = await failed_pairs(runtime, ROUNDS)
    for run_id in run_ids:
        await _race(ops, runtime, run_id, "batch_retry")


async def test_a_resolve_and_a_start_over_at_once_never_both_take_effect(
    ops: Operations, runtime: Runtime
) -> None:
    """Resolving a run's only FAILED step resumes it: the same race as a retry's."""
    run_ids = await failed_pairs(runtime, ROUNDS)
    for run_id in run_ids:
        await _race(ops, runtime, run_id, "resolve")


async def test_two_start_overs_at_once_make_one_run(ops: Operations, runtime: Runtime) -> None:
    run_ids = await failed_pairs(runtime, ROUNDS)
    for run_id in run_ids:
        first, second = await asyncio.gather(
            ops.actions.start_over(run_id, actor="cli"),
            ops.actions.start_over(run_id, actor="cli"),
        )
        assert first.new_run_id == second.new_run_id
        assert sorted([first.changed, second.changed]) == [False, True]
        assert await _restarts_of(runtime, run_id) == 1
