"""The `/workflows` routes over real HTTP, on both backends: publish (admin keys only; 201 new,
200 identical), validate, list, versions, one version, its graph, and every refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import Backend
from tests.e2e.rest_runs_harness import Api, api_on, assert_error
from tests.integration.operations_harness import fanout, single

URL = "http://127.0.0.1:9/never"


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    async with api_on(backend, worker=False) as served:
        yield served


def broken() -> dict[str, Any]:
    """Two problems: an unknown vertex type and a dependency on a missing vertex."""
    return {
        "name": "broken",
        "vertices": {
            "a": {"type": "TELEPORT", "config": {}},
            "b": {"type": "GATEWAY", "dependsOn": ["nowhere"], "config": {"url": URL}},
        },
    }


def serves(version: int) -> dict[str, Any]:
    """The serving fields of a publish's result for a version that serves new runs."""
    return {"serving": True, "servingVersion": version, "hint": None}


async def test_publish_new_then_identical_then_changed(api: Api) -> None:
    async with api.http(api.admin) as http:
        first = await http.post("/workflows", json=single("one", URL))
        again = await http.post("/workflows", json=single("one", URL))
        changed = await http.post("/workflows", json=single("one", URL + "/2"))
        both = await http.post("/workflows", json=fanout(URL))
    assert first.status_code == 201, first.text
    assert first.json() == {"name": "one", "version": 1, "created": True, **serves(1)}
    assert again.status_code == 200
    assert again.json() == {"name": "one", "version": 1, "created": False, **serves(1)}
    assert changed.status_code == 201
    assert changed.json()["version"] == 2
    assert both.status_code == 201
    assert [(r["name"], r["version"]) for r in both.json()] == [("parent", 1), ("child", 1)]


async def test_a_later_version_says_it_does_not_serve_and_how_to_make_it(api: Api) -> None:
    async with api.http(api.admin) as http:
        first = (await http.post("/workflows", json=single("one", URL))).json()
        changed = (await http.post("/workflows", json=single("one", URL + "/2"))).json()
        # A list answers per document: one's v3 waits, a new workflow serves at once.
        both = (
            await http.post("/workflows", json=[single("one", URL + "/3"), single("two", URL)])
        ).json()
        latest = (await http.get("/workflows/one")).json()
        first_version = (await http.get("/workflows/one/versions/1")).json()
        listed = (await http.get("/workflows")).json()["items"]
        switched = await http.post("/workflows/one/serving", json={"version": 2})
        now = (await http.get("/workflows/one")).json()
        again = (await http.post("/workflows", json=single("one", URL + "/3"))).json()
    assert first["serving"] is True and first["hint"] is None
    assert (changed["version"], changed["serving"], changed["servingVersion"]) == (2, False, 1)
    assert changed["hint"] == (
        "one v2 is NOT serving yet: new runs get v1. Deploy it: `schemabridge deployments "
        'start one --version 2` (`POST /workflows/one/deployments` with `{"version": 2}`); '
        "or, as an admin, make it serve at once: `schemabridge workflows serving one 2` "
        '(`POST /workflows/one/serving` with `{"version": 2}`)'
    )
    assert [(r["name"], r["version"], r["serving"]) for r in both] == [
        ("one", 3, False),
        ("two", 1, True),
    ]
    assert both[0]["hint"].startswith("one v3 is NOT serving yet: new runs get v1. Deploy it:")
    assert both[1]["hint"] is None
    # The latest version is not the one new runs get, and the read says so.
    assert (latest["version"], latest["servingVersion"]) == (3, 1)
    assert (first_version["version"], first_version["servingVersion"]) == (1, 1)
    assert {w["name"]: w["servingVersion"] for w in listed}["one"] == latest["servingVersion"]
    assert switched.status_code == 200, switched.text
    assert now["servingVersion"] == 2
    # v3 again: unchanged, still not serving (v2 does now), and the hint says so.
    assert (again["version"], again["created"], again["serving"]) == (3, False, False)
    assert again["hint"].startswith("one v3 is NOT serving yet: new runs get v2.")


async def test_reads_of_workflows_versions_and_graphs(api: Api) -> None:
    async with api.http(api.admin) as http:
        await http.post("/workflows", json=single("one", URL))
        await http.post("/workflows", json=single("one", URL + "/2"))
        await http.post("/workflows", json=fanout(URL))
    async with api.http(api.acme) as http:  # a tenant key reads the shared workflows
        listed = await http.get("/workflows")
        latest = await http.get("/workflows/one")
        versions = await http.get("/workflows/one/versions")
        first = await http.get("/workflows/one/versions/1")
        graph = await http.get("/workflows/parent/versions/1/graph")
    assert listed.status_code == 200
    by_name = {w["name"]: w for w in listed.json()["items"]}
    assert sorted(by_name) == ["child", "one", "parent"]
    assert (by_name["one"]["latestVersion"], by_name["one"]["versions"]) == (2, 2)
    assert latest.json()["version"] == 2
    assert latest.json()["document"]["vertices"]["call"]["config"]["url"] == URL + "/2"
    assert [v["version"] for v in versions.json()["items"]] == [2, 1]
    assert first.json()["document"]["vertices"]["call"]["config"]["url"] == URL
    assert first.json()["definitionHash"] == versions.json()["items"][1]["definitionHash"]
    body = graph.json()
    assert {n["id"]: n["layer"] for n in body["nodes"]} == {"each": 0, "join": 1}
    assert body["edges"] == [{"source": "each", "target": "join"}]


async def test_invalid_workflow_lists_every_problem_and_stores_nothing(api: Api) -> None:
    async with api.http(api.admin) as http:
        refused = await http.post("/workflows", json=broken())
        in_list = await http.post("/workflows", json=[single("fine", URL), broken()])
        listed = await http.get("/workflows")
    body = assert_error(refused, 422, "invalid_workflow")
    problems = body["details"]["problems"]
    assert len(problems) >= 2
    pointers = {p["pointer"] for p in problems}
    assert any(p.startswith("/vertices/a") for p in pointers), problems
    assert any(p.startswith("/vertices/b") for p in pointers), problems
    assert all(p["code"] and p["message"] for p in problems)
    listed_problems = assert_error(in_list, 422, "invalid_workflow")["details"]["problems"]
    assert all(p["pointer"].startswith("/1/") for p in listed_problems), listed_problems
    assert listed.json()["items"] == [], "nothing is published from an invalid request"


async def test_an_input_schema_no_input_can_match_is_refused_at_publication(api: Api) -> None:
    n = {"type": "integer", "minimum": 5, "maximum": 2}
    impossible = {"type": "object", "required": ["n"], "properties": {"n": n}}
    async with api.http(api.admin) as http:
        refused = await http.post("/workflows", json=single("never", URL, inputSchema=impossible))
        listed = await http.get("/workflows")
    [problem] = assert_error(refused, 422, "invalid_workflow")["details"]["problems"]
    assert (problem["pointer"], problem["code"]) == (
        "/inputSchema/properties/n/minimum",
        "unsatisfiable_schema",
    )
    assert "lower minimum or raise maximum" in problem["message"]
    assert listed.json()["items"] == []


async def test_a_timeout_no_http_call_can_meet_is_refused_at_publication(api: Api) -> None:
    hasty = single("hasty", URL)
    hasty["vertices"]["call"]["config"]["timeoutMs"] = 1
    async with api.http(api.admin) as http:
        refused = await http.post("/workflows", json=hasty)
    [problem] = assert_error(refused, 422, "invalid_workflow")["details"]["problems"]
    assert problem == {
        "pointer": "/vertices/call/config/timeoutMs",
        "code": "schema",
        "message": "timeoutMs must be at least 100; got 1.",
    }


async def test_validate_reports_without_publishing(api: Api) -> None:
    async with api.http(api.acme) as http:
        good = await http.post("/workflows/validate", json=single("one", URL))
        bad = await http.post("/workflows/validate", json=broken())
        listed = await http.get("/workflows")
    assert good.status_code == 200
    assert good.json() == {"valid": True, "problems": []}
    assert bad.status_code == 200
    assert bad.json()["valid"] is False
    assert {p["code"] for p in bad.json()["problems"]} and all(
        p["pointer"].startswith("/vertices/") for p in bad.json()["problems"]
    )
    assert listed.json()["items"] == []


async def test_a_spawner_pinned_to_a_missing_child_version_is_refused(api: Api) -> None:
    parent, child = fanout(URL)
    parent["vertices"]["each"]["config"]["workflow"] = "child@5"
    async with api.http(api.admin) as http:
        await http.post("/workflows", json=child)
        checked = await http.post("/workflows/validate", json=parent)
        refused = await http.post("/workflows", json=parent)
        listed = await http.get("/workflows")
    [problem] = assert_error(refused, 422, "invalid_workflow")["details"]["problems"]
    assert (problem["pointer"], problem["code"]) == (
        "/vertices/each/config/workflow",
        "unknown_workflow_version",
    )
    assert "child has no version 5: its only version is 1" in problem["message"]
    assert checked.json() == {"valid": False, "problems": [problem]}
    assert [w["name"] for w in listed.json()["items"]] == ["child"]


async def test_publish_needs_an_admin_key(api: Api) -> None:
    async with api.http(api.acme) as http:
        tenant = await http.post("/workflows", json=single("one", URL))
    async with api.http(None) as http:
        anonymous = await http.post("/workflows", json=single("one", URL))
        anonymous_read = await http.get("/workflows")
    assert_error(tenant, 403, "forbidden")
    assert_error(anonymous, 401, "unauthorized")
    assert_error(anonymous_read, 401, "unauthorized")
    assert await api.ops.workflows.list() == []


async def test_unknown_names_versions_and_malformed_requests(api: Api) -> None:
    async with api.http(api.admin) as http:
        await http.post("/workflows", json=single("one", URL))
        no_name = await http.get("/workflows/nope")
        no_versions = await http.get("/workflows/nope/versions")
        no_version = await http.get("/workflows/one/versions/7")
        no_graph = await http.get("/workflows/one/versions/7/graph")
        zero = await http.get("/workflows/one/versions/0")
        text = await http.get("/workflows/one/versions/abc")
        malformed = await http.post(
            "/workflows", content=b'{"name": ', headers={"Content-Type": "application/json"}
        )
        wrong_type = await http.post("/workflows", json="a workflow")
        wrong_items = await http.post("/workflows/validate", json=[1, 2])
        await http.post("/workflows", json=single("orders-export", URL))
        typos = [
            await http.get("/workflows/orders-exprot"),
            await http.get("/workflows/orders-exprot/versions"),
            await http.get("/workflows/orders-exprot/versions/1/graph"),
            await http.post("/workflows/orders-exprot/runs", json={}),
        ]
    for answer in (no_name, no_versions, no_version, no_graph):
        assert_error(answer, 404, "workflow_not_found")
        assert "did you mean" not in answer.json()["message"]  # nothing close, or the version
    hint = "; did you mean 'orders-export'?"
    said = [f"no published workflow 'orders-exprot'{v}{hint}" for v in ("", "", " version 1", "")]
    for answer, message in zip(typos, said, strict=True):  # the API says which names were meant
        body = assert_error(answer, 404, "workflow_not_found")
        assert (body["message"], body["details"]["meant"]) == (message, ["orders-export"])
    for answer in (zero, text):
        body = assert_error(answer, 422, "invalid_request")
        assert body["details"]["problems"][0]["in"] == "path"
    assert_error(malformed, 400, "invalid_json")
    # Said of the request, in JSON's words: never pydantic's names of the union's members.
    body = assert_error(wrong_type, 422, "invalid_request")
    assert body["message"] == "body /: Input should be a JSON object or a JSON array"
    assert [(p["pointer"], p["code"]) for p in body["details"]["problems"]] == [("", "dict_type")]
    # A list whose items are wrong: each item is named, not also "the body is not an object".
    body = assert_error(wrong_items, 422, "invalid_request")
    assert body["message"] == "body /0: Input should be a JSON object; 1 more problem in details"
    assert [p["pointer"] for p in body["details"]["problems"]] == ["/0", "/1"]
