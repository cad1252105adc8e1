"""A key written twice in one JSON object is refused by every REST route that takes a body,
over real HTTP on both backends: 422 `duplicate_key` with the key's pointer, before the route
runs, so nothing is stored (`json.loads` would keep the last value without a word: a
`"method": "POST", "method": "DELETE"` published as DELETE, an input's amount 1 run as 100).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter

from api.rest import body_shape, create_app
from engine.operations.views import RunFilter
from engine.settings import Settings
from engine.validation import loads_checked
from schemas.errors import Problem
from tests.conftest import Backend
from tests.e2e.rest_body_harness import JSON, Served, plain_api

_TWO_METHODS = b"""{"name": "twice", "vertices": {"call": {"type": "GATEWAY",
  "config": {"url": "https://api.example.com/", "method": "POST", "method": "DELETE"}}}}"""


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    async with plain_api(backend) as api:
        yield api


def _duplicates(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["code"] == "duplicate_key", body
    problems = body["details"]["problems"]
    assert {(p["code"], p["in"]) for p in problems} == {("duplicate_key", "body")}
    return [p["pointer"] for p in problems]


@pytest.mark.parametrize("path", ["/workflows", "/workflows/validate", "/workflows/preview"])
async def test_a_workflow_with_a_key_twice_is_refused(served: Served, path: str) -> None:
    answer = await served.http.post(path, content=_TWO_METHODS, headers=JSON)
    assert _duplicates(answer) == ["/vertices/call/config/method"]
    message = answer.json()["message"]
    assert message.startswith("body /vertices/call/config/method: ")
    assert '"method" appears more than once' in message
    assert [w.name for w in await served.ops.workflows.list()] == ["plain"]


async def test_in_a_list_each_duplicate_is_pointed_at(served: Served) -> None:
    listed = b"[" + _TWO_METHODS + b", " + _TWO_METHODS.replace(b"twice", b"again") + b"]"
    answer = await served.http.post("/workflows", content=listed, headers=JSON)
    assert _duplicates(answer) == [
        "/0/vertices/call/config/method",
        "/1/vertices/call/config/method",
    ]
    assert "(and 1 more)" in answer.json()["message"]


async def test_a_run_input_with_a_key_twice_is_refused(served: Served) -> None:
    body = b'{"input": {"amount": 1, "amount": 100}}'
    answer = await served.http.post("/workflows/plain/runs", content=body, headers=JSON)
    assert _duplicates(answer) == ["/input/amount"]
    assert (await served.ops.runs.list(RunFilter())).items == []


async def test_a_resolved_output_with_a_key_twice_is_refused(served: Served) -> None:
    # Refused before the route looks for the run: the body is wrong whatever the run is.
    body = b'{"output": {"status": 200, "status": 500}}'
    answer = await served.http.post("/runs/r1/steps/v/resolve", content=body, headers=JSON)
    assert _duplicates(answer) == ["/output/status"]


async def test_the_same_key_in_different_objects_is_not_a_duplicate(served: Served) -> None:
    body = b'{"input": {"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]}}'
    answer = await served.http.post("/workflows/plain/runs", content=body, headers=JSON)
    assert answer.status_code == 201, answer.text
    run = await served.ops.runs.get(answer.json()["id"])
    assert run.input == {"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]}


async def test_other_refusals_of_a_body_come_first(served: Served) -> None:
    # Not sent as JSON: 415, as before; not JSON at all: 400, as before.
    form = await served.http.post(
        "/workflows", content=_TWO_METHODS, headers={"content-type": "text/plain"}
    )
    assert (form.status_code, form.json()["code"]) == (415, "unsupported_media_type")
    broken = await served.http.post("/workflows", content=_TWO_METHODS[:-1], headers=JSON)
    assert (broken.status_code, broken.json()["code"]) == (400, "invalid_json")


async def test_a_body_is_parsed_once(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    # FastAPI's parse is the one that finds the duplicates: no second parse per request.
    parsed: list[bytes | str] = []

    def counted(text: bytes | str) -> tuple[Any, list[Problem]]:
        parsed.append(text)
        return loads_checked(text)

    monkeypatch.setattr(body_shape, "loads_checked", counted)
    body = b'{"input": {"amount": 1}}'
    answer = await served.http.post("/workflows/plain/runs", content=body, headers=JSON)
    assert answer.status_code == 201, answer.text
    twice = b'{"input": {"amount": 1, "amount": 100}}'
    refused = await served.http.post("/workflows/plain/runs", content=twice, headers=JSON)
    assert _duplicates(refused) == ["/input/amount"]
    assert parsed == [body, twice]


def test_a_router_whose_body_routes_could_not_say_so_is_refused() -> None:
    plain = APIRouter()

    @plain.post("/echo")
    async def _echo(value: dict[str, int]) -> dict[str, int]:
        return value

    with pytest.raises(TypeError, match="POST /echo takes a body: its router must be"):
        create_app(Settings(), routers=(plain,))
