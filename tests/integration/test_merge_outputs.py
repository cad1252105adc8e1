"""A MERGE's `outputs` read by later vertices, inline or from the payload store, on both
backends (docs/authoring.md, 'MERGE: the join')."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from engine.execution import fanout
from engine.operations.views import RunDetail
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run

PAD = "x" * 300
"""Echoed back in each child's output, so 1,000 children pass the 256 KiB inline limit."""

READS_OUTPUTS = {
    "count": "{{ length(vertices.join.output.outputs) }}",
    "first": "{{ vertices.join.output.outputs[0].call.body.path }}",
    "last": "{{ vertices.join.output.outputs[-1].call.body.body.n }}",
}
READS_COUNTS = {"succeeded": "{{ vertices.join.output.counts.succeeded }}"}


def workflows(base: str, readers: dict[str, dict[str, str]]) -> list[Workflow]:
    """parent: spawner over `input.items` → join → one GATEWAY per `readers` entry, POSTing
    that body (echoed back by the demo downstream); child: one POST of its input, the item's
    index and `PAD`."""
    after = {
        name: {
            "type": "GATEWAY",
            "dependsOn": ["join"],
            "config": {"url": f"{base}/{name}", "method": "POST", "body": body},
        }
        for name, body in readers.items()
    }
    parent = {
        "name": "parent",
        "vertices": {
            "each": {
                "type": "SPAWNER",
                "config": {
                    "items": "{{ input.items }}",
                    "workflow": "child",
                    "input": {"n": "{{ index }}", "pad": PAD},
                },
            },
            "join": {"type": "MERGE", "dependsOn": ["each"]},
            **after,
        },
    }
    child = {
        "name": "child",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {
                    "url": f"{base}/item/{{{{ index }}}}",
                    "method": "POST",
                    "body": "{{ input }}",
                    "retry": {"maxAttempts": 1},
                },
            }
        },
    }
    return [Workflow.model_validate(parent), Workflow.model_validate(child)]


def items(n: int) -> list[int]:
    return list(range(n))


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


def _sent(run_output: dict[str, Any], vertex_id: str) -> Any:
    """The body `vertex_id` sent, as the demo downstream echoed it."""
    return run_output[vertex_id]["body"]["body"]


async def test_expressions_read_the_outputs_of_a_merge_past_the_inline_limit(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    readers = {"size": READS_OUTPUTS, "tally": READS_COUNTS}
    run_id = await start(runtime, workflows(downstream.url, readers), {"items": items(1000)})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id, timeout_s=120)
    assert run.status == "SUCCEEDED", run.error
    assert _sent(run.output, "size") == {"count": 1000, "first": "/item/0", "last": 999}
    assert _sent(run.output, "tally") == {"succeeded": 1000}
    # The join's recorded output keeps its reference: only the expressions saw the list.
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
    merged = steps["join"].output
    assert merged is not None and "outputs" not in merged
    assert merged["outputsRef"]["count"] == 1000
    assert merged["outputsRef"]["bytes"] > fanout.INLINE_OUTPUT_MAX_BYTES


async def _small_join_run(
    backend: Backend, base: str, readers: dict[str, dict[str, str]], read_max_bytes: int
) -> RunDetail:
    """A run of 20 children whose join goes to the payload store (the inline limit lowered
    to 2,000 bytes by the caller), its readers allowed to load `read_max_bytes`."""
    settings = settings_for(backend, merge_outputs_read_max_bytes=read_max_bytes)
    runtime = await Runtime.open(settings)
    try:
        run_id = await start(runtime, workflows(base, readers), {"items": items(20)})
        async with running_worker(runtime):
            return await wait_for_run(runtime, run_id)
    finally:
        await runtime.close()


async def test_a_dependant_reading_only_counts_loads_nothing(
    backend: Backend, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fanout, "INLINE_OUTPUT_MAX_BYTES", 2000)
    # With nothing allowed to load, reading `outputs` would fail the step: this one, which
    # reads the join's counts and outputsRef and the run's id, does not try.
    tally = {**READS_COUNTS, "run": "{{ run.id }}", "ref": "{{ vertices.join.output.outputsRef }}"}
    run = await _small_join_run(backend, downstream.url, {"tally": tally}, read_max_bytes=0)
    assert run.status == "SUCCEEDED", run.error
    sent = _sent(run.output, "tally")
    assert sent["succeeded"] == 20
    assert sent["ref"]["count"] == 20 and sent["ref"]["bytes"] > 2000


async def test_outputs_over_the_read_limit_fail_the_step_saying_what_stays_readable(
    backend: Backend, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fanout, "INLINE_OUTPUT_MAX_BYTES", 2000)
    run = await _small_join_run(backend, downstream.url, {"size": READS_OUTPUTS}, 1000)
    assert run.status == "FAILED"
    error = run.error
    assert error is not None and error.vertex_id == "size"
    assert error.kind == "expression_error"
    assert "\n" not in error.message
    assert "the outputs of MERGE 'join' are " in error.message and " bytes, " in error.message
    assert "over the 1,000 an expression may load" in error.message
    assert "SCHEMABRIDGE_MERGE_OUTPUTS_READ_MAX_BYTES" in error.message
    assert "vertices.join.output.counts and .outputsRef, which stay readable" in error.message
    (size,) = [step for step in run.steps if step.vertex_id == "size"]
    assert size.status == "FAILED" and size.auto_retries == 0  # terminal: not redispatched
