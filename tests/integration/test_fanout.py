"""SPAWNER and MERGE against a real store and a real downstream, on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from demo.downstream import RunningDownstream
from engine.execution import executor
from engine.operations import run_views
from engine.runtime import Runtime
from engine.store.records import StepAwaitingChildren, StepParked, StepRecord, StepSucceeded
from schemas.clock import FakeClock
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


def workflows(base: str, merge: dict[str, Any] | None = None) -> list[Workflow]:
    """parent: spawner over `input.items` → merge; child: one POST whose status the item
    chooses through the demo downstream's X-Demo-Status / X-Demo-Sleep-Ms headers."""
    parent = Workflow.model_validate(
        {
            "name": "parent",
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": "child"},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"], "config": merge or {}},
            },
        }
    )
    child = Workflow.model_validate(
        {
            "name": "child",
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/charge/{{{{ index }}}}",
                        "method": "POST",
                        "headers": {
                            "X-Demo-Status": "{{ item.status }}",
                            "X-Demo-Sleep-Ms": "{{ item.sleep || `0` }}",
                        },
                        "retry": {"maxAttempts": 1},
                    },
                }
            },
        }
    )
    return [parent, child]


def items(n: int, failing: set[int] = frozenset(), **extra: Any) -> list[dict[str, Any]]:
    return [{"status": 400 if i in failing else 200, **extra} for i in range(n)]


TOLERANCE_TABLE = [
    pytest.param(set(), {}, "SUCCEEDED", id="no-failures"),
    pytest.param({3}, {}, "FAILED", id="default-any-failure-fails"),
    pytest.param(
        {3},
        {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailureRatio": 0.2}},
        "SUCCEEDED",
        id="under-ratio",
    ),
    pytest.param(
        {1, 2, 3},
        {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailureRatio": 0.2}},
        "FAILED",
        id="over-ratio",
    ),
    pytest.param(
        {1, 2},
        {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 1}},
        "FAILED",
        id="over-max-failures",
    ),
    pytest.param(
        {1},
        {"tolerateChildFailures": ["CANCELLED"], "failureTolerance": {"maxFailures": 5}},
        "FAILED",
        id="failed-not-in-tolerated-statuses",
    ),
    pytest.param({1, 2}, {"tolerateChildFailures": ["FAILED"]}, "SUCCEEDED", id="tolerate-all"),
]


@pytest.mark.parametrize(("failing", "merge", "expected"), TOLERANCE_TABLE)
async def test_tolerance_table(
    runtime: Runtime,
    downstream: RunningDownstream,
    failing: set[int],
    merge: dict[str, Any],
    expected: str,
) -> None:
    run_id = await start(runtime, workflows(downstream.url, merge), {"items": items(10, failing)})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == expected, run.error
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
    assert steps["join"].attempts == 1  # the merge ran exactly once
    if expected == "FAILED":
        assert run.error.vertex_id == "join"
        assert run.error.kind == "child_failures"
    else:
        outputs = run.output["join"]["outputs"]
        assert len(outputs) == 10
        assert [o is None for o in outputs] == [i in failing for i in range(10)]
    dead = await runtime.store.children(run_id, status="FAILED")
    assert sorted(c.item_index for c in dead) == sorted(failing)
    assert all(c.dlq_at is not None for c in dead)
    # A child that succeeded logs its call, not also its run's success (its status says it,
    # and that line was a quarter of a child's rows); a failed one says why it failed.
    children = await runtime.store.children(run_id)
    assert len(children) == 10
    for child in children:
        said = [line["message"] for line in await runtime.store.run_logs(child.id)]
        assert "run succeeded" not in said, said
        assert any(m.startswith("POST ") for m in said), said
        assert any(m.startswith("run failed") for m in said) == (child.status == "FAILED"), said
    parent_said = [line["message"] for line in await runtime.store.run_logs(run_id)]
    assert ("run succeeded" in parent_said) == (expected == "SUCCEEDED"), parent_said
    # The join's log line is for people; its counts, for tools, are the line's data.
    [joined] = await _joined_lines(runtime, run_id)
    ok, bad = 10 - len(failing), len(failing)
    assert joined["message"] == f"fan-out joined: 10 children, {ok} succeeded, {bad} failed"
    assert joined["data"] == {
        "total": 10,
        "succeeded": ok,
        "failed": bad,
        "cancelled": 0,
        "pending": 0,
    }


async def _joined_lines(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    lines = await runtime.store.run_logs(run_id)
    return [line for line in lines if line["message"].startswith("fan-out joined")]


async def test_fail_fast_closes_the_join_while_stragglers_run(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    # The stragglers' 30 s leave a loaded host 29.5 s for the spawn, the three failures and the
    # fail-fast close (the wait below), which must all come before any straggler ends; CI once
    # took longer than 7.5 s. The worker gives the stragglers up at its stop, not after 30 s.
    slow = [{"status": 200, "sleep": 30_000} for _ in range(6)]
    fast_failures = [{"status": 400} for _ in range(3)]
    merge = {
        "tolerateChildFailures": ["FAILED"],
        "failureTolerance": {"maxFailures": 1},
        "failFast": True,
    }
    run_id = await start(runtime, workflows(downstream.url, merge), {"items": slow + fast_failures})
    async with running_worker(runtime, replace(runtime.worker_config(), shutdown_grace_s=0.1)):
        run = await wait_for_run(runtime, run_id, timeout_s=29.5)
        assert run.status == "FAILED"
        assert run.error.kind == "child_failures"
        progress = await runtime.store.fanout_progress(run_id)
        assert progress["failed"] >= 2
        assert progress["succeeded"] == 0  # the slow children had not ended
        still_running = await runtime.store.children(run_id, status="RUNNING")
        assert len(still_running) >= 1
        [joined] = await _joined_lines(runtime, run_id)
        counts = joined["data"]
        assert counts["pending"] >= 1 and counts["succeeded"] == 0
        assert joined["message"] == (
            f"fan-out joined: 9 children, 0 succeeded, {counts['failed']} failed, "
            f"{counts['pending']} still going"
        )


async def test_reprocess_reruns_only_dead_letters(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    async with httpx.AsyncClient() as client:
        for path in ("/charge/3", "/charge/7"):
            answer = await client.post(
                f"{downstream.url}/_script", json={"path": path, "responses": [400]}
            )
            assert answer.status_code == 200
    run_id = await start(runtime, workflows(downstream.url), {"items": items(10)})
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
        assert run.status == "FAILED"
        assert downstream.stats.total == 10
        assert await runtime.store.reprocess(run_id) == 2
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    assert downstream.stats.total == 12  # only the two dead letters ran again
    children = await runtime.store.children(run_id)
    assert [c.status for c in children] == ["SUCCEEDED"] * 10
    assert all(c.dlq_at is None for c in children)
    assert await runtime.store.reprocess(run_id) == 0


async def test_quota_exceeded_creates_no_children(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    await runtime.store.set_quota("acme", 6)  # the submitted parent counts as one run
    run_id = await start(runtime, workflows(downstream.url), {"items": items(10)}, tenant_id="acme")
    assert await runtime.store.quota_left("acme") == 5
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED"
    assert run.error.kind == "quota_exceeded"
    assert run.error.message == (
        "the fan-out needs 10 runs but tenant acme has 5 left in its quota (1 of 6 used); raise "
        "the quota to 11 or more (`schemabridge tenants set-quota acme 11`) and retry the run, "
        "or split the input"
    )
    assert await runtime.store.children(run_id) == []
    assert await runtime.store.quota_left("acme") == 5


async def _spawner_step(runtime: Runtime, base: str, n: int) -> Any:
    run_id = await start(runtime, workflows(base), {"items": items(n)})
    (step,) = await runtime.store.claim(1, lease_s=60)
    assert step.run_id == run_id and step.vertex_id == "each"
    return step


async def test_racing_spawner_deliveries_create_each_child_once(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    step = await _spawner_step(runtime, downstream.url, 1200)
    version = await runtime.store.get_version("parent")
    deps = runtime.executor_deps()
    results = await asyncio.gather(
        executor.execute(step, version.workflow, deps),
        executor.execute(step, version.workflow, deps),
    )
    assert all(isinstance(result, StepAwaitingChildren) for result, _ in results)
    children = await runtime.store.existing_children(step.run_id, "each")
    assert children == 1200
    page = await runtime.store.children(step.run_id, limit=2000)
    assert [c.item_index for c in page] == list(range(1200))


def _waiting_of(steps: list[StepRecord], vertex_id: str) -> tuple[str, str, float] | None:
    """(reason, message, until) of the step's wait as front doors show it, or None."""
    (step,) = [s for s in steps if s.vertex_id == vertex_id]
    waiting = run_views.waiting_view(step)
    return None if waiting is None else (waiting.reason, waiting.message, waiting.until or 0.0)


async def test_a_fan_out_writes_a_small_first_batch_then_doubles(
    runtime: Runtime, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No child starts before its batch commits, so the first batch is small (64): the first
    children call out while the rest are written. The batches after it double up to
    SPAWN_BATCH (500), and every item gets its one child."""
    step = await _spawner_step(runtime, downstream.url, 1200)
    version = await runtime.store.get_version("parent")
    written: list[int] = []
    create = runtime.store.create_children

    async def recorded(spawner: Any, child: Any, total: int, rows: list[Any]) -> int:
        written.append(len(rows))
        return await create(spawner, child, total, rows)

    monkeypatch.setattr(runtime.store, "create_children", recorded)
    result, _ = await executor.execute(step, version.workflow, runtime.executor_deps())
    assert isinstance(result, StepAwaitingChildren) and result.total == 1200
    assert written == [64, 128, 256, 500, 252]
    assert await runtime.store.existing_children(step.run_id, "each") == 1200


@pytest.fixture
async def clocked(backend: Backend) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    clock = FakeClock()
    settings = settings_for(backend, backpressure_max_depth=3, payload_high_water_bytes=1000)
    runtime = await Runtime.open(settings, clock=clock)
    yield runtime, clock
    await runtime.close()


async def test_backpressure_parks_the_spawner_and_it_resumes(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    step = await _spawner_step(runtime, downstream.url, 5)
    blockers = [await start(runtime, workflows(downstream.url)[1:], {}) for _ in range(5)]
    version = await runtime.store.get_version("parent")
    deps = runtime.executor_deps()
    parked, _ = await executor.execute(step, version.workflow, deps)
    assert isinstance(parked, StepParked) and parked.not_before == clock.now() + 10
    assert "ready queue depth 5" in parked.reason
    await runtime.store.complete([parked])
    assert await runtime.store.existing_children(step.run_id, "each") == 0
    waiting = _waiting_of(await runtime.store.get_steps(step.run_id), "each")
    assert waiting == ("backpressure", parked.reason, clock.now() + 10)
    drained = await runtime.store.claim(10, lease_s=60)
    assert sorted(s.run_id for s in drained) == sorted(blockers)
    await runtime.store.complete([StepSucceeded(s, {}) for s in drained])
    clock.advance(9.9)
    assert await runtime.store.claim(10, lease_s=60) == []
    clock.advance(0.1)
    (again,) = await runtime.store.claim(10, lease_s=60)
    assert again.step_id == step.step_id
    assert _waiting_of(await runtime.store.get_steps(step.run_id), "each") is None  # it runs
    resumed, _ = await executor.execute(again, version.workflow, deps)
    assert isinstance(resumed, StepAwaitingChildren)
    assert await runtime.store.existing_children(step.run_id, "each") == 5


async def test_payload_pressure_parks_until_a_timer_finds_it_drained(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    step = await _spawner_step(runtime, downstream.url, 5)
    payload_ref = await runtime.store.put_payload(step.run_id, ["x" * 2000])
    version = await runtime.store.get_version("parent")
    deps = runtime.executor_deps()
    parked, _ = await executor.execute(step, version.workflow, deps)
    assert isinstance(parked, StepParked) and "payload store" in parked.reason
    await runtime.store.complete([parked])
    waiting = _waiting_of(await runtime.store.get_steps(step.run_id), "each")
    assert waiting is not None and waiting[0] == "payload_store"
    await runtime.store.delete_payload(payload_ref)
    clock.advance(10)
    (again,) = await runtime.store.claim(10, lease_s=60)
    resumed, _ = await executor.execute(again, version.workflow, deps)
    assert isinstance(resumed, StepAwaitingChildren)


async def test_redelivered_spawner_reattaches_existing_children(
    clocked: tuple[Runtime, FakeClock], downstream: RunningDownstream
) -> None:
    runtime, clock = clocked
    step = await _spawner_step(runtime, downstream.url, 30)
    version = await runtime.store.get_version("parent")
    deps = runtime.executor_deps()
    # The first delivery creates every child, then its worker dies before recording.
    await executor.execute(step, version.workflow, deps)
    assert len(await runtime.store.children(step.run_id)) == 30
    clock.advance(61)
    assert len(await runtime.store.requeue_expired()) == 1
    claimed = await runtime.store.claim(100, lease_s=60)
    (again,) = [s for s in claimed if s.vertex_id == "each"]
    assert again.step_id == step.step_id and again.attempts == 2
    result, lines = await executor.execute(again, version.workflow, deps)
    assert isinstance(result, StepAwaitingChildren)
    assert any("0 created, 30 re-attached" in line.message for line in lines)
    assert (await runtime.store.complete([result])).recorded == 1
    assert await runtime.store.existing_children(step.run_id, "each") == 30
    # The dead worker's late execution finds its claim gone and creates nothing.
    stale, _ = await executor.execute(step, version.workflow, deps)
    assert (await runtime.store.complete([stale])).dropped == [step.step_id]
    assert await runtime.store.existing_children(step.run_id, "each") == 30


async def test_large_merge_outputs_go_to_the_payload_store_in_chunks(
    runtime: Runtime, downstream: RunningDownstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.execution import fanout

    monkeypatch.setattr(fanout, "INLINE_OUTPUT_MAX_BYTES", 2000)
    monkeypatch.setattr(fanout, "MERGE_PAGE", 10)
    # Failed children are tolerated and contribute null, in the chunks written from this
    # process (the first) and in those PostgreSQL assembles itself (the rest).
    merge = {"tolerateChildFailures": ["FAILED"]}
    run_input = {"items": items(25, failing={4, 17})}
    run_id = await start(runtime, workflows(downstream.url, merge), run_input)
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    merged = run.output["join"]
    assert "outputs" not in merged
    ref = merged["outputsRef"]
    assert ref["count"] == 25 and ref["chunks"] == 3
    outputs = await runtime.store.get_payload(ref["payloadRef"])
    paths = [None if o is None else o["call"]["body"]["path"] for o in outputs]
    assert paths == [None if i in {4, 17} else f"/charge/{i}" for i in range(25)]
    assert ref["bytes"] == await runtime.store.payload_bytes()  # what the chunks hold


def nested_workflows(base: str) -> list[Workflow]:
    """top: spawner over `input.groups` → mid; mid: spawner over its input → leaf; leaf: one
    POST to /leaf/<group>-<index>."""
    top = {
        "name": "top",
        "vertices": {
            "groups": {
                "type": "SPAWNER",
                "config": {"items": "{{ input.groups }}", "workflow": "mid"},
            },
            "join": {"type": "MERGE", "dependsOn": ["groups"], "config": {}},
        },
    }
    mid = {
        "name": "mid",
        "vertices": {
            "leaves": {
                "type": "SPAWNER",
                "config": {
                    "items": "{{ input.leaves }}",
                    "workflow": "leaf",
                    "input": {"path": "{{ input.name }}-{{ index }}"},
                },
            },
            "join": {"type": "MERGE", "dependsOn": ["leaves"], "config": {}},
        },
    }
    leaf = {
        "name": "leaf",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {
                    "url": f"{base}/leaf/{{{{ input.path }}}}",
                    "method": "POST",
                    "retry": {"maxAttempts": 1},
                },
            }
        },
    }
    return [Workflow.model_validate(w) for w in (top, leaf, mid)]


NESTED_INPUT = {"groups": [{"name": f"g{g}", "leaves": [1, 2, 3]} for g in range(3)]}


async def _nested_run_that_failed(runtime: Runtime, downstream: RunningDownstream) -> str:
    downstream.script([400], path="/leaf/g1-2")  # one leaf fails once
    run_id = await start(runtime, nested_workflows(downstream.url), NESTED_INPUT)
    run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED" and run.error.kind == "child_failures"
    (failed_mid,) = await runtime.store.children(run_id, status="FAILED")
    assert failed_mid.dlq_at is not None and failed_mid.item_index == 1
    return run_id


async def _assert_whole_tree_succeeded(runtime: Runtime, run_id: str) -> None:
    run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    assert run.output["join"]["counts"] == {
        "total": 3, "succeeded": 3, "failed": 0, "cancelled": 0, "pending": 0
    }  # fmt: skip
    mids = await runtime.store.children(run_id)
    assert [m.status for m in mids] == ["SUCCEEDED"] * 3
    for mid in mids:
        assert mid.dlq_at is None
        leaves = await runtime.store.children(mid.id)
        assert [leaf.status for leaf in leaves] == ["SUCCEEDED"] * 3
        progress = await runtime.store.fanout_progress(mid.id)
        assert (progress["succeeded"], progress["failed"]) == (3, 0)


async def test_reprocess_of_a_nested_fan_out_revives_the_dead_letters_below(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    """Reprocessing the top run re-runs the failed mid run and, under it, the failed leaf —
    the only thing that would make it succeed."""
    async with running_worker(runtime):
        run_id = await _nested_run_that_failed(runtime, downstream)
        assert downstream.stats.total == 9
        assert await runtime.store.reprocess(run_id) == 2  # the mid run and its leaf
        await _assert_whole_tree_succeeded(runtime, run_id)
    assert downstream.stats.total == 10  # only the failed leaf was called again


async def test_reprocess_of_a_dead_letter_fixes_its_parents_join(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    """Reprocessing the failed mid run directly: the top run stops counting it as failed,
    its join reopens and it succeeds once the mid run does (counted once, not twice)."""
    async with running_worker(runtime):
        run_id = await _nested_run_that_failed(runtime, downstream)
        (failed_mid,) = await runtime.store.children(run_id, status="FAILED")
        assert await runtime.store.reprocess(failed_mid.id) == 1
        await _assert_whole_tree_succeeded(runtime, run_id)
    assert downstream.stats.total == 10


async def test_a_spawner_no_merge_joins_waits_for_its_children_and_ignores_their_failures(
    runtime: Runtime, downstream: RunningDownstream
) -> None:
    """Without a MERGE the spawner still ends only once every child has ended, with the
    counts as its output, and nothing checks them: a failed child fails neither the spawner
    nor the run (docs/authoring.md, 'A SPAWNER without a MERGE')."""
    parent, child = workflows(downstream.url)
    document = parent.model_dump(mode="json", by_alias=True, exclude_none=True)
    del document["vertices"]["join"]
    document["vertices"]["after"] = {
        "type": "GATEWAY",
        "dependsOn": ["each"],
        "config": {
            "url": f"{downstream.url}/charge/after",
            "method": "POST",
            "body": "{{ vertices.each.output }}",
        },
    }
    run_id = await start(
        runtime, [Workflow.model_validate(document), child], {"items": items(3, {1})}
    )
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "SUCCEEDED", run.error
    steps = {s.vertex_id: s for s in await runtime.store.get_steps(run_id)}
    counts = {"total": 3, "succeeded": 2, "failed": 1, "cancelled": 0, "pending": 0}
    assert (steps["each"].status, steps["each"].output) == ("SUCCEEDED", counts)
    assert steps["after"].status == "SUCCEEDED"
    dead = await runtime.store.children(run_id, status="FAILED")
    assert [c.item_index for c in dead] == [1]
    assert dead[0].dlq_at is not None  # a dead letter, as under a MERGE
