"""A cancel stops the HTTP calls of its runs, on both backends: once it has returned, no new
attempt of the run (or of its children) starts — a step waiting between retries or for an
admission slot ends without sending — and the log says the step was cancelled
(docs/architecture.md, 'Cancelling a run').

The cancel goes through a runtime of its own, as from another process (`schemabridge runs
cancel` against a server), so the worker hears of it over the coordination channel; the
safety net (the worker's lease renewal) is tested with the cancel's announcement left out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from demo.downstream import RunningDownstream
from engine.execution.worker import WorkerConfig
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.actions_harness import fan_out, items, submit, wait_until
from tests.integration.engine_harness import running_worker, settings_for

ATTEMPTS = 4
BASE_DELAY_MS = 2000
"""Waits of 2, 4 and 8 s between the attempts: the cancel lands in the second."""
CAP = 4
"""The destination's concurrency in the fan-out test: most claimed children wait for a slot."""


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    """The worker's runtime. Its lease (30 s) is renewed every 10 s: not before attempt 3
    would be sent, so only the cancel's announcement can stop that."""
    settings = settings_for(backend, lease_s=30.0, default_max_concurrency=CAP)
    runtime = await Runtime.open(settings)
    yield runtime
    await runtime.close()


@pytest.fixture
async def short_lease(backend: Backend) -> AsyncIterator[Runtime]:
    """A worker's runtime whose lease (3 s) is renewed every second: the renewal (the safety
    net) comes before attempt 3 would be sent."""
    runtime = await Runtime.open(settings_for(backend, lease_s=3.0))
    yield runtime
    await runtime.close()


@pytest.fixture
async def operator(backend: Backend) -> AsyncIterator[Operations]:
    """The operator's side: another runtime, as in another process."""
    runtime = await Runtime.open(settings_for(backend))
    await runtime.cancellations.wait_ready(10)
    yield Operations(runtime)
    await runtime.close()


def failing_call(base: str) -> Workflow:
    """One GATEWAY that the downstream always answers 500, retried with long waits."""
    return Workflow.model_validate(
        {
            "name": "flaky",
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/flaky",
                        "method": "POST",
                        "headers": {"X-Demo-Status": "500"},
                        "retry": {"maxAttempts": ATTEMPTS, "baseDelayMs": BASE_DELAY_MS},
                    },
                }
            },
        }
    )


async def messages(runtime: Runtime, run_id: str) -> list[str]:
    return [str(line["message"]) for line in await runtime.store.run_logs(run_id, limit=1000)]


def second_attempt_answered(downstream: RunningDownstream) -> Callable[[], Awaitable[bool]]:
    async def answered() -> bool:
        return downstream.stats.count("500") >= 2

    return answered


async def test_a_cancel_interrupts_the_wait_between_retries(
    runtime: Runtime, operator: Operations, downstream: RunningDownstream
) -> None:
    run_id = await submit(runtime, [failing_call(downstream.url)], {})
    async with running_worker(runtime) as worker:
        await runtime.cancellations.wait_ready(10)
        await wait_until(second_attempt_answered(downstream))
        await operator.actions.cancel(run_id, actor="cli")
        sent_at_cancel = downstream.stats.total

        async def step_ended() -> bool:
            return worker.in_flight == 0

        # Without the stop, the step first goes on to attempts 3 and 4 (4 and 12 s later).
        await wait_until(step_ended, timeout_s=60)
    assert sent_at_cancel == 2
    assert downstream.stats.total == 2  # no attempt after the cancel
    lines = await messages(runtime, run_id)
    assert "step stopped: its run was cancelled; attempt 3/4 not sent" in lines, lines
    assert not [line for line in lines if "claim expired" in line or "(attempt 3/4" in line]
    # Nothing recorded for the step: stopped, not a late result dropped.
    assert (worker.stats.abandoned, worker.stats.dropped) == (1, 0)


async def test_the_lease_renewal_stops_a_step_whose_cancel_was_not_heard(
    short_lease: Runtime, downstream: RunningDownstream
) -> None:
    runtime = short_lease
    run_id = await submit(runtime, [failing_call(downstream.url)], {})
    async with running_worker(runtime) as worker:
        await wait_until(second_attempt_answered(downstream))
        # The store's cancel alone, not announced: as when Redis is down or the message lost.
        await runtime.store.cancel_run(run_id, actor="cli")

        async def step_ended() -> bool:
            return worker.in_flight == 0

        await wait_until(step_ended, timeout_s=60)
    assert downstream.stats.total == 2
    lines = await messages(runtime, run_id)
    assert "step stopped: its run was cancelled; attempt 3/4 not sent" in lines, lines


async def test_children_waiting_for_admission_send_nothing_after_the_cancel(
    runtime: Runtime, operator: Operations, downstream: RunningDownstream
) -> None:
    n, concurrency = 200, 48
    run_id = await submit(runtime, fan_out(downstream.url), {"items": items(n, sleep=1000)})
    config = WorkerConfig(concurrency=concurrency, claim_batch=concurrency, lease_s=30)
    async with running_worker(runtime, config) as worker:
        await runtime.cancellations.wait_ready(10)

        async def queued_for_slots() -> bool:
            # The cap's calls under way, and many more claimed children waiting for a slot.
            return downstream.stats.in_flight >= CAP and worker.in_flight >= 3 * CAP

        await wait_until(queued_for_slots, timeout_s=60)
        await operator.actions.cancel(run_id, actor="cli")
        returned = time.time()
        in_flight_at_cancel = downstream.stats.in_flight
        claimed_at_cancel = worker.in_flight

        async def drained() -> bool:
            return worker.in_flight == 0 and downstream.stats.in_flight == 0

        await wait_until(drained, timeout_s=120)
    started_after = [t for t in downstream.stats.arrivals() if t > returned]
    print(
        f"{claimed_at_cancel} claimed and {in_flight_at_cancel} calls under way at the cancel; "
        f"{len(started_after)} calls started after it"
    )
    assert claimed_at_cancel > in_flight_at_cancel  # children were waiting for admission
    assert len(started_after) <= in_flight_at_cancel


async def test_a_cancel_with_redis_down_still_cancels_and_stops_local_steps(
    tmp_path: Path, downstream: RunningDownstream
) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", redis_url="redis://127.0.0.1:9/0"
    )
    runtime = await Runtime.open(settings)
    try:
        run_id = await submit(runtime, [failing_call(downstream.url)], {})
        async with asyncio.timeout(30):  # the failed PUBLISH does not hold the cancel up
            result = await Operations(runtime).actions.cancel(run_id, actor="cli")
        assert result.changed and result.status == "CANCELLED"
        # This process's workers heard it all the same; other processes rely on their renewal.
        assert runtime.cancellations.heard_since([run_id], 0.0)
    finally:
        await runtime.close()
