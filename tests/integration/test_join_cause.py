"""A join that fails on its FAILED children names their commonest cause, on both backends: the
count by error kind among (at most the first 1,000 of) the failed children, one of their
messages, and the command that lists them; the structured `childCause` goes with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from engine.execution import child_causes
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


def fan_out(base: str) -> list[Workflow]:
    """Children whose item without an `id` leaves the url path empty (`invalid_config`), and
    whose `status` the downstream answers (400: `http_error`)."""
    parent = {
        "name": "causes",
        "vertices": {
            "each": {"type": "SPAWNER", "config": {"items": "{{ input }}", "workflow": "cause"}},
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }
    child = {
        "name": "cause",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {
                    "url": f"{base}/c/{{{{ item.id }}}}",
                    "headers": {"X-Demo-Status": "{{ item.status || `200` }}"},
                    "retry": {"maxAttempts": 1},
                },
            }
        },
    }
    return [Workflow.model_validate(parent), Workflow.model_validate(child)]


ITEMS: list[dict[str, Any]] = [{}, {}, {"id": "a", "status": 400}, {"id": "b"}, {}]
"""Items 0, 1 and 4 fail `invalid_config`, 2 `http_error`, 3 succeeds."""


async def failed_join(runtime: Runtime, downstream: RunningDownstream) -> Any:
    run_id = await start(runtime, fan_out(downstream.url), ITEMS)
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED" and run.error is not None
    assert run.error.vertex_id == "join"
    return run


async def test_the_join_names_the_commonest_cause_of_its_failed_children(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    run = await failed_join(runtime, downstream)
    error = run.error
    assert error.kind == "child_failures"
    assert error.message.startswith(
        "4 of 5 children ended with a status not tolerated (3 invalid_config, e.g. vertex 'call': "
        "url: {{ item.id }} gave null or an empty string in the url path"
    ), error.message
    # One child's message, cut short on one line: the count by kind is what matters.
    assert error.message.endswith(
        f"…, 1 other); see `schemabridge runs children {run.id} --status FAILED`"
    ), error.message
    assert "\n" not in error.message
    assert error.child_cause is not None
    assert (error.child_cause.kind, error.child_cause.count, error.child_cause.read) == (
        "invalid_config",
        3,
        4,
    )
    (join,) = [step for step in run.steps if step.vertex_id == "join"]
    assert join.error is not None and join.error.child_cause == error.child_cause


async def test_past_the_read_limit_it_says_how_many_it_read(
    runtime: Runtime, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 100,000-child fan-out reads 1,000 failed children, not all: here 2 of 4."""
    monkeypatch.setattr(child_causes, "READ_AT_MOST", 2)
    run = await failed_join(runtime, downstream)
    assert "(of the first 2 failed: 2 invalid_config, e.g. vertex 'call'" in run.error.message
    assert ", 1 other" not in run.error.message
    cause = run.error.child_cause
    assert cause is not None and (cause.count, cause.read) == (2, 2)
