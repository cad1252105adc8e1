"""Run operations (submit, get, list filters, children, logs, wait) through the operations
layer, on both backends, with real workers against the demo downstream on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.views import RunDetail, RunEnd, RunFilter, RunSummary
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.errors import (
    IdempotencyConflict,
    InvalidRequest,
    LimitReached,
    NotFound,
    Refusal,
    Unavailable,
)
from tests.conftest import Backend
from tests.integration.actions_harness import statements
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, fanout, gateway, items, single

UNREACHABLE = "http://127.0.0.1:9/never"
"""A URL no run in these tests reaches: without a worker its run stays RUNNING."""


async def run_count(ops: Operations, **selection: Any) -> int:
    page = await ops.runs.list(RunFilter(**selection), limit=500)
    assert page.next is None
    return len(page.items)


# ── submit ──────────────────────────────────────────────────────────────────────────────────


async def test_submit_creates_a_running_run(ops: Operations) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    result = await ops.runs.submit("one", {"x": 1}, tenant_id="acme")
    run = result.run
    assert result.created
    assert (run.workflow, run.version, run.tenant_id, run.status) == ("one", 1, "acme", "RUNNING")
    assert run.parent_run_id is None and run.root_run_id == run.id and run.error is None
    detail = await ops.runs.get(run.id)
    assert detail.input == {"x": 1} and detail.timeout_tier == "process"
    assert [(s.vertex_id, s.type, s.status) for s in detail.steps] == [("call", "GATEWAY", "READY")]
    assert detail.model_dump(by_alias=True)["tenantId"] == "acme"


async def test_a_run_that_fans_out_gets_the_collect_tier(
    ops: Operations, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(fanout(downstream.url))
    run = (await ops.runs.submit("parent", {"items": []})).run
    assert (await ops.runs.get(run.id)).timeout_tier == "collect"


async def test_submit_pins_a_version_or_takes_the_serving_one(ops: Operations) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    await ops.workflows.publish(single("one", UNREACHABLE, description="v2"))
    # Publishing v2 moves no traffic: the first version published serves until a deployment
    # or an operator moves it.
    routed = (await ops.runs.submit("one", {})).run
    assert (routed.version, routed.route) == (1, "serving")
    pinned = (await ops.runs.submit("one", {}, version=2)).run
    assert (pinned.version, pinned.route) == (2, "pinned")
    await ops.deployments.set_serving("one", 2, actor="test")
    assert (await ops.runs.submit("one", {})).run.version == 2
    assert (await ops.runs.submit("one", {}, version=1)).run.version == 1


@pytest.mark.parametrize(("workflow", "version"), [("ghost", None), ("one", 2), ("one", 0)])
async def test_submit_of_an_unknown_workflow_or_version_is_not_found(
    ops: Operations, workflow: str, version: int | None
) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    with pytest.raises(NotFound) as missing:
        await ops.runs.submit(workflow, {}, version=version)
    assert missing.value.code == "workflow_not_found"
    assert missing.value.refusal is Refusal.NOT_FOUND
    assert await run_count(ops) == 0


async def test_a_parent_filter_naming_no_run_is_not_found(ops: Operations) -> None:
    """`GET /runs?parent=` of a run that does not exist, or that the caller's tenant cannot
    see, is `run_not_found` as `children` answers it, never an empty page hiding a typo; a
    run without children is an empty page."""
    await ops.workflows.publish(single("one", UNREACHABLE))
    lone = (await ops.runs.submit("one", {}, tenant_id="acme")).run
    assert (await ops.runs.list(RunFilter(parent=lone.id))).items == []
    assert (await ops.runs.list(RunFilter(parent=lone.id), tenant="acme")).items == []
    for parent, tenant in (("4bf9fa44-0000-0000-0000-000000000000", None), (lone.id, "globex")):
        with pytest.raises(NotFound) as missing:
            await ops.runs.list(RunFilter(parent=parent), tenant=tenant)
        assert missing.value.code == "run_not_found"
        assert missing.value.details["parameter"] == "parent"
        assert str(missing.value) == f"the parent filter names no run {parent!r}"


async def test_submit_checks_the_input_against_the_input_schema(ops: Operations) -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}},
        "required": ["id"],
    }
    await ops.workflows.publish(single("typed", UNREACHABLE, inputSchema=schema))
    with pytest.raises(InvalidRequest) as refused:
        await ops.runs.submit("typed", {"id": "seven", "tags": 3})
    assert refused.value.code == "invalid_input"
    assert [p.pointer for p in refused.value.problems] == ["/id", "/tags"]
    assert [p["pointer"] for p in refused.value.details["problems"]] == ["/id", "/tags"]
    with pytest.raises(InvalidRequest) as missing:
        await ops.runs.submit("typed", {})
    assert missing.value.code == "invalid_input"
    with pytest.raises(InvalidRequest) as not_json:  # refused before the schema sees it
        await ops.runs.submit("typed", {"id": object()})
    assert not_json.value.code == "invalid_input"
    assert await run_count(ops) == 0
    assert (await ops.runs.submit("typed", {"id": 7})).created


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"tenant_id": ""}, "invalid_tenant"),
        ({"tenant_id": "t" * 201}, "invalid_tenant"),
        ({"tenant_id": "system"}, "invalid_tenant"),  # the engine's own runs' tenant
        ({"idempotency_key": ""}, "invalid_idempotency_key"),
        ({"idempotency_key": "k" * 257}, "invalid_idempotency_key"),
        ({"input": {"when": object()}}, "invalid_input"),
        ({"input": {"ratio": float("nan")}}, "invalid_input"),
    ],
)
async def test_submit_refuses_malformed_requests(
    ops: Operations, arguments: dict[str, Any], code: str
) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    call: dict[str, Any] = {"input": {}, **arguments}
    run_input = call.pop("input")
    with pytest.raises(InvalidRequest) as refused:
        await ops.runs.submit("one", run_input, **call)
    assert refused.value.code == code
    assert await run_count(ops) == 0


# ── idempotency ─────────────────────────────────────────────────────────────────────────────


async def test_the_same_key_and_request_return_the_same_run(ops: Operations) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    first = await ops.runs.submit("one", {"a": 1, "b": [1, 2]}, idempotency_key="order-7")
    # The same request, its keys in another order.
    again = await ops.runs.submit("one", {"b": [1, 2], "a": 1}, idempotency_key="order-7")
    assert first.created and not again.created
    assert again.run.id == first.run.id
    assert (await ops.runs.get(first.run.id)).idempotency_key == "order-7"
    assert await run_count(ops) == 1


@pytest.mark.parametrize(
    ("other", "differs", "words"),
    [
        ({"workflow": "one", "input": {"a": 2}}, ["input"], "differs in the input (first at /a)"),
        (
            {"workflow": "one", "input": {"a": 1}, "version": 1},
            ["version"],
            "the version (v1 named; the first request named none and got v1)",
        ),
        ({"workflow": "two", "input": {"a": 1}}, ["workflow"], "the workflow (two, not one)"),
        (
            {"workflow": "two", "input": {"b": 1}, "version": 1},
            ["workflow", "version", "input"],
            "(two, not one), the version (v1 named; the first request named none and got v1) "
            "and the input (first at /a)",
        ),
    ],
    ids=["other-input", "pinned-version", "other-workflow", "all-three"],
)
async def test_the_same_key_with_another_request_conflicts(
    ops: Operations, other: dict[str, Any], differs: list[str], words: str
) -> None:
    """The conflict names what differs from the request that created the key's run, in its
    message and in `details.differs`: a version named where the first request left it to
    routing counts, even the version routing gave it."""
    await ops.workflows.publish([single("one", UNREACHABLE), single("two", UNREACHABLE)])
    first = await ops.runs.submit("one", {"a": 1}, idempotency_key="k")
    with pytest.raises(IdempotencyConflict) as conflict:
        await ops.runs.submit(
            other["workflow"], other["input"], idempotency_key="k", version=other.get("version")
        )
    assert conflict.value.code == "idempotency_conflict"
    assert conflict.value.refusal is Refusal.CONFLICT
    assert conflict.value.run_id == first.run.id == conflict.value.details["runId"]
    assert conflict.value.details["differs"] == differs
    assert words in conflict.value.message, conflict.value.message
    assert await run_count(ops) == 1


async def test_a_conflict_points_into_the_input_without_its_values(ops: Operations) -> None:
    """Where the input first differs is named by its pointer, never by its values (an input
    may carry secrets); a version named the first time and left out the second differs."""
    await ops.workflows.publish(single("one", UNREACHABLE))
    # Values no run id can contain (a uuid is hex and dashes): "c-1" once matched one.
    first_input = {"customer": {"id": "cust-one", "token": "tok-first"}, "items": [1, 2]}
    await ops.runs.submit("one", first_input, idempotency_key="k", version=1)
    with pytest.raises(IdempotencyConflict) as nested:
        await ops.runs.submit(
            "one",
            {"customer": {"id": "cust-two", "token": "tok-second"}, "items": [1, 2]},
            idempotency_key="k",
            version=1,
        )
    with pytest.raises(IdempotencyConflict) as longer:
        await ops.runs.submit("one", {**first_input, "items": [1, 2, 3]}, idempotency_key="k")
    assert nested.value.details["differs"] == ["input"]
    assert nested.value.details["inputPointer"] == "/customer/id"
    assert "the input (first at /customer/id)" in nested.value.message
    for secret in ("cust-one", "cust-two", "tok-first", "tok-second"):
        assert secret not in nested.value.message
    assert longer.value.details["differs"] == ["version", "input"]
    assert longer.value.details["inputPointer"] == "/items/2"
    assert "the version (none named; the first request named v1)" in longer.value.message


async def test_keys_are_scoped_to_the_tenant(ops: Operations) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    acme = await ops.runs.submit("one", {}, tenant_id="acme", idempotency_key="k")
    globex = await ops.runs.submit("one", {}, tenant_id="globex", idempotency_key="k")
    assert acme.created and globex.created and acme.run.id != globex.run.id
    again = await ops.runs.submit("one", {}, tenant_id="globex", idempotency_key="k")
    assert again.run.id == globex.run.id and not again.created


async def test_concurrent_identical_submissions_create_one_run(ops: Operations) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    results = await asyncio.gather(
        *(ops.runs.submit("one", {"n": 1}, idempotency_key="race") for _ in range(20))
    )
    assert len({r.run.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert await run_count(ops) == 1


async def test_concurrent_submissions_with_one_key_and_two_bodies(ops: Operations) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    outcomes = await asyncio.gather(
        *(ops.runs.submit("one", {"n": i % 2}, idempotency_key="race") for i in range(20)),
        return_exceptions=True,
    )
    created = [o for o in outcomes if not isinstance(o, BaseException)]
    conflicts = [o for o in outcomes if isinstance(o, IdempotencyConflict)]
    assert len(created) + len(conflicts) == 20
    assert len({r.run.id for r in created}) == 1 and sum(r.created for r in created) == 1
    assert {c.run_id for c in conflicts} == {created[0].run.id}
    assert len(created) == 10  # every submission of the winning body gets its run
    assert await run_count(ops) == 1


# ── limits at the door ──────────────────────────────────────────────────────────────────────


async def test_a_tenant_quota_counts_submitted_runs(ops: Operations, runtime: Runtime) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    await runtime.store.set_quota("acme", 2)
    first = await ops.runs.submit("one", {}, tenant_id="acme", idempotency_key="a")
    await ops.runs.submit("one", {}, tenant_id="acme")
    assert await runtime.store.quota_left("acme") == 0
    with pytest.raises(LimitReached) as refused:
        await ops.runs.submit("one", {}, tenant_id="acme")
    assert refused.value.code == "quota_exceeded" and refused.value.refusal is Refusal.LIMITED
    # A repeated submission creates nothing, so the quota does not refuse it.
    again = await ops.runs.submit("one", {}, tenant_id="acme", idempotency_key="a")
    assert again.run.id == first.run.id and not again.created
    assert (await ops.runs.submit("one", {}, tenant_id="other")).created  # no quota: unlimited
    assert await run_count(ops, tenant="acme") == 2


async def test_concurrent_submissions_never_exceed_the_quota(
    ops: Operations, runtime: Runtime
) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    await runtime.store.set_quota("acme", 5)
    outcomes = await asyncio.gather(
        *(ops.runs.submit("one", {"i": i}, tenant_id="acme") for i in range(20)),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, LimitReached)]
    assert len(refused) == 15 and {r.code for r in refused} == {"quota_exceeded"}
    assert await run_count(ops, tenant="acme") == 5
    assert await runtime.store.quota_left("acme") == 0


async def test_a_full_ready_queue_refuses_new_submissions(backend: Backend) -> None:
    runtime = await Runtime.open(settings_for(backend, submit_max_ready=5))
    try:
        ops = Operations(runtime)
        await ops.workflows.publish(single("one", UNREACHABLE))
        earlier = await ops.runs.submit("one", {}, idempotency_key="earlier")
        version = await runtime.store.get_version("one")
        await runtime.store.create_runs(version, [{}] * 4)  # 5 READY steps in all
        # A fresh layer: the first one's gauge saw a nearly empty queue a moment ago.
        fresh = Operations(runtime)
        with pytest.raises(LimitReached) as refused:
            await fresh.runs.submit("one", {})
        assert (refused.value.code, refused.value.retry_after_s) == ("queue_full", 5)
        assert refused.value.details == {"retryAfterS": 5}
        again = await fresh.runs.submit("one", {}, idempotency_key="earlier")
        assert again.run.id == earlier.run.id and not again.created
        assert len(await runtime.store.claim(2, lease_s=30)) == 2  # workers catch up
        assert (await fresh.runs.submit("one", {})).created
    finally:
        await runtime.close()


@pytest.mark.parametrize(
    "database_url",
    [
        "postgresql+asyncpg://postgres@127.0.0.1:9/nowhere",
        "sqlite+aiosqlite:///{tmp}/missing/dir/sb.db",
    ],
)
async def test_an_unreachable_database_is_unavailable(database_url: str, tmp_path: Path) -> None:
    runtime = await Runtime.open(
        Settings(database_url=database_url.format(tmp=tmp_path)), migrate=False
    )
    try:
        ops = Operations(runtime)
        calls = [
            ops.runs.submit("one", {}),
            ops.runs.get("00000000-0000-0000-0000-000000000000"),
            ops.runs.list(RunFilter()),
        ]
        for call in calls:
            with pytest.raises(Unavailable) as down:
                await call
            assert down.value.code == "store_unavailable"
            assert down.value.refusal is Refusal.UNAVAILABLE
    finally:
        await runtime.close()


# ── one run ─────────────────────────────────────────────────────────────────────────────────


async def test_the_detail_of_a_failed_run(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    downstream.script([503, 200], path="/flaky")
    fast = {"retry": {"maxAttempts": 3, "baseDelayMs": 1}}
    document = {
        "name": "failing",
        "vertices": {
            "flaky": gateway(f"{downstream.url}/flaky", **fast),
            "missing": gateway(f"{downstream.url}/missing?status=404", "flaky"),
            "after": gateway(f"{downstream.url}/after", "missing"),
        },
    }
    await ops.workflows.publish(document)
    submitted = await ops.runs.submit("failing", {"id": 1})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    assert run.status == "FAILED" and run.ended_at is not None
    assert run.error is not None
    assert (run.error.vertex_id, run.error.kind, run.error.http_status) == (
        "missing",
        "http_error",
        404,
    )
    assert run.error.attempts == 1 and run.error.body_excerpt
    steps = {s.vertex_id: s for s in run.steps}
    assert [s.status for s in steps.values()] == ["SUCCEEDED", "FAILED", "PENDING"]
    flaky = steps["flaky"]
    assert flaky.output["status"] == 200 and flaky.attempts == 1 and flaky.error is None
    assert [(a.execution, a.attempt, a.http_status, a.level) for a in flaky.history] == [
        (1, 1, 503, "warning"),
        (1, 2, 200, "info"),
    ]
    assert flaky.history[0].retry_in_ms is not None and flaky.history[1].retry_in_ms is None
    # What the 503 answered is kept with it; the success keeps nothing of its body.
    assert [a.body_excerpt for a in flaky.history] == ['{"error":"demo answer 503"}', None]
    assert all(a.duration_ms is not None and a.message for a in flaky.history)
    missing = steps["missing"]
    assert missing.error is not None and missing.error.http_status == 404
    assert "404" in missing.error.message
    assert [(a.attempt, a.http_status) for a in missing.history] == [(1, 404)]
    assert steps["after"].history == [] and steps["after"].started_at is None
    assert run.fanout.total == 0 and run.restarts == []


async def test_each_attempt_of_the_history_says_what_it_was_answered(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """A step answered 500 twice with the destination's words, the second past the excerpt's
    bound: each attempt of its stored history keeps the start of its own answer, bounded as
    the step's error keeps the last one."""
    pool = "database connection pool exhausted"
    long = "connection refused by replica; " * 40
    downstream.script([{"status": 500, "raw": pool}, {"status": 500, "raw": long}], path="/db")
    call = gateway(f"{downstream.url}/db", retry={"maxAttempts": 2, "baseDelayMs": 1})
    await ops.workflows.publish({"name": "pool", "vertices": {"call": call}})
    submitted = await ops.runs.submit("pool", {})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    (step,) = run.steps
    assert run.status == "FAILED" and step.error is not None
    assert step.error.body_excerpt == long[:500]
    assert [(a.attempt, a.http_status, a.body_excerpt) for a in step.history] == [
        (1, 500, pool),
        (2, 500, long[:500]),
    ]
    wire = run.model_dump(mode="json", by_alias=True)["steps"][0]["history"]
    assert [a["bodyExcerpt"] for a in wire] == [pool, long[:500]]


async def test_each_attempt_names_the_worker_that_made_it(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """A step answered 500 on every attempt: each attempt of its history names the worker
    that made it (its service id, which the step's `claimed_by` forgets when it ends), for an
    admin key; a tenant key reads neither it nor the log line's copy (docs/security.md)."""
    downstream.script([500, 500], path="/bad-host")
    call = gateway(f"{downstream.url}/bad-host", retry={"maxAttempts": 2, "baseDelayMs": 1})
    await ops.workflows.publish({"name": "bad-host", "vertices": {"call": call}})
    submitted = await ops.runs.submit("bad-host", {}, tenant_id="acme")
    config = dataclasses.replace(runtime.worker_config(), service="worker-eu-3-4242")
    async with running_worker(runtime, config):
        run = await ended(ops, submitted.run.id)
    (step,) = run.steps
    assert run.status == "FAILED" and step.status == "FAILED"
    assert [(a.attempt, a.http_status, a.worker) for a in step.history] == [
        (1, 500, "worker-eu-3-4242"),
        (2, 500, "worker-eu-3-4242"),
    ]
    wire = run.model_dump(mode="json", by_alias=True)["steps"][0]["history"]
    assert [a["worker"] for a in wire] == ["worker-eu-3-4242"] * 2
    logged = (await ops.runs.logs(run.id)).items
    assert [e.data["worker"] for e in logged if "attempt" in (e.data or {})] == [
        "worker-eu-3-4242"
    ] * 2
    as_tenant = await ops.runs.get(run.id, tenant="acme")
    assert [a.worker for a in as_tenant.steps[0].history] == [None, None]
    tenant_log = (await ops.runs.logs(run.id, tenant="acme")).items
    assert len(tenant_log) == len(logged)
    assert not any("worker" in (e.data or {}) for e in tenant_log)


async def test_attempt_histories_count_executions(
    backend: Backend, downstream: RunningDownstream
) -> None:
    # A final 503 is an overload: the step is redispatched and its next execution succeeds.
    downstream.script([503, 200], path="/busy")
    document = {
        "name": "busy",
        "vertices": {"call": gateway(f"{downstream.url}/busy", retry={"maxAttempts": 1})},
    }
    runtime = await Runtime.open(settings_for(backend, redispatch_delays_s=(0.1,)))
    try:
        ops = Operations(runtime)
        await ops.workflows.publish(document)
        submitted = await ops.runs.submit("busy", {})
        async with running_worker(runtime):
            run = await ended(ops, submitted.run.id)
    finally:
        await runtime.close()
    (step,) = run.steps
    assert run.status == "SUCCEEDED" and step.attempts == 2 and step.auto_retries == 1
    assert [(a.execution, a.attempt, a.http_status) for a in step.history] == [
        (1, 1, 503),
        (2, 1, 200),
    ]


async def test_start_over_links_runs_both_ways(ops: Operations, runtime: Runtime) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    old = (await ops.runs.submit("one", {"n": 1})).run
    version = await runtime.store.get_version("one")
    new, _ = await runtime.store.create_run(version, {"n": 1}, restarted_from=old.id)
    assert (await ops.runs.get(old.id)).restarts == [new.id]
    again = await ops.runs.get(new.id)
    assert again.restarted_from == old.id and again.restarts == []


async def test_unknown_runs_are_not_found(ops: Operations) -> None:
    for run_id in ("00000000-0000-0000-0000-000000000000", "x" * 300, ""):
        calls = [
            ops.runs.get(run_id),
            ops.runs.children(run_id),
            ops.runs.logs(run_id),
            ops.runs.wait(run_id, 0),
        ]
        for call in calls:
            with pytest.raises(NotFound) as missing:
                await call
            assert missing.value.code == "run_not_found"


async def test_another_tenants_run_is_not_found_and_never_listed(ops: Operations) -> None:
    await ops.workflows.publish(single("one", UNREACHABLE))
    acme = (await ops.runs.submit("one", {}, tenant_id="acme")).run
    globex = (await ops.runs.submit("one", {}, tenant_id="globex")).run
    assert (await ops.runs.get(acme.id, tenant="acme")).id == acme.id
    calls = [
        ops.runs.get(acme.id, tenant="globex"),
        ops.runs.children(acme.id, tenant="globex"),
        ops.runs.logs(acme.id, tenant="globex"),
        ops.runs.wait(acme.id, 0, tenant="globex"),
    ]
    for call in calls:
        with pytest.raises(NotFound) as missing:
            await call
        assert missing.value.code == "run_not_found"
    scoped = await ops.runs.list(RunFilter(), tenant="globex")
    assert [r.id for r in scoped.items] == [globex.id]
    assert (await ops.runs.list(RunFilter(tenant="acme"), tenant="globex")).items == []
    assert len((await ops.runs.list(RunFilter())).items) == 2


async def test_wait_returns_at_the_end_or_at_the_deadline(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(single("ok", f"{downstream.url}/ok"))
    submitted = await ops.runs.submit("ok", {})
    loop = asyncio.get_running_loop()
    started = loop.time()
    still = await ops.runs.wait(submitted.run.id, 0.3)  # no worker yet
    assert still.status == "RUNNING" and 0.25 <= loop.time() - started < 5
    async with running_worker(runtime):
        done = await ops.runs.wait(submitted.run.id, 30)
    assert done.status == "SUCCEEDED" and done.output["call"]["status"] == 200
    for timeout_s in (-1, 3601, float("nan")):
        with pytest.raises(InvalidRequest) as refused:
            await ops.runs.wait(submitted.run.id, timeout_s)
        assert refused.value.code == "invalid_timeout"


async def test_a_wait_reads_its_run_on_the_events_that_may_be_its_end(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """Steps that start (a fan-out's children that move) change a run without ending it: a
    wait for the end lets those events pass, and reads the run on an event that names it
    ended at once (before its fallback read, a second later)."""
    await ops.workflows.publish(single("ok", f"{downstream.url}/ok"))
    run_id = (await ops.runs.submit("ok", {})).run.id
    loop = asyncio.get_running_loop()

    async def changes(ending: bool) -> None:
        for _ in range(20):
            await asyncio.sleep(0.01)
            await runtime.run_events.changed([run_id], ended=[run_id] if ending else [])

    reads: dict[bool, int] = {}
    for ending in (False, True):
        with statements(runtime, every_task=True) as seen:  # the wait is gather's task
            started = loop.time()
            waited, _ = await asyncio.gather(ops.runs.wait(run_id, 0.5), changes(ending))
        assert waited.status == "RUNNING" and loop.time() - started >= 0.5
        selects = [sql for sql in seen if sql.lstrip().startswith("SELECT")]
        reads[ending] = selects.count(selects[0])  # the wait's first read: the run's row
    # Without an end named: the first read and the one at the deadline (none when the last
    # event passed comes as the deadline does, on a loaded host). With: the first three at
    # once, then one per 50 ms while they come (`ReadPacing`).
    assert reads[False] in (1, 2) and reads[True] >= 4, reads


async def test_a_synchronous_wait_answers_an_ended_run_as_its_whole_detail_does(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """`wait_for_end` (`?wait=true`) reads less than `wait`, and says the same: the summary
    (its error and the run a start over made included) and the output; a run still going
    comes with its whole detail, for its progress."""
    await ops.workflows.publish(single("ok", f"{downstream.url}/ok"))
    await ops.workflows.publish(single("bad", f"{downstream.url}/bad?status=422"))
    going = (await ops.runs.submit("ok", {})).run
    still = await ops.runs.wait_for_end(going.id, 0)  # no worker yet
    assert isinstance(still, RunDetail) and still.steps
    succeeded = going.id
    cancelled = (await ops.runs.submit("ok", {})).run.id
    await ops.actions.cancel(cancelled, actor="test")
    failed = (await ops.runs.submit("bad", {})).run.id
    async with running_worker(runtime):
        for run_id in (succeeded, failed):
            await ended(ops, run_id)
        over = (await ops.actions.start_over(failed, actor="test")).new_run_id
        await ended(ops, over)
    fields = [*RunSummary.model_fields, "output"]
    for run_id, status in ((succeeded, "SUCCEEDED"), (failed, "FAILED"), (cancelled, "CANCELLED")):
        light = await ops.runs.wait_for_end(run_id, 5)
        whole = await ops.runs.wait(run_id, 5)
        assert isinstance(light, RunEnd) and light.status == status
        assert {f: getattr(light, f) for f in fields} == {f: getattr(whole, f) for f in fields}
    light = await ops.runs.wait_for_end(failed, 5)
    assert light.started_over_as == over and light.error is not None
    assert light.error.kind == "http_error"


async def test_logs_are_read_in_pages(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    document = {
        "name": "three",
        "vertices": {
            "a": gateway(f"{downstream.url}/a"),
            "b": gateway(f"{downstream.url}/b", "a"),
            "c": gateway(f"{downstream.url}/c", "b"),
        },
    }
    await ops.workflows.publish(document)
    submitted = await ops.runs.submit("three", {})
    async with running_worker(runtime):
        await ended(ops, submitted.run.id)
    everything = await ops.runs.logs(submitted.run.id, limit=500)
    assert everything.next is None and len(everything.items) >= 4
    assert everything.items[0].message.startswith("run created")
    ids = [line.id for line in everything.items]
    assert ids == sorted(ids)
    walked: list[int] = []
    after: str | None = None
    for _ in range(len(ids) + 1):
        page = await ops.runs.logs(submitted.run.id, after=after, limit=2)
        walked += [line.id for line in page.items]
        if page.next is None:
            break
        after = page.next
    assert walked == ids
    tail = await ops.runs.logs(submitted.run.id, after=ids[-2])
    assert [line.id for line in tail.items] == ids[-1:] and tail.next is None
    assert {line.vertex_id for line in everything.items} >= {None, "a", "b", "c"}
    for bad in (-1, "x", "-3", True):
        with pytest.raises(InvalidRequest) as refused:
            await ops.runs.logs(submitted.run.id, after=bad)  # type: ignore[arg-type]
        assert refused.value.code == "invalid_cursor"


# ── fan-outs ────────────────────────────────────────────────────────────────────────────────


async def test_a_fan_out_shows_its_progress_and_children(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    merge = {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 3}}
    await ops.workflows.publish(fanout(downstream.url, merge))
    submitted = await ops.runs.submit("parent", {"items": items(12, failing={2, 5, 11})})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    assert run.status == "SUCCEEDED", run.error
    assert run.fanout.model_dump() == {
        "total": 12,
        "pending": 0,
        "waiting_children": 0,
        "running": 0,
        "succeeded": 9,
        "failed": 3,
        "cancelled": 0,
        "waiting": [],
        "presumed_dead": [],
    }
    spawner = next(s for s in run.steps if s.vertex_id == "each")
    assert spawner.type == "SPAWNER" and spawner.children is not None
    assert (spawner.children.total, spawner.children.failed) == (12, 3)

    failed = await ops.runs.children(run.id, status="FAILED", limit=2)
    assert [c.item_index for c in failed.items] == [2, 5] and failed.next is not None
    rest = await ops.runs.children(run.id, status="FAILED", limit=2, cursor=failed.next)
    assert [c.item_index for c in rest.items] == [11] and rest.next is None
    # Any case: the same filter, so the same cursor goes on.
    lower = await ops.runs.children(run.id, status="failed", limit=2, cursor=failed.next)
    assert [c.item_index for c in lower.items] == [11]
    dead = rest.items[0]
    assert dead.status == "FAILED" and dead.dlq_at is not None
    assert dead.parent_run_id == run.id and dead.root_run_id == run.id
    assert dead.error is not None and dead.error.http_status == 400

    walked: list[int] = []
    cursor: str | None = None
    for _ in range(5):
        page = await ops.runs.children(run.id, limit=5, cursor=cursor)
        walked += [c.item_index for c in page.items if c.item_index is not None]
        if page.next is None:
            break
        cursor = page.next
    assert walked == list(range(12))
    assert (await ops.runs.children(run.id, status="RUNNING")).items == []
    child = await ops.runs.get(dead.id)
    assert (child.parent_vertex_id, child.item_index, child.input) == ("each", 11, {"status": 400})
    assert (await ops.runs.children(dead.id)).items == []
    with pytest.raises(InvalidRequest) as refused:
        await ops.runs.children(run.id, status="BROKEN")
    assert refused.value.code == "invalid_filter"


async def test_progress_is_the_status_steps_and_fanout_of_a_run(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(fanout(downstream.url))
    submitted = await ops.runs.submit("parent", {"items": items(4)}, tenant_id="acme")
    before = await ops.runs.progress(submitted.run.id, tenant="acme")
    assert (before.status, before.ended, before.fanout.total) == ("RUNNING", False, 0)
    assert [(s.vertex_id, s.status) for s in before.steps] == [
        ("each", "READY"),
        ("join", "PENDING"),
    ]
    async with running_worker(runtime):
        await ended(ops, submitted.run.id)
    after = await ops.runs.progress(submitted.run.id)
    assert (after.status, after.ended, after.ended_at is not None) == ("SUCCEEDED", True, True)
    assert (after.fanout.total, after.fanout.succeeded) == (4, 4)
    each = next(s for s in after.steps if s.vertex_id == "each")
    assert each.children is not None and each.children.succeeded == 4
    for run_id, tenant in [(submitted.run.id, "globex"), ("no-such-run", None)]:
        with pytest.raises(NotFound) as refused:
            await ops.runs.progress(run_id, tenant=tenant)
        assert refused.value.code == "run_not_found"


# ── list filters ────────────────────────────────────────────────────────────────────────────


async def test_each_list_filter(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    await ops.workflows.publish(
        [
            single("ok", f"{downstream.url}/ok"),
            single("bad", f"{downstream.url}/bad?status=404"),
            *fanout(downstream.url),
        ]
    )
    await ops.workflows.publish(single("ok", f"{downstream.url}/ok", description="v2"))
    ok_v1 = (await ops.runs.submit("ok", {}, tenant_id="acme")).run  # the serving version
    ok_v2 = (await ops.runs.submit("ok", {}, version=2, tenant_id="acme")).run
    bad = (await ops.runs.submit("bad", {}, tenant_id="globex")).run
    parent = (await ops.runs.submit("parent", {"items": items(3)}, tenant_id="globex")).run
    async with running_worker(runtime):
        for run_id in (ok_v1.id, ok_v2.id, bad.id, parent.id):
            await ended(ops, run_id)
    cut = runtime.clock.now()
    late = (await ops.runs.submit("ok", {}, tenant_id="acme")).run  # stays RUNNING

    async def ids(**selection: Any) -> set[str]:
        page = await ops.runs.list(RunFilter(**selection), limit=500)
        return {r.id for r in page.items}

    children = await ids(parent=parent.id)
    roots = {ok_v1.id, ok_v2.id, bad.id, parent.id, late.id}
    assert len(children) == 3
    # Root runs unless roots_only is False; a parent's children without saying so.
    assert await ids() == roots == await ids(roots_only=True)
    assert await ids(roots_only=False) == roots | children
    assert await ids(workflow="ok") == {ok_v1.id, ok_v2.id, late.id}
    assert await ids(workflow="ok", version=1) == {ok_v1.id, late.id}
    assert await ids(workflow="child") == set()
    assert await ids(workflow="child", roots_only=False) == children
    assert await ids(status="FAILED") == {bad.id}
    assert await ids(status="failed") == {bad.id}  # any case, as the CLI takes it
    assert await ids(status="RUNNING") == {late.id}
    assert await ids(status="SUCCEEDED", roots_only=True) == {ok_v1.id, ok_v2.id, parent.id}
    assert await ids(tenant="acme") == {ok_v1.id, ok_v2.id, late.id}
    assert await ids(tenant="globex", roots_only=True) == {bad.id, parent.id}
    assert await ids(parent=parent.id, roots_only=False) == children
    with pytest.raises(InvalidRequest) as contradiction:  # children are never roots
        await ids(parent=parent.id, roots_only=True)
    assert contradiction.value.code == "invalid_filter"
    assert await ids(created_after=cut) == {late.id}
    assert await ids(created_before=cut) == roots - {late.id}
    assert await ids(created_before=cut, roots_only=False) == roots - {late.id} | children
    assert await ids(created_after=late.created_at, created_before=late.created_at) == set()
    assert await ids(created_after=late.created_at) == {late.id}
    assert await ids(workflow="ok", status="SUCCEEDED", tenant="acme") == {ok_v1.id, ok_v2.id}
    assert await ids(route="pinned") == {ok_v2.id}
    assert await ids(route="Pinned") == {ok_v2.id}
    assert await ids(workflow="ok", route="serving") == {ok_v1.id, late.id}
    assert await ids(route="candidate") == set()
    with pytest.raises(InvalidRequest) as unknown_route:
        await ids(route="lucky")
    assert unknown_route.value.code == "invalid_filter"
    everything = await ops.runs.list(RunFilter(), limit=500)
    keys = [(r.created_at, r.id) for r in everything.items]
    assert keys == sorted(keys, reverse=True)  # newest first


@pytest.mark.parametrize(
    "selection",
    [
        RunFilter(status="DONE"),
        RunFilter(status="PENDING"),  # a step status: no run is ever PENDING
        RunFilter(version=1),
        RunFilter(workflow="ok", version=0),
        RunFilter(created_after=float("nan")),
        RunFilter(created_before=float("inf")),
        RunFilter(parent="a-run", roots_only=True),  # a run's children are never roots
        RunFilter(parent="3F2A9C1E"),  # a prefix of an id: the filter takes whole ids
    ],
)
async def test_an_invalid_filter_is_refused(ops: Operations, selection: RunFilter) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await ops.runs.list(selection)
    assert refused.value.code == "invalid_filter"
