"""An execution that ends without a result shows in its step's attempt history, on both
backends, through the real store, executor and demo downstream on loopback, on an injected
clock.

A user's tour: a worker was killed (SIGKILL) while its call was on the wire; the lease expired,
the step was requeued and the same worker, restarted, sent the call again and read 200. The
history said `[{execution: 1, attempt: 1, 200}]`: the 200 labelled as the first execution and
the lost one gone, though the downstream had had the call twice (same Idempotency-Key). The
requeue now records the lost execution (which, whose worker, why) and the history shows it
as an entry of its own, with no HTTP status since none was read; each attempt names the
execution (claim) that made it, so the numbers stay right whatever was lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from engine.execution import executor
from engine.operations import Operations
from engine.operations.views import AttemptView
from engine.runtime import Runtime
from engine.store.records import ClaimedStep, StepSucceeded
from schemas.clock import FakeClock
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run
from tests.integration.operations_harness import gateway

LEASE_S = 30.0


@pytest.fixture
async def clocked(backend: Backend) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend), clock=clock)
    yield runtime, clock
    await runtime.close()


async def _submitted(runtime: Runtime, url: str) -> str:
    ops = Operations(runtime)
    call = gateway(f"{url}/charge", retry={"maxAttempts": 1})
    await ops.workflows.publish({"name": "charge", "vertices": {"call": call}})
    return (await ops.runs.submit("charge", {}, tenant_id="acme")).run.id


async def _claim(runtime: Runtime, worker: str) -> ClaimedStep:
    (step,) = await runtime.store.claim(1, lease_s=LEASE_S, worker=worker)
    return step


async def _run_to_its_end(runtime: Runtime, step: ClaimedStep, worker: str) -> None:
    """What a worker does with a claim: execute it and record its result and lines."""
    version = await runtime.store.get_version(step.workflow_name, step.workflow_version)
    result, lines = await executor.execute(
        step, version.workflow, runtime.executor_deps(), worker=worker
    )
    assert isinstance(result, StepSucceeded)
    assert (await runtime.store.complete([result], lines)).recorded == 1


def _entries(
    history: list[AttemptView],
) -> list[tuple[int, int, int | None, str | None, str | None]]:
    return [(a.execution, a.attempt, a.http_status, a.lost, a.worker) for a in history]


async def test_a_call_lost_with_its_killed_worker_is_its_own_execution(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    """The worker sends the call and dies before recording its answer (kill -9); the lease
    expires and the reaper requeues the step; the same worker name, restarted, claims it and
    records 200. The history has the lost first execution (its worker, no status), then the
    200 as the second."""
    runtime, clock = clocked
    ops = Operations(runtime)
    run_id = await _submitted(runtime, downstream.url)
    first = await _claim(runtime, "w1")
    version = await runtime.store.get_version("charge")
    # The call reaches the downstream; the worker dies before its flush: nothing recorded.
    await executor.execute(first, version.workflow, runtime.executor_deps(), worker="w1")
    clock.advance(LEASE_S + 1)
    assert len(await runtime.store.requeue_expired()) == 1
    again = await _claim(runtime, "w1")
    assert again.attempts == 2
    await _run_to_its_end(runtime, again, "w1")

    run = await ops.runs.get(run_id)
    (step,) = run.steps
    assert run.status == "SUCCEEDED" and step.attempts == 2
    assert _entries(step.history) == [
        (1, 1, None, "lease_expired", "w1"),
        (2, 1, 200, None, "w1"),
    ]
    assert downstream.stats.total == 2  # the call was sent twice
    wire = run.model_dump(mode="json", by_alias=True)["steps"][0]["history"]
    assert (wire[0]["lost"], wire[0]["httpStatus"], wire[1]["lost"]) == (
        "lease_expired",
        None,
        None,
    )
    # A tenant is told an execution was lost, not which worker held it.
    told = (await ops.runs.get(run_id, tenant="acme")).steps[0].history
    assert _entries(told) == [(1, 1, None, "lease_expired", None), (2, 1, 200, None, None)]


async def test_a_claim_given_back_by_a_stopping_worker_is_a_lost_execution(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    """A worker stopping gracefully cancels what is still in flight after its grace and gives
    the claims back: the history says the execution was given back by that worker, and the
    next worker's 200 is the second execution."""
    runtime, _ = clocked
    ops = Operations(runtime)
    run_id = await _submitted(runtime, downstream.url)
    first = await _claim(runtime, "w1")
    assert await runtime.store.give_back([first.claim_token]) == 1
    await _run_to_its_end(runtime, await _claim(runtime, "w2"), "w2")
    (step,) = (await ops.runs.get(run_id)).steps
    assert _entries(step.history) == [
        (1, 1, None, "worker_stopped", "w1"),
        (2, 1, 200, None, "w2"),
    ]


async def test_a_requeue_of_a_claim_renewed_meanwhile_records_nothing(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    """Only the steps the requeue takes back get a lost entry: a live claim keeps running and
    its step's history shows its attempt alone."""
    runtime, clock = clocked
    ops = Operations(runtime)
    run_id = await _submitted(runtime, downstream.url)
    step = await _claim(runtime, "w1")
    clock.advance(LEASE_S - 1)
    assert await runtime.store.renew([step.claim_token], LEASE_S) == 1
    clock.advance(2)
    assert await runtime.store.requeue_expired() == []
    await _run_to_its_end(runtime, step, "w1")
    (view,) = (await ops.runs.get(run_id)).steps
    assert _entries(view.history) == [(1, 1, 200, None, "w1")]


async def test_a_worker_started_after_a_crash_takes_expired_leases_back_at_once(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """From an on-call tour: a worker restarted after a crash took back the steps whose
    leases had ended about 10 s after it started (its reaper's first pass came a third of a
    lease late). Its first pass is at start now: with a 30 s lease the run is done within
    5 s, where the first pass would have come at 10 s."""
    runtime = await Runtime.open(settings_for(backend, lease_s=LEASE_S))
    try:
        run_id = await _submitted(runtime, downstream.url)
        # A worker that claimed the step and died: its short lease has run out.
        assert len(await runtime.store.claim(1, lease_s=0.2, worker="gone")) == 1
        await asyncio.sleep(0.5)
        async with running_worker(runtime):
            run = await wait_for_run(runtime, run_id, timeout_s=5)
        assert run.status == "SUCCEEDED"
        assert _entries(run.steps[0].history)[0][3] == "lease_expired"
    finally:
        await runtime.close()
