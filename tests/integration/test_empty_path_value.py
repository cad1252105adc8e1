"""A run whose GATEWAY url path would get a null or empty value fails `invalid_config` before
anything is sent, on both backends, and says which vertex and expression and what to do
(`DELETE /del/{{ input.id }}` without an id used to send `DELETE /del/`: the collection)."""

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


def deleting(base: str) -> Workflow:
    """`fetch` answers; `remove` deletes what the input names, after it."""
    return Workflow.model_validate(
        {
            "name": "delete-one",
            "vertices": {
                "fetch": {"type": "GATEWAY", "config": {"url": f"{base}/orders/o1"}},
                "remove": {
                    "type": "GATEWAY",
                    "dependsOn": ["fetch"],
                    "config": {"url": f"{base}/del/{{{{ input.id }}}}", "method": "DELETE"},
                },
            },
        }
    )


@pytest.mark.parametrize("run_input", [{}, {"id": ""}, {"id": None}])
async def test_a_run_without_the_path_value_fails_before_the_call(
    runtime: Runtime, downstream: RunningDownstream, run_input: dict[str, object]
) -> None:
    run_id = await start(runtime, [deleting(downstream.url)], run_input)
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED"
    assert run.error is not None
    assert run.error.kind == "invalid_config"
    assert run.error.vertex_id == "remove"
    assert run.error.message.startswith(
        "vertex 'remove': url: {{ input.id }} gave null or an empty string in the url path"
    )
    paths = [(record.method, record.path) for record in downstream.stats.recent]
    assert paths == [("GET", "/orders/o1")]  # no DELETE at all


async def test_the_same_run_with_the_value_calls_its_path(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    run_id = await start(runtime, [deleting(downstream.url)], {"id": "o1"})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED"
    assert ("DELETE", "/del/o1") in [(r.method, r.path) for r in downstream.stats.recent]
