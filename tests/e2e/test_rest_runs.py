"""The run routes over real HTTP, on both backends: submit (Idempotency-Key, ?wait=true
200/502/504, admission at the door), list with filters and cursors, one run, children, logs,
tenant isolation both ways, and every documented refusal. Real runs go to the demo
downstream on loopback through a worker in the test's loop."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from demo.downstream import RunningDownstream
from engine.operations.pagination import encode_cursor
from engine.operations.views import RunFilter
from tests.conftest import Backend
from tests.e2e.rest_runs_harness import Api, api_on, assert_error
from tests.integration.operations_harness import ended, fanout, gateway, items, single

NOWHERE = "http://127.0.0.1:9/never"
"""Without a worker, a run of this stays RUNNING."""


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    async with api_on(backend, worker=False) as served:
        await served.ops.workflows.publish(single("one", NOWHERE))
        yield served


@pytest.fixture
async def working(backend: Backend, downstream: RunningDownstream) -> AsyncIterator[Api]:
    """A worker and a gateway tier (10 s) far longer than any of these runs takes on a slow
    host, for the waits that must end with the run."""
    async with working_api(backend, downstream, timeout_gateway_ms=10_000) as served:
        yield served


@pytest.fixture
async def impatient(backend: Backend, downstream: RunningDownstream) -> AsyncIterator[Api]:
    """The same with a gateway tier of 1 s, for the waits that must run out."""
    async with working_api(backend, downstream, timeout_gateway_ms=1_000) as served:
        yield served


@asynccontextmanager
async def working_api(
    backend: Backend, downstream: RunningDownstream, *, timeout_gateway_ms: int
) -> AsyncIterator[Api]:
    async with api_on(backend, worker=True, timeout_gateway_ms=timeout_gateway_ms) as served:
        base = downstream.url
        await served.ops.workflows.publish(single("ok", f"{base}/ok"))
        await served.ops.workflows.publish(
            single(
                "bad",
                f"{base}/bad",
                vertices={
                    "call": gateway(
                        f"{base}/bad", headers={"X-Demo-Status": "400"}, retry={"maxAttempts": 1}
                    )
                },
            )
        )
        await served.ops.workflows.publish(
            single(
                "slow",
                f"{base}/slow",
                # Its own deadline (8 s) outlasts the wait (the 1 s tier of `impatient` and
                # the 2 s grace): the wait runs out, the call does not.
                vertices={
                    "call": gateway(
                        f"{base}/slow", headers={"X-Demo-Sleep-Ms": "4000"}, timeoutMs=8_000
                    )
                },
            )
        )
        await served.ops.workflows.publish(
            single(
                "hanging",
                f"{base}/hang",
                vertices={
                    "call": gateway(
                        f"{base}/hang",
                        headers={"X-Demo-Sleep-Ms": "60000"},
                        # Three attempts of the 1 s tier outlast the wait (1 s + 2 s grace).
                        retry={"maxAttempts": 3, "baseDelayMs": 100},
                    )
                },
            )
        )
        await served.ops.workflows.publish(
            single(
                "timing-out",
                f"{base}/hang",
                vertices={
                    "call": gateway(
                        f"{base}/hang",
                        headers={"X-Demo-Sleep-Ms": "60000"},
                        retry={"maxAttempts": 1},
                    )
                },
            )
        )
        await served.ops.workflows.publish(fanout(base))
        yield served


# ── submit ──────────────────────────────────────────────────────────────────────────────────


async def test_submit_creates_a_run_with_its_url(api: Api) -> None:
    async with api.http(api.admin) as http:
        created = await http.post("/workflows/one/runs", json={"input": {"x": 1}})
        body = created.json()
        read = await http.get(body["url"])
    assert created.status_code == 201, created.text
    assert created.headers["Location"] == f"/runs/{body['id']}" == body["url"]
    assert body["created"] is True
    assert (body["run"]["workflow"], body["run"]["tenantId"]) == ("one", "default")
    assert read.status_code == 200
    assert read.json()["input"] == {"x": 1}
    assert read.json()["status"] == "RUNNING"


async def test_idempotency_key_same_request_same_run_other_request_409(api: Api) -> None:
    headers = {"Idempotency-Key": "order-17"}
    async with api.http(api.acme) as http:
        first = await http.post("/workflows/one/runs", json={"input": {"n": 1}}, headers=headers)
        again = await http.post("/workflows/one/runs", json={"input": {"n": 1}}, headers=headers)
        other = await http.post("/workflows/one/runs", json={"input": {"n": 2}}, headers=headers)
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["created"] is False
    assert again.headers["Location"] == first.headers["Location"]
    body = assert_error(other, 409, "idempotency_conflict")
    assert body["details"] == {
        "runId": first.json()["id"],
        "differs": ["input"],
        "inputPointer": "/n",
    }
    assert "differs in the input (first at /n)" in body["message"]


async def test_a_conflict_names_the_version_named_where_the_first_left_it_out(
    api: Api,
) -> None:
    """The serving version named explicitly is another request than the version left out
    (the first is pinned, the second follows the serving version): the 409 says so, and
    names where the input differs without any of its values."""
    headers = {"Idempotency-Key": "order-18"}
    # Values no id or number in the answer can hold by chance (a run id is hexadecimal: an
    # earlier "4111-1111" card was found in one).
    secret = {"customer": {"id": "cust-one", "card": "card-secret-one"}}
    async with api.http(api.acme) as http:
        first = await http.post("/workflows/one/runs", json={"input": secret}, headers=headers)
        pinned = await http.post(
            "/workflows/one/runs", json={"input": secret, "version": 1}, headers=headers
        )
        changed = {"customer": {"id": "cust-two", "card": "card-secret-two"}}
        both = await http.post(
            "/workflows/one/runs", json={"input": changed, "version": 1}, headers=headers
        )
    assert first.status_code == 201, first.text
    body = assert_error(pinned, 409, "idempotency_conflict")
    assert body["details"] == {"runId": first.json()["id"], "differs": ["version"]}
    assert "the version (v1 named; the first request named none and got v1)" in body["message"]
    body = assert_error(both, 409, "idempotency_conflict")
    assert body["details"]["differs"] == ["version", "input"]
    assert body["details"]["inputPointer"] == "/customer/card"
    for value in ("cust-", "card-secret"):
        assert value not in both.text


async def test_twenty_concurrent_identical_submissions_make_one_run(api: Api) -> None:
    headers = {"Idempotency-Key": "burst"}
    async with api.http(api.acme) as http:
        answers = await asyncio.gather(
            *(
                http.post("/workflows/one/runs", json={"input": {"k": 1}}, headers=headers)
                for _ in range(20)
            )
        )
        listed = await http.get("/runs", params={"limit": 500})
    assert all(a.status_code in (200, 201) for a in answers), [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.status_code == 201 for a in answers) == 1
    assert len(listed.json()["items"]) == 1


async def test_submit_refusals(api: Api) -> None:
    await api.ops.workflows.publish(
        single("typed", NOWHERE, inputSchema={"type": "object", "required": ["day"]})
    )
    async with api.http(api.admin) as http:
        unknown = await http.post("/workflows/nope/runs", json={})
        no_version = await http.post("/workflows/one/runs", json={"version": 9})
        at_version = await http.post("/workflows/one@1/runs", json={})
        at_unknown = await http.post("/workflows/nope@1/runs", json={})
        bad_input = await http.post("/workflows/typed/runs", json={"input": {}})
        malformed = await http.post(
            "/workflows/one/runs", content=b"{nope", headers={"Content-Type": "application/json"}
        )
        wrong_type = await http.post("/workflows/one/runs", json={"version": "two"})
        extra = await http.post("/workflows/one/runs", json={"input": {}, "priority": 1})
        not_object = await http.post("/workflows/one/runs", json=[1])
        unwrapped = await http.post("/workflows/one/runs", json={"day": "mon", "tenantId": "t"})
        long_key = await http.post(
            "/workflows/one/runs", json={}, headers={"Idempotency-Key": "k" * 300}
        )
    assert_error(unknown, 404, "workflow_not_found")
    assert_error(no_version, 404, "workflow_not_found")
    # `one@1`, as the command line takes it: over REST the version goes in the body.
    assert assert_error(at_version, 404, "workflow_not_found")["message"] == (
        "no published workflow 'one@1'; to run version 1 of 'one', POST /workflows/one/runs "
        'with "version": 1 in the body'
    )
    assert "in the body" not in assert_error(at_unknown, 404, "workflow_not_found")["message"]
    problems = assert_error(bad_input, 422, "invalid_input")["details"]["problems"]
    assert problems and all("pointer" in p and p["code"] for p in problems)
    assert_error(malformed, 400, "invalid_json")
    assert (
        assert_error(wrong_type, 422, "invalid_request")["details"]["problems"][0]["pointer"]
        == "/version"
    )
    assert (
        assert_error(extra, 422, "invalid_request")["details"]["problems"][0]["pointer"]
        == "/priority"
    )
    assert_error(not_object, 422, "invalid_request")
    # The input sent as the body itself: one problem, the fix (not one per input field).
    body = assert_error(unwrapped, 422, "invalid_request")
    assert [p["code"] for p in body["details"]["problems"]] == ["input_not_wrapped"]
    assert body["message"] == (
        'body /: day is not a field of a submission: the run\'s input goes under "input", as '
        'in {"input": {...}, "tenantId": "..."}'
    )
    assert assert_error(long_key, 422, "invalid_request")["details"]["problems"][0]["in"] == (
        "header"
    )


# ── admission at the door ───────────────────────────────────────────────────────────────────


async def test_full_ready_queue_is_429_with_retry_after(backend: Backend) -> None:
    async with api_on(backend, worker=False, submit_max_ready=1) as api:
        await api.ops.workflows.publish(single("one", NOWHERE))
        # One READY step, no worker: the queue is at its mark before the API counts it.
        await api.ops.runs.submit("one", {})
        async with api.http(api.admin) as http:
            refused = await http.post("/workflows/one/runs", json={})
            listed = await http.get("/runs")
    assert_error(refused, 429, "queue_full")
    assert int(refused.headers["Retry-After"]) >= 1
    assert len(listed.json()["items"]) == 1, "the refused submission created nothing"


async def test_tenant_over_its_quota_is_429_quota_exceeded(api: Api) -> None:
    await api.ops.settings.set_quota("acme", 1)
    async with api.http(api.acme) as http:
        first = await http.post("/workflows/one/runs", json={})
        refused = await http.post("/workflows/one/runs", json={})
    async with api.http(api.globex) as http:
        other_tenant = await http.post("/workflows/one/runs", json={})
    assert first.status_code == 201
    assert_error(refused, 429, "quota_exceeded")
    assert other_tenant.status_code == 201


async def test_a_used_up_quota_says_whose_how_much_and_how_to_raise_it(api: Api) -> None:
    await api.ops.settings.set_quota("acme", 2)
    async with api.http(api.acme) as http:
        for _ in range(2):
            assert (await http.post("/workflows/one/runs", json={})).status_code == 201
        refused = await http.post("/workflows/one/runs", json={})
    assert_error(refused, 429, "quota_exceeded")
    assert refused.json()["details"] == {"tenantId": "acme", "usedRuns": 2, "maxRuns": 2}
    assert "Retry-After" not in refused.headers, "waiting never frees a run of the quota"
    message = refused.json()["message"]
    assert "tenant acme used its quota of 2 runs" in message
    assert "schemabridge tenants set-quota acme N" in message
    assert "schemabridge tenants reset-quota acme" in message


# ── ?wait=true ──────────────────────────────────────────────────────────────────────────────


async def test_wait_answers_200_with_the_output(working: Api) -> None:
    async with working.http(working.admin) as http:
        answer = await http.post("/workflows/ok/runs?wait=true", json={"input": {"a": 1}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "SUCCEEDED"
    assert body["output"]["call"]["status"] == 200
    assert answer.headers["Location"] == body["url"] == f"/runs/{body['id']}"


async def test_wait_answers_say_whether_the_request_created_the_run(working: Api) -> None:
    """`created` on every `?wait=true` answer, as without a wait: a new run true, the same
    Idempotency-Key and request again (a replay) false, for a 200 and for a 502 alike."""
    async with working.http(working.admin) as http:
        answers = [
            await http.post(
                f"/workflows/{name}/runs?wait=true",
                json={},
                headers={"Idempotency-Key": f"wait-{name}"},
            )
            for name in ("ok", "ok", "bad", "bad")
        ]
    new_ok, replayed_ok, new_bad, replayed_bad = answers
    assert (new_ok.status_code, new_ok.json()["created"]) == (200, True)
    assert (replayed_ok.status_code, replayed_ok.json()["created"]) == (200, False)
    assert replayed_ok.json()["id"] == new_ok.json()["id"]
    assert assert_error(new_bad, 502, "run_failed")["details"]["created"] is True
    # The 502 says which step failed, why, and the request that runs it again.
    failed_id = new_bad.json()["details"]["runId"]
    said = new_bad.json()["message"]
    assert said.startswith(f"run {failed_id} failed at step call: http_error: GET "), said
    assert "400 Bad Request" in said, said
    assert said.endswith(
        f"; once the cause is fixed, POST /runs/{failed_id}/retry runs the failed step again"
    ), said
    replayed = assert_error(replayed_bad, 502, "run_failed")["details"]
    assert replayed["created"] is False
    assert replayed["runId"] == new_bad.json()["details"]["runId"]
    assert replayed["status"] == "FAILED" and replayed["error"]["kind"] == "http_error"


async def test_wait_answers_a_failure_the_workflow_causes_with_the_fix_not_a_retry(
    working: Api, downstream: RunningDownstream
) -> None:
    """The tour: a SPAWNER's items read a field the answer does not have (invalid_config),
    and children refused by their inputSchema (a join's invalid_input). The 502 said "once
    the cause is fixed, POST /runs/…/retry runs the failed step again", while the retry runs
    the same version on the same input and fails the same way (as `GET /runs/{id}` and
    `runs show` say): it says what they say instead."""
    base = downstream.url
    typo = {
        "name": "typo",
        "vertices": {
            "list": gateway(f"{base}/items?count=2"),
            "each": {
                "type": "SPAWNER",
                "dependsOn": ["list"],
                "config": {"items": "{{ vertices.list.output.body.itemz }}", "workflow": "ok"},
            },
        },
    }
    strict = single("strict", f"{base}/ok", inputSchema={"type": "object", "required": ["n"]})
    refused = {
        "name": "refused",
        "vertices": {
            "each": {"type": "SPAWNER", "config": {"items": [1, 2], "workflow": "strict"}},
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }
    await working.ops.workflows.publish([typo, strict, refused])
    async with working.http(working.admin) as http:
        answers = {
            name: await http.post(f"/workflows/{name}/runs?wait=true", json={})
            for name in ("typo", "refused")
        }
    for name, step, what in (
        ("typo", "each", "step each failed with invalid_config"),
        ("refused", "join", "2 children of step join failed with invalid_input"),
    ):
        body = assert_error(answers[name], 502, "run_failed")
        run_id = body["details"]["runId"]
        said = body["message"]
        assert said.startswith(f"run {run_id} failed at step {step}: "), said
        assert "/retry" not in said, said
        assert said.endswith(
            f"; {what}, which comes from the workflow or the run's input: retrying, "
            f"reprocessing or starting over runs v1 with the same input and fails the same "
            f"way. Fix the workflow (or the input) first, publish it, then submit a new run "
            f"(`schemabridge runs submit {name}@VERSION --input JSON`)"
        ), said
        async with working.http(working.admin) as http:
            shown = (await http.get(f"/runs/{run_id}")).json()
        assert said.endswith(f"; {shown['fixFirst']}"), "the words GET /runs/{id} says"


async def test_wait_answers_409_run_cancelled_with_created(api: Api) -> None:
    """No worker: the run waits RUNNING until it is cancelled from beside the request."""
    async with api.http(api.admin) as http:
        waiting = asyncio.create_task(
            http.post(
                "/workflows/one/runs?wait=true",
                json={},
                headers={"Idempotency-Key": "cancelled-while-waiting"},
            )
        )
        run_id = None
        for _ in range(200):
            page = await api.ops.runs.list(RunFilter(workflow="one"), limit=5)
            if page.items:
                run_id = page.items[0].id
                break
            await asyncio.sleep(0.05)
        assert run_id is not None
        await api.ops.actions.cancel(run_id, actor="test")
        answer = await waiting
        document = (await http.get("/openapi.json")).json()
    body = assert_error(answer, 409, "run_cancelled")
    assert body["details"] == {
        "runId": run_id,
        "state": "CANCELLED",
        "url": f"/runs/{run_id}",
        "created": True,
        "status": "CANCELLED",
    }
    assert answer.headers["Location"] == f"/runs/{run_id}"
    # Declared, as the 502's and the 504's are: a generated client exposes only those.
    declared = document["paths"]["/workflows/{name}/runs"]["post"]["responses"]["409"]
    assert "Location" in declared.get("headers", {}), declared


async def test_wait_answers_502_when_a_downstream_failed_the_run(working: Api) -> None:
    async with working.http(working.admin) as http:
        answer = await http.post("/workflows/bad/runs?wait=true", json={})
        run_id = assert_error(answer, 502, "run_failed")["details"]["runId"]
        detail = (await http.get(f"/runs/{run_id}")).json()
    error = answer.json()["details"]["error"]
    assert (error["kind"], error["httpStatus"]) == ("http_error", 400)
    assert detail["status"] == "FAILED"
    (step,) = detail["steps"]
    assert (step["error"]["kind"], step["error"]["httpStatus"]) == ("http_error", 400)
    assert step["error"]["bodyExcerpt"]
    assert [a["httpStatus"] for a in step["history"]] == [400]


async def test_wait_runs_the_calls_under_the_gateway_tier(impatient: Api) -> None:
    """TIMEOUT_GATEWAY_MS is 1 s here; the downstream hangs for 60 s. The answer is a 504 once
    the wait (the tier and its grace) ran out, and the run goes on: each attempt of its call is
    cut at 1 s (not at the 30 s of the tier a run gets without `?wait=true`), so it ends by
    itself, FAILED with `timeout`."""
    async with impatient.http(impatient.admin) as http:
        answer = await http.post("/workflows/hanging/runs?wait=true", json={})
        run_id = assert_error(answer, 504, "run_still_running")["details"]["runId"]
        finished = await ended(impatient.ops, run_id)
        detail = (await http.get(f"/runs/{run_id}")).json()
        plain_id = (await http.post("/workflows/ok/runs", json={})).json()["id"]
        plain = (await http.get(f"/runs/{plain_id}")).json()
    assert finished.status == "FAILED"
    assert detail["timeoutTier"] == "gateway"
    (step,) = detail["steps"]
    assert step["error"]["kind"] == "timeout"
    durations = [attempt["durationMs"] for attempt in step["history"]]
    # Cut at the 1 s tier, not the 30 s one; the bound leaves a stalled worker its margin.
    assert len(durations) == 3 and all(900 <= d < 20_000 for d in durations), durations
    assert plain["timeoutTier"] == "process", "without ?wait=true the run keeps its tier"
    # Nothing limits the run: the 504 says what it waits on instead, its call (a tour found
    # it said no reason): the wait's 1 s and its 2 s grace, with the claim's moment before.
    message = answer.json()["message"]
    running = re.search(r"not ended yet \(step call has been running for ([0-9.]+) s\)", message)
    assert running is not None and 1.0 <= float(running[1]) <= 30, message


async def test_a_call_timing_out_in_the_tier_fails_the_run_within_the_wait(
    impatient: Api,
) -> None:
    """The call times out at the tier (1 s), after the wait began: the wait's grace lets the
    run's end land, so the caller gets the 502 with the timeout, not a 504."""
    async with impatient.http(impatient.admin) as http:
        answer = await http.post("/workflows/timing-out/runs?wait=true", json={})
    assert_error(answer, 502, "run_failed")
    assert answer.json()["details"]["error"]["kind"] == "timeout"


async def test_wait_answers_504_in_time_and_the_run_goes_on(impatient: Api) -> None:
    async with impatient.http(impatient.admin) as http:
        answer = await http.post("/workflows/slow/runs?wait=true", json={})
    body = assert_error(answer, 504, "run_still_running")
    run_id = body["details"]["runId"]
    assert body["details"]["url"] == answer.headers["Location"] == f"/runs/{run_id}"
    finished = await ended(impatient.ops, run_id)
    assert finished.status == "SUCCEEDED"


async def test_a_504_says_why_the_run_had_not_ended(impatient: Api) -> None:
    """Tenant acme may make one GATEWAY call a minute and has made it: its next run waits for
    the rate window, and the 504 of its `?wait=true` says so (the step, the reason, when it
    goes on) in `details.progress` and the message, so the client need not ask again."""
    await impatient.ops.settings.set_tenant_rate("acme", 1)
    async with impatient.http(impatient.acme) as http:
        first = await http.post("/workflows/ok/runs?wait=true", json={})
        assert first.status_code == 200, first.text
        answer = await http.post("/workflows/ok/runs?wait=true", json={})
    body = assert_error(answer, 504, "run_still_running")
    progress = body["details"]["progress"]
    assert (progress["id"], progress["status"], progress["ended"]) == (
        body["details"]["runId"],
        "RUNNING",
        False,
    )
    (step,) = progress["steps"]
    assert step["vertexId"] == "call"
    assert step["waiting"]["reason"] == "tenant_rate_limit"
    assert step["waiting"]["until"] > 0
    assert "step call waits: tenant acme is at its rate limit" in body["message"]


# ── reads ───────────────────────────────────────────────────────────────────────────────────


async def test_list_filters_and_cursor_pagination(api: Api) -> None:
    await api.ops.workflows.publish(single("two", NOWHERE))
    async with api.http(api.admin) as http:
        ids = [
            (await http.post(f"/workflows/{name}/runs", json={"tenantId": tenant})).json()["id"]
            for name, tenant in [("one", "acme"), ("one", "globex"), ("two", "acme")] * 2
        ]
        pages: list[list[str]] = []
        params: dict[str, object] = {"limit": 2}
        for _ in range(5):
            page = (await http.get("/runs", params=params)).json()
            pages.append([r["id"] for r in page["items"]])
            if page["next"] is None:
                break
            params = {"limit": 2, "cursor": page["next"]}
        by_workflow = (await http.get("/runs", params={"workflow": "two"})).json()["items"]
        by_version = (await http.get("/runs", params={"workflow": "one", "version": 1})).json()
        by_tenant = (await http.get("/runs", params={"tenantId": "globex"})).json()["items"]
        # `tenant`, the old name of `tenantId`, still works (deprecated in OpenAPI)
        by_old_name = (await http.get("/runs", params={"tenant": "globex"})).json()["items"]
        both = await http.get("/runs", params={"tenant": "globex", "tenantId": "acme"})
        running = (await http.get("/runs", params={"status": "RUNNING", "roots": True})).json()
        future = (await http.get("/runs", params={"createdAfter": 4_000_000_000})).json()
        past = (await http.get("/runs", params={"createdBefore": 1})).json()
    assert [len(p) for p in pages] == [2, 2, 2]
    assert sorted(i for p in pages for i in p) == sorted(ids)
    assert len(by_workflow) == 2 and {r["workflow"] for r in by_workflow} == {"two"}
    assert len(by_version["items"]) == 4
    assert {r["tenantId"] for r in by_tenant} == {"globex"} and len(by_tenant) == 2
    assert by_old_name == by_tenant
    assert_error(both, 422, "invalid_request")
    assert len(running["items"]) == 6
    assert future["items"] == [] and past["items"] == []


async def test_list_refusals_limits_and_cursors(api: Api) -> None:
    async with api.http(api.admin) as http:
        for _ in range(3):
            await http.post("/workflows/one/runs", json={})
        first = (await http.get("/runs", params={"limit": 1})).json()
        cursor = first["next"]
        raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        raw[raw.index(b"runs")] = ord("x")
        tampered = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
        answers = {
            "negative": await http.get("/runs", params={"limit": -1}),
            "huge": await http.get("/runs", params={"limit": 10**9}),
            "text": await http.get("/runs", params={"limit": "many"}),
            "tampered": await http.get("/runs", params={"cursor": tampered}),
            "garbage": await http.get("/runs", params={"cursor": "%%%not-a-cursor"}),
            "other filter": await http.get("/runs", params={"cursor": cursor, "tenantId": "x"}),
            "status": await http.get("/runs", params={"status": "DONE"}),
            "version alone": await http.get("/runs", params={"version": 1}),
            "time": await http.get("/runs", params={"createdAfter": "yesterday"}),
            "wait": await http.post(
                "/workflows/nope/runs", params={"wait": "maybe"}, json={"input": {}}
            ),
            "swapped": await http.get(
                "/runs", params={"createdAfter": 1_796_520_500, "createdBefore": 1_796_520_400}
            ),
        }
    for name in ("negative", "huge", "text", "time", "wait"):
        body = assert_error(answers[name], 422, "invalid_request")
        assert body["details"]["problems"][0]["in"] == "query", name
    # A value that does not parse is told what the parameter takes, not only its type, and
    # in a reminder: the first clause of the parameter's description (a new user's tour read
    # `wait`'s whole paragraph there).
    said = {name: answers[name].json()["message"] for name in answers}
    assert said["time"] == (
        "query /createdAfter: should be a number, not 'yesterday' (Epoch seconds, inclusive)"
    )
    assert said["text"] == (
        "query /limit: should be a whole number, not 'many' (Runs in this page, at most 500)"
    )
    assert said["wait"] == "query /wait: should be true or false, not 'maybe'"
    # A bound as a bound, not pydantic's "Input should be greater than or equal to 1".
    assert said["negative"] == "query /limit: should be at least 1, not '-1'"
    assert said["huge"] == "query /limit: should be at most 500, not '1000000000'"
    for name in ("tampered", "garbage", "other filter"):
        assert_error(answers[name], 422, "invalid_cursor")
    for name in ("status", "version alone"):
        assert_error(answers[name], 422, "invalid_filter")
    # A window whose start is after its end matches nothing: said, not an empty page.
    swapped = assert_error(answers["swapped"], 422, "invalid_filter")
    assert swapped["details"] == {"parameter": "createdBefore"}
    assert "swapped" in swapped["message"]
    # The bounds as times a person reads, not epoch seconds in exponent form (1.79652e+09).
    assert swapped["message"].startswith(
        "createdAfter (2026-12-06 01:28:20Z) is later than createdBefore (2026-12-06 01:26:40Z)"
    ), swapped["message"]


async def test_a_path_or_header_value_and_a_length_are_said_as_a_query_value_is(
    api: Api,
) -> None:
    # pydantic's own words ("String should have at most 256 characters", "Input should be a
    # valid integer, unable to parse string as an integer") came through everywhere but a
    # query string's numbers.
    async with api.http(api.admin) as http:
        answers = {
            "path": await http.get("/workflows/one/versions/abc"),
            "long key": await http.post(
                "/workflows/one/runs", json={}, headers={"Idempotency-Key": "k" * 300}
            ),
            "empty key": await http.post(
                "/workflows/one/runs", json={}, headers={"Idempotency-Key": ""}
            ),
            "prefix": await http.get("/run-ids", params={"prefix": "abc"}),
            "tenant": await http.post("/workflows/one/runs", json={"tenantId": ""}),
        }
    said = {
        name: assert_error(answer, 422, "invalid_request")["message"]
        for name, answer in answers.items()
    }
    assert said["path"].startswith("path /version: should be a whole number, not 'abc'")
    assert said["long key"] == (
        "header /Idempotency-Key: should be at most 256 characters long, not 300"
    )
    assert said["empty key"] == (
        "header /Idempotency-Key: should be at least 1 character long, not 0"
    )
    assert said["prefix"] == "query /prefix: should be at least 8 characters long, not 3"
    assert said["tenant"] == "body /tenantId: should be at least 1 character long, not 0"
    assert (await api.ops.runs.list(RunFilter())).items == []


async def test_run_detail_children_and_logs_of_a_fanout(working: Api) -> None:
    async with working.http(working.admin) as http:
        submitted = await http.post(
            "/workflows/parent/runs", json={"input": {"items": items(5, failing={3})}}
        )
        run_id = submitted.json()["id"]
        await ended(working.ops, run_id)
        detail = (await http.get(f"/runs/{run_id}")).json()
        page1 = (await http.get(f"/runs/{run_id}/children", params={"limit": 3})).json()
        page2 = (
            await http.get(f"/runs/{run_id}/children", params={"limit": 3, "cursor": page1["next"]})
        ).json()
        failed = (await http.get(f"/runs/{run_id}/children", params={"status": "FAILED"})).json()
        by_parent = (await http.get("/runs", params={"parent": run_id, "limit": 10})).json()
        logs1 = (await http.get(f"/runs/{run_id}/logs", params={"limit": 2})).json()
        logs2 = (
            await http.get(f"/runs/{run_id}/logs", params={"limit": 500, "cursor": logs1["next"]})
        ).json()
        bad_status = await http.get(f"/runs/{run_id}/children", params={"status": "NOPE"})
        bad_after = await http.get(f"/runs/{run_id}/logs", params={"cursor": "-4"})
        bad_cursor = await http.get(f"/runs/{run_id}/children", params={"cursor": logs1["next"]})
    assert detail["status"] == "FAILED"
    assert detail["fanout"] == {
        "total": 5,
        "pending": 0,
        "running": 0,
        "waitingChildren": 0,
        "succeeded": 4,
        "failed": 1,
        "cancelled": 0,
        "waiting": [],
        "presumedDead": [],
    }
    each = next(s for s in detail["steps"] if s["vertexId"] == "each")
    assert each["children"] == {"total": 5, "succeeded": 4, "failed": 1, "cancelled": 0}
    assert [c["itemIndex"] for c in page1["items"] + page2["items"]] == [0, 1, 2, 3, 4]
    assert page2["next"] is None
    (dead,) = failed["items"]
    assert (dead["itemIndex"], dead["error"]["httpStatus"]) == (3, 400)
    assert dead["dlqAt"] is not None
    assert len(by_parent["items"]) == 5
    ids = [line["id"] for line in logs1["items"] + logs2["items"]]
    assert len(logs1["items"]) == 2 and ids == sorted(ids) and len(set(ids)) == len(ids)
    bad = assert_error(bad_status, 422, "invalid_filter")
    assert bad["details"] == {
        "parameter": "status",
        "accepted": ["CANCELLED", "FAILED", "RUNNING", "SUCCEEDED"],
    }
    assert_error(bad_after, 422, "invalid_cursor")
    assert_error(bad_cursor, 422, "invalid_cursor")


async def test_the_list_shows_root_runs_unless_roots_is_false(working: Api) -> None:
    """Root runs by default, as a batch retry by the same filter takes them; `roots=false`
    every run; `parent` that run's children, and `parent` with `roots=true` a 422 in both."""
    async with working.http(working.admin) as http:
        submitted = await http.post(
            "/workflows/parent/runs", json={"input": {"items": items(3, failing={1})}}
        )
        run_id = submitted.json()["id"]
        await ended(working.ops, run_id)
        lone = (await http.post("/workflows/ok/runs", json={})).json()["id"]
        await ended(working.ops, lone)

        async def ids(**params: object) -> list[str]:
            answer = await http.get("/runs", params={"limit": 500, **params})
            assert answer.status_code == 200, answer.text
            return [r["id"] for r in answer.json()["items"]]

        default = await ids()
        roots = await ids(roots="true")
        every = await ids(roots="false")
        failed = await ids(status="FAILED")
        failed_every = await ids(status="FAILED", roots="false")
        children = await ids(parent=run_id)
        children_too = await ids(parent=run_id, roots="false")
        dead_children = await http.get(f"/runs/{run_id}/children", params={"status": "FAILED"})
        (dead,) = dead_children.json()["items"]
        contradiction = await http.get("/runs", params={"parent": run_id, "roots": "true"})
        batch_contradiction = await http.post(
            "/runs/retry", json={"filter": {"parent": run_id, "roots": True}}
        )
        first = (await http.get("/runs", params={"limit": 1})).json()
        # The default and roots=true are one list: a cursor of one continues the other.
        after_first = {"limit": 1, "roots": "true", "cursor": first["next"]}
        second = await http.get("/runs", params=after_first)
    assert default == roots == [lone, run_id]
    assert len(children) == 3 and set(children) == set(children_too)
    assert set(every) == {lone, run_id, *children}
    assert failed == [run_id]
    assert set(failed_every) == {run_id, dead["id"]}
    for refused in (contradiction, batch_contradiction):
        body = assert_error(refused, 422, "invalid_filter")
        assert "children are never root runs" in body["message"]
    assert [r["id"] for r in first["items"]] == [lone]
    assert [r["id"] for r in second.json()["items"]] == [run_id]


async def test_a_parent_filter_refuses_a_prefix_of_the_id(api: Api) -> None:
    """`parent` takes the whole id, as `GET /runs/{id}` does: the 8 characters the monitor
    shows (or an id in capitals) are a 422 naming the lookup that finds the whole id, in a
    list and in a batch retry and its preview, never an empty page that reads as "no
    children". The same for a tenant key whatever run starts with it: nothing is resolved,
    so nothing of another tenant's runs shows, and its whole id is no run (404)."""
    async with api.http(api.acme) as acme, api.http(api.globex) as globex:
        run_id = (await acme.post("/workflows/one/runs", json={})).json()["id"]
        short = run_id[:8]
        whole = await acme.get("/runs", params={"parent": run_id})
        refused = [
            await acme.get("/runs", params={"parent": short}),
            await acme.get("/runs", params={"parent": run_id.upper()}),
            await acme.post("/runs/retry", json={"filter": {"parent": short}}),
            await acme.post("/runs/retry/preview", json={"filter": {"parent": short}}),
            await globex.get("/runs", params={"parent": short}),
        ]
        other_tenant = await globex.get("/runs", params={"parent": run_id})
    assert whole.status_code == 200 and whole.json()["items"] == []  # it has no children
    for answer in refused:
        body = assert_error(answer, 422, "invalid_filter")
        assert body["details"] == {"parameter": "parent"}
        assert "whole id" in body["message"] and "GET /run-ids?prefix=" in body["message"]
    assert f"GET /run-ids?prefix={short} " in refused[0].json()["message"]
    # Another tenant's run is no run to this key, as `GET /runs/{id}` answers it.
    assert assert_error(other_tenant, 404, "run_not_found")["details"] == {"parameter": "parent"}


async def test_a_workflow_filter_nothing_was_published_as_is_404(api: Api) -> None:
    """A `workflow` filter no published workflow has, or a `version` of it never published,
    is the 404 `workflow_not_found` a batch retry by the same filter answers (the close names,
    or the versions there are), never an empty page that reads as "no runs"; a published
    workflow with no runs of the caller's is an empty page. Workflow names are no tenant's,
    so a tenant key is told the same."""
    await api.ops.workflows.publish(single("two", NOWHERE))
    async with api.http(api.acme) as acme:
        await acme.post("/workflows/one/runs", json={})
        typo = await acme.get("/runs", params={"workflow": "onee"})
        version = await acme.get("/runs", params={"workflow": "one", "version": 9})
        batch = await acme.post("/runs/retry/preview", json={"filter": {"workflow": "onee"}})
        no_runs = await acme.get("/runs", params={"workflow": "two"})
        some = await acme.get("/runs", params={"workflow": "one", "version": 1})
    body = assert_error(typo, 404, "workflow_not_found")
    assert body == batch.json()
    assert "did you mean 'one'?" in body["message"] and body["details"]["meant"] == ["one"]
    assert assert_error(version, 404, "workflow_not_found")["details"] == {"versions": [1]}
    assert no_runs.status_code == 200 and no_runs.json()["items"] == []
    assert some.status_code == 200 and len(some.json()["items"]) == 1


async def test_a_version_never_published_is_told_with_the_versions_there_are(api: Api) -> None:
    """A version of a published workflow that does not exist is one answer wherever it is
    named, a submission, a version's read, its graph, a run list and a batch retry's filter:
    `workflow_not_found` naming the versions there are, in the message and in
    `details.versions`, so an integrator is told which version to send."""
    async with api.http(api.acme) as acme:
        answers = [
            await acme.post("/workflows/one/runs", json={"input": {}, "version": 9}),
            await acme.get("/workflows/one/versions/9"),
            await acme.get("/workflows/one/versions/9/graph"),
            await acme.get("/runs", params={"workflow": "one", "version": 9}),
            await acme.post(
                "/runs/retry/preview", json={"filter": {"workflow": "one", "version": 9}}
            ),
        ]
    for answer in answers:
        body = assert_error(answer, 404, "workflow_not_found")
        assert body["message"] == "workflow 'one' has no version 9; its only version is 1"
        assert body["details"] == {"versions": [1]}


async def test_unknown_runs_are_404(api: Api) -> None:
    async with api.http(api.admin) as http:
        answers = [
            await http.get("/runs/no-such-run"),
            await http.get("/runs/no-such-run/children"),
            await http.get("/runs/no-such-run/logs"),
            await http.get("/runs/no-such-run/events"),
        ]
        too_long = await http.get("/runs/" + "r" * 100)
    for answer in answers:
        assert_error(answer, 404, "run_not_found")
    assert_error(too_long, 422, "invalid_request")


# ── tenant isolation ────────────────────────────────────────────────────────────────────────


async def test_tenants_see_and_submit_only_their_own_runs(api: Api) -> None:
    async with api.http(api.acme) as acme, api.http(api.globex) as globex:
        mine = (await acme.post("/workflows/one/runs", json={})).json()
        named = await acme.post("/workflows/one/runs", json={"tenantId": "acme"})
        other = await acme.post("/workflows/one/runs", json={"tenantId": "globex"})
        theirs = (await globex.post("/workflows/one/runs", json={})).json()
        acme_list = (await acme.get("/runs", params={"limit": 500})).json()["items"]
        acme_asks_globex = await acme.get("/runs", params={"tenantId": "globex"})
        acme_asks_itself = await acme.get("/runs", params={"tenantId": "acme"})
        globex_list = (await globex.get("/runs")).json()["items"]
        reads = [
            await globex.get(f"/runs/{mine['id']}"),
            await globex.get(f"/runs/{mine['id']}/children"),
            await globex.get(f"/runs/{mine['id']}/logs"),
            await globex.get(f"/runs/{mine['id']}/events"),
            await acme.get(f"/runs/{theirs['id']}"),
        ]
        own = await acme.get(f"/runs/{mine['id']}")
    async with api.http(api.admin) as admin:
        everything = (await admin.get("/runs")).json()["items"]
        admin_reads = await admin.get(f"/runs/{mine['id']}")
    assert mine["run"]["tenantId"] == "acme"
    assert named.status_code == 201 and named.json()["run"]["tenantId"] == "acme"
    assert_error(other, 403, "tenant_forbidden")
    assert {r["tenantId"] for r in acme_list} == {"acme"} and len(acme_list) == 2
    assert theirs["id"] not in {r["id"] for r in acme_list}
    # Naming another tenant is refused in words, not answered with a page that reads as
    # "globex has no runs"; naming its own tenant is the same list as naming none.
    assert_error(acme_asks_globex, 403, "tenant_forbidden")
    assert "reads tenant 'acme' only, not 'globex'" in acme_asks_globex.json()["message"]
    assert [r["id"] for r in acme_asks_itself.json()["items"]] == [r["id"] for r in acme_list]
    assert [r["id"] for r in globex_list] == [theirs["id"]]
    for answer in reads:
        assert_error(answer, 404, "run_not_found")
    assert own.status_code == 200
    assert len(everything) == 3
    assert admin_reads.status_code == 200


# ── the OpenAPI document says what the routes answer ────────────────────────────────────────


def _answer_schema(document: dict[str, Any], path: str, method: str, status: int) -> Any:
    operation = document["paths"][path][method]
    schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
    return {**schema, "components": document["components"]}


def check_against(document: dict[str, Any], path: str, method: str, answer: Any) -> None:
    """`answer` (an httpx response) fits the schema the document declares for its status."""
    schema = _answer_schema(document, path, method, answer.status_code)
    Draft202012Validator(schema).validate(answer.json())


async def test_answers_fit_the_documented_schemas(working: Api) -> None:
    async with working.http(working.admin) as http:
        document = (await http.get("/openapi.json")).json()
        runs_path = "/workflows/{name}/runs"
        submitted = await http.post("/workflows/parent/runs", json={"input": {"items": items(2)}})
        run_id = submitted.json()["id"]
        await ended(working.ops, run_id)
        checks = [
            (runs_path, "post", submitted),
            (runs_path, "post", await http.post("/workflows/ok/runs?wait=true", json={})),
            (runs_path, "post", await http.post("/workflows/bad/runs?wait=true", json={})),
            (runs_path, "post", await http.post("/workflows/nope/runs", json={})),
            ("/runs", "get", await http.get("/runs", params={"limit": 1})),
            ("/runs", "get", await http.get("/runs", params={"limit": 0})),
            ("/runs/{run_id}", "get", await http.get(f"/runs/{run_id}")),
            ("/runs/{run_id}/children", "get", await http.get(f"/runs/{run_id}/children")),
            ("/runs/{run_id}/logs", "get", await http.get(f"/runs/{run_id}/logs")),
            ("/run-ids", "get", await http.get("/run-ids", params={"prefix": run_id[:8]})),
            ("/run-ids", "get", await http.get("/run-ids", params={"prefix": "zzzzzzzz"})),
            ("/workflows", "get", await http.get("/workflows")),
            ("/workflows", "post", await http.post("/workflows", json=single("ok", NOWHERE))),
            ("/workflows/{name}", "get", await http.get("/workflows/parent")),
            ("/workflows/{name}/versions", "get", await http.get("/workflows/parent/versions")),
            (
                "/workflows/{name}/versions/{version}/graph",
                "get",
                await http.get("/workflows/parent/versions/1/graph"),
            ),
            (
                "/workflows/validate",
                "post",
                await http.post("/workflows/validate", json={"name": "x"}),
            ),
        ]
    for path, method, answer in checks:
        check_against(document, path, method, answer)
    matched = [answer.json() for path, _, answer in checks if path == "/run-ids"]
    assert matched[0]["ids"] == [run_id] and matched[1]["code"] == "invalid_request"
    # What a prefix must be, in words, not the pattern the schema checks it against.
    assert "8 to 32 hex digits" in matched[1]["message"] and "(?:" not in matched[1]["message"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path.startswith(("/workflows", "/runs")):
                assert {"401", "500"} <= set(operation["responses"]), (method, path)


BIGINT_MAX = 2**63 - 1
INTEGER_MAX = 2**31 - 1


async def test_numbers_past_what_the_database_holds_are_422_not_500(api: Api) -> None:
    """A log cursor, a version filter or a version in a path past the database's integer
    range (SQLite's 64 bits, PostgreSQL's bigint and integer columns) is refused with the code
    its malformed values get, never sent to the database (an OverflowError there was a 500)."""
    async with api.http(api.admin) as http:
        run_id = (await http.post("/workflows/one/runs", json={})).json()["id"]
        logs = f"/runs/{run_id}/logs"
        last = await http.get(logs, params={"cursor": str(BIGINT_MAX)})
        for cursor in (str(BIGINT_MAX + 1), "9" * 20):
            body = assert_error(
                await http.get(logs, params={"cursor": cursor}), 422, "invalid_cursor"
            )
            assert body["details"] == {"parameter": "cursor"}
            assert str(BIGINT_MAX) in body["message"], body
        for version in (INTEGER_MAX + 1, BIGINT_MAX + 1, 10**30):
            listed = await http.get("/runs", params={"workflow": "one", "version": version})
            body = assert_error(listed, 422, "invalid_request")
            assert body["details"]["problems"][0]["pointer"] == "/version", body
            shown = await http.get(f"/workflows/one/versions/{version}")
            assert_error(shown, 422, "invalid_request")
        top = await http.get("/runs", params={"workflow": "one", "version": INTEGER_MAX})
    assert last.status_code == 200 and last.json()["items"] == [], last.text
    # The largest version the column holds reaches the database: a version never published
    # (a typo the list no longer answers with an empty page).
    assert assert_error(top, 404, "workflow_not_found")["details"]["versions"] == [1]


def _forged(cursor: str, keys: list[Any]) -> str:
    """`cursor` with other row keys and a check digest that fits them: the digest is no
    secret, so any caller can make one."""
    body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    return encode_cursor(body["k"], keys, body["s"])


async def test_a_cursor_forged_past_the_database_range_is_invalid_cursor(api: Api) -> None:
    async with api.http(api.admin) as http:
        for _ in range(2):
            run_id = (await http.post("/workflows/one/runs", json={})).json()["id"]
        await http.post("/keys", json={"tenantId": "acme"})
        await http.post("/keys", json={"tenantId": "acme"})
        runs = (await http.get("/runs", params={"limit": 1})).json()["next"]
        audit = (await http.get("/audit", params={"limit": 1})).json()["next"]
        assert runs and audit
        forged = {
            "/runs": [
                _forged(runs, [10**30, run_id]),
                _forged(runs, [float("inf"), run_id]),
                _forged(runs, [float("nan"), run_id]),
            ],
            "/audit": [_forged(audit, [BIGINT_MAX + 1]), _forged(audit, [-(10**30)])],
        }
        for path, cursors in forged.items():
            for cursor in cursors:
                answer = await http.get(path, params={"cursor": cursor})
                assert_error(answer, 422, "invalid_cursor")
        fits = await http.get("/runs", params={"cursor": _forged(runs, [BIGINT_MAX, run_id])})
    assert fits.status_code == 200, fits.text
