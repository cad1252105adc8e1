"""A run that FAILED creates no more children: its SPAWNER, in the middle of creating them
when a sibling fails the run, stops between two batches like a GATEWAY stops between two
attempts, its claim given back held; the retry of the run creates the rest, one child per
item (docs/architecture.md, 'Terminal failures'). Without the stop, every child of the failed
run is still created, and each one calls its destination."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.actions_harness import submit, wait_until
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run

ITEMS = 2000
"""Created one a batch: far longer than the sibling takes to fail the run."""


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend, lease_s=30.0, spawn_batch=1))
    await runtime.cancellations.wait_ready(10)
    yield runtime
    await runtime.close()


def workflows(base: str) -> list[Workflow]:
    parent = {
        "name": "spawns",
        "vertices": {
            "bad": {"type": "GATEWAY", "config": {"url": f"{base}/bad", "method": "POST"}},
            "each": {
                "type": "SPAWNER",
                "config": {"items": "{{ input.items }}", "workflow": "leaf"},
            },
        },
    }
    leaf = {
        "name": "leaf",
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": f"{base}/leaf"}}},
    }
    return [Workflow.model_validate(parent), Workflow.model_validate(leaf)]


async def test_a_failed_run_stops_creating_children(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    downstream.script([400], path="/bad")  # then 200
    run_id = await submit(runtime, workflows(downstream.url), {"items": list(range(ITEMS))})
    ops = Operations(runtime)
    async with running_worker(runtime):
        failed = await wait_for_run(runtime, run_id)
        assert failed.status == "FAILED"

        async def spawner_let_go() -> bool:
            shown = await ops.runs.get(run_id)
            return {s.vertex_id: s.status for s in shown.steps}["each"] != "RUNNING"

        await wait_until(spawner_let_go, timeout_s=120)
        created = await runtime.store.existing_children(run_id, "each")
        assert created < ITEMS, "the spawner of a FAILED run created every child"
        shown = await ops.runs.get(run_id)
        assert {s.vertex_id: s.status for s in shown.steps}["each"] == "PENDING"

        assert (await ops.actions.retry(run_id, actor="cli")).changed
        done = await wait_for_run(runtime, run_id, timeout_s=240)
    assert done.status == "SUCCEEDED", done.error
    assert await runtime.store.existing_children(run_id, "each") == ITEMS
