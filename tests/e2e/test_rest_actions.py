"""Operator actions over real HTTP (uvicorn on loopback), on both backends, with a real worker
and the demo downstream: retry, resolve, start over, batch retry, reprocess, cancel; who did it
in the run's log; tenant scope (another tenant's run is 404); wrong state is 409 with a `code`
and the state; bad input is 4xx with a code."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from sqlalchemy import update

from api.rest import borrowed_runtime, create_app
from api.rest.run_models import RunCancelledError
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from engine.store.models import Run
from schemas.batch_limits import DEFAULT_BATCH
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.actions_harness import (
    action_lines,
    failed_chain,
    failed_fan_out,
    failed_runs,
    fix_first_warning,
    requests_by_path,
    single,
    submit,
    succeeded_over_a_dead_letter,
    succeeded_with_a_report,
)
from tests.integration.engine_harness import running_worker, settings_for, wait_for_run
from vertices.gateway import destination_key


@dataclass
class Api:
    url: str
    ops: Operations
    runtime: Runtime
    admin_key: str
    acme_key: str
    acme_key_id: str
    globex_key: str


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    runtime = await Runtime.open(settings_for(backend))
    ops = Operations(runtime)
    admin = await ops.keys.create(admin=True)
    acme = await ops.keys.create(tenant="acme")
    globex = await ops.keys.create(tenant="globex")
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
    try:
        async with serving(app) as url:
            yield Api(url, ops, runtime, admin.key, acme.key, acme.id, globex.key)
    finally:
        await runtime.close()


async def test_retry_by_the_runs_tenant_is_logged_with_its_key(
    api: Api, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(api.runtime, downstream, tenant_id="acme")
    async with client(api.url, api.globex_key) as other:
        hidden = await other.post(f"/runs/{run_id}/retry")
    assert hidden.status_code == 404 and hidden.json()["code"] == "run_not_found"
    async with client(api.url, api.acme_key) as http, running_worker(api.runtime):
        answer = await http.post(f"/runs/{run_id}/retry")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["runId"], body["action"], body["changed"]) == (run_id, "retry", True)
        assert (body["status"], body["stepsRetried"]) == ("RUNNING", 1)
        run = await wait_for_run(api.runtime, run_id)
        assert run.status == "SUCCEEDED"
        again = await http.post(f"/runs/{run_id}/retry")
    assert again.status_code == 409
    assert again.json()["code"] == "run_not_failed"
    assert again.json()["details"] == {"state": "SUCCEEDED", "runId": run_id}
    (line,) = await action_lines(api.runtime, run_id)
    assert line["data"] == {"action": "retry", "actor": f"key:{api.acme_key_id}"}


async def test_resolve_supplies_the_output_and_the_run_goes_on(
    api: Api, downstream: RunningDownstream
) -> None:
    run_id = await failed_chain(api.runtime, downstream)
    path = f"/runs/{run_id}/steps/b/resolve"
    async with client(api.url, api.admin_key) as http:
        missing = await http.post(path, json={})
        assert missing.status_code == 422 and missing.json()["code"] == "invalid_request"
        assert missing.json()["message"] == "body /: 'output' is required (null is a valid output)"
        malformed = await http.post(
            path, content=b'{"output": ', headers={"content-type": "application/json"}
        )
        assert malformed.status_code == 400 and malformed.json()["code"] == "invalid_json"
        unknown = await http.post(f"/runs/{run_id}/steps/zz/resolve", json={"output": 1})
        assert unknown.status_code == 404 and unknown.json()["code"] == "step_not_found"
        assert unknown.json()["message"] == f"run {run_id} has no step zz; its steps: a, b, c"
        assert unknown.json()["details"] == {"meant": [], "steps": ["a", "b", "c"]}
        not_failed = await http.post(f"/runs/{run_id}/steps/a/resolve", json={"output": 1})
        assert not_failed.status_code == 409
        assert not_failed.json()["code"] == "step_not_failed"
        assert not_failed.json()["details"] == {
            "state": "SUCCEEDED",
            "runId": run_id,
            "vertexId": "a",
        }
        output = {"status": 200, "body": {"path": "/resolved"}, "headers": {}}
        async with running_worker(api.runtime):
            answer = await http.post(path, json={"output": output})
            assert answer.status_code == 200, answer.text
            assert (answer.json()["vertexId"], answer.json()["changed"]) == ("b", True)
            run = await wait_for_run(api.runtime, run_id)
        assert run.status == "SUCCEEDED"
        same = await http.post(path, json={"output": output})
        assert same.status_code == 200 and same.json()["changed"] is False
        other = await http.post(path, json={"output": None})
        assert other.status_code == 409
        assert other.json()["code"] == "step_already_resolved"
        assert other.json()["details"] == {"state": "RESOLVED", "runId": run_id, "vertexId": "b"}
    (line,) = await action_lines(api.runtime, run_id)
    assert line["data"]["action"] == "resolve" and line["data"]["actor"].startswith("key:")


async def test_a_cancelled_run_is_run_cancelled_with_the_details_wait_answers(
    api: Api, downstream: RunningDownstream
) -> None:
    """Resolve and reprocess answer a CANCELLED run with `run_cancelled` and the `details`
    every `run_cancelled` has (`runId`, `state`: `?wait=true`'s model, its extras optional)."""
    run_id = await submit(api.runtime, [single(downstream.url)], {})  # no worker: RUNNING
    await api.ops.actions.cancel(run_id, actor="test")
    async with client(api.url, api.admin_key) as http:
        answers = [
            await http.post(f"/runs/{run_id}/steps/call/resolve", json={"output": 1}),
            await http.post(f"/runs/{run_id}/reprocess"),
        ]
    for answer in answers:
        assert answer.status_code == 409, answer.text
        assert answer.json()["code"] == "run_cancelled"
        assert answer.json()["details"] == {"runId": run_id, "state": "CANCELLED"}
        RunCancelledError.model_validate(answer.json())


async def test_a_resolved_output_is_bounded_like_a_gateways_kept_response(
    api: Api, downstream: RunningDownstream
) -> None:
    # The brief's case: `runs resolve … --output @big.json` with 3 MB, over the 1 MiB a
    # GATEWAY step keeps of a response (MAX_RESPONSE_BYTES, default 1 MiB).
    limit = api.runtime.settings.max_response_bytes
    assert limit == 1_048_576
    run_id = await failed_chain(api.runtime, downstream)
    path = f"/runs/{run_id}/steps/b/resolve"
    envelope = len(json.dumps({"s": ""}, separators=(",", ":")))
    async with client(api.url, api.admin_key) as http:
        big = await http.post(path, json={"output": {"s": "x" * 3_000_000}})
        assert big.status_code == 422, big.text
        body = big.json()
        assert body["code"] == "output_too_large"
        assert body["message"] == (
            f"The output is {3_000_000 + envelope:,} bytes as compact JSON, over the limit of "
            "1,048,576; the limit is SCHEMABRIDGE_MAX_RESPONSE_BYTES, the most of a response a "
            "GATEWAY step keeps: resolve with a smaller output or raise it."
        )
        assert [(p["pointer"], p["code"]) for p in body["details"]["problems"]] == [
            ("", "too_large")
        ]
        steps = {s.vertex_id: s.status for s in await api.runtime.store.get_steps(run_id)}
        assert steps["b"] == "FAILED"  # nothing changed
        over = await http.post(path, json={"output": {"s": "x" * (limit - envelope + 1)}})
        assert over.json()["code"] == "output_too_large"
        at_limit = await http.post(path, json={"output": {"s": "x" * (limit - envelope)}})
        assert at_limit.status_code == 200, at_limit.text
        assert at_limit.json()["changed"] is True


async def test_start_over_and_cancel(api: Api, downstream: RunningDownstream) -> None:
    running = await submit(api.runtime, [single(downstream.url)], {"n": 1})  # no worker yet
    async with client(api.url, api.admin_key) as http:
        early = await http.post(f"/runs/{running}/start-over")
        assert early.status_code == 409
        assert (early.json()["code"], early.json()["details"]) == (
            "run_not_ended",
            {"state": "RUNNING", "runId": running},
        )
        cancelled = await http.post(f"/runs/{running}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert (cancelled.json()["status"], cancelled.json()["runsCancelled"]) == (
            "CANCELLED",
            1,
        )
        steps = cancelled.json()["stepsCancelled"]
        assert steps >= 1
        assert cancelled.json()["message"] == f"cancelled ({steps} step{'' if steps == 1 else 's'})"
        twice = await http.post(f"/runs/{running}/cancel")
        assert twice.status_code == 200 and twice.json()["changed"] is False
        started = await http.post(f"/runs/{running}/start-over")
        assert started.status_code == 200, started.text
        new_id = started.json()["newRunId"]
        assert new_id != running and started.json()["changed"] is True
        again = await http.post(f"/runs/{running}/start-over")
        assert again.json()["newRunId"] == new_id and again.json()["changed"] is False
        async with running_worker(api.runtime):
            run = await wait_for_run(api.runtime, new_id)
        assert run.status == "SUCCEEDED" and run.input == {"n": 1}
        ended = await http.post(f"/runs/{new_id}/cancel")
        assert ended.status_code == 409
        assert (ended.json()["code"], ended.json()["details"]) == (
            "run_ended",
            {"state": "SUCCEEDED", "runId": new_id},
        )
    actions = [line["data"]["action"] for line in await action_lines(api.runtime, running)]
    assert actions == ["cancel", "start_over"]


async def test_reprocess_reruns_the_dead_letters(api: Api, downstream: RunningDownstream) -> None:
    async with running_worker(api.runtime):
        parent_id = await failed_fan_out(api.runtime, downstream, 3, failing={1})
        async with client(api.url, api.admin_key) as http:
            answer = await http.post(f"/runs/{parent_id}/reprocess")
            assert answer.status_code == 200, answer.text
            assert (answer.json()["revived"], answer.json()["changed"]) == (1, True)
            run = await wait_for_run(api.runtime, parent_id)
            assert run.status == "SUCCEEDED"
            nothing = await http.post(f"/runs/{parent_id}/reprocess")
    assert nothing.status_code == 200 and nothing.json()["changed"] is False


async def test_a_batch_reprocess_over_http_keeps_to_the_keys_tenant(
    api: Api, downstream: RunningDownstream
) -> None:
    async with running_worker(api.runtime):
        mine = await failed_fan_out(api.runtime, downstream, 3, failing={1}, tenant_id="acme")
        theirs = await failed_fan_out(api.runtime, downstream, 3, failing={2}, tenant_id="globex")
        async with client(api.url, api.acme_key) as http:
            answer = await http.post("/runs/reprocess", json={"ids": [theirs, mine]})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["reprocessed"] == [{"runId": mine, "revived": 1, "status": "RUNNING"}]
            assert body["revived"] == 1
            assert body["skipped"] == [
                {
                    "runId": theirs,
                    "reason": "run_not_found",
                    "state": None,
                    "message": f"no run {theirs!r}",
                }
            ]
            assert (body["warnings"], body["breakers"]) == ([], [])
            assert (await wait_for_run(api.runtime, mine)).status == "SUCCEEDED"
            # The operations layer's words, not pydantic's "List should have at least 1 item".
            empty = await http.post("/runs/reprocess", json={"ids": []})
            assert (empty.status_code, empty.json()["code"]) == (422, "invalid_batch")
            assert empty.json()["message"] == "give the ids of the runs to reprocess"
            many = await http.post("/runs/reprocess", json={"ids": [mine] * 1_001})
            assert (many.status_code, many.json()["code"]) == (422, "too_many_runs")
            assert "1,001 runs asked for" in many.json()["message"]
            unknown_field = await http.post("/runs/reprocess", json={"filter": {}})
            assert unknown_field.status_code == 422
    assert (await api.ops.runs.get(theirs)).status == "FAILED"
    (line,) = await action_lines(api.runtime, mine)
    assert line["data"] == {"action": "reprocess", "actor": f"key:{api.acme_key_id}"}


async def test_a_reprocess_of_a_succeeded_fan_out_is_previewed_and_warns(
    api: Api, downstream: RunningDownstream
) -> None:
    """The integrator's case over HTTP: 500 children, 4 FAILED and tolerated, the run
    SUCCEEDED and /report sent once. `GET /runs/{id}/reprocess/preview` says, changing and
    sending nothing, which children run again, that the run reopens and that `report` calls
    its destination again; `POST /runs/{id}/reprocess` answers the same warning (as a retry
    says the run it reopens), the run's log says who did it, and /report is sent again."""
    destination = destination_key(downstream.url, None)
    async with running_worker(api.runtime):
        parent = await succeeded_with_a_report(api.runtime, downstream, 500, {0, 41, 260, 499})
        async with client(api.url, api.admin_key) as http:
            preview = await http.get(f"/runs/{parent}/reprocess/preview")
            assert requests_by_path(downstream)["/report"] == 1
            logged = await action_lines(api.runtime, parent)
            answer = await http.post(f"/runs/{parent}/reprocess")
            documented = (await http.get("/openapi.json")).json()["paths"]
        async with client(api.url, api.globex_key) as http:
            foreign = await http.get(f"/runs/{parent}/reprocess/preview")
        run = await wait_for_run(api.runtime, parent, timeout_s=60)
    assert run.status == "SUCCEEDED" and requests_by_path(downstream)["/report"] == 2
    assert logged == [], "the preview logs no action"
    assert preview.status_code == 200, preview.text
    said = preview.json()
    assert (said["reprocessable"], said["status"], said["revived"]) == (True, "SUCCEEDED", 4)
    assert [child["itemIndex"] for child in said["deadLetters"]] == [0, 41, 260, 499]
    assert (said["reopenedRun"], said["reopenedJoin"]) == (parent, "join")
    assert said["reopenedJoins"] == [
        {
            "runId": parent,
            "join": "join",
            "spawner": "each",
            "above": False,
            "ended": "SUCCEEDED",
            "stepsAgain": [
                {"vertexId": "report", "type": "GATEWAY", "destinations": [destination]}
            ],
        }
    ]
    warning = (
        f"run {parent} had SUCCEEDED and runs again from its join 'join': the steps after that "
        f"join run a second time: report (calls {destination})"
    )
    assert said["warnings"] == [warning]
    assert answer.status_code == 200, answer.text
    done = answer.json()
    assert (done["revived"], done["warnings"], done["reopenedRun"]) == (4, [warning], parent)
    assert done["reopenedJoins"] == said["reopenedJoins"]
    (line,) = await action_lines(api.runtime, parent)
    assert line["data"]["actor"].startswith("key:"), line
    assert "the run, which had SUCCEEDED, runs again from its join 'join'" in line["message"]
    assert (foreign.status_code, foreign.json()["code"]) == (404, "run_not_found")
    assert "get" in documented["/runs/{run_id}/reprocess/preview"]


async def test_a_child_run_refuses_a_start_over_saying_what_to_do(
    api: Api, downstream: RunningDownstream
) -> None:
    """A child of a fan-out is a 409 with a code and its state, like the other refusals of an
    action in the wrong state: retry it (when FAILED) or start over its parent."""
    async with running_worker(api.runtime):
        parent_id = await failed_fan_out(api.runtime, downstream, 2, failing={0})
    (failed,) = await api.runtime.store.children(parent_id, status="FAILED")
    (succeeded,) = await api.runtime.store.children(parent_id, status="SUCCEEDED")
    async with client(api.url, api.admin_key) as http:
        for child, state, instead in [
            (failed.id, "FAILED", f"retry it, or start over its parent {parent_id}"),
            (succeeded.id, "SUCCEEDED", f"start over its parent {parent_id} instead"),
        ]:
            answer = await http.post(f"/runs/{child}/start-over")
            assert answer.status_code == 409, answer.text
            body = answer.json()
            assert (body["code"], body["details"]) == (
                "start_over_child_run",
                {"state": state, "runId": child},
            )
            assert body["message"] == (
                f"run {child} is a child run, which cannot be started over alone; {instead}"
            )
    assert await api.runtime.store.count_runs() == 3, "nothing was created"


async def test_batch_retry_by_ids_and_by_filter(api: Api, downstream: RunningDownstream) -> None:
    acme = await failed_chain(api.runtime, downstream, tenant_id="acme")
    running = await submit(api.runtime, [single(downstream.url)], {}, tenant_id="acme")
    async with client(api.url, api.acme_key) as http:
        by_ids = await http.post("/runs/retry", json={"ids": [acme, running, "nope"]})
        assert by_ids.status_code == 200, by_ids.text
        assert by_ids.json()["retried"] == [acme]
        assert by_ids.json()["skipped"] == [
            {
                "runId": running,
                "reason": "run_not_failed",
                "state": "RUNNING",
                "message": f"run {running} is RUNNING; only a FAILED run can be retried",
            },
            {"runId": "nope", "reason": "run_not_found", "state": None, "message": "no run 'nope'"},
        ]
        both = await http.post("/runs/retry", json={"ids": [acme], "filter": {}})
        assert both.status_code == 422 and both.json()["code"] == "invalid_batch"
        neither = await http.post("/runs/retry", json={})
        assert neither.status_code == 422 and neither.json()["code"] == "invalid_batch"
        wrong_type = await http.post("/runs/retry", json={"ids": "abc"})
        assert wrong_type.status_code == 422 and wrong_type.json()["code"] == "invalid_request"
        too_big = await http.post("/runs/retry", json={"ids": [acme], "limit": 0})
        assert too_big.status_code == 422
        unknown_field = await http.post("/runs/retry", json={"filter": {"colour": "red"}})
        assert unknown_field.status_code == 422
        assert unknown_field.json()["details"]["problems"][0]["pointer"] == "/filter/colour"
    await cancel_all(api, [acme, running])
    second = await failed_chain(api.runtime, downstream, tenant_id="acme")
    async with client(api.url, api.globex_key) as http:
        others = await http.post("/runs/retry", json={"filter": {"tenantId": "acme"}})
        # Naming another tenant is refused, not answered with an empty batch.
        assert (others.status_code, others.json()["code"]) == (403, "tenant_forbidden")
    assert (await wait_for_run(api.runtime, second)).status == "FAILED"
    assert await action_lines(api.runtime, second) == [], "the refused batch retried nothing"
    async with client(api.url, api.acme_key) as http:
        # `tenant`, the filter's old name for `tenantId`, is still taken (deprecated)
        both = {"tenant": "acme", "tenantId": "globex"}
        conflict = await http.post("/runs/retry", json={"filter": both})
        assert conflict.status_code == 422, conflict.text
        assert "give only `tenantId`" in conflict.json()["message"]
        old_name = {"workflow": "chain", "tenant": "acme"}
        mine = await http.post("/runs/retry", json={"filter": old_name})
        assert mine.status_code == 200 and mine.json()["retried"] == [second]


async def test_a_batch_retry_of_a_version_never_published_is_refused(
    api: Api, downstream: RunningDownstream
) -> None:
    """A filter naming a version (or workflow) never published matches no run ever: the
    batch and its preview answer 404 `workflow_not_found` naming the versions there are,
    not "0 runs", and document it."""
    await failed_chain(api.runtime, downstream)
    missing = {"filter": {"workflow": "chain", "version": 99}}
    async with client(api.url, api.admin_key) as http:
        answers = [await http.post(path, json=missing) for path in BATCH_PATHS]
        documented = (await http.get("/openapi.json")).json()["paths"]
    for path, answer in zip(BATCH_PATHS, answers, strict=True):
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json() == {
            "code": "workflow_not_found",
            "message": "workflow 'chain' has no version 99; its only version is 1",
            "details": {"versions": [1]},
        }
        assert "workflow_not_found" in documented[path]["post"]["responses"]["404"]["description"]


BATCH_PATHS = ("/runs/retry/preview", "/runs/retry")


async def test_a_batch_retry_takes_a_deployments_exposure_as_the_list_shows_it(
    api: Api,
) -> None:
    """`GET /runs?workflow=W&version=V&route=candidate&createdAfter=…&createdBefore=…` lists a
    deployment's exposure; a batch retry's filter took no `route`, so the same runs could not
    be retried alone. It takes the list's filter now, window and route included."""
    runs = await failed_runs(api.runtime, ["http_error"] * 4, name="exposed")
    table = Run.__table__  # type: ignore[attr-defined]
    async with api.runtime.store._engines.write.begin() as conn:
        await conn.execute(update(table).where(table.c.id.in_(runs[1:])).values(route="candidate"))
    until = (await api.ops.runs.get(runs[3])).created_at  # exclusive: the newest is out
    exposure = {
        "workflow": "exposed",
        "version": 1,
        "route": "Candidate",  # any case, as the list takes it
        "createdAfter": (await api.ops.runs.get(runs[0])).created_at,
        "createdBefore": until,
    }
    async with client(api.url, api.admin_key) as http:
        listed = await http.get("/runs", params=exposure)
        preview = await http.post("/runs/retry/preview", json={"filter": exposure})
        typo = await http.post("/runs/retry", json={"filter": {**exposure, "route": "canidate"}})
        retried = await http.post("/runs/retry", json={"filter": exposure})
    assert listed.status_code == 200, listed.text
    shown = {run["id"] for run in listed.json()["items"]}
    assert shown == {runs[1], runs[2]}
    assert preview.status_code == 200, preview.text
    assert (preview.json()["matching"], preview.json()["truncated"]) == (2, False)
    assert (typo.status_code, typo.json()["code"]) == (422, "invalid_filter"), typo.text
    assert "unknown route 'canidate' (did you mean 'candidate'?)" in typo.json()["message"]
    assert retried.status_code == 200, retried.text
    assert set(retried.json()["retried"]) == shown and retried.json()["skipped"] == []
    assert [await action_lines(api.runtime, run) for run in (runs[0], runs[3])] == [[], []]


async def test_a_batch_retry_preview_counts_what_a_filter_would_take(
    api: Api, downstream: RunningDownstream
) -> None:
    """`POST /runs/retry/preview` counts the runs a batch retry with the same filter would
    take (FAILED ones, unless it names a status), up to `limit`, and retries nothing. A tenant
    key counts its own tenant's runs only: a filter naming another tenant is refused (403
    `tenant_forbidden`), for the preview and the batch alike. A filter a list refuses is
    refused the same way; the route is documented."""
    acme = [await failed_chain(api.runtime, downstream, tenant_id="acme") for _ in range(2)]
    globex = await failed_chain(api.runtime, downstream, tenant_id="globex")
    running = await submit(api.runtime, [single(downstream.url)], {}, tenant_id="acme")
    async with client(api.url, api.admin_key) as http:
        everything = (await http.post("/runs/retry/preview", json={"filter": {}})).json()
        capped = (await http.post("/runs/retry/preview", json={"filter": {}, "limit": 2})).json()
        broken = await http.post("/runs/retry/preview", json={"filter": {"status": "BROKEN"}})
        bodiless = await http.post("/runs/retry/preview", json={"limit": 5})
        openapi = (await http.get("/openapi.json")).json()
        documented = openapi["paths"]
    async with client(api.url, api.acme_key) as http:
        mine = (await http.post("/runs/retry/preview", json={"filter": {}})).json()
        # By ids, as the monitor's "Retry selected" asks: another tenant's id is unknown.
        picked = {"ids": [acme[0], running, globex]}
        by_ids = (await http.post("/runs/retry/preview", json=picked)).json()
        both = await http.post("/runs/retry/preview", json={**picked, "filter": {}})
        named = {"filter": {"tenant": "globex"}}
        theirs = await http.post("/runs/retry/preview", json=named)
        retry_theirs = await http.post("/runs/retry", json=named)
    async with client(api.url, api.globex_key) as http:
        globex_own = (await http.post("/runs/retry/preview", json={"filter": {}})).json()
    assert everything == {
        "matching": 3,
        "skipped": [],
        "limit": DEFAULT_BATCH,  # the batch's own default: it counts what the batch takes
        "truncated": False,
        "warnings": [],
        "breakers": [],
        "fixFirst": [],
        "stuck": {"count": 0, "runIds": [], "message": None, "cancelled": 0},
    }
    assert (capped["matching"], capped["limit"], capped["truncated"]) == (2, 2, True)
    assert (broken.status_code, broken.json()["code"]) == (422, "invalid_filter")
    assert (bodiless.status_code, bodiless.json()["code"]) == (422, "invalid_batch")
    assert (mine["matching"], mine["truncated"]) == (2, False)
    assert by_ids["matching"] == 1
    assert sorted((s["reason"], s.get("state"), s["count"]) for s in by_ids["skipped"]) == [
        ("run_not_failed", "RUNNING", 1),
        ("run_not_found", None, 1),
    ]
    assert (both.status_code, both.json()["code"]) == (422, "invalid_batch")
    assert both.json()["message"] == "give either ids or a filter: both ids and a filter were given"
    assert bodiless.json()["message"] == "give either ids or a filter: neither was given"
    for refused in (theirs, retry_theirs):
        assert (refused.status_code, refused.json()["code"]) == (403, "tenant_forbidden")
        assert "not 'globex'" in refused.json()["message"]
    assert globex_own["matching"] == 1
    route = documented["/runs/retry/preview"]["post"]
    assert {"200", "403", "422"} <= set(route["responses"])
    assert "403" in documented["/runs/retry"]["post"]["responses"]
    bodies = openapi["components"]["schemas"]
    for body in ("BatchRetryRequest", "BatchRetryPreviewRequest"):
        assert bodies[body]["properties"]["limit"]["default"] == DEFAULT_BATCH, body
    for run_id in [*acme, globex]:
        assert (await wait_for_run(api.runtime, run_id)).status == "FAILED"
        assert await action_lines(api.runtime, run_id) == [], "a preview retries nothing"
    await cancel_all(api, [running])


async def test_a_batch_retry_preview_warns_of_runs_that_fail_the_same_way(api: Api) -> None:
    """The tour: "Retry all matching" retried a run that failed with invalid_config, which
    failed again at once, and its preview had said nothing. Of a batch matching that run and
    one that failed on its destination (http_error), the preview warns of exactly the first,
    as data too; the batch itself still retries both."""
    config, http = await failed_runs(api.runtime, ["invalid_config", "http_error"])
    body = {"filter": {"workflow": "kinds", "status": "FAILED"}}
    async with client(api.url, api.admin_key) as http_client:
        answer = await http_client.post("/runs/retry/preview", json=body)
        assert answer.status_code == 200, answer.text
        preview = answer.json()
        batch = (await http_client.post("/runs/retry", json=body)).json()
    assert preview["matching"] == 2
    assert preview["fixFirst"] == [{"kind": "invalid_config", "count": 1, "runIds": [config]}]
    assert preview["warnings"] == [
        fix_first_warning("1 of the 2 runs failed with invalid_config", [config])
    ]
    assert http not in preview["warnings"][0]
    assert sorted(batch["retried"]) == sorted([config, http])


async def test_a_batch_retry_preview_names_the_runs_whose_joins_fail_again(
    api: Api, downstream: RunningDownstream
) -> None:
    """The tour: the monitor's batch dialogs read `POST /runs/retry/preview`, which answered
    `warnings: []` for a fan-out whose join fails again at once; the batch then listed it in
    `stuck`. By filter and by ids, the preview says it first, as data and in a sentence."""
    chain = await failed_chain(api.runtime, downstream)
    async with running_worker(api.runtime):
        fan_out = await failed_fan_out(api.runtime, downstream, 3, failing={1})
    by_filter = {"filter": {"status": "FAILED"}}
    async with client(api.url, api.admin_key) as http:
        answers = [
            await http.post("/runs/retry/preview", json=body)
            for body in (by_filter, {"ids": [chain, fan_out]})
        ]
        batch = (await http.post("/runs/retry", json=by_filter)).json()
    for answer in answers:
        assert answer.status_code == 200, answer.text
        preview = answer.json()
        assert preview["matching"] == 2
        stuck = preview["stuck"]
        assert (stuck["count"], stuck["runIds"]) == (1, [fan_out])
        assert preview["warnings"] == [stuck["message"]]
        assert stuck["message"].startswith("1 of the 2 runs has a join that fails again at once")
        assert (
            '"Reprocess dead letters" on it (`schemabridge runs reprocess RUN`)'
            in (stuck["message"])
        )
        assert stuck["message"].endswith(f"; run: {fan_out}")
    assert [stuck["runId"] for stuck in batch["stuck"]] == [fan_out]


async def test_a_batch_by_filter_leaves_a_finished_runs_dead_letter_alone(
    api: Api, downstream: RunningDownstream
) -> None:
    """The tour: globex's `{"filter": {"status": "FAILED"}}` retried the tolerated FAILED
    child of a SUCCEEDED fan-out, and its report was sent a second time."""
    async with running_worker(api.runtime):
        parent, child = await succeeded_over_a_dead_letter(
            api.runtime, downstream, tenant_id="globex"
        )
    ended = (await api.runtime.store.get_run(parent)).ended_at  # type: ignore[union-attr]
    sent = downstream.stats.total
    async with client(api.url, api.globex_key) as http:
        listed = await http.get("/runs", params={"status": "FAILED", "roots": "true"})
        assert listed.json()["items"] == []
        batch = await http.post("/runs/retry", json={"filter": {"status": "FAILED"}})
        assert batch.status_code == 200, batch.text
        assert batch.json() == {
            "retried": [],
            "skipped": [],
            "truncated": False,
            "stuck": [],
            "warnings": [],
            "breakers": [],
        }
        # `rootsOnly`, the field's name before `roots`: older clients keep their meaning.
        wide = ({"roots": False}, {"rootsOnly": False}, {"rootsOnly": False, "roots": False})
        for selection in (*wide, {"parent": parent}):
            # The preview counts what the batch takes: none, the child skipped, and why.
            preview = await http.post("/runs/retry/preview", json={"filter": selection})
            assert preview.status_code == 200, (selection, preview.text)
            assert preview.json()["matching"] == 0, preview.text
            (counted,) = preview.json()["skipped"]
            assert (counted["reason"], counted["state"], counted["count"]) == (
                "parent_succeeded",
                "FAILED",
                1,
            )
            assert "a run above them has SUCCEEDED" in counted["message"], counted
            wider = await http.post("/runs/retry", json={"filter": selection})
            assert wider.status_code == 200, (selection, wider.text)
            (skipped,) = wider.json()["skipped"]
            assert (skipped["runId"], skipped["reason"]) == (child, "parent_succeeded")
            assert f"start over run {parent}" in skipped["message"], skipped
        narrow = await http.post("/runs/retry", json={"filter": {"rootsOnly": True}})
        assert narrow.json()["skipped"] == [], narrow.text
        both = await http.post(
            "/runs/retry", json={"filter": {"status": "FAILED", "rootsOnly": True, "roots": False}}
        )
        assert both.status_code == 422, both.text
        assert both.json()["message"].count("\n") == 0
        assert "`rootsOnly` (deprecated) and `roots` differ: give only `roots`" in both.text
        documented = (await http.get("/openapi.json")).json()["components"]["schemas"]
        assert "rootsOnly" not in str(documented["BatchFilter"]), "kept out of the contract"
        by_ids = await http.post("/runs/retry", json={"ids": [child]})
        assert by_ids.json()["skipped"][0]["reason"] == "parent_succeeded"
        assert by_ids.json()["retried"] == []
    after = await api.runtime.store.get_run(parent)
    assert after is not None and (after.status, after.ended_at) == ("SUCCEEDED", ended)
    assert downstream.stats.total == sent
    async with client(api.url, api.globex_key) as http, running_worker(api.runtime):
        alone = await http.post(f"/runs/{child}/retry")
        assert alone.status_code == 200, alone.text
        assert alone.json()["reopenedRun"] == parent
        assert alone.json()["reopenedJoin"] == "join"
        await wait_for_run(api.runtime, parent)


async def test_resolving_a_finished_runs_dead_letter_says_the_run_reopens(
    api: Api, downstream: RunningDownstream
) -> None:
    """The tour over HTTP: `POST /runs/{child}/steps/call/resolve` on the tolerated FAILED
    child of a fan-out that had SUCCEEDED reopens the parent's join and sends its report
    again; the answer says so as the child's retry would (the retry preview the monitor's
    Resolve dialog reads first says it before), and the parent's log says who did it."""
    destination = destination_key(downstream.url, None)
    async with running_worker(api.runtime):
        parent = await succeeded_with_a_report(api.runtime, downstream, 3, {1})
        (dead,) = await api.runtime.store.children(parent, status="FAILED")
        async with client(api.url, api.admin_key) as http:
            preview = await http.get(f"/runs/{dead.id}/retry/preview")
            answer = await http.post(
                f"/runs/{dead.id}/steps/call/resolve", json={"output": {"status": 200}}
            )
            await wait_for_run(api.runtime, parent)
            logs = (await http.get(f"/runs/{parent}/logs", params={"limit": 500})).json()
    assert preview.json()["reopenedRun"] == parent, preview.text
    assert answer.status_code == 200, answer.text
    said = answer.json()
    assert (said["status"], said["reopenedRun"], said["reopenedJoin"]) == (
        "SUCCEEDED",
        parent,
        "join",
    )
    assert said["warnings"] == [
        f"run {parent} above it had SUCCEEDED and runs again from its join 'join': the steps "
        f"after that join run a second time: report (calls {destination})"
    ]
    assert preview.json()["warnings"][0] in said["warnings"][0], "the retry's sentence"
    (line,) = [e for e in logs["items"] if (e.get("data") or {}).get("action") == "resolve"]
    assert line["data"]["actor"].startswith("key:"), line
    assert "of 1 FAILED child of 'each': the join 'join' reopens" in line["message"]
    assert requests_by_path(downstream)["/report"] == 2


async def test_a_batch_retry_says_which_joins_fail_again(
    api: Api, downstream: RunningDownstream
) -> None:
    async with running_worker(api.runtime):
        parent = await failed_fan_out(api.runtime, downstream, 2, failing={0})
    async with client(api.url, api.admin_key) as http:
        batch = await http.post("/runs/retry", json={"ids": [parent]})
    assert batch.json()["stuck"] == [
        {
            "runId": parent,
            "joins": ["join"],
            "childrenFailed": 1,
            "childrenCancelled": 0,
            "message": f"run {parent}: its join 'join' fails again at once: 1 child is still "
            f"FAILED; reprocess run {parent} (`schemabridge runs reprocess {parent}`) to run it "
            "again and reopen the join",
        }
    ]


async def test_a_short_id_in_a_run_route_points_to_the_prefix_lookup(
    api: Api, downstream: RunningDownstream
) -> None:
    run = await failed_chain(api.runtime, downstream)
    short = run[:8]
    pointer = (
        f"no run '{short}'; a run route needs the whole id: GET /run-ids?prefix={short} lists "
        "the runs whose id starts with it"
    )
    routes = [
        ("GET", "/runs/{}"),
        ("GET", "/runs/{}/children"),
        ("GET", "/runs/{}/logs"),
        ("GET", "/runs/{}/events"),
        ("GET", "/runs/{}/steps/b/long-tail"),
        ("POST", "/runs/{}/retry"),
        ("POST", "/runs/{}/start-over"),
        ("POST", "/runs/{}/reprocess"),
        ("POST", "/runs/{}/cancel"),
    ]
    unknown = "0" * 8 + run[8:] if not run.startswith("0" * 8) else "1" * 8 + run[8:]
    async with client(api.url, api.admin_key) as http:
        for method, path in routes:
            answer = await http.request(method, path.format(short))
            assert answer.status_code == 404, (path, answer.text)
            assert answer.json()["message"] == pointer, path
            # A whole id no run has, or a name no id starts with: the plain line.
            for given in (unknown, "no-such-run"):
                plain = await http.request(method, path.format(given))
                assert plain.json()["message"] == f"no run '{given}'", (path, plain.text)
        resolve = await http.post(f"/runs/{short}/steps/b/resolve", json={"output": 1})
        assert resolve.json()["message"] == pointer
        found = await http.get("/run-ids", params={"prefix": short})
        assert found.json()["ids"] == [run]


async def test_two_unknown_fields_count_the_other_problem_as_a_problem(api: Api) -> None:
    async with client(api.url, api.admin_key) as http:
        answer = await http.post("/runs/retry", json={"status": "FAILED", "workflow": "w"})
    body = answer.json()
    assert answer.status_code == 422 and len(body["details"]["problems"]) == 2
    assert body["message"] == (
        "body /status: 'status' is not a field here; the fields here are ids, filter, limit; "
        "1 more problem in details"
    )


async def cancel_all(api: Api, run_ids: list[str]) -> None:
    for run_id in run_ids:
        await api.ops.actions.cancel(run_id, actor="test")


async def test_refusals_without_a_key_and_for_unknown_runs(api: Api) -> None:
    async with client(api.url) as anonymous:
        refused = await anonymous.post("/runs/x/retry")
        assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
    async with client(api.url, api.admin_key) as http:
        for action in ("retry", "start-over", "reprocess", "cancel"):
            answer = await http.post(f"/runs/no-such-run/{action}")
            assert answer.status_code == 404, action
            assert answer.json()["code"] == "run_not_found", action
        resolve = await http.post("/runs/no-such-run/steps/a/resolve", json={"output": 1})
        assert resolve.status_code == 404 and resolve.json()["code"] == "run_not_found"
    status, body = await post_huge(api.url, "/runs/retry", api.admin_key, 10 * 1024 * 1024 + 1)
    assert status == 413 and json.loads(body)["code"] == "body_too_large"


async def post_huge(url: str, path: str, key: str, size: int) -> tuple[int, bytes]:
    """POST a body of `size` bytes, sending only its first 64 KiB: the API answers before it
    reads the rest (an HTTP client sending it all would race the connection's close)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode()
            + b'{"ids": ["'
            + b"x" * 65_536
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").split("\r\n")
        length = next(
            int(line.split(":", 1)[1])
            for line in lines
            if line.lower().startswith("content-length")
        )
        body = await asyncio.wait_for(reader.readexactly(length), 10)
    finally:
        writer.close()
    return int(lines[0].split()[1]), body


async def test_a_retry_preview_warns_before_and_changes_nothing(
    api: Api, downstream: RunningDownstream
) -> None:
    """`GET /runs/{id}/retry/preview` answers, before any click, what the retry would: a join
    that fails again at once with the retry's own words, the FAILED steps it would run. It
    changes nothing (the run stays FAILED, no action logged, nothing sent); a run that is not
    FAILED is not retriable; an unknown run, or another tenant's, is 404; it is documented."""
    async with running_worker(api.runtime):
        parent = await failed_fan_out(api.runtime, downstream, 2, failing={0})
        sent = downstream.stats.total
        async with client(api.url, api.admin_key) as http:
            preview = await http.get(f"/runs/{parent}/retry/preview")
            logged = await action_lines(api.runtime, parent)
            retried = await http.post("/runs/retry", json={"ids": [parent]})
            documented = (await http.get("/openapi.json")).json()["paths"]
        async with client(api.url, api.globex_key) as http:
            foreign = await http.get(f"/runs/{parent}/retry/preview")
            unknown = await http.get("/runs/no-such-run/retry/preview")
        # The retry ran the join, which failed again at once, as the preview had said.
        assert (await wait_for_run(api.runtime, parent)).status == "FAILED"
        assert downstream.stats.total == sent
        async with client(api.url, api.admin_key) as http:
            await http.post(f"/runs/{parent}/reprocess")
            run = await wait_for_run(api.runtime, parent)
            ended_preview = (await http.get(f"/runs/{parent}/retry/preview")).json()
    assert logged == [], "the preview logs no action"
    assert preview.status_code == 200, preview.text
    said = preview.json()
    assert (said["retriable"], said["status"], said["stepsRetried"]) == (True, "FAILED", 1)
    assert (said["stepsHeldBack"], said["message"]) == (0, "1 failed step run again")
    assert (said["stuckJoins"], said["childrenFailed"]) == (["join"], 1)
    assert said["warnings"] == [retried.json()["stuck"][0]["message"]]
    assert (foreign.status_code, foreign.json()["code"]) == (404, "run_not_found")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "run_not_found")
    assert "get" in documented["/runs/{run_id}/retry/preview"]
    assert run.status == "SUCCEEDED"
    assert (ended_preview["retriable"], ended_preview["status"]) == (False, "SUCCEEDED")
    assert ended_preview["warnings"] == [] and ended_preview["stepsRetried"] == 0


async def test_a_join_reopened_by_retried_children_says_so_in_its_log(
    api: Api, downstream: RunningDownstream
) -> None:
    """A parent whose join failed on its FAILED children: retrying those children (a batch by
    filter, as the monitor's "Retry all matching" sends it) reopens the join, and the parent's
    log says who retried how many children of which spawner, on the join's line."""
    async with running_worker(api.runtime):
        parent = await failed_fan_out(api.runtime, downstream, 3, failing={0, 2})
        before = await action_lines(api.runtime, parent)
        async with client(api.url, api.admin_key) as http:
            answer = await http.post(
                "/runs/retry", json={"filter": {"parent": parent, "status": "FAILED"}}
            )
        assert len(answer.json()["retried"]) == 2, answer.text
        await wait_for_run(api.runtime, parent)
    lines = await action_lines(api.runtime, parent)
    assert before == []
    (line,) = lines
    assert line["vertex_id"] == "join", line
    assert line["message"].startswith("batch retry by key:"), line
    assert line["message"].endswith("of 2 FAILED children of 'each': the join 'join' reopens")


async def test_resolve_names_a_misspelt_output_field(api: Api) -> None:
    """A resolve body without `output` but with a key close to it names that key, with the
    close field name, as every other body's unknown field is named; with keys none of which
    is close (the output itself, `{"status": 200}`), it says the output goes under `output`;
    without any key, that `output` is required. The body is refused before the route looks
    for the run."""
    path = f"/runs/{uuid.uuid4()}/steps/v/resolve"
    async with client(api.url, api.admin_key) as http:
        misspelt = await http.post(path, json={"outptu": {}})
        unrelated = await http.post(path, json={"value": 1})
        empty = await http.post(path, json={})
    body = misspelt.json()
    assert misspelt.status_code == 422 and body["code"] == "invalid_request", body
    assert body["message"] == "body /outptu: 'outptu' is not a field here; did you mean 'output'?"
    assert [(p["pointer"], p["code"]) for p in body["details"]["problems"]] == [
        ("/outptu", "extra_forbidden")
    ]
    # Keys none of which is `output` misspelt: the output itself, sent unwrapped.
    said = unrelated.json()["message"]
    assert said == (
        'body /: value is not a field of a resolve: the step\'s output goes under "output", '
        'as in {"output": {...}}'
    ), said
    assert [p["code"] for p in unrelated.json()["details"]["problems"]] == ["output_not_wrapped"]
    assert empty.json()["message"] == "body /: 'output' is required (null is a valid output)"
