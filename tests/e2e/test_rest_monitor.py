"""The routes the web run monitor added, over real HTTP with authentication on, both backends:
a fan-out's long tail, the progress column of `GET /runs`, the destinations' history, the
editor's preview, and `/ui` itself (served to anyone: the page asks for a key when the API
answers 401)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from demo.downstream import RunningDownstream
from tests.conftest import Backend
from tests.e2e.rest_runs_harness import Api, api_on, assert_error
from tests.integration.operations_harness import ended, fanout, items


@pytest.fixture
async def api(backend: Backend, downstream: RunningDownstream) -> AsyncIterator[Api]:
    async with api_on(backend, worker=True) as served:
        await served.ops.workflows.publish(fanout(downstream.url))
        yield served


async def test_long_tail_and_progress_of_a_fan_out(api: Api) -> None:
    async with api.http(api.acme) as http:
        submitted = await http.post("/workflows/parent/runs", json={"input": {"items": items(6)}})
        run_id = submitted.json()["id"]
        await ended(api.ops, run_id)
        tail = await http.get(f"/runs/{run_id}/steps/each/long-tail", params={"limit": 2})
        listed = await http.get("/runs", params={"roots": "true"})
        assert_error(await http.get(f"/runs/{run_id}/steps/join/long-tail"), 422, "not_a_spawner")
        assert_error(await http.get(f"/runs/{run_id}/steps/nope/long-tail"), 404, "step_not_found")
        assert_error(
            await http.get(f"/runs/{run_id}/steps/each/long-tail", params={"limit": 51}),
            422,
            "invalid_request",
        )
    assert tail.status_code == 200, tail.text
    body = tail.json()
    assert (body["total"], body["ended"], len(body["slowest"])) == (6, 6, 2)
    assert body["p50S"] <= body["p95S"] <= body["p99S"] <= body["maxS"]
    assert body["slowest"][0]["durationS"] >= body["slowest"][1]["durationS"]
    assert body["slowest"][0]["run"]["parentRunId"] == run_id
    (row,) = [r for r in listed.json()["items"] if r["id"] == run_id]
    assert row["progress"] == {
        "steps": 2,
        "stepsDone": 2,
        "children": {"total": 6, "succeeded": 6, "failed": 0, "cancelled": 0},
        "waiting": None,  # it ended: no step of it waits
    }
    async with api.http(api.globex) as http:  # another tenant's run does not exist for it
        other = await http.get(f"/runs/{run_id}/steps/each/long-tail")
    assert_error(other, 404, "run_not_found")


async def test_the_destinations_history_is_for_admins(api: Api) -> None:
    async with api.http(api.admin) as http:
        answer = await http.get("/destinations/history")
        one = await http.get("/destinations/history", params={"destination": "http://x:1"})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["intervalS"], answer.json()["windowS"]) == (2.0, 600.0)
    assert one.json()["series"] == [{"destination": "http://x:1", "points": []}]
    async with api.http(api.acme) as http:
        assert_error(await http.get("/destinations/history"), 403, "forbidden")
    async with api.http(None) as http:
        assert_error(await http.get("/destinations/history"), 401, "unauthorized")


async def test_preview_answers_problems_and_graphs(api: Api) -> None:
    draft = {
        "name": "d",
        "vertices": {"a": {"type": "GATEWAY", "dependsOn": ["zz"], "config": {"url": "x"}}},
    }
    async with api.http(api.acme) as http:
        answer = await http.post("/workflows/preview", json=draft)
        listed = await http.post("/workflows/preview", json=[draft, draft])
        assert_error(await http.post("/workflows/preview", json="text"), 422, "invalid_request")
    body = answer.json()
    assert body["valid"] is False
    assert {p["pointer"] for p in body["problems"]} >= {"/vertices/a/dependsOn/0"}
    assert [n["id"] for n in body["graphs"][0]["nodes"]] == ["a"]
    assert body["graphs"][0]["version"] == 0
    assert len(listed.json()["graphs"]) == 2


async def test_the_monitor_is_served_without_a_key(api: Api) -> None:
    async with api.http(None) as http:
        page = await http.get("/ui/")
        script = await http.get("/ui/js/app.js")
        root = await http.get("/")
        runs = await http.get("/runs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert root.status_code == 307 and root.headers["location"] == "/ui/"
    assert_error(runs, 401, "unauthorized")  # the data still needs a key


async def test_the_api_reference_pages_cannot_be_framed(api: Api) -> None:
    """`/docs` (Swagger UI, which takes a key and sends requests with it) and `/redoc` had
    none of the monitor's headers: any site could frame them."""
    async with api.http(None) as http:
        pages = [await http.get("/docs"), await http.get("/redoc")]
    for page in pages:
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"


async def test_the_monitor_config_names_no_downstream_outside_the_demo(api: Api) -> None:
    """Only `serve --demo` has a demo downstream for the editor's starter document (the demo
    case is tests/e2e/test_ui_monitor.py)."""
    async with api.http(None) as http:
        config = await http.get("/ui/config")
    assert config.status_code == 200, config.text
    assert config.json() == {"demoDownstream": None}
