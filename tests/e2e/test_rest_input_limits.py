"""Every input limit over real HTTP, on both backends: each over-limit input is refused with
413 or 422, a stable code and a JSON pointer, never a 500, and nothing is stored. The request
body's byte limit itself (413 `body_too_large`) is tested in test_rest_limits.py.

Limits are set low where a default-sized input would only slow the test down; the defaults
are asserted once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from api.rest import borrowed_runtime, create_app
from engine.operations import Operations
from engine.operations.views import RunFilter
from engine.runtime import Runtime
from engine.settings import Settings
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.engine_harness import settings_for

LIMITS = {
    "max_document_bytes": 4_096,
    "max_vertices": 3,
    "max_nesting_depth": 8,
    "max_input_bytes": 512,
}


@dataclass
class Served:
    http: httpx.AsyncClient
    ops: Operations


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    settings = settings_for(backend, **LIMITS)
    runtime = await Runtime.open(settings)
    app = create_app(settings, runtime_factory=borrowed_runtime(runtime), auth=False)
    try:
        async with serving(app) as url, client(url) as http:
            ops = Operations(runtime)
            await ops.workflows.publish(_workflow("plain"))
            yield Served(http, ops)
    finally:
        await runtime.close()


def _workflow(name: str, vertices: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "vertices": {
            f"v{i}": {"type": "GATEWAY", "config": {"url": "https://api.example.com/"}}
            for i in range(vertices)
        },
        **extra,
    }


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def _refusal(answer: httpx.Response, status: int, code: str) -> list[tuple[str, str]]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["code"] == code, body
    return [(p["pointer"], p["code"]) for p in body["details"]["problems"]]


async def _stored_versions(ops: Operations) -> list[str]:
    return [w.name for w in await ops.workflows.list()]


async def test_a_document_over_the_byte_limit(served: Served) -> None:
    big = _workflow("big", description="x" * 5_000)
    problems = _refusal(await served.http.post("/workflows", json=big), 422, "invalid_workflow")
    assert problems == [("", "too_large")]
    assert await _stored_versions(served.ops) == ["plain"]


async def test_a_workflow_over_the_vertex_limit(served: Served) -> None:
    answer = await served.http.post("/workflows", json=_workflow("wide", vertices=4))
    assert _refusal(answer, 422, "invalid_workflow") == [("/vertices", "too_many_vertices")]
    assert await _stored_versions(served.ops) == ["plain"]


async def test_a_body_nested_past_the_limit_is_refused_before_any_route(served: Served) -> None:
    # The workflow's own 4 levels (root, vertices, v0, config) and 5 in the body: 9 > 8.
    deep = _workflow("deep")
    deep["vertices"]["v0"]["config"]["body"] = _nested(5)
    answer = await served.http.post("/workflows", json=deep)
    pointer = "/vertices/v0/config/body/k/k/k/k"
    assert _refusal(answer, 422, "too_deep") == [(pointer, "too_deep")]
    # The same on a route that has nothing to do with workflows, and with a body too deep
    # for the JSON parser itself (which answered 400 without a pointer before).
    keys = await served.http.post("/keys", content=b"[" * 5_000 + b"]" * 5_000, headers=_JSON)
    assert _refusal(keys, 422, "too_deep") == [("", "too_deep")]
    assert await _stored_versions(served.ops) == ["plain"]


_JSON = {"content-type": "application/json"}


async def test_a_run_input_over_the_byte_limit(served: Served) -> None:
    answer = await served.http.post("/workflows/plain/runs", json={"input": {"s": "x" * 600}})
    assert _refusal(answer, 422, "input_too_large") == [("", "too_large")]
    assert "SCHEMABRIDGE_MAX_INPUT_BYTES" in answer.json()["message"]
    assert (await served.ops.runs.list(RunFilter())).items == []


async def test_a_run_input_nested_past_the_limit(served: Served) -> None:
    answer = await served.http.post("/workflows/plain/runs", json={"input": _nested(8)})
    # The body check sees it first: {"input": ...} adds a level, so level 9 is 7 keys down.
    assert _refusal(answer, 422, "too_deep") == [("/input/k/k/k/k/k/k/k", "too_deep")]
    assert (await served.ops.runs.list(RunFilter())).items == []


async def test_limits_at_their_value_pass(served: Served) -> None:
    at_depth = await served.http.post("/workflows/plain/runs", json={"input": _nested(7)})
    assert at_depth.status_code == 201, at_depth.text
    text = json.dumps({"s": ""}, separators=(",", ":"))
    at_size = {"s": "x" * (512 - len(text))}
    answer = await served.http.post("/workflows/plain/runs", json={"input": at_size})
    assert answer.status_code == 201, answer.text
    answer = await served.http.post("/workflows", json=_workflow("three", vertices=3))
    assert answer.status_code == 201, answer.text


async def test_an_unsafe_input_schema_pattern_is_refused_at_publication(served: Served) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "(?=x)"}}}
    answer = await served.http.post("/workflows", json=_workflow("lookahead", inputSchema=schema))
    problems = _refusal(answer, 422, "invalid_workflow")
    assert problems == [("/inputSchema/properties/id/pattern", "unsafe_pattern")]


async def test_a_catastrophic_pattern_cannot_hold_the_api(served: Served) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^(a+)+$"}}}
    published = await served.http.post("/workflows", json=_workflow("evil", inputSchema=schema))
    assert published.status_code == 201
    # 400 characters of 'a' and a '!' fit the input limit; with a backtracking engine this one
    # request would hold the API for longer than the age of the universe.
    hostile = {"input": {"id": "a" * 400 + "!"}}
    answer = await served.http.post("/workflows/evil/runs", json=hostile)
    assert _refusal(answer, 422, "invalid_input") == [("/id", "schema")]


def test_the_documented_defaults() -> None:
    defaults = Settings.model_construct()
    assert (defaults.max_body_bytes, defaults.max_document_bytes) == (10 * 2**20, 2**20)
    assert (defaults.max_input_bytes, defaults.max_nesting_depth) == (256 * 2**10, 64)
    assert (defaults.max_vertices, defaults.max_fanout_items) == (500, 1_000_000)
    assert defaults.max_fanout_input_bytes == 256 * 2**20
    assert defaults.max_response_bytes == 2**20
