"""Runs executed end to end by a real worker against a real HTTP downstream, on both
backends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


def chain(base: str) -> Workflow:
    return Workflow.model_validate(
        {
            "name": "chain",
            "vertices": {
                "fetch": {
                    "type": "GATEWAY",
                    "config": {"url": f"{base}/customers/{{{{ input.id }}}}"},
                },
                "notify": {
                    "type": "GATEWAY",
                    "dependsOn": ["fetch"],
                    "config": {
                        "url": f"{base}/notify",
                        "method": "POST",
                        "body": {"path": "{{ vertices.fetch.output.body.path }}"},
                    },
                },
            },
        }
    )


async def test_chain_passes_outputs_between_steps(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await start(runtime, [chain(downstream.url)], {"id": 42})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    assert run.output["notify"]["body"]["body"] == {"path": "/customers/42"}
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
    assert steps["fetch"].attempts == 1 and steps["notify"].attempts == 1


async def test_a_4xx_fails_the_run_with_http_details(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    workflow = Workflow.model_validate(
        {
            "name": "bad",
            "vertices": {
                "call": {"type": "GATEWAY", "config": {"url": f"{downstream.url}/x?status=404"}},
                "after": {
                    "type": "GATEWAY",
                    "dependsOn": ["call"],
                    "config": {"url": f"{downstream.url}/never"},
                },
            },
        }
    )
    run_id = await start(runtime, [workflow], {})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED"
    assert run.error.vertex_id == "call"
    assert run.error.kind == "http_error"
    assert run.error.http_status == 404
    # The step's own error names its vertex as the run's does (GET /runs/{id} shows both).
    [failed] = [s for s in run.steps if s.error is not None]
    assert failed.error is not None and failed.error.vertex_id == "call"
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
    assert steps["after"].status == "PENDING"
    assert downstream.stats.total == 1


def fanout(base: str, merge_config: dict[str, object]) -> list[Workflow]:
    parent = Workflow.model_validate(
        {
            "name": "parent",
            "vertices": {
                "collect": {"type": "GATEWAY", "config": {"url": f"{base}/items?count=25"}},
                "each": {
                    "type": "SPAWNER",
                    "dependsOn": ["collect"],
                    "config": {
                        "items": "{{ vertices.collect.output.body.items }}",
                        "workflow": "child",
                    },
                },
                "join": {"type": "MERGE", "dependsOn": ["each"], "config": merge_config},
            },
        }
    )
    child = Workflow.model_validate(
        {
            "name": "child",
            "vertices": {
                "charge": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/charge/{{{{ item.id }}}}",
                        "method": "POST",
                        "body": {"index": "{{ index }}"},
                    },
                }
            },
        }
    )
    return [parent, child]


async def test_fan_out_and_merge(runtime: Runtime, downstream: RunningDownstream) -> None:
    run_id = await start(runtime, fanout(downstream.url, {}), {})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    merged = run.output["join"]
    assert merged["counts"] == {
        "total": 25,
        "succeeded": 25,
        "failed": 0,
        "cancelled": 0,
        "pending": 0,
    }
    paths = [o["charge"]["body"]["path"] for o in merged["outputs"]]
    assert paths == [f"/charge/{i}" for i in range(25)]
    bodies = [o["charge"]["body"]["body"] for o in merged["outputs"]]
    assert bodies == [{"index": i} for i in range(25)]
    progress = await runtime.store.fanout_progress(run_id)
    assert progress["succeeded"] == 25 and progress["pending"] == 0
