"""Why a step waits, as every front door reads it (`StepView.waiting`, `StepProgress.waiting`,
`FanoutProgress.waiting`): set while the step waits, cleared when it runs or ends
(docs/architecture.md, 'Why a step waits'). On both backends."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from demo.downstream import RunningDownstream, start_downstream
from demo.downstream_state import DownstreamConfig
from engine.operations import Operations
from engine.operations.views import StepView
from engine.runtime import Runtime
from engine.store.records import LogLine
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run
from tests.integration.test_engine_admission import call
from tests.integration.test_fanout import items, workflows

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = 30
) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await check()
        if found is not None:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not within {timeout_s} s")


async def only_step(ops: Operations, run_id: str) -> StepView:
    (step,) = (await ops.runs.get(run_id)).steps
    return step


async def test_a_step_at_its_tenant_rate_limit_says_so_until_it_runs(
    backend: Backend, downstream: RunningDownstream
) -> None:
    runtime = await Runtime.open(settings_for(backend, tenant_rate_per_minute=1))
    ops = Operations(runtime)
    try:
        tenant = f"acme-{uuid.uuid4().hex[:8]}"  # a rate window of its own
        first = await start(runtime, [call(f"{downstream.url}/ok")], {}, tenant_id=tenant)
        second = (await ops.runs.submit("call", {}, tenant_id=tenant)).run.id
        async with running_worker(runtime):
            assert (await wait_for_run(runtime, first)).status == "SUCCEEDED"

            async def parked() -> StepView | None:
                step = await only_step(ops, second)
                return step if step.waiting is not None else None

            step = await eventually(parked, "the second step waiting")
            assert step.status == "READY" and step.waiting is not None
            assert step.waiting.reason == "tenant_rate_limit"
            assert f"tenant {tenant} is at its rate limit (1/1" in step.waiting.message
            assert f"schemabridge tenants set-rate {tenant} N" in step.waiting.message
            assert "SCHEMABRIDGE_TENANT_RATE_PER_MINUTE" in step.waiting.message
            assert step.waiting.until == step.not_before > time.time()
            (progress,) = (await ops.runs.progress(second)).steps
            assert progress.waiting == step.waiting
            await ops.settings.set_tenant_rate(tenant, 100)
            done = await wait_for_run(runtime, second)
        (record,) = await runtime.store.get_steps(second)
    finally:
        await runtime.close()
    assert done.status == "SUCCEEDED"
    assert done.steps[0].waiting is None
    assert (record.wait_reason, record.wait_message) == (None, None)


async def test_a_redispatched_step_counts_its_redispatches_and_a_cancel_clears_it(
    backend: Backend, downstream: RunningDownstream
) -> None:
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=(60.0,)))
    ops = Operations(runtime)
    try:
        workflow = call(f"{downstream.url}/busy?status=503", max_auto_retries=2, attempts=1)
        run_id = await start(runtime, [workflow], {})
        async with running_worker(runtime):

            async def redispatched() -> StepView | None:
                step = await only_step(ops, run_id)
                return step if step.waiting is not None else None

            step = await eventually(redispatched, "the step waiting for its redispatch")
        assert step.waiting is not None and step.waiting.reason == "redispatch"
        destination = downstream.url.rstrip("/")
        assert step.waiting.message.startswith(
            f"waiting to be sent again (redispatch) after {destination} answered 503 Service "
            "Unavailable; redispatch 1/2 after GET "
        )
        assert step.waiting.until == step.not_before >= time.time() + 50
        await ops.actions.cancel(run_id, actor="test")
        cancelled = await only_step(ops, run_id)
        (record,) = await runtime.store.get_steps(run_id)
    finally:
        await runtime.close()
    assert cancelled.status == "CANCELLED" and cancelled.waiting is None
    assert record.wait_reason is None


async def three_children_at_the_rate_limit(runtime: Runtime, downstream: RunningDownstream) -> str:
    """A fan-out of 5 children for a tenant of its own allowed 2 GATEWAY steps a minute (the
    runtime's setting), run until 3 children wait at the limit; its id (the worker stopped)."""
    ops = Operations(runtime)
    tenant = f"fan-{uuid.uuid4().hex[:8]}"  # a rate window of its own
    run_id = await start(runtime, workflows(downstream.url), {"items": items(5)}, tenant_id=tenant)

    async def three_waiting() -> list[object] | None:
        groups = (await ops.runs.get(run_id)).fanout.waiting
        return list(groups) if groups and groups[0].children == 3 else None

    async with running_worker(runtime):
        await eventually(three_waiting, "three children at the rate limit")
    return run_id


async def test_a_fan_out_groups_its_waiting_children_by_reason(
    backend: Backend, downstream: RunningDownstream
) -> None:
    runtime = await Runtime.open(settings_for(backend, tenant_rate_per_minute=2))
    ops = Operations(runtime)
    try:
        run_id = await three_children_at_the_rate_limit(runtime, downstream)
        progress = await ops.runs.progress(run_id)
        (group,) = progress.fanout.waiting
    finally:
        await runtime.close()
    assert group.reason == "tenant_rate_limit"
    assert "(2/2 GATEWAY steps a minute)" in group.message
    assert group.until is not None
    assert [g.reason for g in progress.fanout.waiting] == ["tenant_rate_limit"]


async def test_a_step_waiting_for_an_admission_slot_says_so_while_it_runs(
    backend: Backend,
) -> None:
    """A cap of 1 and a slow destination: the second call waits for the slot in memory; the
    lease renewer (every second here) records it on the running step, and its result clears
    it."""
    server = await start_downstream(config=DownstreamConfig(latency_ms=2500))
    runtime = await Runtime.open(settings_for(backend, lease_s=3.0))
    ops = Operations(runtime)
    try:
        await ops.settings.set_caps("slow", 1)
        workflow = Workflow.model_validate(
            {
                "name": "slow",
                "vertices": {
                    "call": {
                        "type": "GATEWAY",
                        "config": {"url": f"{server.url}/s", "destination": "slow"},
                    }
                },
            }
        )
        first = await start(runtime, [workflow], {})
        second = (await ops.runs.submit("slow", {})).run.id

        async def admission_wait() -> StepView | None:
            for run_id in (first, second):
                step = await only_step(ops, run_id)
                if step.waiting is not None:
                    return step
            return None

        async with running_worker(runtime):
            step = await eventually(admission_wait, "a step waiting for its admission slot")
            runs = [await wait_for_run(runtime, run_id) for run_id in (first, second)]
    finally:
        await runtime.close()
        await server.stop()
    assert step.status == "RUNNING" and step.waiting is not None
    assert step.waiting.reason == "admission_wait"
    assert "admission slot of slow" in step.waiting.message
    assert step.waiting.until is None
    assert [r.status for r in runs] == ["SUCCEEDED", "SUCCEEDED"]
    assert all(r.steps[0].waiting is None for r in runs)


async def test_a_step_waiting_to_retry_shows_its_attempts_and_when_the_next_is_due(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """A 503 with Retry-After: 3, then 200: while the step sleeps in-process its first attempt
    and the retry's due time are in the store (one write as the wait starts); the end writes
    the second attempt only, so the history holds each attempt once. A write for a claim
    that is not live (a token naming the step, not its claim's) changes nothing."""
    downstream.script([{"status": 503, "retry_after": "3"}, 200])
    runtime = await Runtime.open(settings_for(backend))
    ops = Operations(runtime)
    try:
        run_id = await start(runtime, [call(f"{downstream.url}/flaky")], {})

        async def retry_wait() -> StepView | None:
            step = await only_step(ops, run_id)
            return step if step.waiting is not None and step.history else None

        async with running_worker(runtime):
            step = await eventually(retry_wait, "the step waiting to retry", timeout_s=10)
            seen_at = time.time()
            (progress,) = (await ops.runs.progress(run_id)).steps
            (waiting,) = await runtime.store.get_steps(run_id)
            stale = await runtime.store.show_retry_wait(
                f"stale:{waiting.id}",
                [LogLine(run_id, "warning", "stale", "call")],
                "stale",
                time.time() + 60,
            )
            (unchanged,) = await runtime.store.get_steps(run_id)
            done = await wait_for_run(runtime, run_id)
        (record,) = await runtime.store.get_steps(run_id)
        lines = await runtime.store.step_log_lines(run_id, limit=100)
    finally:
        await runtime.close()
    assert step.status == "RUNNING" and step.waiting is not None
    assert step.waiting.reason == "retry_backoff"
    assert "attempt 2/2" in step.waiting.message and "503" in step.waiting.message
    (first,) = step.history
    assert (first.attempt, first.http_status, first.retry_in_ms) == (1, 503, 3000)
    # Due when the wait started plus its 3 s: the attempt's own time, give or take its write.
    assert abs(step.waiting.until - (first.at + 3.0)) < 0.5
    assert step.waiting.until > seen_at
    assert progress.waiting is not None and progress.waiting.reason == "retry_backoff"
    assert progress.waiting.until == step.waiting.until
    assert stale is False
    assert unchanged == waiting and waiting.wait_reason == "retry_backoff"
    assert done.status == "SUCCEEDED"
    (final,) = done.steps
    assert final.waiting is None
    assert [(a.attempt, a.http_status) for a in final.history] == [(1, 503), (2, 200)]
    assert final.history[0] == first
    assert [line.message for line in lines if line.message == "stale"] == []
    assert [line.data.get("attempt") for line in lines] == [1, 2]
    assert (record.wait_reason, record.wait_message) == (None, None)


async def test_a_retry_wait_is_over_once_the_next_attempt_runs(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """A 503 with Retry-After: 1, then a 200 that takes 4 s: once the wait's time has passed
    the next attempt runs, and neither the run view nor the progress stream still says the
    step waits to retry (the row keeps the reason until the result rewrites it)."""
    downstream.script([{"status": 503, "retry_after": "1"}, {"status": 200, "sleep_ms": 4000}])
    runtime = await Runtime.open(settings_for(backend))
    ops = Operations(runtime)
    try:
        run_id = await start(runtime, [call(f"{downstream.url}/slow-second")], {})

        async def retry_wait() -> StepView | None:
            step = await only_step(ops, run_id)
            return step if step.waiting is not None else None

        async with running_worker(runtime):
            waiting = await eventually(retry_wait, "the step waiting to retry", timeout_s=10)
            assert waiting.waiting is not None and waiting.waiting.until is not None
            await asyncio.sleep(max(0.0, waiting.waiting.until - time.time()) + 0.5)
            (row,) = await runtime.store.get_steps(run_id)
            during = await only_step(ops, run_id)
            (progress,) = (await ops.runs.progress(run_id)).steps
            done = await wait_for_run(runtime, run_id)
    finally:
        await runtime.close()
    assert (row.status, row.wait_reason) == ("RUNNING", "retry_backoff")
    assert during.status == "RUNNING" and during.waiting is None
    assert progress.status == "RUNNING" and progress.waiting is None
    assert done.status == "SUCCEEDED"


async def test_children_whose_wait_is_over_are_not_said_to_wait(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """The children summary says only what is true now: a parked child whose time has come is
    due (it waits for a worker, not for its old reason), so it is not counted any more."""
    clock = FakeClock()
    runtime = await Runtime.open(settings_for(backend, tenant_rate_per_minute=2), clock=clock)
    ops = Operations(runtime)
    try:
        run_id = await three_children_at_the_rate_limit(runtime, downstream)
        (group,) = (await ops.runs.progress(run_id)).fanout.waiting
        assert group.until is not None
        clock.advance(group.until - clock.now() + 0.1)  # no worker: they stay READY, due
        after = await ops.runs.progress(run_id)
    finally:
        await runtime.close()
    assert group.children == 3 and group.text == group.message
    assert after.fanout.waiting == []
