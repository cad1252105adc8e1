"""A run that FAILED starts no new HTTP attempt of its other steps, on both backends: a sibling
waiting between retries stops there, its claim given back held, and the operator's retry of
the run runs it again, to the end, every step's call made (docs/architecture.md, 'Terminal
failures'). The worker that records the failure announces it, as a cancel is announced, over
the coordination channel (tests/unit/test_step_stops.py: what another process hears)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.actions_harness import requests_by_path, submit, wait_until
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run

ATTEMPTS = 3
BASE_DELAY_MS = 2000
"""`slow` waits 2 s, then 4 s between its attempts: `bad` fails the run during the first."""


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend, lease_s=30.0))
    await runtime.cancellations.wait_ready(10)
    yield runtime
    await runtime.close()


def siblings(base: str) -> Workflow:
    """Two roots: `slow` (answered 500 first, retried with long waits) and `bad` (answered 400
    a little later: a terminal failure that fails the run)."""
    return Workflow.model_validate(
        {
            "name": "siblings",
            "vertices": {
                "slow": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/slow",
                        "method": "POST",
                        "retry": {"maxAttempts": ATTEMPTS, "baseDelayMs": BASE_DELAY_MS},
                    },
                },
                "bad": {"type": "GATEWAY", "config": {"url": f"{base}/bad", "method": "POST"}},
            },
        }
    )


async def messages(runtime: Runtime, run_id: str) -> list[str]:
    return [str(line["message"]) for line in await runtime.store.run_logs(run_id, limit=1000)]


async def test_a_failed_run_stops_its_sibling_and_a_retry_completes_it(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    downstream.script([500], path="/slow")  # then 200
    downstream.script([{"status": 400, "sleep_ms": 300}], path="/bad")  # then 200
    run_id = await submit(runtime, [siblings(downstream.url)], {})
    async with running_worker(runtime) as worker:
        failed = await wait_for_run(runtime, run_id)
        assert failed.status == "FAILED" and failed.error is not None
        assert failed.error.vertex_id == "bad"

        async def slow_stopped() -> bool:
            return worker.in_flight == 0

        # Without the stop, `slow` goes on to its second attempt 2 s after the first.
        await wait_until(slow_stopped, timeout_s=60)
        sent = requests_by_path(downstream)
        assert sent == {"/slow": 1, "/bad": 1}, sent
        stopped = "step stopped: its run failed; attempt 2/3 not sent"
        given_back = "claim given back: its run failed; the step waits for the run's retry"

        async def said() -> bool:
            # The give-back's line is written with its flush, a moment after the call stops.
            found = await messages(runtime, run_id)
            return stopped in found and given_back in found

        await wait_until(said, timeout_s=30)
        lines = await messages(runtime, run_id)
        assert stopped in lines, lines
        assert "claim given back: its run failed; the step waits for the run's retry" in lines
        shown = await Operations(runtime).runs.get(run_id)
        steps = {step.vertex_id: step.status for step in shown.steps}
        assert steps == {"slow": "PENDING", "bad": "FAILED"}, steps
        assert shown.status == "FAILED"

        # The retry runs both, and says so: the failed step, and the one stopped with the run.
        both = "1 failed step run again, and 1 step stopped when the run failed"
        preview = await Operations(runtime).actions.retry_preview(run_id)
        assert (preview.steps_retried, preview.steps_held_back) == (1, 1)
        assert preview.message == both
        retried = await Operations(runtime).actions.retry(run_id, actor="cli")
        assert retried.changed
        assert (retried.steps_retried, retried.steps_held_back) == (1, 1)
        assert retried.message == both
        assert f"retry by cli: {both}" in await messages(runtime, run_id)
        done = await wait_for_run(runtime, run_id, timeout_s=60)
    assert done.status == "SUCCEEDED", done.error
    assert {step.vertex_id: step.status for step in done.steps} == {
        "slow": "SUCCEEDED",
        "bad": "SUCCEEDED",
    }
    assert requests_by_path(downstream) == {"/slow": 2, "/bad": 2}
    # `slow`'s history: its 500, then its execution cut short by the run's failure before
    # attempt 2 (sent nothing: no status), then the retry's execution.
    (slow,) = [step for step in done.steps if step.vertex_id == "slow"]
    assert [(a.execution, a.attempt, a.http_status, a.lost) for a in slow.history] == [
        (1, 1, 500, None),
        (1, 2, None, "run_failed"),
        (2, 1, 200, None),
    ]


async def test_an_answer_on_the_wire_when_the_run_fails_is_recorded(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The stop comes between attempts: a call already sent keeps its answer (the claim is
    still the step's, unlike a cancel's), so a retry does not send it again."""
    downstream.script([{"status": 200, "sleep_ms": 1500}], path="/slow")
    downstream.script([400], path="/bad")
    run_id = await submit(runtime, [siblings(downstream.url)], {})
    async with running_worker(runtime) as worker:
        failed = await wait_for_run(runtime, run_id)
        assert failed.status == "FAILED"

        async def slow_ended() -> bool:
            return worker.in_flight == 0

        await wait_until(slow_ended, timeout_s=60)
    shown = await Operations(runtime).runs.get(run_id)
    assert {step.vertex_id: step.status for step in shown.steps} == {
        "slow": "SUCCEEDED",
        "bad": "FAILED",
    }
    assert requests_by_path(downstream) == {"/slow": 1, "/bad": 1}
