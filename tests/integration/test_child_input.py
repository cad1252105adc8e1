"""A child run's input is checked against its workflow's inputSchema, with a real store (both
backends), a real worker and the demo downstream on loopback: a child whose input the schema
refuses FAILS with `invalid_input` before its GATEWAY sends anything, and its siblings run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from engine.execution.child_input import ChildInputs
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


def workflows(base: str, child_schema: dict[str, Any] | None) -> list[Workflow]:
    """parent: a spawner giving each child `{"n": item}`, then a join that tolerates failed
    children; child: one POST to /c/<n>, its input required to hold an integer `n`."""
    parent = {
        "name": "parent",
        "vertices": {
            "each": {
                "type": "SPAWNER",
                "config": {
                    "items": "{{ input.items }}",
                    "workflow": "child",
                    "input": {"n": "{{ item }}"},
                },
            },
            "join": {
                "type": "MERGE",
                "dependsOn": ["each"],
                "config": {"tolerateChildFailures": ["FAILED"]},
            },
        },
    }
    child: dict[str, Any] = {
        "name": "child",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {"url": f"{base}/c/{{{{ input.n }}}}", "method": "POST"},
            }
        },
    }
    if child_schema is not None:
        child["inputSchema"] = child_schema
    return [Workflow.model_validate(parent), Workflow.model_validate(child)]


N_INTEGER = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}


async def test_a_child_whose_input_the_schema_refuses_fails_and_its_siblings_run(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await start(runtime, workflows(downstream.url, N_INTEGER), {"items": [1, "two", 3]})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error  # the join tolerates the failed child
    children = await runtime.store.children(run_id)
    assert [c.status for c in children] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]
    failed = children[1]
    assert failed.error is not None
    assert failed.error["kind"] == "invalid_input"
    assert failed.error["message"] == (
        "the child's input does not match the inputSchema of child v1: input /n: "
        "n must be an integer, not a string; fix the SPAWNER's items or its input, publish "
        "the workflow and submit a new run of the parent"
    )
    # Nothing was sent for "two": the downstream saw the two valid children only.
    assert sorted(r.path for r in downstream.stats.recent) == ["/c/1", "/c/3"]
    assert run.output["join"]["counts"]["failed"] == 1


async def test_without_an_input_schema_every_child_runs(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await start(runtime, workflows(downstream.url, None), {"items": [1, "two"]})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    assert sorted(r.path for r in downstream.stats.recent) == ["/c/1", "/c/two"]


async def test_a_version_is_compiled_once_per_worker(runtime: Runtime) -> None:
    [_, child] = workflows("http://127.0.0.1:9", N_INTEGER)
    inputs = ChildInputs()
    assert inputs._validator(child, 1) is inputs._validator(child, 1)
    assert inputs._validator(child, 2) is not inputs._validator(child, 1)
