"""A retry (single or batch), resolve or reprocess of a FAILED run, or the retry of a child
under it, committed at the same moment as the run's start over: exactly one of them takes
effect, never both, on both backends. Either the action makes the run RUNNING again (and the
start over, now of a run that is going, is refused `run_not_ended`), or the start over
creates the new run (and the action is refused `started_over`): otherwise the old run's
calls run again beside the new run's. Two start overs at once make one run.

Each round fires the two on separate connections of the store's pool (`asyncio.gather`); on
PostgreSQL their transactions overlap, on SQLite its writers take turns. Real store, no
worker while they race (a reopened run's steps stay READY), no timing assertion."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from sqlalchemy import func, select

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.action_views import BatchRetryResult
from engine.runtime import Runtime
from engine.store.models import Run
from engine.store.records import ClaimedStep, StepFailed
from schemas.definitions import Workflow
from schemas.errors import WrongState
from tests.integration.actions_harness import BAD, failed_fan_out
from tests.integration.engine_harness import running_worker

ROUNDS = 20
"""Runs raced per action; each race is one FAILED run."""
FAN_OUT_ROUNDS = 8
"""Fan-outs raced (half by a child's retry, half by a reprocess): each is a run of a worker."""

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


def _took_effect(done: Any) -> bool:
    """Whether an action (its answer, or its error, from a gather) took effect: else it was
    refused (or, in a batch, skipped) as `started_over`."""
    if isinstance(done, BatchRetryResult):
        if done.retried:
            return True
        (skipped,) = done.skipped
        assert skipped.reason == "started_over", skipped
        return False
    return not _refusal(done, "started_over")


async def _race(
    ops: Operations, runtime: Runtime, act: Coroutine[Any, Any, Any], root_id: str
) -> None:
    """Fire `act` (an action on the FAILED run `root_id` or on a run under it, which makes
    `root_id` RUNNING again) and the start over of `root_id` at once: exactly one takes
    effect, the other is refused as the rules say, and the store agrees."""
    done, started = await asyncio.gather(
        act, ops.actions.start_over(root_id, actor="cli"), return_exceptions=True
    )
    acted = _took_effect(done)
    created = not _refusal(started, "run_not_ended")
    assert (acted, created) != (True, True), f"both took effect on {root_id}: {done}"
    assert acted or created, f"neither took effect on {root_id}"
    if created:
        assert started.changed  # type: ignore[union-attr]
    run = await ops.runs.get(root_id)
    assert run.status == ("FAILED" if created else "RUNNING")
    assert await _restarts_of(runtime, root_id) == (1 if created else 0)


async def test_a_retry_and_a_start_over_at_once_never_both_take_effect(
    ops: Operations, runtime: Runtime
) -> None:
    for run_id in await failed_pairs(runtime, ROUNDS):
        await _race(ops, runtime, ops.actions.retry(run_id, actor="cli"), run_id)


async def test_a_batch_retry_and_a_start_over_at_once_never_both_take_effect(
    ops: Operations, runtime: Runtime
) -> None:
    for run_id in await failed_pairs(runtime, ROUNDS):
        await _race(ops, runtime, ops.actions.batch_retry([run_id], actor="cli"), run_id)


async def test_a_resolve_and_a_start_over_at_once_never_both_take_effect(
    ops: Operations, runtime: Runtime
) -> None:
    """Resolving a run's only FAILED step resumes it: the same race as a retry's."""
    for run_id in await failed_pairs(runtime, ROUNDS):
        resolve = ops.actions.resolve(run_id, "first", {"status": 200}, actor="cli")
        await _race(ops, runtime, resolve, run_id)


async def test_actions_under_a_root_and_its_start_over_at_once_never_both_take_effect(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """A fan-out whose join failed for a FAILED child: the child's retry, or the parent's
    reprocess, reopens the parent's join (the parent runs again) while the parent is started
    over."""
    async with running_worker(runtime):
        parents = [
            await failed_fan_out(runtime, downstream, 2, failing={0}) for _ in range(FAN_OUT_ROUNDS)
        ]
    for round_, parent_id in enumerate(parents):
        if round_ % 2:
            act = ops.actions.reprocess(parent_id, actor="cli")
        else:
            (child,) = await runtime.store.children(parent_id, status="FAILED")
            act = ops.actions.retry(child.id, actor="cli")
        await _race(ops, runtime, act, parent_id)


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
