"""A run that was started over, over real HTTP (uvicorn on loopback), on both backends: its
retry is a 409 `started_over` naming the new run and its status, its retry preview says so,
and a batch retry (by ids, by filter) and its preview skip it; the start over's own preview
says what it would do before, and the run it made after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from api.rest import borrowed_runtime, create_app
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.actions_harness import failed_chain, requests_by_path
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run


@dataclass
class Api:
    url: str
    runtime: Runtime
    admin_key: str


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    runtime = await Runtime.open(settings_for(backend))
    admin = await Operations(runtime).keys.create(admin=True)
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
    try:
        async with serving(app) as url:
            yield Api(url, runtime, admin.key)
    finally:
        await runtime.close()


async def test_every_retry_of_a_run_started_over_is_refused(
    api: Api, downstream: RunningDownstream
) -> None:
    old = await failed_chain(api.runtime, downstream)
    async with client(api.url, api.admin_key) as http:
        ahead = (await http.get(f"/runs/{old}/start-over/preview")).json()
        assert ahead == {
            "runId": old,
            "status": "FAILED",
            "startable": True,
            "newRunId": None,
            "message": "would start a new run of v1 with the same input",
            "warnings": [],
        }
        started = await http.post(f"/runs/{old}/start-over")
        new = started.json()["newRunId"]
        again = (await http.get(f"/runs/{old}/start-over/preview")).json()
        assert (again["startable"], again["newRunId"]) == (False, new)
        unknown = await http.get("/runs/no-such-run/start-over/preview")
        assert (unknown.status_code, unknown.json()["code"]) == (404, "run_not_found")
        async with running_worker(api.runtime):
            assert (await wait_for_run(api.runtime, new)).status == "SUCCEEDED"
        sent = requests_by_path(downstream)

        retry = await http.post(f"/runs/{old}/retry")
        assert retry.status_code == 409, retry.text
        body = retry.json()
        assert body["code"] == "started_over"
        assert body["details"] == {
            "state": "FAILED",
            "runId": old,
            "startedOverRun": old,
            "newRunId": new,
            "newRunStatus": "SUCCEEDED",
        }
        assert f"started over as run {new}, SUCCEEDED" in body["message"]

        preview = (await http.get(f"/runs/{old}/retry/preview")).json()
        assert (preview["retriable"], preview["warnings"]) == (False, [body["message"]])

        by_ids = (await http.post("/runs/retry", json={"ids": [old]})).json()
        assert by_ids["retried"] == []
        assert [(s["reason"], s["message"]) for s in by_ids["skipped"]] == [
            ("started_over", body["message"])
        ]
        counted = (await http.post("/runs/retry/preview", json={"filter": {}})).json()
        assert counted["matching"] == 0
        assert [(s["reason"], s["count"]) for s in counted["skipped"]] == [("started_over", 1)]
        by_filter = (await http.post("/runs/retry", json={"filter": {}})).json()
        assert [s["reason"] for s in by_filter["skipped"]] == ["started_over"]

        # No dead letter to revive: a reprocess does nothing, as before (one that would revive
        # some is refused too: tests/integration/test_started_over_actions.py).
        reprocess = await http.post(f"/runs/{old}/reprocess")
        assert (reprocess.status_code, reprocess.json()["changed"]) == (200, False)
    assert requests_by_path(downstream) == sent


async def test_run_lists_name_the_run_a_start_over_made(
    api: Api, downstream: RunningDownstream
) -> None:
    """A FAILED run already started over read as any other failure in `GET /runs`: only the
    new run linked the two (`restartedFrom`). The old one names the new one (`startedOverAs`)
    in the list and in its detail, null on any other run, as the answer model says: a field
    always sent, so required, and nullable."""
    old = await failed_chain(api.runtime, downstream)
    other = await failed_chain(api.runtime, downstream)
    async with client(api.url, api.admin_key) as http:
        new = (await http.post(f"/runs/{old}/start-over")).json()["newRunId"]
        listed = (await http.get("/runs")).json()["items"]
        failed = (await http.get("/runs", params={"status": "FAILED"})).json()["items"]
        detail = (await http.get(f"/runs/{old}")).json()
        new_detail = (await http.get(f"/runs/{new}")).json()
        document = (await http.get("/openapi.json")).json()
    assert [(r["id"], r["startedOverAs"], r["restartedFrom"]) for r in listed] == [
        (new, None, old),
        (other, None, None),
        (old, new, None),
    ]
    assert [(r["id"], r["startedOverAs"]) for r in failed] == [(other, None), (old, new)]
    assert (detail["startedOverAs"], detail["restarts"]) == (new, [new])
    assert new_detail["startedOverAs"] is None
    summary = document["components"]["schemas"]["RunSummary"]
    assert "startedOverAs" in summary["required"]
    assert summary["properties"]["startedOverAs"]["anyOf"] == [
        {"type": "string"},
        {"type": "null"},
    ]
