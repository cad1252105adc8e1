"""Every error the API answers is JSON with a stable code, over real HTTP: 404, 405, 400
(malformed JSON), 422 (FastAPI's validation, invalid workflows, invalid requests), the
operations' refusals (404/409/422/429/503), and 500 for a bug, whose traceback is logged on the
server and never sent. Every one has the same keys (`code`, `message`, `details`), on both
backends with authentication on. Plus the OpenAPI document: every route declares its error
answers."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel

from api.rest import CallerDep, borrowed_runtime, create_app
from api.rest.app import DEFAULT_ROUTERS
from api.rest.body_shape import JsonBodyRoute
from engine.operations import Operations
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.errors import (
    DefinitionError,
    IdempotencyConflict,
    InvalidRequest,
    LimitReached,
    NotFound,
    Problem,
    Unavailable,
    WrongState,
)
from tests.conftest import Backend
from tests.e2e.rest_harness import access_lines, client, serving
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single

SECRET = "s3cr3t-in-the-traceback"
NOWHERE = "http://127.0.0.1:9/never"
"""Without a worker, a run of this stays RUNNING."""

probe = APIRouter(route_class=JsonBodyRoute)


class Item(BaseModel):
    name: str
    count: int


@probe.post("/probe/items")
async def _create_item(item: Item, limit: int = 10) -> Item:
    return item


@probe.get("/probe/whoami")
async def _whoami(caller: CallerDep) -> dict[str, str]:
    return {"keyId": caller.key_id}


@probe.get("/probe/boom")
async def _boom() -> None:
    raise RuntimeError(f"a bug holding {SECRET}")


REFUSALS: dict[str, Exception] = {
    "not-found": NotFound("no run r1", code="run_not_found"),
    "wrong-state": WrongState("run r1 is RUNNING", state="RUNNING"),
    "conflict": IdempotencyConflict(
        "key k1 names another request", run_id="r1", differs=["input"], input_pointer="/day"
    ),
    "invalid": InvalidRequest(
        "bad input", problems=[Problem("/input/day", "must be a date", code="format")]
    ),
    "queue-full": LimitReached("the ready queue is full", code="queue_full", retry_after_s=4.2),
    "quota": LimitReached("tenant acme has no runs left", code="quota_exceeded"),
    "unavailable": Unavailable("the database is down", code="store_unavailable"),
    "redis-down": Unavailable("Redis is down", code="coordination_unavailable"),
    "not-ready": Unavailable("the API is starting or stopping; try again", code="not_ready"),
    "definition": DefinitionError(
        [
            Problem("/vertices/a/dependsOn/0", "unknown vertex 'x'", code="unknown_dependency"),
            Problem("/name", "name is required", code="required"),
        ]
    ),
}


@probe.get("/probe/refuse/{which}")
async def _refuse(which: str) -> None:
    raise REFUSALS[which]


def _with_probes(runtime: Runtime, *, auth: bool) -> FastAPI:
    """The real routes and the probes, on `runtime`."""
    routers = (*DEFAULT_ROUTERS, probe)
    factory = borrowed_runtime(runtime)
    return create_app(runtime.settings, runtime_factory=factory, auth=auth, routers=routers)


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}")
    runtime = await Runtime.open(settings)
    try:
        async with serving(_with_probes(runtime, auth=False)) as served:
            yield served
    finally:
        await runtime.close()


def _compact(value: Any) -> bytes:
    """`value` as Starlette's JSONResponse writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _is_error(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    body: dict[str, Any] = answer.json()
    assert body["code"] == code
    assert isinstance(body["message"], str) and body["message"]
    assert set(body) == {"code", "message", "details"}, body
    assert isinstance(body["details"], dict), body
    return body


@pytest.fixture
async def authed(backend: Backend) -> AsyncIterator[tuple[str, str, str]]:
    """The real routes (and the probes) with authentication on and a 1 KiB body limit: the
    URL, an admin key and a tenant key."""
    runtime = await Runtime.open(settings_for(backend, max_body_bytes=1024))
    ops = Operations(runtime)
    admin = await ops.keys.create(admin=True, name="errors admin")
    tenant = await ops.keys.create(tenant="acme", name="errors tenant")
    try:
        async with serving(_with_probes(runtime, auth=True)) as served:
            yield served, admin.key, tenant.key
    finally:
        await runtime.close()


async def test_every_error_has_the_same_keys(authed: tuple[str, str, str]) -> None:
    url, admin, tenant = authed
    as_json = {"content-type": "application/json"}
    # (status, code, key, method, path, body): one request per kind of error
    cases: list[tuple[int, str, str | None, str, str, bytes | None]] = [
        (400, "invalid_json", admin, "POST", "/workflows", b"{not json"),
        (401, "unauthorized", None, "GET", "/runs", None),
        (401, "unauthorized", "sbk_wrong", "GET", "/runs", None),
        (403, "forbidden", tenant, "GET", "/keys", None),
        (404, "run_not_found", admin, "GET", f"/runs/{uuid.uuid4()}", None),
        (404, "not_found", admin, "GET", "/no/such/route", None),
        (405, "method_not_allowed", admin, "PUT", "/health", None),
        (413, "body_too_large", admin, "POST", "/workflows", b"[" + b"0," * 2000 + b"0]"),
        (422, "invalid_request", admin, "GET", "/runs?limit=-1", None),
        (422, "invalid_cursor", admin, "GET", "/runs?cursor=dGFtcGVyZWQ", None),
        (422, "too_deep", admin, "POST", "/workflows", b"[" * 200 + b"]" * 200),
        (429, "queue_full", admin, "GET", "/probe/refuse/queue-full", None),
        (503, "store_unavailable", admin, "GET", "/probe/refuse/unavailable", None),
        (500, "internal_error", admin, "GET", "/probe/boom", None),
    ]
    for status, code, key, method, path, body in cases:
        async with client(url, key) as http:
            answer = await http.request(method, path, content=body, headers=as_json)
        details = _is_error(answer, status, code)["details"]
        if code == "invalid_cursor":
            assert details == {"parameter": "cursor"}


async def test_a_body_without_a_live_key_is_401_whatever_the_body(
    authed: tuple[str, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever the body, a request without a live key is told 401, not what is wrong with a
    body it was not allowed to send; with a key, each body gets its own refusal, and the
    access log names the key that sent it."""
    url, _admin, tenant = authed
    as_json = {"content-type": "application/json"}
    bodies = {
        "invalid_json": (400, b"{not json"),
        "too_deep": (422, b"[" * 200 + b"]" * 200),
        "body_too_large": (413, b"[" + b"0," * 2000 + b"0]"),
        "duplicate_key": (422, b'{"input": {"n": 1, "n": 2}}'),
    }
    for key in (None, "sbk_wrong"):
        for body in [body for _, body in bodies.values()]:
            async with client(url, key) as http:
                answer = await http.post("/workflows/w/runs", content=body, headers=as_json)
            _is_error(answer, 401, "unauthorized")
            # Refused before routing, written as the routes' answers are (a tour saw spaces).
            assert answer.content == _compact(answer.json())
    tenant_id = await _key_id(url, tenant)
    with caplog.at_level(logging.INFO):
        for code, (status, body) in bodies.items():
            async with client(url, tenant) as http:
                answer = await http.post("/workflows/w/runs", content=body, headers=as_json)
            _is_error(answer, status, code)
    logged = {(line["status"], line["key_id"]) for line in access_lines(caplog.records)}
    assert logged == {(400, tenant_id), (413, tenant_id), (422, tenant_id)}


async def test_the_key_gate_reads_the_key_the_route_reads(authed: tuple[str, str, str]) -> None:
    """A repeated `Authorization` is read alike with a body or without (the gate and the
    routes read the same headers): two different keys are refused whichever comes first,
    and the same key twice is one key. A GET's body does not make a public route need a
    key."""
    url, admin, _tenant = authed
    document = single("gate", NOWHERE)
    for first, second, status in (
        (admin, "sbk_wrong", 401),
        ("sbk_wrong", admin, 401),
        (admin, admin, 200),
    ):
        headers = [("authorization", f"Bearer {first}"), ("authorization", f"Bearer {second}")]
        async with client(url) as http:
            with_body = await http.post("/workflows/validate", json=document, headers=headers)
            without = await http.get("/keys", headers=headers)
        assert (with_body.status_code, without.status_code) == (status, status), with_body.text
    async with client(url) as http:
        health = await http.request("GET", "/health", content=b"{}")
    assert health.status_code == 200, health.text


async def _key_id(url: str, key: str) -> str:
    """The id of `key` (what the access log names), as the probe route's caller has it."""
    async with client(url, key) as http:
        answer = await http.get("/probe/whoami")
    return str(answer.json()["keyId"])


async def test_unknown_path_is_404_json(url: str) -> None:
    async with client(url) as http:
        for method in ("GET", "POST", "DELETE"):
            _is_error(await http.request(method, "/no/such/route"), 404, "not_found")


async def test_wrong_method_is_405_json_with_allow(url: str) -> None:
    """The methods the path takes are in `Allow` and in the message's one line too: a client
    that logs the body alone is told what to send instead."""
    async with client(url) as http:
        answer = await http.put("/health")
    body = _is_error(answer, 405, "method_not_allowed")
    assert answer.headers["allow"] == "GET"
    assert body["message"] == "/health does not accept PUT; it takes GET"


async def test_a_405_names_the_methods_of_the_path_it_was_sent_to(url: str) -> None:
    """`/keys/current` (GET) also fits the template `/keys/{key_id}` (DELETE): the answer names
    the route the path spells out, not the first template that fit, and a path served by one
    route per method names them all."""
    async with client(url) as http:
        current = await http.post("/keys/current")
        keys = await http.put("/keys")
    body = _is_error(current, 405, "method_not_allowed")
    assert current.headers["allow"] == "GET"
    assert body["message"] == "/keys/current does not accept POST; it takes GET"
    body = _is_error(keys, 405, "method_not_allowed")
    assert keys.headers["allow"] == "GET, POST"
    assert body["message"] == "/keys does not accept PUT; it takes GET, POST"


@pytest.mark.parametrize("body", [b"{not json", b'{"name": "a",}', b"[1, 2", b"\xff\xfe"])
async def test_malformed_json_is_400_invalid_json(url: str, body: bytes) -> None:
    async with client(url) as http:
        answer = await http.post(
            "/probe/items", content=body, headers={"content-type": "application/json"}
        )
    assert "not valid JSON" in _is_error(answer, 400, "invalid_json")["message"]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            b'{"name": "a",\n "tags": [1, 2,],\n "count": 1}',
            "Expecting value (line 2, column 16). The `]` there follows a comma: JSON allows "
            "none after the last item, so remove that comma.",
        ),
        (
            b'{"name": "a",\n}',
            "Expecting property name enclosed in double quotes (line 2, column 1). The `}` "
            "there follows a comma: JSON allows none after the last item, so remove that comma.",
        ),
        (
            b'{"name": "a", "count": 1',
            "Expecting ',' delimiter (line 1, column 25). The document ends too early: was it "
            "cut short?",
        ),
        (
            b"{'name': 'a', 'count': 1}",
            "Expecting property name enclosed in double quotes (line 1, column 2). JSON writes "
            'strings and names in double quotes ("), not single ones.',
        ),
    ],
)
async def test_malformed_json_says_where_by_line_and_column_and_the_likely_cause(
    url: str, body: bytes, said: str
) -> None:
    """As the command line says it of a file (engine.validation.json_text.syntax_reason)."""
    async with client(url) as http:
        answer = await http.post(
            "/probe/items", content=body, headers={"content-type": "application/json"}
        )
    message = _is_error(answer, 400, "invalid_json")["message"]
    assert message == f"the request body is not valid JSON: {said}"


async def test_body_and_parameter_validation_is_422_with_pointers(url: str) -> None:
    async with client(url) as http:
        wrong_body = await http.post("/probe/items", json={"name": 3, "extra": 1})
        wrong_query = await http.post("/probe/items?limit=many", json={"name": "a", "count": 1})
    body = _is_error(wrong_body, 422, "invalid_request")
    problems = {(p["in"], p["pointer"], p["code"]) for p in body["details"]["problems"]}
    assert problems == {("body", "/name", "string_type"), ("body", "/count", "missing")}
    query = _is_error(wrong_query, 422, "invalid_request")
    assert [(p["in"], p["pointer"]) for p in query["details"]["problems"]] == [("query", "/limit")]


async def test_a_repeated_query_parameter_is_422_not_silently_the_last(url: str) -> None:
    async with client(url) as http:
        answer = await http.post("/probe/items?limit=1&limit=2", json={"name": "a", "count": 1})
        once = await http.post("/probe/items?limit=2", json={"name": "a", "count": 1})
    body = _is_error(answer, 422, "invalid_request")
    assert body["details"]["problems"] == [
        {
            "in": "query",
            "pointer": "/limit",
            "code": "repeated",
            "message": "given 2 times; give it once",
        }
    ]
    assert body["message"] == "query /limit: given 2 times; give it once"
    assert once.status_code == 200


async def test_an_unknown_query_parameter_is_422_naming_it_and_the_close_ones(url: str) -> None:
    async with client(url) as http:
        typo = await http.get("/runs?statsu=FAILED")
        unknown = await http.get("/runs?since=yesterday")
        several = await http.get("/runs?since=yesterday&statsu=FAILED&limit=5")
        none_taken = await http.get(f"/runs/{uuid.uuid4()}?verbose=1")
        probe_typo = await http.post("/probe/items?limt=2", json={"name": "a", "count": 1})
        declared = await http.get("/runs?status=FAILED&createdAfter=0&limit=5")
        # Pages for a browser take any query string (a link's tracking, a cache buster).
        page = await http.get("/docs?utm_source=wiki")
        document = await http.get("/openapi.json?v=2")
        # So do the probes' and scrapers' routes: their configurations may add their own.
        probe = await http.get("/health?full=1")
        probe_repeated = await http.get("/health?verbose=1&verbose=2")
        scrape = await http.get("/metrics?format=text")
    body = _is_error(typo, 422, "unknown_query_parameter")
    assert body["message"] == "GET /runs takes no query parameter 'statsu'; did you mean 'status'?"
    assert body["details"]["problems"] == [
        {
            "in": "query",
            "pointer": "/statsu",
            "code": "unknown_query_parameter",
            "message": body["message"],
        }
    ]
    assert {"status", "createdAfter", "limit", "cursor"} <= set(body["details"]["accepted"])
    # Nothing close: the message says what the route takes instead.
    message = _is_error(unknown, 422, "unknown_query_parameter")["message"]
    assert message.startswith("GET /runs takes no query parameter 'since'; it takes workflow,")
    assert "createdAfter" in message
    body = _is_error(several, 422, "unknown_query_parameter")
    assert body["message"].startswith(
        "GET /runs takes none of the query parameters 'since', 'statsu'; it takes workflow,"
    )
    assert [p["pointer"] for p in body["details"]["problems"]] == ["/since", "/statsu"]
    assert "did you mean 'status'?" in body["details"]["problems"][1]["message"]
    assert _is_error(none_taken, 422, "unknown_query_parameter")["message"] == (
        "GET /runs/{run_id} takes no query parameters: leave out 'verbose'"
    )
    assert _is_error(probe_typo, 422, "unknown_query_parameter")["message"] == (
        "POST /probe/items takes no query parameter 'limt'; did you mean 'limit'?"
    )
    assert declared.status_code == 200, declared.text
    assert page.status_code == 200 and document.status_code == 200
    assert probe.status_code == 200 and scrape.status_code == 200, (probe.text, scrape.text)
    # They read no parameter, so a repeated one drops nothing: not refused either (and their
    # OpenAPI declares no 422).
    assert probe_repeated.status_code == 200, probe_repeated.text


async def test_what_the_monitor_and_the_cli_send_is_declared(url: str) -> None:
    """Every query parameter the web monitor's pages and the CLI's client put in a URL (the
    lists' filters, cursors, lookups, `?system=true`, `?limit=5`) is one its route takes."""
    run_id = str(uuid.uuid4())
    async with client(url) as http:
        # `w` is published and has a run: a run list's filter on a workflow never published,
        # or on a parent that is no run, is a 404
        published = await http.post("/workflows", json=single("w", "http://127.0.0.1:9/w"))
        assert published.status_code == 201, published.text
        parent = (await http.post("/workflows/w/runs", json={})).json()["id"]
        every_filter = (
            f"workflow=w&version=1&status=FAILED&route=serving&tenantId=acme&parent={parent}"
            "&roots=false&createdAfter=1&createdBefore=2&limit=50"
        )
        for path in (
            f"/runs?{every_filter}",
            "/runs?roots=true&limit=50",
            "/run-ids?prefix=3f2a9c1e&limit=5",
            "/deployment-ids?prefix=3f2a9c1e&limit=5",
            "/workflows?system=true",
            "/deployments?limit=20",
            "/destinations/history",
        ):
            answer = await http.get(path)
            assert answer.status_code == 200, (path, answer.text)
        for path in (
            f"/runs/{run_id}/children?status=FAILED&limit=100",
            f"/runs/{run_id}/logs?limit=200",
            f"/runs/{run_id}/steps/call/long-tail?limit=5",
        ):
            _is_error(await http.get(path), 404, "run_not_found")


async def test_a_body_that_is_not_json_is_415_saying_which_header_to_send(url: str) -> None:
    document = b'{"input": {"ticket": 1}}'
    async with client(url) as http:
        # curl -d @file: form data, unless told otherwise
        form = await http.post(
            "/workflows/support-ticket/runs",
            content=document,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        untyped = await http.post("/workflows/support-ticket/runs", content=document)
        text = await http.post(
            "/workflows", content=b'{"name": "a"}', headers={"Content-Type": "text/plain"}
        )
        suffixed = await http.post(
            "/probe/items",
            content=b'{"name": "a", "count": 1}',
            headers={"Content-Type": "application/merge-patch+json; charset=utf-8"},
        )
    body = _is_error(form, 415, "unsupported_media_type")
    assert body["message"] == (
        "the body must be JSON sent with the header Content-Type: application/json (this one "
        "had Content-Type: application/x-www-form-urlencoded, what curl -d sends unless told "
        "otherwise)"
    )
    assert body["details"] == {"contentType": "application/x-www-form-urlencoded"}
    body = _is_error(untyped, 415, "unsupported_media_type")
    assert body["message"].endswith("Content-Type: application/json (this one had none)")
    assert body["details"] == {"contentType": None}
    assert (
        "Content-Type: application/json"
        in _is_error(text, 415, "unsupported_media_type")["message"]
    )
    assert suffixed.status_code == 200, suffixed.text


async def test_an_empty_body_is_422_showing_the_body_the_route_takes(url: str) -> None:
    async with client(url) as http:
        submit = await http.post("/workflows/support-ticket/runs")
        typed = await http.post(
            "/workflows/support-ticket/runs", headers={"Content-Type": "application/json"}
        )
        probe_item = await http.post("/probe/items")
        workflow = await http.post("/workflows")
    for answer in (submit, typed):
        body = _is_error(answer, 422, "invalid_request")
        expected = (
            'the request needs a JSON body: {"input": {...}, "tenantId": "...", "version": 1}'
        )
        assert body["message"] == f"body /: {expected}"
        assert body["details"]["problems"] == [
            {"in": "body", "pointer": "", "code": "body_missing", "message": expected}
        ]
    assert _is_error(probe_item, 422, "invalid_request")["message"] == (
        'body /: the request needs a JSON body: {"name": "...", "count": 1} (name, count required)'
    )
    assert _is_error(workflow, 422, "invalid_request")["message"] == (
        "body /: the request needs a JSON body: one workflow document, or a list (a parent "
        "with the child workflows)"
    )


async def test_a_body_that_is_not_an_object_shows_the_object_the_route_takes(url: str) -> None:
    """Not pydantic's "Input should be a valid dictionary or object to extract fields from",
    whose "Input" a submission's author reads as the run's input."""
    submit = "/workflows/support-ticket/runs"
    async with client(url) as http:
        listed = await http.post(submit, json=[{"count": 1}])
        null = await http.post(
            submit, content=b"null", headers={"Content-Type": "application/json"}
        )
        text = await http.post("/probe/items", json="a")
        inner = await http.post("/runs/retry", json={"filter": []})
    shape = '{"input": {...}, "tenantId": "...", "version": 1}'
    for answer, kind in ((listed, "an array"), (null, "null")):
        body = _is_error(answer, 422, "invalid_request")
        said = f"the body must be a JSON object, not {kind}: {shape}"
        assert body["message"] == f"body /: {said}"
        assert body["details"]["problems"] == [
            {"in": "body", "pointer": "", "code": "model_attributes_type", "message": said}
        ]
    assert _is_error(text, 422, "invalid_request")["message"] == (
        'body /: the body must be a JSON object, not a string: {"name": "...", "count": 1} '
        "(name, count required)"
    )
    message = _is_error(inner, 422, "invalid_request")["message"]
    assert message.startswith("body /filter: 'filter' must be a JSON object, not an array: {")
    assert "extract fields" not in message


async def test_a_body_item_and_a_body_bound_are_said_in_words(url: str) -> None:
    """A tour's deployment bodies: a list item that is not an object was named "'0'", as if a
    field; a weight over its bound was pydantic's "Input should be less than or equal to
    100"."""
    async with client(url) as http:
        items = await http.post("/workflows/x/deployments", json={"version": 2, "stages": [50]})
        heavy = {"version": 2, "stages": [{"weight": 150}]}
        bound = await http.post("/workflows/x/deployments", json=heavy)
    message = _is_error(items, 422, "invalid_request")["message"]
    assert message.startswith(
        "body /stages/0: item 0 of 'stages' must be a JSON object, not an integer: {"
    ), message
    message = _is_error(bound, 422, "invalid_request")["message"]
    assert message == "body /stages/0/weight: should be at most 100, not 150", message


async def test_an_unknown_body_field_is_offered_the_close_field_names(url: str) -> None:
    async with client(url) as http:
        tenant = await http.post(
            "/workflows/support-ticket/runs", json={"input": {}, "tenant": "acme"}
        )
        snake = await http.post("/runs/retry", json={"ids": [], "limitt": 5})
        nested = await http.post("/runs/retry", json={"filter": {"statuss": "FAILED"}})
        far = await http.put("/tenants/acme/limits", json={"burst": 5})
    body = _is_error(tenant, 422, "invalid_request")
    assert body["message"] == "body /tenant: 'tenant' is not a field here; did you mean 'tenantId'?"
    assert body["details"]["problems"][0]["code"] == "extra_forbidden"
    assert _is_error(snake, 422, "invalid_request")["message"] == (
        "body /limitt: 'limitt' is not a field here; did you mean 'limit'?"
    )
    assert _is_error(nested, 422, "invalid_request")["message"] == (
        "body /filter/statuss: 'statuss' is not a field here; did you mean 'status'?"
    )
    assert _is_error(far, 422, "invalid_request")["message"] == (
        "body /burst: 'burst' is not a field here; the fields here are ratePerMinute, maxRuns"
    )


async def test_status_and_route_filters_take_any_case(url: str) -> None:
    async with client(url) as http:
        published = await http.post("/workflows", json=single("one", NOWHERE))
        assert published.status_code == 201, published.text
        submitted = await http.post("/workflows/one/runs", json={"input": {}})
        assert submitted.status_code == 201, submitted.text
        run_id = submitted.json()["id"]
        listed = {
            status: await http.get(f"/runs?status={status}&route=Serving")
            for status in ("RUNNING", "running", "Running")
        }
        failed = await http.get("/runs?status=failed")
        children = await http.get(f"/runs/{run_id}/children?status=failed")
        retried = await http.post("/runs/retry", json={"filter": {"status": "failed"}})
        unknown = await http.get("/runs?status=flailed")
        sideways = await http.get("/runs?route=candidat")
    for status, answer in listed.items():
        assert answer.status_code == 200, (status, answer.text)
        assert [run["id"] for run in answer.json()["items"]] == [run_id], status
    assert failed.status_code == 200 and failed.json()["items"] == []
    assert children.status_code == 200 and children.json()["items"] == []
    assert retried.status_code == 200 and retried.json()["retried"] == []
    refused = _is_error(unknown, 422, "invalid_filter")
    assert refused["message"] == (
        "unknown run status 'flailed' (did you mean 'FAILED'?); one of CANCELLED, FAILED, "
        "RUNNING, SUCCEEDED (any case)"
    )
    assert _is_error(sideways, 422, "invalid_filter")["message"] == (
        "unknown route 'candidat' (did you mean 'candidate'?); one of candidate, pinned, "
        "serving, start_over, system (any case)"
    )
    # The parameter and the values it takes, as `invalid_cursor` names its parameter.
    assert refused["details"] == {
        "parameter": "status",
        "accepted": ["CANCELLED", "FAILED", "RUNNING", "SUCCEEDED"],
    }


@pytest.mark.parametrize(
    ("which", "status", "code"),
    [
        ("not-found", 404, "run_not_found"),
        ("wrong-state", 409, "wrong_state"),
        ("conflict", 409, "idempotency_conflict"),
        ("invalid", 422, "invalid_request"),
        ("queue-full", 429, "queue_full"),
        ("quota", 429, "quota_exceeded"),
        ("unavailable", 503, "store_unavailable"),
        ("redis-down", 503, "coordination_unavailable"),
        ("not-ready", 503, "not_ready"),
    ],
)
async def test_operation_refusals_map_by_category(
    url: str, which: str, status: int, code: str
) -> None:
    async with client(url) as http:
        answer = await http.get(f"/probe/refuse/{which}")
    body = _is_error(answer, status, code)
    assert body["message"] == REFUSALS[which].args[0]
    if which == "queue-full":
        assert answer.headers["retry-after"] == "5"  # 4.2 s, rounded up
        assert body["details"] == {"retryAfterS": 4.2}
    elif status == 503:
        # Every 503 says when to come back: a process starting or stopping is replaced
        # within a second, a database or Redis outage is asked again after 5 s.
        assert answer.headers["retry-after"] == ("1" if code == "not_ready" else "5")
        assert body["details"] == {}
    else:
        assert "retry-after" not in answer.headers
    if which == "wrong-state":
        assert body["details"] == {"state": "RUNNING"}
    if which == "conflict":
        assert body["details"] == {"runId": "r1", "differs": ["input"], "inputPointer": "/day"}
    if which == "invalid":
        assert body["details"]["problems"] == [
            {"pointer": "/input/day", "code": "format", "message": "must be a date"}
        ]


async def test_invalid_workflow_is_422_with_every_problem(url: str) -> None:
    async with client(url) as http:
        answer = await http.get("/probe/refuse/definition")
    body = _is_error(answer, 422, "invalid_workflow")
    assert body["details"]["problems"] == [
        {"pointer": "/name", "code": "required", "message": "name is required"},
        {
            "pointer": "/vertices/a/dependsOn/0",
            "code": "unknown_dependency",
            "message": "unknown vertex 'x'",
        },
    ]


async def test_a_bug_is_500_and_its_traceback_stays_on_the_server(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        async with client(url) as http:
            answer = await http.get("/probe/boom")
            after = await http.get("/health")
    body = _is_error(answer, 500, "internal_error")
    assert SECRET not in answer.text and "Traceback" not in answer.text
    assert after.status_code == 200, "the server goes on serving"
    logged = [r for r in caplog.records if r.exc_info and SECRET in str(r.exc_info[1])]
    assert len(logged) == 1, "the traceback is logged once, on the server"
    assert body["message"].startswith("an unexpected error")
    statuses = [(line["route"], line["status"]) for line in access_lines(caplog.records)]
    assert ("/probe/boom", 500) in statuses


ERROR_REF = "#/components/schemas/ErrorBody"
OWN_ERROR_MODELS = {
    ("/health", "503"): ["#/components/schemas/HealthReport"],
    # `?wait=true`'s outcomes: their own models, `code` a constant (a 409 may also be an
    # `idempotency_conflict`, an ErrorBody).
    ("/workflows/{name}/runs", "409"): ["#/components/schemas/RunCancelledError", ERROR_REF],
    ("/runs/{run_id}/steps/{vertex_id}/resolve", "409"): [
        "#/components/schemas/RunCancelledError",
        ERROR_REF,
    ],
    ("/runs/{run_id}/reprocess", "409"): ["#/components/schemas/RunCancelledError", ERROR_REF],
    ("/workflows/{name}/runs", "502"): ["#/components/schemas/RunFailedError"],
    ("/workflows/{name}/runs", "504"): ["#/components/schemas/RunStillRunningError"],
}
"""Error answers documented with a model other than `ErrorBody`."""


async def test_openapi_declares_error_answers_for_every_route(url: str) -> None:
    async with client(url) as http:
        document = (await http.get("/openapi.json")).json()
        docs = await http.get("/docs")
        redoc = await http.get("/redoc")
        script = await http.get("/docs/assets/swagger-ui-bundle.js")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    # Served from here: the pages name no other host (a machine may have no way out).
    for page in (docs, redoc):
        assert page.status_code == 200 and "http" not in page.text.replace("http-equiv", "")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.text[:2000]
    schemas = document["components"]["schemas"]
    assert "ErrorBody" in schemas
    assert "HTTPValidationError" not in schemas, "422 answers are ErrorBody, not FastAPI's own"
    for path, path_item in document["paths"].items():
        for method, operation in path_item.items():
            answers = operation["responses"]
            assert any(s.startswith("2") for s in answers), (method, path)
            assert "500" in answers, (method, path)
            # Any route refuses a query parameter it does not take, but the probed ones,
            # which take any query string (load balancers and scrapers may add their own).
            if path in ("/health", "/metrics"):
                assert "422" not in answers, (method, path)
            else:
                assert "unknown_query_parameter" in answers["422"]["description"], (method, path)
            if "requestBody" in operation:
                assert "400" in answers, (method, path)
                assert "unsupported_media_type" in answers["415"]["description"], (method, path)
            for status, answer in answers.items():
                if not status.startswith(("4", "5")):
                    continue
                schema = answer["content"]["application/json"]["schema"]
                refs = [s["$ref"] for s in schema.get("anyOf", [schema])]
                assert refs == OWN_ERROR_MODELS.get((path, status), [ERROR_REF]), (
                    method,
                    path,
                    status,
                )
    key_routes = document["paths"]["/keys"]
    assert {"400", "401", "403", "422"} <= set(key_routes["post"]["responses"])
    created = key_routes["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert created["$ref"].endswith("/CreatedApiKey")
    assert "422" in document["paths"]["/probe/refuse/{which}"]["get"]["responses"]


async def test_the_statuses_no_operation_declares_are_described_at_the_top(url: str) -> None:
    """A route answers 405, 408 and 431 whatever it is (the method, the request's head), so
    no operation declares them; a client user reads `info.description` for them, and for the
    conventions every operation shares (keys, errors, times, pages)."""
    async with client(url) as http:
        document = (await http.get("/openapi.json")).json()
    declared = {
        status
        for path_item in document["paths"].values()
        for operation in path_item.values()
        for status in operation["responses"]
    }
    described = " ".join(document["info"]["description"].split())
    for status, code in [("405", "method_not_allowed"), ("408", "request_timeout")]:
        assert status not in declared and f"{status} `{code}`" in described, status
    assert "431 `headers_too_large`" in described
    for convention in ["Authorization: Bearer", "`cursor`", "epoch seconds", "`tenantId`"]:
        assert convention in described, convention


async def test_every_parameter_is_described_and_a_name_means_one_thing(url: str) -> None:
    """A generated client turns each parameter into an argument whose docstring is its
    `description`; an undescribed `limit` or `key` leaves its user to guess what it counts or
    how a destination is spelled. And a path parameter named alike in one collection
    (`run_id` on a run's page and on its retry) takes the same values: the same schema, so an
    over-long id is the same 422 on every route, not a 422 on one and a 404 on the other."""
    async with client(url) as http:
        document = (await http.get("/openapi.json")).json()
    undescribed: list[tuple[str, str, str]] = []
    schemas: dict[tuple[str, str], dict[str, list[str]]] = {}
    for path, path_item in document["paths"].items():
        if path.startswith("/probe/"):  # this test's own routes
            continue
        for method, operation in path_item.items():
            for parameter in operation.get("parameters", []):
                if not parameter.get("description"):
                    undescribed.append((method, path, parameter["name"]))
                if parameter["in"] == "path":
                    schema = {k: v for k, v in parameter["schema"].items() if k != "description"}
                    shape = json.dumps(schema, sort_keys=True)
                    # Within one collection: a secret's `name` is not a workflow's.
                    named = (path.split("/")[1], parameter["name"])
                    schemas.setdefault(named, {}).setdefault(shape, []).append(path)
    assert undescribed == []
    assert {name: shapes for name, shapes in schemas.items() if len(shapes) > 1} == {}
    async with client(url) as http:
        long_id = "a" * 65
        read = await http.get(f"/runs/{long_id}")
        retried = await http.post(f"/runs/{long_id}/retry")
    assert read.status_code == retried.status_code == 422, (read.text, retried.text)
    assert retried.json()["details"]["problems"][0]["pointer"] == "/run_id"


async def test_every_get_route_answers_head_as_its_get_without_the_body(
    authed: tuple[str, str, str],
) -> None:
    """HEAD is GET without the body (RFC 9110, 9.3.2): an uptime monitor probing `HEAD /runs`
    was told 405 and read the API as down. Same status, type and length, the key checked the
    same way; a streamed answer (a run's events) ends at once."""
    url, admin, tenant = authed
    as_admin = {"Authorization": f"Bearer {admin}"}
    async with client(url) as http:
        published = await http.post("/workflows", json=single("head", NOWHERE), headers=as_admin)
        assert published.status_code == 201, published.text
        run = await http.post("/workflows/head/runs", json={"input": {}}, headers=as_admin)
        run_id = run.json()["id"]
        for path, key in (
            ("/runs?limit=5", admin),
            ("/workflows/head", admin),
            (f"/runs/{run_id}", admin),
            (f"/runs/{run_id}", tenant),  # another tenant's run: 404, as for GET
            ("/runs", None),  # no key: 401
            ("/destinations", tenant),  # an admin route: 403
            ("/health", None),
        ):
            headers = {} if key is None else {"Authorization": f"Bearer {key}"}
            got = await http.get(path, headers=headers)
            head = await http.head(path, headers=headers)
            assert (head.status_code, head.content) == (got.status_code, b""), path
            for header in ("content-type", "content-length"):
                assert head.headers[header] == got.headers[header], (path, header)
        refused = await http.head(f"/runs/{run_id}/retry", headers=as_admin)  # POST only
        assert (refused.status_code, refused.headers["allow"]) == (405, "POST")
        streamed = await asyncio.wait_for(
            http.head(f"/runs/{run_id}/events", headers=as_admin), timeout=10
        )
        assert (streamed.status_code, streamed.content) == (200, b"")
        assert streamed.headers["content-type"].startswith("text/event-stream")


async def test_a_query_without_a_live_key_is_401_whatever_the_query(
    authed: tuple[str, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """As for a body: a request without a live key is told 401, not which query parameters
    the route takes; with a key, the query gets its 422 (a tenant key on an admin route its
    403), and the access log names the key (it said `key_id` null). A public route still
    takes any query string."""
    url, admin, tenant = authed
    queries = ("/runs?statsu=FAILED", "/runs?status=FAILED&status=RUNNING", "/keys?zz=1")
    for key in (None, "sbk_wrong"):
        for path in queries:
            async with client(url, key) as http:
                answer = await http.get(path)
            _is_error(answer, 401, "unauthorized")
    tenant_id = await _key_id(url, tenant)
    with caplog.at_level(logging.INFO):
        async with client(url, tenant) as http:
            _is_error(await http.get(queries[0]), 422, "unknown_query_parameter")
            _is_error(await http.get(queries[1]), 422, "invalid_request")
            # An admin route tells a tenant key it may not use it, whatever its query or body.
            _is_error(await http.get(queries[2]), 403, "forbidden")
            text = {"content-type": "text/plain"}
            _is_error(await http.post("/keys", content=b"admin", headers=text), 403, "forbidden")
            twice = b'{"admin": true, "admin": false}'
            as_json = {"content-type": "application/json"}
            _is_error(await http.post("/keys", content=twice, headers=as_json), 403, "forbidden")
    logged = [(line["status"], line["key_id"]) for line in access_lines(caplog.records)]
    assert logged == [(422, tenant_id)] * 2 + [(403, tenant_id)] * 3, logged
    async with client(url, admin) as http:
        _is_error(
            await http.post("/keys", content=b"admin", headers=text), 415, "unsupported_media_type"
        )
    async with client(url, admin) as http:
        _is_error(await http.get(queries[2]), 422, "unknown_query_parameter")
    async with client(url) as http:
        assert (await http.get("/health?full=1")).status_code == 200
