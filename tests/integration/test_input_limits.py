"""The limits the engine applies, on both backends, through the operations layer and a real
worker: run inputs (size, depth), items per fan-out, the downstream response body a step
keeps and how deep its JSON may nest. The REST side of each limit is in
tests/e2e/test_rest_input_limits.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from schemas.errors import InvalidRequest
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, fanout, gateway, items, single

LIMITS = {
    "max_input_bytes": 2_048,
    "max_nesting_depth": 6,
    "max_fanout_items": 5,
    "max_response_bytes": 1_024,
}


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend, **LIMITS))
    yield runtime
    await runtime.close()


@pytest.fixture
def ops(runtime: Runtime) -> Operations:
    return Operations(runtime)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


async def _runs(ops: Operations) -> int:
    return len((await ops.runs.list(RunFilter())).items)


async def test_run_inputs_over_the_limits_are_refused(
    ops: Operations, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(single("plain", downstream.url))
    with pytest.raises(InvalidRequest) as large:
        await ops.runs.submit("plain", {"s": "é" * 1_100})  # 2,200 bytes in UTF-8
    assert large.value.code == "input_too_large"
    assert [(p.pointer, p.code) for p in large.value.problems] == [("", "too_large")]
    with pytest.raises(InvalidRequest) as deep:
        await ops.runs.submit("plain", {"a": [{"b": _nested(5)}]})
    assert deep.value.code == "input_too_deep"
    assert [(p.pointer, p.code) for p in deep.value.problems] == [("/a/0/b/0/0/0", "too_deep")]
    assert await _runs(ops) == 0
    # At the limits: accepted.
    await ops.runs.submit("plain", {"a": [{"b": _nested(3)}], "s": "é" * 1_000})
    assert await _runs(ops) == 1


async def test_a_fan_out_over_the_item_limit_fails_before_any_child(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(fanout(downstream.url))
    over = await ops.runs.submit("parent", {"items": items(6)})
    at = await ops.runs.submit("parent", {"items": items(5)})
    async with running_worker(runtime):
        refused = await ended(ops, over.run.id)
        accepted = await ended(ops, at.run.id)
    assert refused.status == "FAILED" and refused.error is not None
    assert (refused.error.kind, refused.error.vertex_id) == ("too_many_items", "each")
    assert "6 entries, over the limit of 5" in refused.error.message
    assert "SCHEMABRIDGE_MAX_FANOUT_ITEMS" in refused.error.message
    assert refused.fanout.total == 0
    assert (await ops.runs.children(over.run.id)).items == []
    assert accepted.status == "SUCCEEDED" and accepted.fanout.succeeded == 5


@pytest.fixture
async def endless() -> AsyncIterator[str]:
    """A downstream whose JSON body never ends: 4 KiB, then nothing until the test is over.
    A step that tried to read it whole would hang there."""
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"items": [' + b'"x",' * 1_024)
        await release.wait()
        return response

    app = web.Application()
    app.router.add_get("/endless", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.AbstractServer)
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        release.set()
        await runner.cleanup()


async def test_a_response_body_over_the_limit_is_cut_flagged_and_stored(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream, endless: str
) -> None:
    document = {
        "name": "big-answers",
        "vertices": {
            "endless": gateway(f"{endless}/endless", timeoutMs=20_000),
            "large": gateway(f"{downstream.url}/x?body_bytes=5000&content_type=text/plain"),
            "small": gateway(f"{downstream.url}/x?body_bytes=1024&content_type=text/plain"),
        },
    }
    await ops.workflows.publish(document)
    submitted = await ops.runs.submit("big-answers", {})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    assert run.status == "SUCCEEDED", run.error
    steps = {step.vertex_id: step.output for step in run.steps}
    for cut in ("endless", "large"):
        assert steps[cut]["bodyTruncated"] is True
        assert isinstance(steps[cut]["body"], str) and len(steps[cut]["body"]) == 1_024
    assert steps["endless"]["body"].startswith('{"items": ["x",')  # text: a cut JSON body
    assert "bodyTruncated" not in steps["small"] and len(steps["small"]["body"]) == 1_024
    logs = [line.message for line in (await ops.runs.logs(submitted.run.id)).items]
    assert sum("response body cut at 1,024 bytes" in message for message in logs) == 2


async def test_items_read_from_a_cut_body_say_the_answer_was_cut(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """The tour: a lookup answered more than MAX_RESPONSE_BYTES of JSON, its body was kept as
    text, and the SPAWNER reading its items failed with "body is a string, not an object:
    check the expression", an expression that was right. It says the answer was cut instead,
    and how to fit it."""
    parent = {
        "name": "big-lookup",
        "vertices": {
            "lookup": gateway(f"{downstream.url}/items?count=200"),
            "each": {
                "type": "SPAWNER",
                "dependsOn": ["lookup"],
                "config": {"items": "{{ vertices.lookup.output.body.items }}", "workflow": "one"},
            },
        },
    }
    await ops.workflows.publish([parent, single("one", downstream.url)])
    submitted = await ops.runs.submit("big-lookup", {})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    assert run.status == "FAILED" and run.error is not None
    assert (run.error.kind, run.error.vertex_id) == ("invalid_config", "each")
    assert run.error.message == (
        "/config/items must evaluate to an array, got null: vertices.lookup.output.body was "
        "longer than SCHEMABRIDGE_MAX_RESPONSE_BYTES, so it was cut there and kept as text "
        "(vertices.lookup.output.bodyTruncated is true); have the destination answer less "
        "(a page at a time) or raise SCHEMABRIDGE_MAX_RESPONSE_BYTES"
    )


async def test_a_json_answer_nested_past_the_limit_fails_the_step_as_invalid_response(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    json_answer = {"content_type": "application/json"}
    downstream.script([{"raw": "[" * 7 + "]" * 7, **json_answer}], path="/deep")
    downstream.script([{"raw": "[" * 6 + "]" * 6, **json_answer}], path="/at-limit")
    await ops.workflows.publish(single("deep-answer", f"{downstream.url}/deep"))
    await ops.workflows.publish(single("at-limit-answer", f"{downstream.url}/at-limit"))
    deep = await ops.runs.submit("deep-answer", {})
    at_limit = await ops.runs.submit("at-limit-answer", {})
    async with running_worker(runtime):
        refused = await ended(ops, deep.run.id)
        accepted = await ended(ops, at_limit.run.id)
    assert refused.status == "FAILED" and refused.error is not None
    assert refused.error.kind == "invalid_response"
    assert "nests arrays and objects deeper than 6 levels" in refused.error.message
    assert accepted.status == "SUCCEEDED", accepted.error
    assert accepted.steps[0].output["body"] == [[[[[[]]]]]]


async def test_a_json_answer_too_deep_for_the_parser_is_no_crash(
    backend: Backend, downstream: RunningDownstream, caplog: pytest.LogCaptureFixture
) -> None:
    # The defaults (64 levels, 1 MiB kept): 200 KB of brackets reach the parser whole.
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        deep = "[" * 100_000 + "]" * 100_000
        downstream.script([{"raw": deep, "content_type": "application/json"}], path="/deep")
        await ops.workflows.publish(single("very-deep-answer", f"{downstream.url}/deep"))
        submitted = await ops.runs.submit("very-deep-answer", {})
        with caplog.at_level(logging.ERROR):
            async with running_worker(runtime):
                run = await ended(ops, submitted.run.id)
    finally:
        await runtime.close()
    assert run.status == "FAILED" and run.error is not None
    assert run.error.kind == "invalid_response"
    assert "deeper than 64 levels" in run.error.message
    assert "RecursionError" not in run.error.message
    assert not [r for r in caplog.records if "crashed" in r.getMessage()]
    assert downstream.stats.total == 1  # a downstream's fault: not retried
